// SPDX-License-Identifier: Apache-2.0
// napkin::attention_fwd: argument checks and dispatch to the per-(dtype, head dim) kernels.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <cutlass/numeric_types.h>

#include "napkin/attention.h"

namespace napkin::detail {
template <class Element, int kHeadDim>
cudaError_t run_fwd_dim(const AttentionFwdArgs& a, cudaStream_t stream);

// One counter per (device, stream): launches on one stream run in order, so they can share
// it; launches on different streams may overlap, so they must not. Kept for the process's
// lifetime (4 bytes each). Replaces a stream-ordered allocation and a memset per launch.
cudaError_t tile_counter_for(cudaStream_t stream, int** counter) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, int*> counters;
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mutex);
  int*& slot = counters[{device, stream}];
  if (slot == nullptr) {
    int* p = nullptr;
    if (cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&p), sizeof(int)); err != cudaSuccess) return err;
    if (cudaError_t err = cudaMemsetAsync(p, 0, sizeof(int), stream); err != cudaSuccess) {
      cudaFree(p);
      return err;
    }
    slot = p;
  }
  *counter = slot;
  return cudaSuccess;
}
}  // namespace napkin::detail

namespace napkin {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

std::string check_strides(const char* name, int64_t b, int64_t s, int64_t h) {
  for (int64_t st : {b, s, h}) {
    if (st <= 0 || st % 8 != 0)
      return std::string(name) + ": batch/seq/head strides must be positive multiples of 8 elements (16 bytes) for TMA, got (" +
             std::to_string(b) + ", " + std::to_string(s) + ", " + std::to_string(h) + ")";
  }
  return "";
}

}  // namespace

std::string attention_fwd_check(const AttentionFwdArgs& a) {
  if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256)
    return "head_dim must be 64, 128 or 256, got " + std::to_string(a.head_dim);
  if (a.batch < 1 || a.seqlen_q < 1 || a.seqlen_k < 1 || a.heads_q < 1 || a.heads_kv < 1)
    return "batch, seqlen_q, seqlen_k, heads_q and heads_kv must be >= 1";
  if (a.heads_q % a.heads_kv != 0)
    return "heads_q (" + std::to_string(a.heads_q) + ") must be a multiple of heads_kv (" + std::to_string(a.heads_kv) + ")";
  if (a.batch > 65535 || a.heads_q > 65535) return "batch and heads_q must be <= 65535 (grid limits)";
  if (!(a.softmax_scale > 0.f)) return "softmax_scale must be > 0";
  if (!a.q || !a.k || !a.v || !a.o) return "q, k, v and o must be non-null";
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v) || !aligned16(a.o))
    return "q, k, v and o must be 16-byte aligned";
  for (const std::string& e : {check_strides("q", a.q_batch_stride, a.q_seq_stride, a.q_head_stride),
                               check_strides("k", a.k_batch_stride, a.k_seq_stride, a.k_head_stride),
                               check_strides("v", a.v_batch_stride, a.v_seq_stride, a.v_head_stride),
                               check_strides("o", a.o_batch_stride, a.o_seq_stride, a.o_head_stride)})
    if (!e.empty()) return e;
  return "";
}

std::string attention_fwd(const AttentionFwdArgs& a, void* stream_ptr) {
  if (std::string e = attention_fwd_check(a); !e.empty()) return e;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  cudaError_t err = cudaSuccess;
  const bool bf16 = a.dtype == AttentionDType::kBF16;
  switch (a.head_dim) {
    case 64:
      err = bf16 ? detail::run_fwd_dim<cutlass::bfloat16_t, 64>(a, stream) : detail::run_fwd_dim<cutlass::half_t, 64>(a, stream);
      break;
    case 128:
      err = bf16 ? detail::run_fwd_dim<cutlass::bfloat16_t, 128>(a, stream) : detail::run_fwd_dim<cutlass::half_t, 128>(a, stream);
      break;
    default:
      err = bf16 ? detail::run_fwd_dim<cutlass::bfloat16_t, 256>(a, stream) : detail::run_fwd_dim<cutlass::half_t, 256>(a, stream);
      break;
  }
  if (err != cudaSuccess) return std::string("attention_fwd: CUDA error: ") + cudaGetErrorString(err);
  return "";
}

}  // namespace napkin
