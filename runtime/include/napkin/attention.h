// SPDX-License-Identifier: Apache-2.0
// Host API of napkin's fused attention forward kernel for Hopper (sm_90a).
//
//   O[b, s, h, :] = softmax(scale * Q[b, s, h, :] . K[b, :, h / g, :]^T  (+ causal mask)) . V
//   LSE[b, h, s]  = log(sum_k exp(scale * q.k))     (natural log; +inf for a fully masked row)
//
// Pre-conditions (checked; a violation returns a message and launches nothing):
//   dtype bf16 or fp16 for Q, K, V and O alike; head_dim in {64, 128, 256};
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
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // [batch, heads_q, seqlen_q] contiguous f32, or null
  // Element strides of the batch, sequence and head axes (the head_dim axis has stride 1).
  int64_t q_batch_stride = 0, q_seq_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_seq_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_seq_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_seq_stride = 0, o_head_stride = 0;
  float softmax_scale = 0.f;
  bool causal = false;
  // Schedule knob: the two consumer warpgroups take turns issuing their GEMMs (FlashAttention-3's
  // ping-pong), so one's softmax overlaps the other's GEMMs. Off: they issue independently.
  bool pingpong = true;
};

// Checks the arguments; returns "" when the kernel supports them, else the reason.
std::string attention_fwd_check(const AttentionFwdArgs& args);

// Launches the kernel on `stream` (a cudaStream_t; null = the default stream). Returns "" on
// success, else the reason (unsupported arguments, or the CUDA error of the launch).
std::string attention_fwd(const AttentionFwdArgs& args, void* stream);

}  // namespace napkin
