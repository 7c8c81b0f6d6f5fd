// SPDX-License-Identifier: Apache-2.0
// The schedule chosen for each (dtype, head dim, mask), and the typed entry that launches it.
// Each attention_fwd_<dtype>_d<D>.cu instantiates one (dtype, head dim) pair, so the kernels
// compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "napkin/attention.h"
#include "napkin/device/fmha_fwd.h"

namespace napkin::detail {

// Tile schedule per head dim: {kBlockN, consumer warpgroups, stages, CTAs per SM, idle
// warpgroups skipped}. See docs/runtime.md.
template <int kHeadDim> struct FwdSchedule;
template <> struct FwdSchedule<64> {
  static constexpr int kBlockN = 128, kConsumerWGs = 3, kStages = 2, kCtasPerSM = 1;
  static constexpr bool kSkipIdleWarpgroups = false;
};
template <> struct FwdSchedule<128> {
  static constexpr int kBlockN = 128, kConsumerWGs = 2, kStages = 2, kCtasPerSM = 1;
  static constexpr bool kSkipIdleWarpgroups = false;
};
// d = 256: 80-key chunks (CuTe extended WGMMA shapes); measured +4-8 % over 64 on non-causal rows.
template <> struct FwdSchedule<256> {
  static constexpr int kBlockN = 80, kConsumerWGs = 2, kStages = 2, kCtasPerSM = 1;
  static constexpr bool kSkipIdleWarpgroups = false;
};

// Causal d = 64 with short queries: 64 x 64 tiles, one consumer warpgroup, three CTAs per SM.
// Short causal tiles are bound by each tile's fixed latency (first S GEMM, last P V, epilogue),
// which three independent CTAs hide better than two ping-pong warpgroups: measured on the H100,
// bf16, s = 512 272 vs 240 TFLOP/s (128 x 128 tiles), 1k 346 vs 322, 2k 402 vs 393 (192-row
// tiles); slower from 4k and on non-causal rows. See bench/NOTES.md, v20.
struct FwdScheduleD64Short {
  static constexpr int kBlockN = 64, kConsumerWGs = 1, kStages = 2, kCtasPerSM = 3;
  static constexpr bool kSkipIdleWarpgroups = false;
};
// (tests/gpu/test_attention.py and runtime/tests/sanitize_attention.cu each run a length past
// this threshold, so that both d = 64 causal kernels are tested.)
inline bool use_short_schedule(const AttentionFwdArgs& a) { return a.causal && a.seqlen_q <= 2048; }

// Non-causal d = 64 where the 192-row tiles pad much: the same tiles, but a warpgroup whose rows
// all lie past seqlen_q computes nothing. Worth it from 1/16 of the warpgroups idle (512 and 1k:
// 1/9; measured +1-3 %), not below (2k-8k: 1/33 to 1/129; measured -2 to -5 %): bench/NOTES.md, v23.
struct FwdScheduleD64Padded : FwdSchedule<64> { static constexpr bool kSkipIdleWarpgroups = true; };
inline bool use_padded_schedule(const AttentionFwdArgs& a) {
  constexpr int kWGs = FwdSchedule<64>::kConsumerWGs;
  const int wg_used = (a.seqlen_q + 63) / 64;
  const int wg_launched = (wg_used + kWGs - 1) / kWGs * kWGs;
  return !a.causal && 16 * (wg_launched - wg_used) >= wg_launched;
}

// Non-causal d = 128 with long keys: 176-key chunks, so each chunk's fixed work (row max and
// sum, barriers, ping-pong turns) is spread over more keys. Shared memory then holds one Q
// buffer, and O is staged in the V ring (as at d = 256). Measured on the H100 against 128-key
// chunks: 8k and 16k +3 to +8 %, 4k +1 %, 2k even, 1k -3 %, 512 -6 % (short tiles pay for the
// single Q buffer): bench/NOTES.md, v24.
struct FwdScheduleD128Long : FwdSchedule<128> { static constexpr int kBlockN = 176; };
inline bool use_long_schedule(const AttentionFwdArgs& a) { return !a.causal && a.seqlen_k > 2048; }

// The persistent scheduler's tile counter for launches on `stream` (current device): allocated
// and zeroed on first use, then kept zero by the kernel itself. Defined in attention_fwd.cu.
cudaError_t tile_counter_for(cudaStream_t stream, int** counter);

template <class Element, int kHeadDim, bool kCausal, class Sched = FwdSchedule<kHeadDim>>
cudaError_t run_fwd(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Cfg = device::FwdConfig<Element, kHeadDim, Sched::kBlockN, Sched::kConsumerWGs, Sched::kStages, kCausal,
                                Sched::kCtasPerSM, Sched::kSkipIdleWarpgroups>;
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
    if constexpr (kHeadDim == 64) {                                                            \
      if (use_short_schedule(a)) return run_fwd<Element, 64, true, FwdScheduleD64Short>(a, stream); \
      if (use_padded_schedule(a)) return run_fwd<Element, 64, false, FwdScheduleD64Padded>(a, stream); \
    }                                                                                          \
    if constexpr (kHeadDim == 128)                                                             \
      if (use_long_schedule(a)) return run_fwd<Element, 128, false, FwdScheduleD128Long>(a, stream); \
    return a.causal ? run_fwd<Element, kHeadDim, true>(a, stream)                              \
                    : run_fwd<Element, kHeadDim, false>(a, stream);                            \
  }

}  // namespace napkin::detail
