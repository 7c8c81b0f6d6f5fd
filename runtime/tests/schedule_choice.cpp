// SPDX-License-Identifier: Apache-2.0
// Which tile schedule a call takes (napkin::detail::choose_fwd_schedule): the thresholds of
// docs/runtime.md's table, on both sides of each, and the suite's lengths. Runs without a GPU.
#include <cstdio>
#include <string>

#include "napkin/attention_schedule.h"

namespace {

using napkin::detail::FwdScheduleKind;

int failures = 0;

const char* name(FwdScheduleKind k) {
  switch (k) {
    case FwdScheduleKind::kPlain: return "plain";
    case FwdScheduleKind::kD64Short: return "d64 short";
    case FwdScheduleKind::kD64Padded: return "d64 padded";
    case FwdScheduleKind::kD128Long: return "d128 long";
    case FwdScheduleKind::kD128Overlapped: return "d128 overlapped";
    case FwdScheduleKind::kD64TwoGroups: return "d64 two warpgroups";
    case FwdScheduleKind::kD128ShortRows: return "d128 short rows";
  }
  return "?";
}

void expect(int head_dim, bool causal, int seqlen_q, int seqlen_k, FwdScheduleKind want, int longest_visit = -1,
            bool rows_from_tensors = false, bool reads_score_tensors = false, bool unnormalised = false) {
  napkin::AttentionFwdArgs a;
  a.head_dim = head_dim, a.causal = causal, a.seqlen_q = seqlen_q, a.seqlen_k = seqlen_k;
  const FwdScheduleKind got = napkin::detail::choose_fwd_schedule(a, longest_visit, rows_from_tensors, reads_score_tensors, unnormalised);
  if (got != want) {
    std::printf("FAIL d=%d causal=%d seqlen_q=%d seqlen_k=%d longest_visit=%d rows_from_tensors=%d "
                "reads_score_tensors=%d: %s, expected %s\n",
                head_dim, causal, seqlen_q, seqlen_k, longest_visit, rows_from_tensors, reads_score_tensors, name(got),
                name(want));
    ++failures;
  }
}

void expect_splits(int tiles, int sms, int chunks, int want) {
  const int got = napkin::detail::fwd_num_splits(tiles, sms, chunks);
  if (got != want) {
    std::printf("FAIL splits: %d tiles, %d SMs, %d chunks: %d, expected %d\n", tiles, sms, chunks, got, want);
    ++failures;
  }
}

}  // namespace

// Run with NAPKIN_ATTENTION_SPLITS set to `value` (ctest runs it so): whether the launch's
// override is taken (a whole number >= 1) or refused with a message naming the variable.
int check_forced_splits(const char* value) {
  const std::string e = napkin::detail::forced_splits_error();
  const bool valid = std::string(value) == "3";
  const bool ok = valid ? e.empty() && napkin::detail::fwd_launch_splits(132, 132, 1000) == 3
                        : e.find("NAPKIN_ATTENTION_SPLITS='" + std::string(value) + "'") != std::string::npos &&
                              e.find("whole number") != std::string::npos;
  std::printf("%s NAPKIN_ATTENTION_SPLITS=%s: %s\n", ok ? "ok" : "FAIL", value, e.empty() ? "taken" : e.c_str());
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--forced-splits") return check_forced_splits(argv[2]);
  // V's head dim apart from Q's: the wider of the two takes its schedules.
  static_assert(napkin::detail::schedule_head_dim(192, 128) == 256 && napkin::detail::schedule_head_dim(64, 192) == 256 &&
                napkin::detail::schedule_head_dim(64, 128) == 128 && napkin::detail::schedule_head_dim(96) == 128);
  // Splits along the keys only where the tiles fill under 80 % of the GPU, each >= 4 chunks.
  expect_splits(132, 132, 1000, 1);  // a wave
  expect_splits(106, 132, 1000, 1);  // 80 %
  expect_splits(105, 132, 1000, 5);  // 525 tiles in 4 waves of 132: 0.99 (1 to 4 splits: 0.80)
  expect_splits(32, 132, 745, 4);    // decoding 128k keys over 32 heads: 128 of 132 CTAs
  expect_splits(32, 132, 7, 1);      // too few chunks for two splits of 4
  expect_splits(8, 132, 9, 2);       // at most chunks / 4
  expect_splits(1, 132, 100000, 109);  // within 15 % of 128 splits' 0.97
  // Decoding, GQA 8 KV heads with the group as rows (H100, bench/NOTES.md 2026-11-27): one CTA a
  // SM, whatever the short-row schedule's CTAs a SM (two splits on one SM measured slower).
  expect_splits(8, 132, 256, 15);    // b = 1, 16k keys (16 splits measured best)
  expect_splits(128, 132, 32, 1);    // b = 16, 2k: 128 tiles fill the SMs
  expect_splits(32, 132, 512, 4);    // b = 4, 32k

  using K = FwdScheduleKind;
  // At most 64 query rows a head (decoding): 64-row tiles, whatever the keys and the mask.
  expect(64, false, 1, 131072, K::kD64Short);
  expect(64, false, 64, 64, K::kD64Short);
  expect(128, false, 1, 131072, K::kD128ShortRows);
  expect(128, true, 64, 8192, K::kD128ShortRows);
  expect(128, false, 65, 8192, K::kD128Long);
  expect(256, false, 1, 8192, K::kPlain);
  expect(64, false, 1, 8192, K::kD64TwoGroups, -1, false, true);  // staged score inputs: two warpgroups
  // d = 64 causal: 64 x 64 tiles at three CTAs per SM up to 2048 query rows.
  expect(64, true, 1, 1, K::kD64Short);
  expect(64, true, 2048, 2048, K::kD64Short);
  expect(64, true, 2049, 2049, K::kPlain);
  expect(64, true, 16384, 16384, K::kPlain);
  // d = 64 non-causal: the padded schedule where >= 1/16 of the 192-row tiles' warpgroups idle.
  expect(64, false, 512, 512, K::kD64Padded);     // 8 of 9 warpgroups used
  expect(64, false, 1024, 1024, K::kD64Padded);   // 16 of 18
  expect(64, false, 65, 65, K::kD64Padded);       // 2 of 3
  expect(64, false, 2048, 2048, K::kPlain);       // 32 of 33
  expect(64, false, 2100, 2100, K::kPlain);       // 33 of 33
  expect(64, false, 960, 960, K::kPlain);         // 15 of 15
  expect(64, false, 16384, 16384, K::kPlain);     // 256 of 258
  // d = 128 non-causal: 176-key chunks past 2048 keys, 128-key chunks with the softmax
  // overlapped with P V past 1024 (the key length decides, not the query's).
  expect(128, false, 2048, 2048, K::kD128Overlapped);
  expect(128, false, 1025, 1025, K::kD128Overlapped);
  expect(128, false, 1024, 1024, K::kPlain);
  expect(128, false, 512, 512, K::kPlain);
  expect(128, false, 65, 2049, K::kD128Long);
  expect(128, false, 4097, 2048, K::kD128Overlapped);
  expect(128, false, 4097, 1024, K::kPlain);
  expect(128, false, 16384, 16384, K::kD128Long);
  // d = 128 causal: 128-key chunks, the softmax overlapped with P V past 1024 keys.
  expect(128, true, 1024, 1024, K::kPlain);
  expect(128, true, 512, 512, K::kPlain);
  expect(128, true, 65, 1025, K::kD128Overlapped);
  expect(128, true, 2048, 1024, K::kPlain);
  expect(128, true, 16384, 16384, K::kD128Overlapped);
  // A mask whose tiles visit few keys at any length (a window, local chunks) takes the schedules
  // of short sequences; one visiting every key takes those of its lengths.
  expect(64, true, 16384, 16384, K::kD64Short, 1152);
  expect(64, true, 16384, 16384, K::kD64Short, 2048);
  expect(64, true, 16384, 16384, K::kPlain, 2176);
  expect(64, true, 1024, 1024, K::kD64Short, 1024);
  expect(128, true, 16384, 16384, K::kPlain, 1024);
  expect(128, true, 16384, 16384, K::kD128Overlapped, 1152);
  // A mask a tensor varies by query row (a mask tensor, segment ids): at d = 64, 128-row tiles
  // past the short schedule's lengths; d = 128's tiles are 128 rows already.
  expect(64, true, 2048, 2048, K::kD64Short, -1, true);
  expect(64, true, 2049, 2049, K::kD64TwoGroups, -1, true);
  expect(64, true, 16384, 16384, K::kD64TwoGroups, -1, true);
  expect(128, true, 16384, 16384, K::kD128Overlapped, -1, true);
  // Score code that reads score-shaped tensors (a bias table): at d = 64, two warpgroups at
  // every length (registers); d = 128 as without.
  expect(64, false, 2048, 2048, K::kD64TwoGroups, -1, false, true);
  expect(64, true, 1024, 1024, K::kD64TwoGroups, -1, false, true);
  expect(128, false, 2048, 2048, K::kD128Overlapped, -1, false, true);
  // P unnormalised (sigmoid attention): at d = 64, two warpgroups past the short causal
  // lengths; non-causal at every length. (Score modifications keep three: measured faster.)
  expect(64, false, 512, 512, K::kD64TwoGroups, -1, false, false, true);
  expect(64, true, 2048, 2048, K::kD64Short, -1, false, false, true);
  expect(64, true, 8192, 8192, K::kD64TwoGroups, -1, false, false, true);
  expect(128, true, 8192, 8192, K::kD128Overlapped, -1, false, false, true);
  // d = 256: one schedule.
  expect(256, false, 512, 512, K::kPlain);
  expect(256, true, 16384, 16384, K::kPlain);
  if (failures == 0) std::printf("schedule choice: all cases as expected\n");
  return failures == 0 ? 0 : 1;
}
