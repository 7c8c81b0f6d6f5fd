// SPDX-License-Identifier: Apache-2.0
// The attention kernel's entry, as every generated kernel instantiates it: a Fusion
// (napkin/device/attention_fusion.h), the element type and head dim in; the tile schedule
// chosen at launch from the measured table (napkin/attention_schedule.h); tensors bound by
// name and role from the C interface (napkin/kernel_abi.h).
//
// Roles of a tensor's dims, one letter each, in the tensor's own order:
//   b batch, h KV head, g query heads per KV head (GQA group), q query row, k key,
//   d the contracted head dim, e V's and O's head dim.
// The query head index the kernel sees is h * G + g (G the group size).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <cutlass/numeric_types.h>

#include "napkin/attention.h"
#include "napkin/attention_schedule.h"
#include "napkin/block_summary.h"
#include "napkin/device/fmha_fwd.h"
#include "napkin/kernel_abi.h"
#include "napkin/kernel_host.h"
#include "napkin/tensor_binder.h"

namespace napkin {

namespace detail {

// The persistent scheduler's tile counter for launches on `stream` (current device): allocated
// and zeroed on first use, then kept zero by the kernel itself. One per (device, stream):
// launches on one stream run in order and can share it; launches on different streams may
// overlap and must not. Kept for the process's lifetime (4 bytes each).
inline cudaError_t tile_counter_for(cudaStream_t stream, int** counter) {
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

template <class Fusion, class Element, int kHeadDim, int kHeadDimV, class Sched>
cudaError_t run_fused(const AttentionFwdArgs& a, const typename Fusion::Args& fusion, cudaStream_t stream) {
  using Cfg = device::FwdConfig<Element, kHeadDim, Sched::kBlockN, Sched::kConsumerWGs, Sched::kStages, Fusion,
                                Sched::kCtasPerSM, Sched::kSkipIdleWarpgroups, Sched::kSoftmaxOverlapsPV,
                                Sched::kQInRegisters, Sched::kStaggerClocksPerChunk, kHeadDimV>;
  int* counter = nullptr;
  if (cudaError_t err = tile_counter_for(stream, &counter); err != cudaSuccess) return err;
  const int64_t qs[3] = {a.q_batch_stride, a.q_seq_stride, a.q_head_stride};
  const int64_t ks[3] = {a.k_batch_stride, a.k_seq_stride, a.k_head_stride};
  const int64_t vs[3] = {a.v_batch_stride, a.v_seq_stride, a.v_head_stride};
  const int64_t os[3] = {a.o_batch_stride, a.o_seq_stride, a.o_head_stride};
  return device::launch_fmha_fwd<Cfg>(a.q, a.k, a.v, a.o, a.lse, a.batch, a.heads_q, a.heads_kv, a.seqlen_q,
                                      a.seqlen_k, qs, ks, vs, os, a.softmax_scale, a.pingpong, counter, stream,
                                      fusion);
}

// The most keys one tile of 128 query rows visits, counted in 128-key chunks by the mask's block
// bound on the host (batch 0, head 0; nine tiles spread over the rows, the last included), or -1
// where the bound reads tensors. Only the schedule choice reads it (runtime/tests/longest_visit.cu).
// Kept per thread for the last lengths and arguments, since a call's host time counts at short
// lengths.
template <class Fusion>
int longest_visit(const typename Fusion::Args& f, const AttentionFwdArgs& a) {
  if constexpr (!Fusion::kSkipsBlocks || !Fusion::kBlockOnHost) {
    return -1;
  } else {
    using Args = typename Fusion::Args;
    thread_local struct { int seqlen_q = -1, seqlen_k = -1, longest = -1; unsigned char args[sizeof(Args)] = {}; } last;
    if (last.seqlen_q == a.seqlen_q && last.seqlen_k == a.seqlen_k && std::memcmp(last.args, &f, sizeof(Args)) == 0)
      return last.longest;
    constexpr int kRows = 128, kKeys = 128, kSamples = 9;
    const int tiles = (a.seqlen_q + kRows - 1) / kRows, chunks = (a.seqlen_k + kKeys - 1) / kKeys;
    int longest = 0;
    for (int s = 0; s < kSamples; ++s) {
      const int tile = static_cast<int>(static_cast<int64_t>(tiles - 1) * s / (kSamples - 1));
      const int q0 = tile * kRows, q1 = std::min(q0 + kRows, a.seqlen_q) - 1;
      int visited = 0;
      for (int c = 0; c < chunks; ++c)
        visited += Fusion::block(f, 0, 0, q0, q1, c * kKeys, std::min((c + 1) * kKeys, a.seqlen_k) - 1).may;
      longest = std::max(longest, std::min(visited * kKeys, a.seqlen_k));
    }
    last.seqlen_q = a.seqlen_q, last.seqlen_k = a.seqlen_k, last.longest = longest;
    std::memcpy(last.args, &f, sizeof(Args));
    return longest;
  }
}

inline std::string finish(cudaError_t err) {
  return err == cudaSuccess ? std::string() : std::string("CUDA error: ") + cudaGetErrorString(err);
}

}  // namespace detail

// Launches the schedule the measured table gives for these lengths (kHeadDim: Q's and K's head
// dim; kHeadDimV: V's and O's) (a.causal is read as
// "tiles of uneven work", which is Fusion::kSkipsBlocks; the keys a tile visits, where the host
// can bound them, as longest_visit) with the fused code. Only the
// schedules that can be taken are instantiated; the long-key d = 128 schedule only for fusions
// with no per-score code. Arguments are checked (attention_fwd_check)
// first; returns "" or the reason.
template <class Fusion, class Element, int kHeadDim, int kHeadDimV = kHeadDim>
std::string run_attention(AttentionFwdArgs a, const typename Fusion::Args& fusion, cudaStream_t stream) {
  using namespace detail;
  a.causal = Fusion::kSkipsBlocks;
  a.head_dim_v = kHeadDimV;
  if (!Fusion::kNormalise && a.lse != nullptr) return "an LSE output needs a softmax (this diagram has none)";
  if (std::string e = attention_fwd_check(a); !e.empty()) return e;
  if (std::string e = forced_splits_error(); !e.empty()) return e;
  const long long longest = std::max({static_cast<long long>(a.seqlen_q), static_cast<long long>(a.seqlen_k),
                                      static_cast<long long>(a.batch), static_cast<long long>(a.heads_q),
                                      static_cast<long long>(a.head_dim)});
  if constexpr (Fusion::kIndexFloatScale > 0 || Fusion::kIndexFloatOffset > 0) {
    if (Fusion::kIndexFloatScale * longest + Fusion::kIndexFloatOffset >= device::kIndexFloatLimit)
      return "the fused code converts index arithmetic to floats exactly below 2^22 (" +
             std::to_string(Fusion::kIndexFloatScale) + " x the longest extent, " + std::to_string(longest) +
             ", plus " + std::to_string(Fusion::kIndexFloatOffset) + "): sequences this long are not supported";
  }
  if (const long long bound = Fusion::index_int_bound(longest); bound >= (1LL << 31))
    return "the fused code computes index arithmetic in 32-bit integers, which reaches |x| = " +
           std::to_string(bound) + " at the longest extent, " + std::to_string(longest) +
           " (past 2^31): sequences this long are not supported";
  cudaError_t err = cudaSuccess;
  constexpr bool kUnnormalised = !Fusion::kNormalise;
  const FwdScheduleKind kind = choose_fwd_schedule(a, longest_visit<Fusion>(fusion, a), Fusion::kBlockRowsFromTensors,
                                                   Fusion::kStagedBytes > 0, kUnnormalised);
  constexpr int kScheduleDim = schedule_head_dim(kHeadDim, kHeadDimV);
  constexpr int kWidest = kHeadDim > kHeadDimV ? kHeadDim : kHeadDimV;
  if constexpr (kScheduleDim == 64 && Fusion::kStagedBytes > 0) {
    err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdScheduleD64TwoGroups>(a, fusion, stream);
  } else if constexpr (kScheduleDim == 64) {
    if (kind == FwdScheduleKind::kD64Short) {
      err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdScheduleD64Short>(a, fusion, stream);
    } else if constexpr (Fusion::kSkipsBlocks) {
      if constexpr (Fusion::kBlockRowsFromTensors || kUnnormalised) {
        err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdScheduleD64TwoGroups>(a, fusion, stream);
      } else {
        err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdSchedule<64>>(a, fusion, stream);
      }
    } else if constexpr (kUnnormalised) {
      err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdScheduleD64TwoGroups>(a, fusion, stream);
    } else {
      if (kind == FwdScheduleKind::kD64Padded) err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdScheduleD64Padded>(a, fusion, stream);
      else err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdSchedule<64>>(a, fusion, stream);
    }
  } else if constexpr (kScheduleDim == 128) {
    if (kind == FwdScheduleKind::kD128ShortRows)
      return finish(run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdScheduleD128ShortRows>(a, fusion, stream));
    constexpr bool kPlainScores = !Fusion::kSkipsBlocks && !Fusion::kScoreMod && !Fusion::kMask && Fusion::kNormalise;
    if constexpr (kWidest <= 96 && kPlainScores) {
      err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdScheduleD96>(a, fusion, stream);
    } else {
      // The 176-key chunks leave no registers for fused per-score code (ptxas spills).
      if constexpr (kPlainScores) {
        if (kind == FwdScheduleKind::kD128Long) return finish(run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdScheduleD128Long>(a, fusion, stream));
      }
      if (kind == FwdScheduleKind::kD128Overlapped)
        err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdScheduleD128Overlapped>(a, fusion, stream);
      else
        err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdSchedule<128>>(a, fusion, stream);
    }
  } else {
    static_assert(kScheduleDim == 256);
    // (Score code that reads staged score-shaped tensors spills at 112 keys: it keeps 80.)
    if constexpr (kHeadDim <= 192 && kHeadDimV <= 128 && Fusion::kSkipsBlocks && Fusion::kStagedBytes == 0)
      err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdScheduleD192V128>(a, fusion, stream);
    else if constexpr (kWidest <= 192 && Fusion::kStagedBytes == 0) err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdScheduleD192>(a, fusion, stream);
    else err = run_fused<Fusion, Element, kHeadDim, kHeadDimV, FwdSchedule<256>>(a, fusion, stream);
  }
  return finish(err);
}

// Whether the kernel's head index h * G + g (G = the group's size) addresses t's heads: where t
// carries both axes and both exceed one, h's stride must be G times g's (the two merge into one).
inline bool head_axes_merge(const TensorBinder& tb, const napkin_tensor* t, const char* roles) {
  const int64_t group = tb.size('g');
  if (!std::strchr(roles, 'g') || !std::strchr(roles, 'h') || group == 1 || tb.size('h') == 1) return true;
  return TensorBinder::stride(t, roles, 'h') == group * TensorBinder::stride(t, roles, 'g');
}

// Fills the kernel's arguments from Q, K, V and O bound by role (TensorBinder). The kernel
// needs the head dims contiguous; where Q and O carry both h and g, h's stride must be G times
// g's (the two merge into one head axis). Returns "" or the reason, naming the tensor.
inline std::string attention_args_from(const TensorBinder& tb, const napkin_tensor* q, const char* q_roles,
                                       const napkin_tensor* k, const char* k_roles, const napkin_tensor* v,
                                       const char* v_roles, const napkin_tensor* o, const char* o_roles,
                                       AttentionDType dtype, AttentionFwdArgs* out) {
  AttentionFwdArgs a;
  a.dtype = dtype;
  a.batch = static_cast<int>(tb.size('b'));
  a.heads_kv = static_cast<int>(tb.size('h'));
  const int64_t group = tb.size('g');
  a.heads_q = static_cast<int>(a.heads_kv * group);
  a.seqlen_q = static_cast<int>(tb.size('q'));
  a.seqlen_k = static_cast<int>(tb.size('k'));
  a.head_dim = static_cast<int>(tb.size('d'));
  a.head_dim_v = static_cast<int>(tb.size('e'));
  if (tb.size('b') > 65535 || a.heads_q > 65535 || tb.size('q') > (1 << 30) || tb.size('k') > (1 << 30))
    return "batch and heads must be <= 65535 and sequences <= 2^30";
  struct Strides {
    int64_t b, s, h;
  };
  // Strides for the kernel's (batch, seq, head) of one tensor; absent roles get a stride past
  // the tensor's extent (their index is always 0), but for K's and V's batch.
  auto strides_of = [&](const char* name, const napkin_tensor* t, const char* roles, char seq, char dim,
                        Strides* st) -> std::string {
    if (TensorBinder::stride(t, roles, dim) != 1)
      return std::string("tensor '") + name + "': its head dim must be contiguous (stride 1)";
    int64_t extent = 8;
    for (int i = 0; i < t->rank; ++i) extent = std::max(extent, t->strides[i] * t->shape[i]);
    const bool has_b = std::strchr(roles, 'b'), has_h = std::strchr(roles, 'h'), has_g = std::strchr(roles, 'g');
    // K and V without the batch axis (one copy for every batch): batch stride 0 (launch_fmha_fwd).
    st->b = has_b ? TensorBinder::stride(t, roles, 'b') : seq == 'k' ? 0 : extent;
    st->s = TensorBinder::stride(t, roles, seq);
    // The kernel's head index is h * G + g: g's stride where G > 1 (h's must then be G times
    // it), else h's (a group of one head, whatever its stride, has index 0).
    if (has_g && (group > 1 || !has_h)) {
      st->h = TensorBinder::stride(t, roles, 'g');
      if (!head_axes_merge(tb, t, roles))
        return std::string("tensor '") + name + "': its KV-head stride must be " + std::to_string(group) +
               " times its group stride (the two head axes merge into one)";
    } else {
      st->h = has_h ? TensorBinder::stride(t, roles, 'h') : extent;
    }
    return "";
  };
  Strides sq, sk, sv, so;
  // Each tensor named as the diagram names it (its role where it has no name).
  auto name_of = [](const napkin_tensor* t, const char* role) { return t->name != nullptr ? t->name : role; };
  for (const std::string& e : {strides_of(name_of(q, "Q"), q, q_roles, 'q', 'd', &sq), strides_of(name_of(k, "K"), k, k_roles, 'k', 'd', &sk),
                               strides_of(name_of(v, "V"), v, v_roles, 'k', 'e', &sv), strides_of(name_of(o, "O"), o, o_roles, 'q', 'e', &so)})
    if (!e.empty()) return e;
  a.q = q->data, a.k = k->data, a.v = v->data, a.o = o->data;
  a.q_batch_stride = sq.b, a.q_seq_stride = sq.s, a.q_head_stride = sq.h;
  a.k_batch_stride = sk.b, a.k_seq_stride = sk.s, a.k_head_stride = sk.h;
  a.v_batch_stride = sv.b, a.v_seq_stride = sv.s, a.v_head_stride = sv.h;
  a.o_batch_stride = so.b, a.o_seq_stride = so.s, a.o_head_stride = so.h;
  *out = a;
  return "";
}

// Copies a message into a C caller's buffer (napkin_kernel_launch's err).
inline int32_t report_error(const std::string& message, char* err, int32_t err_len) {
  if (err != nullptr && err_len > 0) std::snprintf(err, static_cast<size_t>(err_len), "%s", message.c_str());
  return message.empty() ? 0 : 1;
}

// A generated kernel's Q, K, V and O: names and roles (as the diagram declares them), the head
// dim it is built for, the element type, and the scale folded into the softmax (1 where the
// fused score code applies its own).
struct AttentionSpec {
  const char *q, *q_roles, *k, *k_roles, *v, *v_roles, *o, *o_roles;
  int head_dim;
  AttentionDType dtype;
  float softmax_scale;
  // The row logsumexp as an output (f32, roles among b h g q in that order), or null.
  const char* lse = nullptr;
  const char* lse_roles = nullptr;
};

// Binds a generated kernel's LSE output: f32, written by the kernel as [batch, heads_q, seqlen_q]
// contiguous (head = h * G + g), so its strides must be those. Returns "" or the reason.
inline std::string bind_lse(TensorBinder& tb, const AttentionSpec& spec, AttentionFwdArgs* a) {
  if (spec.lse == nullptr) return "";
  const napkin_tensor* t = tb.bind(spec.lse, NAPKIN_F32, spec.lse_roles);
  if (t == nullptr) return tb.error();
  int64_t want = 1;
  for (const char role : {'q', 'g', 'h', 'b'}) {
    if (!std::strchr(spec.lse_roles, role)) continue;
    if (tb.size(role) > 1 && TensorBinder::stride(t, spec.lse_roles, role) != want)
      return std::string("tensor '") + spec.lse + "': the kernel writes it contiguous in the order [" + spec.lse_roles +
             "]: its stride along " + TensorBinder::role_name(role) + " must be " + std::to_string(want) + ", found " +
             std::to_string(TensorBinder::stride(t, spec.lse_roles, role));
    want *= tb.size(role);
  }
  a->lse = static_cast<float*>(t->data);
  return "";
}

// `roles` with the query row and the GQA group exchanged ('q' <-> 'g'), into `out`.
inline const char* exchange_query_roles(const char* roles, char (&out)[16]) {
  std::size_t i = 0;
  for (; roles[i] != 0 && i + 1 < sizeof out; ++i) out[i] = roles[i] == 'q' ? 'g' : roles[i] == 'g' ? 'q' : roles[i];
  out[i] = 0;
  return out;
}

// `spec` with the query row and the GQA group exchanged where the fused code reads neither
// (Fusion::kQueryAxesInterchangeable) and the group is the larger: its heads then share a tile's
// rows and read each K/V chunk once (decoding: one query row, the group's heads as rows). Only
// where Q and O allow it: the new group (the query rows) must merge with the KV heads.
template <class Fusion>
AttentionSpec with_larger_axis_as_rows(const AttentionSpec& spec, const napkin_tensor* tensors, int32_t count,
                                       char (&q_roles)[16], char (&o_roles)[16]) {
  if constexpr (!Fusion::kQueryAxesInterchangeable) {
    return spec;
  } else {
    const int element = spec.dtype == AttentionDType::kBF16 ? NAPKIN_BF16 : NAPKIN_F16;
    TensorBinder probe(tensors, count);
    const napkin_tensor* q = probe.bind(spec.q, element, exchange_query_roles(spec.q_roles, q_roles));
    const napkin_tensor* o = probe.bind(spec.o, Fusion::kOutputF32 ? NAPKIN_F32 : element, exchange_query_roles(spec.o_roles, o_roles));
    if (!probe.error().empty() || probe.size('q') <= probe.size('g') || !head_axes_merge(probe, q, q_roles) ||
        !head_axes_merge(probe, o, o_roles))
      return spec;
    AttentionSpec exchanged = spec;
    exchanged.q_roles = q_roles;
    exchanged.o_roles = o_roles;
    return exchanged;
  }
}

// napkin_kernel_launch of a generated kernel: binds Q, K, V and O by `declared` (its query axes
// exchanged where with_larger_axis_as_rows says), then the fused code's own inputs and params
// and the block summaries its mask reads (`bind_fusion(TensorBinder&, Fusion::Args&,
// BlockSummaries&)`), checks, launches.
template <class Fusion, class Element, int kHeadDim, int kHeadDimV, class BindFusion>
int32_t launch_generated(const AttentionSpec& declared, BindFusion bind_fusion, const napkin_tensor* tensors,
                         int32_t count, void* stream, char* err, int32_t err_len) {
  char q_roles[16], o_roles[16];
  AttentionSpec spec = with_larger_axis_as_rows<Fusion>(declared, tensors, count, q_roles, o_roles);
  const int element = spec.dtype == AttentionDType::kBF16 ? NAPKIN_BF16 : NAPKIN_F16;
  TensorBinder tb(tensors, count);
  const napkin_tensor* q = tb.bind(spec.q, element, spec.q_roles);
  const napkin_tensor* k = tb.bind(spec.k, element, spec.k_roles);
  const napkin_tensor* v = tb.bind(spec.v, element, spec.v_roles);
  const napkin_tensor* o = tb.bind(spec.o, Fusion::kOutputF32 ? NAPKIN_F32 : element, spec.o_roles);
  typename Fusion::Args fusion{};
  BlockSummaries summaries(static_cast<cudaStream_t>(stream));  // freed after the launch, in stream order
  bind_fusion(tb, fusion, summaries);
  if (!tb.error().empty()) return report_error(tb.error(), err, err_len);
  if (!summaries.error().empty()) return report_error(summaries.error(), err, err_len);
  if (tb.size('d') != kHeadDim)
    return report_error(std::string("tensor '") + spec.q + "': head dim " + std::to_string(tb.size('d')) + ", expected " +
                            std::to_string(kHeadDim) + " (the kernel is built for it)",
                        err, err_len);
  if (tb.size('e') != kHeadDimV)
    return report_error(std::string("tensor '") + spec.v + "': head dim " + std::to_string(tb.size('e')) + ", expected " +
                            std::to_string(kHeadDimV) + " (the kernel is built for it)",
                        err, err_len);
  fusion.group = static_cast<int>(tb.size('g'));
  AttentionFwdArgs args;
  if (std::string e = attention_args_from(tb, q, spec.q_roles, k, spec.k_roles, v, spec.v_roles, o, spec.o_roles,
                                          spec.dtype, &args);
      !e.empty())
    return report_error(e, err, err_len);
  args.softmax_scale = spec.softmax_scale;
  if (std::string e = bind_lse(tb, spec, &args); !e.empty()) return report_error(e, err, err_len);
  return report_error(run_attention<Fusion, Element, kHeadDim, kHeadDimV>(args, fusion, static_cast<cudaStream_t>(stream)), err,
                      err_len);
}

}  // namespace napkin

// The C entry points of a generated kernel (napkin/kernel_abi.h, napkin/kernel_host.h).
// One attention kernel of a plan's library (napkin/plan_launch.h): only its launch entry.
// kHeadDim: Q's and K's head dim; kHeadDimV: V's and O's.
#define NAPKIN_ATTENTION_ENTRY(entry, FusionT, ElementT, kHeadDim, kHeadDimV, spec, bind_fusion)                  \
  extern "C" int32_t entry(const napkin_tensor* tensors, int32_t count, void* stream, char* err, int32_t err_len) { \
    return napkin::launch_generated<FusionT, ElementT, kHeadDim, kHeadDimV>(spec, bind_fusion, tensors, count,      \
                                                                            stream, err, err_len);                 \
  }

// `names`: every tensor and param the library takes, null-terminated (others are refused).
#define NAPKIN_GENERATED_ATTENTION(FusionT, ElementT, kHeadDim, kHeadDimV, spec, bind_fusion, names, manifest)    \
  extern "C" int32_t napkin_kernel_abi_version() { return NAPKIN_KERNEL_ABI_VERSION; }                           \
  extern "C" const char* napkin_kernel_manifest() { return manifest; }                                           \
  extern "C" int32_t napkin_kernel_launch(const napkin_tensor* tensors, int32_t count, void* stream, char* err,   \
                                          int32_t err_len) {                                                     \
    if (std::string e = napkin::host::unknown_tensor(tensors, count, names); !e.empty())                        \
      return napkin::report_error(e, err, err_len);                                                              \
    return napkin::launch_generated<FusionT, ElementT, kHeadDim, kHeadDimV>(spec, bind_fusion, tensors, count,    \
                                                                            stream, err, err_len);               \
  }                                                                                                              \
  NAPKIN_DEFINE_HOST_ENTRIES([](const napkin_tensor& t) { return t.rank == 0; }) /* (O has axes) */
