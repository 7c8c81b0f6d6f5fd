// SPDX-License-Identifier: Apache-2.0
// A measured kernel timeline (trace_tiles' text) read into timeline lanes: spans named by the
// events that bound them, times from the text's clock, a golden drawing, and located errors.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "emit/kernel_trace.h"
#include "emit/svg.h"

namespace napkin {
namespace {

// Two runs, as a results file holds them; the second has two warpgroups through a chunk.
constexpr const char* kTrace =
    "## first run\n"
    "d64 N64 WGs1 causal=1 b1 s128 h1: 10.0 us, 1 TFLOP/s (traced launch)\n"
    "SM clock: 1000 MHz (clock64 against %globaltimer over CTA 0's tiles)\n"
    "CTA 0, tiles 4-5 of warpgroup 0 (cycles from its tile 4 start):\n"
    "        0  WG0  tile\n"
    "      100  WG0  turn\n"
    "\n"
    "## second run\n"
    "d128 N128 WGs2 causal=0 b32 s512 h16: 146.6 us, 469 TFLOP/s (traced launch)\n"
    "SM clock: 2000 MHz (clock64 against %globaltimer over CTA 0's tiles)\n"
    "CTA 0 WG 0: 14 tiles, mean tile 15271 cycles (tiles 2..13)\n"
    "   tile          -> turn             476 cycles x 12\n"
    "CTA 0, tiles 4-5 of warpgroup 0 (cycles from its tile 4 start):\n"
    "        0  WG0  tile\n"
    "      400  WG0  turn\n"
    "      500  WG1  tile\n"
    "     1200  WG0  issued\n"
    "     1400  WG0  S ready\n"
    "     1500  WG1  turn\n"
    "     3000  WG0  softmax done\n"
    "     3100  WG0  PV done\n"
    "     3200  WG1  issued\n"
    "     3400  WG0  store start\n"
    "     4000  WG0  store end\n"
    "CTA 1 WG 0: 14 tiles, mean tile 15259 cycles (tiles 2..13)\n";

emit::KernelTrace parse(const std::string& text, int section, double clock_mhz = 0) {
  auto r = emit::parse_kernel_trace({"trace.txt", text}, section, clock_mhz);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().format());
  return r.ok() ? r.value() : emit::KernelTrace{};
}

TEST(KernelTrace, SpansRunBetweenAWarpgroupsEventsAndAreNamedByThem) {
  const emit::KernelTrace t = parse(kTrace, 1);
  EXPECT_EQ(t.title, "d128 N128 WGs2 causal=0 b32 s512 h16: CTA 0 as measured (2000 MHz)");
  EXPECT_EQ(t.clock_mhz, 2000);
  ASSERT_EQ(t.lanes.size(), 2u);
  EXPECT_EQ(t.lanes[0].unit, "warpgroup 0");
  ASSERT_EQ(t.lanes[0].spans.size(), 7u);
  const emit::TimelineSpan& softmax = t.lanes[0].spans[3];
  EXPECT_EQ(softmax.kind, "softmax");
  EXPECT_DOUBLE_EQ(softmax.start_s, 1400 / 2e9);  // cycles / (2000 MHz)
  EXPECT_DOUBLE_EQ(softmax.end_s, 3000 / 2e9);
  EXPECT_EQ(t.lanes[0].spans[0].kind, "tile boundary");
  EXPECT_EQ(t.lanes[0].spans[6].kind, "O store");
  ASSERT_EQ(t.lanes[1].spans.size(), 2u);  // tile -> turn -> issued
  EXPECT_EQ(t.lanes[1].spans[1].kind, "issue WGMMA");
  EXPECT_DOUBLE_EQ(t.lanes[1].spans[0].start_s, 500 / 2e9);
  // The first section, and a clock given instead of the text's.
  EXPECT_DOUBLE_EQ(parse(kTrace, 0).lanes.at(0).spans.at(0).end_s, 100 / 1e9);
  EXPECT_DOUBLE_EQ(parse(kTrace, 0, 500).lanes.at(0).spans.at(0).end_s, 100 / 5e8);
}

TEST(KernelTrace, TheTilesFirstKSplitsItsStartIntoTheWaitForKAndForTheTurn) {
  const std::string text =
      "SM clock: 1000 MHz\nCTA 0, tiles 4-5 of warpgroup 0:\n"
      "     0  WG0  tile\n   530  WG0  first K\n   650  WG0  turn\n  1200  WG0  issued\n";
  const emit::KernelTrace t = parse(text, 0);
  ASSERT_EQ(t.lanes.size(), 1u);
  ASSERT_EQ(t.lanes[0].spans.size(), 3u);
  EXPECT_EQ(t.lanes[0].spans[0].label, "wait K");
  EXPECT_EQ(t.lanes[0].spans[1].label, "wait turn");
  EXPECT_EQ(t.lanes[0].spans[1].kind, "tile boundary");
  EXPECT_DOUBLE_EQ(t.lanes[0].spans[0].end_s, 530 / 1e9);
}

TEST(KernelTrace, AnSMsBlockHasALanePerResidentCTA) {
  // trace_tiles built with NAPKIN_FWD_TRACE_SM0: the CTAs of SM 0 on its one clock.
  const std::string text =
      "d64 N64 WGs1 causal=1 b8 s2048 h32: 371.2 us, 370 TFLOP/s (traced launch)\n"
      "SM clock: 1000 MHz\nCTA 0, tiles 4-5 of warpgroup 0:\n     0  WG0  tile\n   100  WG0  turn\n"
      "SM 0, every resident CTA (slots in start order), cycles from slot 0's tile 3:\n"
      "     0  CTA0  S ready\n   200  CTA1  S ready\n   800  CTA0  softmax done\n   900  CTA2  issued\n"
      "  1000  CTA1  softmax done\n  1100  CTA2  S ready\n";
  const emit::KernelTrace t = parse(text, 1);
  EXPECT_EQ(t.title, "d64 N64 WGs1 causal=1 b8 s2048 h32: the CTAs of SM 0 as measured (1000 MHz)");
  ASSERT_EQ(t.lanes.size(), 3u);
  EXPECT_EQ(t.lanes[1].unit, "CTA 1");
  ASSERT_EQ(t.lanes[1].spans.size(), 1u);
  EXPECT_EQ(t.lanes[1].spans[0].kind, "softmax");
  EXPECT_DOUBLE_EQ(t.lanes[1].spans[0].start_s, 200 / 1e9);
  EXPECT_EQ(t.lanes[2].spans.at(0).kind, "wait for S");
}

TEST(KernelTrace, DrawingMatchesGolden) {
  const emit::KernelTrace t = parse(kTrace, 1);
  testing::expect_golden("svg/kernel_trace.svg", emit::draw_timeline_svg(t.lanes, 0, t.title));
}

TEST(KernelTrace, BadTextGivesLocatedErrors) {
  auto error = [](const std::string& text, int section = 0) {
    auto r = emit::parse_kernel_trace({"trace.txt", text}, section);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.error().headline();
  };
  const std::string header = "SM clock: 1700 MHz\nCTA 0, tiles 4-5 of warpgroup 0:\n";
  EXPECT_EQ(error(header + "   0  WG0  tile\n  12  WG0  lunch\n"),
            "trace.txt:4:12: error: unknown event 'lunch' (expected one of: tile, turn, issued, S ready, "
            "softmax done, PV done, store start, store end, first K)");
  EXPECT_EQ(error(header + "   0  WG0  tile\n  12  XG0  turn\n"),
            "trace.txt:4:7: error: expected 'WG' and the warpgroup's number (or 'CTA' and the CTA's)");
  EXPECT_EQ(error(header + "   0  WG0  tile\n  12  WG  turn\n"),
            "trace.txt:4:9: error: expected a number after 'WG'");
  EXPECT_EQ(error(header + "   0  WG0  tile\n  12  CTA1  turn\n"),
            "trace.txt:4:3: error: expected 'WG<k>': this block lists CTA 0's warpgroups");
  EXPECT_EQ(error("SM clock: 1700 MHz\nSM 0, every resident CTA:\n   0  CTA0  tile\n  12  WG0  turn\n"),
            "trace.txt:4:3: error: expected 'CTA<k>': this block lists the CTAs of SM 0");
  EXPECT_EQ(error(header + "   0  WG0  tile\n"), "trace.txt:2:1: error: this timeline has fewer than two events");
  EXPECT_EQ(error(header + "   9  WG0  tile\n   5  WG0  turn\n"),
            "trace.txt:4:1: error: this event is earlier than the one before it: the timeline must be in clock order");
  EXPECT_EQ(error("CTA 0, tiles 4-5:\n 0  WG0  tile\n 5  WG0  turn\n"),
            "trace.txt:1:1: error: no 'SM clock: N MHz' line before this timeline");
  EXPECT_EQ(error("SM clock: fast\n"), "trace.txt:1:11: error: expected the clock as 'SM clock: N MHz'");
  EXPECT_NE(error(kTrace, 2).find("no timeline 2 in the text: it has 2, numbered from 0"), std::string::npos);
  EXPECT_NE(error("H100 3 4\nnot a trace\n", 0).find("no timeline in the text: expected blocks that begin"), std::string::npos);
}

TEST(KernelTrace, CommandLineDrawsAndRefusesBadInput) {
  const std::string path = (testing::source_dir() / "bench/results/trace_v37_d128_h100_20261122.txt").string();
  const std::string out = ::testing::TempDir() + "/kernel_trace.svg";
  auto ok = testing::run_napkin("draw-trace " + path + " --section 8 -o " + out);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(testing::read_text(out).find("warpgroup 1"), std::string::npos);
  auto missing = testing::run_napkin("draw-trace nosuch.txt -o " + out);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("nosuch.txt: cannot open the file"), std::string::npos);
  auto no_clock = testing::run_napkin("draw-trace " + path + " --section 0 -o " + out);
  EXPECT_EQ(no_clock.exit_code, 1);
  EXPECT_NE(no_clock.err.find("no 'SM clock: N MHz' line before this timeline"), std::string::npos);
  auto no_output = testing::run_napkin("draw-trace " + path);
  EXPECT_NE(no_output.exit_code, 0);
}

}  // namespace
}  // namespace napkin
