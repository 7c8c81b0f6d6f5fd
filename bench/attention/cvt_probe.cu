// SPDX-License-Identifier: Apache-2.0
// Does converting f32 pairs to fp16 cost the softmax more than converting them to bf16? The
// attention kernel's softmax issues, per 64-key chunk and thread, 32 MUFU.EX2 and 16 F2FP
// (P packed to the 16-bit dtype); napkin's fp16 kernels run 1.5-2 % slower than its bf16 ones on
// the same SASS but for the F2FP and HGMMA types (bench/NOTES.md, session 8). This times, in SM
// clocks per loop iteration of one warp with 16 warps per SM, loops of 8 independent ex2 and/or
// 4 packed conversions, alone and together: if the fp16 conversion shared the SFU with ex2,
// "ex2 + cvt f16" would take longer than "ex2 + cvt bf16".
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a bench/attention/cvt_probe.cu -o cvt_probe && ./cvt_probe
#include <cuda_runtime.h>

#include <cstdio>

template <int kEx2, int kCvt, bool kF16>
__global__ void probe(float* out, long long* clocks, int iters) {
  float x[8];
  unsigned packed[4] = {0, 0, 0, 0};
  for (int i = 0; i < 8; ++i) x[i] = -0.001f * (threadIdx.x + i);
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < kEx2; ++i) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(x[i]));
#pragma unroll
    for (int i = 0; i < kCvt; ++i) {
      unsigned r;
      if constexpr (kF16)
        asm volatile("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x[2 * i]), "f"(x[2 * i + 1]));
      else
        asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x[2 * i]), "f"(x[2 * i + 1]));
      packed[i] ^= r;
    }
  }
  const long long t1 = clock64();
  float s = 0;
  for (int i = 0; i < 8; ++i) s += x[i];
  for (int i = 0; i < 4; ++i) s += static_cast<float>(packed[i]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) clocks[blockIdx.x] = t1 - t0;
}

template <int kEx2, int kCvt, bool kF16>
void run(const char* name, float* out, long long* clocks, int sms) {
  const int iters = 20000;
  probe<kEx2, kCvt, kF16><<<sms, 512>>>(out, clocks, iters);  // warm-up
  probe<kEx2, kCvt, kF16><<<sms, 512>>>(out, clocks, iters);
  cudaDeviceSynchronize();
  long long c = 0;
  cudaMemcpy(&c, clocks, sizeof(c), cudaMemcpyDeviceToHost);
  std::printf("%-22s %7.2f SM clocks per iteration (16 warps on the SM)\n", name, double(c) / iters);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* out;
  long long* clocks;
  cudaMalloc(&out, sms * 512 * sizeof(float));
  cudaMalloc(&clocks, sms * sizeof(long long));
  run<8, 0, true>("ex2 x8", out, clocks, sms);
  run<0, 4, true>("cvt f16x2 x4", out, clocks, sms);
  run<0, 4, false>("cvt bf16x2 x4", out, clocks, sms);
  run<8, 4, true>("ex2 x8 + cvt f16x2 x4", out, clocks, sms);
  run<8, 4, false>("ex2 x8 + cvt bf16x2 x4", out, clocks, sms);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
