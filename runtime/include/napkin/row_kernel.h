// SPDX-License-Identifier: Apache-2.0
// The device library of row kernels (napkin/emit/row_kernel.h generates them): memory-bound
// kernels over rows, a CTA per row, with block-wide reductions along the row. The generated code
// is the per-element arithmetic; this header holds the reductions, the element conversions and
// the launch entry's checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "napkin/elementwise.h"
#include "napkin/kernel_abi.h"
#include "napkin/kernel_host.h"
#include "napkin/tensor_binder.h"

namespace napkin::rows {

// Block-wide reductions of one value per thread; every thread gets the result. `scratch` holds
// 32 floats of shared memory; kThreads is a multiple of 32.
template <int kThreads, class Op>
__device__ __forceinline__ float block_reduce(float v, float* scratch, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch is free (a previous reduction's readers are done)
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? scratch[lane] : Op::kIdentity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
struct Sum {
  static constexpr float kIdentity = 0.0f;
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  static constexpr float kIdentity = -INFINITY;
  __device__ float operator()(float a, float b) const { return nan_max(a, b); }
};

// Grid size for `rows` rows of CTAs that stride over the rows: enough CTAs to fill the GPU.
inline int grid_for(int64_t rows, int threads) {
  int device = 0, sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  const int64_t per_sm = 2048 / threads;
  const int64_t g = rows < sms * per_sm * 4 ? rows : sms * per_sm * 4;
  return static_cast<int>(g < 1 ? 1 : g);
}

}  // namespace napkin::rows
