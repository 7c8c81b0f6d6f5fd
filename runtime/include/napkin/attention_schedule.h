// SPDX-License-Identifier: Apache-2.0
// The tile schedules of the attention forward kernel and which one a call takes. Host-only (no
// CUDA), so the choice is tested without a GPU (runtime/tests/schedule_choice.cpp). The kernels
// are instantiated from these in attention_fwd_impl.h. See docs/runtime.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "napkin/attention.h"

namespace napkin::detail {

// A tile schedule: {kBlockN, consumer warpgroups, stages, CTAs per SM, idle warpgroups
// skipped, softmax overlapped with P V, Q in registers, start stagger}, the FwdConfig
// parameters beside dtype, head dim and mask. See docs/runtime.md.
struct FwdScheduleDefaults {
  static constexpr int kStages = 2, kCtasPerSM = 1, kStaggerClocksPerChunk = 0;
  static constexpr bool kSkipIdleWarpgroups = false, kSoftmaxOverlapsPV = false, kQInRegisters = false;
};
template <int kHeadDim> struct FwdSchedule;
template <> struct FwdSchedule<64> : FwdScheduleDefaults { static constexpr int kBlockN = 128, kConsumerWGs = 3; };
// d = 128 and 256, non-causal: the CTAs that take a tile fewer start up to 3,000 SM clocks a
// chunk later (FwdConfig::kStaggerClocksPerChunk; under 0.8 of a tile at 512 keys), so the
// CTAs reach their tile boundaries at different moments. Measured on the H100 (bench/NOTES.md,
// v48): d128 512 +2 %, d256 512-1k +2.5 to +3 %; 5,000 a chunk lost at 2k-4k; even at d = 64.
template <> struct FwdSchedule<128> : FwdScheduleDefaults {
  static constexpr int kBlockN = 128, kConsumerWGs = 2, kStaggerClocksPerChunk = 3000;
};
// d = 256: 80-key chunks (CuTe extended WGMMA shapes); measured +4-8 % over 64 on non-causal rows.
template <> struct FwdSchedule<256> : FwdScheduleDefaults {
  static constexpr int kBlockN = 80, kConsumerWGs = 2, kStaggerClocksPerChunk = 3000;
};

// Head dims past 64 up to 96 (tiles of 80 or 96 columns), non-causal with no per-score code:
// 192-row tiles of three consumer warpgroups and 96-key chunks, where the d = 128 schedules run
// 128-row tiles. Measured on the H200 against them (bench/NOTES.md, 2026-11-28 eleventh), d = 96:
// plain +5 to +7 % at 2k-16k; causal -4 % at 2k to +4 % at 16k, softcap -5 to -10 % (its score
// code spills 72 bytes at 160 registers a thread), so not for those.
struct FwdScheduleD96 : FwdScheduleDefaults { static constexpr int kBlockN = 96, kConsumerWGs = 3; };
// Head dims past 128 up to 192: 112-key chunks where d = 256 takes 80 (shared memory: 48 KiB of
// Q and a 168 KiB K/V ring, O in the V ring). Measured on the H200 against the 80-key chunks,
// d = 192: plain +4 to +10 %, causal +1 to +7 %, softcap even (bench/NOTES.md, 2026-11-28 eleventh).
// Not where the score code reads staged score-shaped tensors (relative_bias, score_tables): ptxas
// spills there at 112 keys.
struct FwdScheduleD192 : FwdSchedule<256> { static constexpr int kBlockN = 112; };
// Q's and K's head dims past 128 up to 192 with V's at most 128 (DeepSeek's MLA: 192 / 128), under
// a mask that skips blocks: 128-key chunks (shared memory: 48 KiB of Q and a 160 KiB K/V ring, O
// staged in the V ring). Measured on the H200 against 112-key chunks, causal 192 / 128: +4 to +7 %
// at 2k-16k (bench/NOTES.md, 2026-11-28 twelfth); not measured without a mask, which keeps 112.
struct FwdScheduleD192V128 : FwdSchedule<256> { static constexpr int kBlockN = 128; };

// Causal d = 64 with short queries: 64 x 64 tiles, one consumer warpgroup, three CTAs per SM.
// Short causal tiles are bound by each tile's fixed latency (first S GEMM, last P V, epilogue),
// which three independent CTAs hide better than two ping-pong warpgroups: measured on the H100,
// bf16, s = 512 272 vs 240 TFLOP/s (128 x 128 tiles), 1k 346 vs 322, 2k 402 vs 393 (192-row
// tiles); slower from 4k and on non-causal rows. See bench/NOTES.md, v20. Q is held in
// registers, so the S GEMM reads only K from shared memory (+1 to +1.5 % at 1k/2k, v37).
struct FwdScheduleD64Short : FwdScheduleDefaults {
  static constexpr int kBlockN = 64, kConsumerWGs = 1, kCtasPerSM = 3;
  static constexpr bool kQInRegisters = true;
};

// d = 64 in tiles of 128 rows, two warpgroups:
// - under a mask that a tensor varies by query row (a mask tensor, segment ids; the fusion's
//   kBlockRowsFromTensors), causal: a tile covers whole blocks of the 128 rows users lay such
//   masks out in (FlexAttention's block size). A 192-row tile straddles two such blocks and
//   visits the union of their chunks: under a block-sparse mask of density 0.3, 0.51 of the
//   chunks for 0.3 of the work (bench/NOTES.md, 2026-11-25 4th).
// - where the score code reads score-shaped tensors (staged through shared memory, the fusion's
//   kStagedBytes): three warpgroups leave 160 registers a consumer thread, and their score code
//   spills 300-400 bytes; two leave 240 (bench/NOTES.md, 2026-11-26);
// - where P is not normalised (sigmoid attention: an exponential and a reciprocal a score), past
//   the short causal schedule's lengths: +5-8 %. Not for score modifications (alibi, softcap,
//   a per-head temperature), which three warpgroups run 2-9 % faster (bench/NOTES.md, 2026-11-26).
struct FwdScheduleD64TwoGroups : FwdScheduleDefaults { static constexpr int kBlockN = 128, kConsumerWGs = 2; };

// Non-causal d = 64 where the 192-row tiles pad much: the same tiles, but a warpgroup whose rows
// all lie past seqlen_q computes nothing. Worth it from 1/16 of the warpgroups idle (512 and 1k:
// 1/9; measured +1-3 %), not below (2k-8k: 1/33 to 1/129; measured -2 to -5 %): bench/NOTES.md, v23.
struct FwdScheduleD64Padded : FwdSchedule<64> { static constexpr bool kSkipIdleWarpgroups = true; };

// Non-causal d = 128 with long keys: 176-key chunks, so each chunk's fixed work (row max and
// sum, barriers, ping-pong turns) is spread over more keys. Shared memory then holds one Q
// buffer, and O is staged in the V ring (as at d = 256). Measured on the H100 against 128-key
// chunks: 8k and 16k +3 to +8 %, 4k +1 %, 2k even, 1k -3 %, 512 -6 % (short tiles pay for the
// single Q buffer): bench/NOTES.md, v24.
struct FwdScheduleD128Long : FwdSchedule<128> { static constexpr int kBlockN = 176; };

// d = 128 with 128-key chunks past 1024 keys: the softmax kept overlapped with the previous
// chunk's P V (FwdConfig::kSoftmaxOverlapsPV). Measured on the H100 against the plain schedule:
// causal 2k-4k +1.5 to +2 %, 8k-16k +2 to +4 %; non-causal 2k +0.5 %; at 1k even, at 512 -1 to
// -2 %; with the 176-key chunks (non-causal past 2048 keys) -1 % at 4k, even beyond
// (bench/NOTES.md, v34).
struct FwdScheduleD128Overlapped : FwdSchedule<128> { static constexpr bool kSoftmaxOverlapsPV = true; };

// Short query rows (decoding, speculative drafts: at most 64 rows a head) at d = 128: 64-row
// tiles, one consumer warpgroup, two CTAs per SM (64-key chunks, so that two fit), where the
// 128-row schedules compute a second warpgroup of padding; Q in registers, as d = 64's short
// schedule (from shared memory, the S GEMM's descriptors left uniform registers: 2 R2UR a
// HGMMA). (d = 64 takes its short schedule.) Measured on the H100: bench/NOTES.md, 2026-11-26
// (seventh).
struct FwdScheduleD128ShortRows : FwdScheduleDefaults {
  static constexpr int kBlockN = 64, kConsumerWGs = 1, kCtasPerSM = 2;
  static constexpr bool kQInRegisters = true;
};

// Which of the schedules above a call takes (FwdSchedule<head_dim> where none of the others).
// runtime/tests/schedule_choice.cpp checks the thresholds without a GPU; tests/gpu and
// runtime/tests/sanitize_attention.cu run lengths on both sides of each, so every kernel is
// tested on the GPU.
// `longest_visit`: the most keys one tile of query rows visits where the host knows it (a mask
// whose block bound reads no tensor: a window of 1024 keys visits about 1024 at any length), or
// -1; the short and the overlapped schedules follow it rather than the sequence lengths.
// `rows_from_tensors`: the mask's visible blocks follow a tensor's rows (kBlockRowsFromTensors).
// `reads_score_tensors`: the score code reads score-shaped tensors (kStagedBytes > 0).
// `unnormalised`: P is the score code's own value, summed plainly (no softmax; !kNormalise).
// The schedules are tuned at head dims 64, 128 and 256; another head dim takes those of the
// smallest of the three that holds it (its tiles rounded up to 16 columns: FwdConfig); where V's
// head dim differs from Q's, the larger of the two decides.
constexpr int schedule_head_dim(int head_dim, int head_dim_v = 0) {
  const int widest = head_dim > head_dim_v ? head_dim : head_dim_v;
  return widest <= 64 ? 64 : widest <= 128 ? 128 : 256;
}
enum class FwdScheduleKind { kPlain, kD64Short, kD64Padded, kD128Long, kD128Overlapped, kD64TwoGroups, kD128ShortRows };
// Query rows a head at most for the short-row schedules: one 64-row tile.
inline constexpr int kShortRows = 64;
inline FwdScheduleKind choose_fwd_schedule(const AttentionFwdArgs& a, int longest_visit = -1,
                                           bool rows_from_tensors = false, bool reads_score_tensors = false,
                                           bool unnormalised = false) {
  // Without it, the lengths the thresholds were measured by: the query's (causal), the keys'.
  const int causal_keys = longest_visit >= 0 ? longest_visit : a.seqlen_q;
  const int row_keys = longest_visit >= 0 ? longest_visit : a.seqlen_k;
  const int head_dim = schedule_head_dim(a.head_dim, a.head_dim_v);
  if (head_dim == 64 && reads_score_tensors) return FwdScheduleKind::kD64TwoGroups;
  if (a.seqlen_q <= kShortRows && head_dim == 64) return FwdScheduleKind::kD64Short;
  if (a.seqlen_q <= kShortRows && head_dim == 128) return FwdScheduleKind::kD128ShortRows;
  if (head_dim == 64 && a.causal && causal_keys <= 2048) return FwdScheduleKind::kD64Short;
  if (head_dim == 64 && ((rows_from_tensors && a.causal) || unnormalised)) return FwdScheduleKind::kD64TwoGroups;
  if (head_dim == 64 && !a.causal) {
    constexpr int kWGs = FwdSchedule<64>::kConsumerWGs;
    const int wg_used = (a.seqlen_q + 63) / 64;
    const int wg_launched = (wg_used + kWGs - 1) / kWGs * kWGs;
    if (16 * (wg_launched - wg_used) >= wg_launched) return FwdScheduleKind::kD64Padded;
  }
  if (head_dim == 128 && !a.causal && a.seqlen_k > 2048) return FwdScheduleKind::kD128Long;
  if (head_dim == 128 && row_keys > 1024) return FwdScheduleKind::kD128Overlapped;
  return FwdScheduleKind::kPlain;
}

// How many slices a launch splits each tile's keys into (device::TileCoord in fmha_fwd.h): 1 where
// `tiles` fill 80 % of the `sms`; else the fewest splits whose wave efficiency over the SMs is
// within 15 % of the best, each at least kMinChunks of the `chunks` a row may visit (a split
// pays a tile's fixed cost: Q, the first S GEMM, the partial rows' write, the combine). SMs, not
// resident CTAs: the splits stream memory, which two CTAs on one SM share. The cost model applies
// the same rule (search/configure.cpp).
inline int fwd_num_splits(int tiles, int sms, int chunks) {
  constexpr int kMinChunks = 4, kMaxSplits = 128;
  if (static_cast<int64_t>(tiles) * 5 >= static_cast<int64_t>(sms) * 4) return 1;
  const int most = std::min(kMaxSplits, chunks / kMinChunks);
  auto efficiency = [&](int s) {
    const double n = static_cast<double>(tiles) * s;
    return n / (std::ceil(n / sms) * sms);
  };
  double best = 0;
  for (int s = 1; s <= most; ++s) best = std::max(best, efficiency(s));
  for (int s = 1; s <= most; ++s)
    if (efficiency(s) >= 0.85 * best) return s;
  return 1;
}

// NAPKIN_ATTENTION_SPLITS (read once): 0 where unset or empty, n for a whole number n >= 1, -1
// for anything else (forced_splits_error says so).
inline int forced_splits() {
  static const int forced = [] {
    const char* env = std::getenv("NAPKIN_ATTENTION_SPLITS");
    if (env == nullptr || *env == 0) return 0;
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    return *end == 0 && n >= 1 && n <= (1 << 20) ? static_cast<int>(n) : -1;
  }();
  return forced;
}
inline std::string forced_splits_error() {
  if (forced_splits() >= 0) return "";
  return std::string("NAPKIN_ATTENTION_SPLITS='") + std::getenv("NAPKIN_ATTENTION_SPLITS") +
         "': expected a whole number of splits >= 1 (or unset, for the launch's own choice)";
}

// The launch's split count: NAPKIN_ATTENTION_SPLITS=n (at most one split a chunk) where set, for
// tests and tuning, else fwd_num_splits. (The launch refuses an invalid value first.)
inline int fwd_launch_splits(int tiles, int sms, int chunks) {
  const int forced = forced_splits();
  return forced >= 1 ? std::max(1, std::min(forced, chunks)) : fwd_num_splits(tiles, sms, chunks);
}

}  // namespace napkin::detail
