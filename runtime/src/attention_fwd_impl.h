// SPDX-License-Identifier: Apache-2.0
// The schedule chosen for each (dtype, head dim, mask), and the typed entry that launches it.
// Each attention_fwd_<dtype>_d<D>.cu instantiates one (dtype, head dim) pair, so the kernels
// compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "napkin/attention.h"
#include "napkin/device/fmha_fwd.h"

namespace napkin::detail {

// Tile schedule per head dim: {kBlockN, consumer warpgroups, stages}. See docs/runtime.md.
template <int kHeadDim> struct FwdSchedule;
template <> struct FwdSchedule<64>  { static constexpr int kBlockN = 128, kConsumerWGs = 3, kStages = 2; };
template <> struct FwdSchedule<128> { static constexpr int kBlockN = 128, kConsumerWGs = 2, kStages = 2; };
template <> struct FwdSchedule<256> { static constexpr int kBlockN = 64,  kConsumerWGs = 2, kStages = 2; };

template <class Element, int kHeadDim, bool kCausal>
cudaError_t run_fwd(const AttentionFwdArgs& a, cudaStream_t stream) {
  using Sched = FwdSchedule<kHeadDim>;
  using Cfg = device::FwdConfig<Element, kHeadDim, Sched::kBlockN, Sched::kConsumerWGs, Sched::kStages, kCausal>;
  const int64_t qs[3] = {a.q_batch_stride, a.q_seq_stride, a.q_head_stride};
  const int64_t ks[3] = {a.k_batch_stride, a.k_seq_stride, a.k_head_stride};
  const int64_t vs[3] = {a.v_batch_stride, a.v_seq_stride, a.v_head_stride};
  const int64_t os[3] = {a.o_batch_stride, a.o_seq_stride, a.o_head_stride};
  return device::launch_fmha_fwd<Cfg>(a.q, a.k, a.v, a.o, a.lse, a.batch, a.heads_q, a.heads_kv,
                                      a.seqlen_q, a.seqlen_k, qs, ks, vs, os, a.softmax_scale, a.pingpong, stream);
}

template <class Element, int kHeadDim>
cudaError_t run_fwd_dim(const AttentionFwdArgs& a, cudaStream_t stream);

#define NAPKIN_INSTANTIATE_FWD(Element, kHeadDim)                                              \
  template <>                                                                                  \
  cudaError_t run_fwd_dim<Element, kHeadDim>(const AttentionFwdArgs& a, cudaStream_t stream) { \
    return a.causal ? run_fwd<Element, kHeadDim, true>(a, stream)                              \
                    : run_fwd<Element, kHeadDim, false>(a, stream);                            \
  }

}  // namespace napkin::detail
