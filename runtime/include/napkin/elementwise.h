// SPDX-License-Identifier: Apache-2.0
// Scalar device helpers of generated elementwise code (src/emit/expression.cpp writes calls to
// them): the reference interpreter's rounding and NaN rules in f32, and element loads and stores
// in a tensor's dtype.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

namespace napkin::rows {

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float round_f16(float x) { return __half2float(__float2half_rn(x)); }
__device__ __forceinline__ int round_i32(float x) { return x != x ? 0 : __float2int_rn(x); }
// exp on the SFU, flushing subnormal results to zero (ex2.approx.ftz: two instructions, where
// __expf without -ftz takes five and expf about ten): a few ulp of f32, 2 + 1.16|x| for |x| large.
__device__ __forceinline__ float fast_exp(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}
// IEEE 754-2019 maximum/minimum: NaN if either is NaN (the reference interpreter's max and min),
// one instruction (PTX max.NaN, sm_80 and later) where two compares and a select took four.
__device__ __forceinline__ float nan_max(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
__device__ __forceinline__ float nan_min(float a, float b) {
  float y;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

// Element reads and writes in the tensor's dtype, computed in f32.
__device__ __forceinline__ float load(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(__ldg(p)); }
__device__ __forceinline__ float load(const __half* p) { return __half2float(__ldg(p)); }
__device__ __forceinline__ float load(const double* p) { return static_cast<float>(__ldg(p)); }
__device__ __forceinline__ int load(const int32_t* p) { return __ldg(p); }
__device__ __forceinline__ bool load(const uint8_t* p) { return __ldg(p) != 0; }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(double* p, float v) { *p = v; }
__device__ __forceinline__ void store(int32_t* p, float v) { *p = round_i32(v); }
__device__ __forceinline__ void store(uint8_t* p, float v) { *p = v != 0; }

}  // namespace napkin::rows
