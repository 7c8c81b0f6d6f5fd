// SPDX-License-Identifier: Apache-2.0
// napkin::attention_fwd: dispatch to the per-(dtype, head dim) kernels (attention_fwd_impl.h).
#include <cuda_runtime.h>

#include <string>

#include <cutlass/numeric_types.h>

#include "napkin/attention.h"

namespace napkin::detail {
template <class Element, int kHeadDim>
std::string run_fwd_dim(const AttentionFwdArgs& a, cudaStream_t stream);
}  // namespace napkin::detail

namespace napkin {

std::string attention_fwd(const AttentionFwdArgs& a, void* stream_ptr) {
  if (std::string e = attention_fwd_check(a); !e.empty()) return e;
  if (a.head_dim_v != 0 && a.head_dim_v != a.head_dim)
    return "attention_fwd: the prebuilt kernels take V's head dim equal to Q's, got head_dim_v " + std::to_string(a.head_dim_v) +
           " and head_dim " + std::to_string(a.head_dim) + " (napkin build generates a kernel for V's own head dim)";
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  std::string err;
  const bool bf16 = a.dtype == AttentionDType::kBF16;
  switch (a.head_dim) {
    case 64:
      err = bf16 ? detail::run_fwd_dim<cutlass::bfloat16_t, 64>(a, stream) : detail::run_fwd_dim<cutlass::half_t, 64>(a, stream);
      break;
    case 128:
      err = bf16 ? detail::run_fwd_dim<cutlass::bfloat16_t, 128>(a, stream) : detail::run_fwd_dim<cutlass::half_t, 128>(a, stream);
      break;
    case 256:
      err = bf16 ? detail::run_fwd_dim<cutlass::bfloat16_t, 256>(a, stream) : detail::run_fwd_dim<cutlass::half_t, 256>(a, stream);
      break;
    default:
      return "attention_fwd: the prebuilt kernels take head_dim 64, 128 or 256, got " + std::to_string(a.head_dim) +
             " (napkin build generates a kernel for any multiple of 8 up to 256)";
  }
  return err.empty() ? err : "attention_fwd: " + err;
}

}  // namespace napkin
