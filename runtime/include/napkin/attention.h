// SPDX-License-Identifier: Apache-2.0
// Host API of napkin's fused attention forward kernel for Hopper (sm_90a).
//
//   O[b, s, h, :] = softmax(scale * Q[b, s, h, :] . K[b, :, h / g, :]^T  (+ causal mask)) . V
//   LSE[b, h, s]  = log(sum_k exp(scale * q.k))     (natural log; +inf for a fully masked row)
//
// Pre-conditions (checked; a violation returns a message and launches nothing):
//   dtype bf16 or fp16 for Q, K, V and O alike; head_dim a multiple of 8 from 8 to 256 (the
//   prebuilt attention_fwd: 64, 128 or 256; a generated kernel: the diagram's), and V's and O's
//   head_dim_v likewise (the prebuilt kernels: head_dim's);
//   heads_q a multiple of heads_kv (GQA/MQA: query head h reads KV head h / (heads_q / heads_kv));
//   the head axis contiguous (stride 1); every other stride a multiple of 8 elements (16 bytes);
//   pointers 16-byte aligned; seqlen_q, seqlen_k >= 1; softmax_scale > 0; lse may be null.
// Strides are in elements, so both (b, s, h, d) and (b, h, s, d) layouts (or any other with a
// unit head_dim stride) are accepted. Causal masking is aligned to the bottom-right corner, as
// in FlashAttention 2/3: query row i sees keys j <= i + seqlen_k - seqlen_q; rows that see no key
// get O = 0 and LSE = +inf.
#pragma once

#include <cstdint>
#include <string>

namespace napkin {

enum class AttentionDType { kBF16, kF16 };

struct AttentionFwdArgs {
  AttentionDType dtype = AttentionDType::kBF16;
  int batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_k = 0, head_dim = 0;
  int head_dim_v = 0;  // V's and O's head dim; 0: head_dim's
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // [batch, heads_q, seqlen_q] contiguous f32, or null
  // Element strides of the batch, sequence and head axes (the head_dim axis has stride 1).
  int64_t q_batch_stride = 0, q_seq_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_seq_stride = 0, k_head_stride = 0;  // K's and V's batch stride 0: one copy for every batch
  int64_t v_batch_stride = 0, v_seq_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_seq_stride = 0, o_head_stride = 0;
  float softmax_scale = 0.f;
  bool causal = false;
  // Schedule knob: the two consumer warpgroups take turns issuing their GEMMs (FlashAttention-3's
  // ping-pong), so one's softmax overlaps the other's GEMMs. Off: they issue independently.
  bool pingpong = true;
};

namespace detail {

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// `batch_may_be_zero`: K and V, whose batch stride 0 gives every batch one copy.
inline std::string check_strides(const char* name, int64_t b, int64_t s, int64_t h, bool batch_may_be_zero = false) {
  for (int64_t st : {batch_may_be_zero && b == 0 ? int64_t{8} : b, s, h}) {
    if (st <= 0 || st % 8 != 0)
      return std::string(name) + ": batch/seq/head strides must be positive multiples of 8 elements (16 bytes) for TMA, got (" +
             std::to_string(b) + ", " + std::to_string(s) + ", " + std::to_string(h) + ")";
  }
  return "";
}

}  // namespace detail

// Checks the arguments; returns "" when the kernel supports them, else the reason. (Inline:
// generated kernels check with it too.)
inline std::string attention_fwd_check(const AttentionFwdArgs& a) {
  if (a.head_dim < 8 || a.head_dim > 256 || a.head_dim % 8 != 0)
    return "head_dim must be a multiple of 8 from 8 to 256 (16-byte rows; WGMMA's widest N), got " +
           std::to_string(a.head_dim);
  if (a.head_dim_v != 0 && (a.head_dim_v < 8 || a.head_dim_v > 256 || a.head_dim_v % 8 != 0))
    return "head_dim_v must be a multiple of 8 from 8 to 256 (16-byte rows; WGMMA's widest N), or 0 for head_dim's, got " +
           std::to_string(a.head_dim_v);
  if (a.batch < 1 || a.seqlen_q < 1 || a.seqlen_k < 1 || a.heads_q < 1 || a.heads_kv < 1)
    return "batch, seqlen_q, seqlen_k, heads_q and heads_kv must be >= 1";
  if (a.heads_q % a.heads_kv != 0)
    return "heads_q (" + std::to_string(a.heads_q) + ") must be a multiple of heads_kv (" + std::to_string(a.heads_kv) + ")";
  if (a.batch > 65535 || a.heads_q > 65535) return "batch and heads_q must be <= 65535 (grid limits)";
  if (!(a.softmax_scale > 0.f)) return "softmax_scale must be > 0";
  if (!a.q || !a.k || !a.v || !a.o) return "q, k, v and o must be non-null";
  if (!detail::aligned16(a.q) || !detail::aligned16(a.k) || !detail::aligned16(a.v) || !detail::aligned16(a.o))
    return "q, k, v and o must be 16-byte aligned";
  if ((a.k_batch_stride == 0) != (a.v_batch_stride == 0))
    return "k and v: a batch stride of 0 (one K and V for every batch) must be both's or neither's";
  for (const std::string& e : {detail::check_strides("q", a.q_batch_stride, a.q_seq_stride, a.q_head_stride),
                               detail::check_strides("k", a.k_batch_stride, a.k_seq_stride, a.k_head_stride, true),
                               detail::check_strides("v", a.v_batch_stride, a.v_seq_stride, a.v_head_stride, true),
                               detail::check_strides("o", a.o_batch_stride, a.o_seq_stride, a.o_head_stride)})
    if (!e.empty()) return e;
  return "";
}

// Launches the kernel on `stream` (a cudaStream_t; null = the default stream). Returns "" on
// success, else the reason (unsupported arguments, or the CUDA error of the launch).
std::string attention_fwd(const AttentionFwdArgs& args, void* stream);

}  // namespace napkin
