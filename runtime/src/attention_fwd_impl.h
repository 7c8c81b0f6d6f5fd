// SPDX-License-Identifier: Apache-2.0
// The typed entry that launches the schedule a call takes (attention_fwd_schedule.h). Each
// attention_fwd_<dtype>_d<D>.cu instantiates one (dtype, head dim) pair, so the kernels compile
// in parallel.
#pragma once

#include <cuda_runtime.h>

#include "napkin/attention.h"
#include "napkin/device/fmha_fwd.h"
#include "attention_fwd_schedule.h"

namespace napkin::detail {

// The persistent scheduler's tile counter for launches on `stream` (current device): allocated
// and zeroed on first use, then kept zero by the kernel itself. Defined in attention_fwd.cu.
cudaError_t tile_counter_for(cudaStream_t stream, int** counter);

template <class Element, int kHeadDim, bool kCausal, class Sched = FwdSchedule<kHeadDim>>
cudaError_t run_fwd(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Cfg = device::FwdConfig<Element, kHeadDim, Sched::kBlockN, Sched::kConsumerWGs, Sched::kStages, kCausal,
                                Sched::kCtasPerSM, Sched::kSkipIdleWarpgroups, Sched::kSoftmaxOverlapsPV,
                                Sched::kQInRegisters, Sched::kStaggerClocksPerChunk>;
  int* counter = nullptr;
  if (cudaError_t err = tile_counter_for(stream, &counter); err != cudaSuccess) return err;
  const int64_t qs[3] = {a.q_batch_stride, a.q_seq_stride, a.q_head_stride};
  const int64_t ks[3] = {a.k_batch_stride, a.k_seq_stride, a.k_head_stride};
  const int64_t vs[3] = {a.v_batch_stride, a.v_seq_stride, a.v_head_stride};
  const int64_t os[3] = {a.o_batch_stride, a.o_seq_stride, a.o_head_stride};
  return device::launch_fmha_fwd<Cfg>(a.q, a.k, a.v, a.o, a.lse, a.batch, a.heads_q, a.heads_kv,
                                      a.seqlen_q, a.seqlen_k, qs, ks, vs, os, a.softmax_scale, a.pingpong, counter, stream);
}

// The schedule's causal or non-causal kernel, as the call asks.
template <class Element, int kHeadDim, class Sched = FwdSchedule<kHeadDim>>
cudaError_t run_fwd_either_mask(const AttentionFwdArgs& a, cudaStream_t stream) {
  return a.causal ? run_fwd<Element, kHeadDim, true, Sched>(a, stream) : run_fwd<Element, kHeadDim, false, Sched>(a, stream);
}

template <class Element, int kHeadDim>
cudaError_t run_fwd_dim(const AttentionFwdArgs& a, cudaStream_t stream);

#define NAPKIN_INSTANTIATE_FWD(Element, kHeadDim)                                              \
  template <>                                                                                  \
  cudaError_t run_fwd_dim<Element, kHeadDim>(const AttentionFwdArgs& a, cudaStream_t stream) { \
    const FwdScheduleKind kind = choose_fwd_schedule(a);                                       \
    if constexpr (kHeadDim == 64) {                                                            \
      if (kind == FwdScheduleKind::kD64Short) return run_fwd<Element, 64, true, FwdScheduleD64Short>(a, stream); \
      if (kind == FwdScheduleKind::kD64Padded) return run_fwd<Element, 64, false, FwdScheduleD64Padded>(a, stream); \
    }                                                                                          \
    if constexpr (kHeadDim == 128) {                                                           \
      if (kind == FwdScheduleKind::kD128Long) return run_fwd<Element, 128, false, FwdScheduleD128Long>(a, stream); \
      if (kind == FwdScheduleKind::kD128Overlapped)                                            \
        return run_fwd_either_mask<Element, 128, FwdScheduleD128Overlapped>(a, stream);         \
    }                                                                                          \
    return run_fwd_either_mask<Element, kHeadDim>(a, stream);                                  \
  }

}  // namespace napkin::detail
