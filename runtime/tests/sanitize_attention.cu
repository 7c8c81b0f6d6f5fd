// SPDX-License-Identifier: Apache-2.0
// Small launches of every kernel instantiation, for compute-sanitizer (memcheck, racecheck,
// synccheck): tests/gpu/test_sanitizer.py runs it. Needs a GPU; exits 2 when none is present.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cutlass/numeric_types.h>

#include "napkin/attention.h"

#define CHECK_CUDA(x)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::printf("%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));           \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no GPU\n");
    return 2;
  }
  // (seqlen_q, seqlen_k): partial tiles, q != k, fully masked causal rows, and a causal length
  // past the short-query schedule of d = 64 (choose_fwd_schedule: seqlen_q <= 2048). For d = 64
  // non-causal, all but {2100, 2060} take the padded schedule (idle warpgroups); for d = 128
  // non-causal, {2100, 2060} takes the long-key one, and {300, 1100} the overlapped one (so does
  // d = 128 causal past 1024 keys). {700, 300} causal: whole tiles masked, before and between
  // the visited ones. {8500, 200}: more tiles than the grid at d = 128 and 256 (134), so the
  // non-causal CTAs that take a tile fewer start late (FwdConfig::kStaggerClocksPerChunk).
  const int shapes[][2] = {{77, 200}, {200, 77}, {700, 300}, {2100, 2060}, {300, 1100}, {8500, 200}};
  int launches = 0;
  for (int dtype = 0; dtype < 2; ++dtype)
    for (int d : {64, 128, 256})
      for (int causal = 0; causal < 2; ++causal)
        for (auto& sh : shapes) {
          const int b = 1, hq = 2, hkv = 1, sq = sh[0], sk = sh[1];
          std::vector<uint16_t> hq_buf(size_t(b) * sq * hq * d), hk_buf(size_t(b) * sk * hkv * d);
          // Small random bf16/fp16 bit patterns of modest magnitude (values in about [-1, 1]).
          auto fill = [&](std::vector<uint16_t>& v) {
            for (auto& x : v) {
              float f = (std::rand() / float(RAND_MAX)) * 2.f - 1.f;
              x = dtype == 0 ? cutlass::bfloat16_t(f).raw() : cutlass::half_t(f).raw();
            }
          };
          fill(hq_buf);
          fill(hk_buf);
          void *q, *k, *v, *o;
          float* lse;
          CHECK_CUDA(cudaMalloc(&q, hq_buf.size() * 2));
          CHECK_CUDA(cudaMalloc(&o, hq_buf.size() * 2));
          CHECK_CUDA(cudaMalloc(&k, hk_buf.size() * 2));
          CHECK_CUDA(cudaMalloc(&v, hk_buf.size() * 2));
          CHECK_CUDA(cudaMalloc(&lse, size_t(b) * hq * sq * 4));
          CHECK_CUDA(cudaMemcpy(q, hq_buf.data(), hq_buf.size() * 2, cudaMemcpyHostToDevice));
          CHECK_CUDA(cudaMemcpy(k, hk_buf.data(), hk_buf.size() * 2, cudaMemcpyHostToDevice));
          CHECK_CUDA(cudaMemcpy(v, hk_buf.data(), hk_buf.size() * 2, cudaMemcpyHostToDevice));
          napkin::AttentionFwdArgs a;
          a.dtype = dtype == 0 ? napkin::AttentionDType::kBF16 : napkin::AttentionDType::kF16;
          a.batch = b, a.heads_q = hq, a.heads_kv = hkv, a.seqlen_q = sq, a.seqlen_k = sk, a.head_dim = d;
          a.q = q, a.k = k, a.v = v, a.o = o, a.lse = lse;
          a.q_batch_stride = int64_t(sq) * hq * d, a.q_seq_stride = hq * d, a.q_head_stride = d;
          a.o_batch_stride = a.q_batch_stride, a.o_seq_stride = a.q_seq_stride, a.o_head_stride = d;
          a.k_batch_stride = int64_t(sk) * hkv * d, a.k_seq_stride = hkv * d, a.k_head_stride = d;
          a.v_batch_stride = a.k_batch_stride, a.v_seq_stride = a.k_seq_stride, a.v_head_stride = d;
          a.softmax_scale = 0.125f;
          a.causal = causal;
          std::string err = napkin::attention_fwd(a, nullptr);
          if (!err.empty()) {
            std::printf("attention_fwd: %s\n", err.c_str());
            return 1;
          }
          CHECK_CUDA(cudaDeviceSynchronize());
          ++launches;
          for (void* p : {q, k, v, o}) CHECK_CUDA(cudaFree(p));
          CHECK_CUDA(cudaFree(lse));
        }
  std::printf("sanitize_attention: %d launches ok\n", launches);
  return 0;
}
