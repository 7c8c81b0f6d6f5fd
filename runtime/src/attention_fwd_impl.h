// SPDX-License-Identifier: Apache-2.0
// The schedule chosen for each (dtype, head dim, mask), and the typed entry that launches it.
// Each attention_fwd_<dtype>_d<D>.cu instantiates one (dtype, head dim) pair, so the kernels
// compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "napkin/attention.h"
#include "napkin/device/fmha_fwd.h"

namespace napkin::detail {

// Tile schedule per head dim: {kBlockN, consumer warpgroups, stages, CTAs per SM}. See
// docs/runtime.md.
template <int kHeadDim> struct FwdSchedule;
template <> struct FwdSchedule<64>  { static constexpr int kBlockN = 128, kConsumerWGs = 3, kStages = 2, kCtasPerSM = 1; };
template <> struct FwdSchedule<128> { static constexpr int kBlockN = 128, kConsumerWGs = 2, kStages = 2, kCtasPerSM = 1; };
// d = 256: 80-key chunks (CuTe extended WGMMA shapes); measured +4-8 % over 64 on non-causal rows.
template <> struct FwdSchedule<256> { static constexpr int kBlockN = 80,  kConsumerWGs = 2, kStages = 2, kCtasPerSM = 1; };

// Causal d = 64 with short queries: 64 x 64 tiles, one consumer warpgroup, three CTAs per SM.
// Short causal tiles are bound by each tile's fixed latency (first S GEMM, last P V, epilogue),
// which three independent CTAs hide better than two ping-pong warpgroups: measured on the H100,
// bf16, s = 512 272 vs 240 TFLOP/s (128 x 128 tiles), 1k 346 vs 322, 2k 402 vs 393 (192-row
// tiles); slower from 4k and on non-causal rows. See bench/NOTES.md, v20.
struct FwdScheduleD64Short { static constexpr int kBlockN = 64, kConsumerWGs = 1, kStages = 2, kCtasPerSM = 3; };
// (tests/gpu/test_attention.py and runtime/tests/sanitize_attention.cu each run a length past
// this threshold, so that both d = 64 causal kernels are tested.)
inline bool use_short_schedule(const AttentionFwdArgs& a) { return a.causal && a.seqlen_q <= 2048; }

// The persistent scheduler's tile counter for launches on `stream` (current device): allocated
// and zeroed on first use, then kept zero by the kernel itself. Defined in attention_fwd.cu.
cudaError_t tile_counter_for(cudaStream_t stream, int** counter);

template <class Element, int kHeadDim, bool kCausal, class Sched = FwdSchedule<kHeadDim>>
cudaError_t run_fwd(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Cfg = device::FwdConfig<Element, kHeadDim, Sched::kBlockN, Sched::kConsumerWGs, Sched::kStages, kCausal,
                                Sched::kCtasPerSM>;
  int* counter = nullptr;
  if (cudaError_t err = tile_counter_for(stream, &counter); err != cudaSuccess) return err;
  const int64_t qs[3] = {a.q_batch_stride, a.q_seq_stride, a.q_head_stride};
  const int64_t ks[3] = {a.k_batch_stride, a.k_seq_stride, a.k_head_stride};
  const int64_t vs[3] = {a.v_batch_stride, a.v_seq_stride, a.v_head_stride};
  const int64_t os[3] = {a.o_batch_stride, a.o_seq_stride, a.o_head_stride};
  return device::launch_fmha_fwd<Cfg>(a.q, a.k, a.v, a.o, a.lse, a.batch, a.heads_q, a.heads_kv,
                                      a.seqlen_q, a.seqlen_k, qs, ks, vs, os, a.softmax_scale, a.pingpong, counter, stream);
}

template <class Element, int kHeadDim>
cudaError_t run_fwd_dim(const AttentionFwdArgs& a, cudaStream_t stream);

#define NAPKIN_INSTANTIATE_FWD(Element, kHeadDim)                                              \
  template <>                                                                                  \
  cudaError_t run_fwd_dim<Element, kHeadDim>(const AttentionFwdArgs& a, cudaStream_t stream) { \
    if constexpr (kHeadDim == 64)                                                              \
      if (use_short_schedule(a)) return run_fwd<Element, 64, true, FwdScheduleD64Short>(a, stream); \
    return a.causal ? run_fwd<Element, kHeadDim, true>(a, stream)                              \
                    : run_fwd<Element, kHeadDim, false>(a, stream);                            \
  }

}  // namespace napkin::detail
