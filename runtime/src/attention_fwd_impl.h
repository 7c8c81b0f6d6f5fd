// SPDX-License-Identifier: Apache-2.0
// napkin::attention_fwd (napkin/attention.h) as two fusions of the one kernel entry
// (napkin/attention_kernel.h), the same template every generated kernel instantiates: plain
// attention, and causal attention aligned to the bottom-right corner (FlashAttention's
// convention). Each attention_fwd_<dtype>_d<D>.cu instantiates one (dtype, head dim) pair, so
// the kernels compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "napkin/attention.h"
#include "napkin/attention_kernel.h"

namespace napkin::detail {

// Query row i sees keys j <= i + diag, diag = seqlen_k - seqlen_q.
struct BottomRightCausal : device::FusionDefaults {
  struct Args {
    int diag;
  };
  static constexpr bool kMask = true, kSkipsBlocks = true;
  template <class Reads>
  __device__ static bool visible(Args const& a, Reads const&, int, int, int q, int k) { return k <= q + a.diag; }
  __device__ static device::BlockVisibility block(Args const& a, int, int, int q0, int q1, int k0, int k1) {
    return {k0 <= q1 + a.diag, k1 <= q0 + a.diag};
  }
};

template <class Element, int kHeadDim>
std::string run_fwd_dim(const AttentionFwdArgs& a, cudaStream_t stream);

#define NAPKIN_INSTANTIATE_FWD(Element, kHeadDim)                                                      \
  template <>                                                                                          \
  std::string run_fwd_dim<Element, kHeadDim>(const AttentionFwdArgs& a, cudaStream_t stream) {         \
    return a.causal ? run_attention<BottomRightCausal, Element, kHeadDim>(a, {a.seqlen_k - a.seqlen_q}, stream) \
                    : run_attention<device::FusionDefaults, Element, kHeadDim>(a, {}, stream);         \
  }

}  // namespace napkin::detail
