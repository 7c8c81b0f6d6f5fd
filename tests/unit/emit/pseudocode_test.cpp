// SPDX-License-Identifier: Apache-2.0
// Pseudocode: golden files for every example under the default schedule on h100-sxm5, for a
// hand-written two-level attention schedule and matmul schedules, and the Markdown form;
// structural checks that the recurrences are the ones the accumulators need (online softmax,
// +=, normalised contraction), that nothing loops over an axis the schedule does not stream,
// determinism, and that `napkin pseudocode` prints the same text.
#include <string>

#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"
#include "cost/cost.h"
#include "emit/pseudocode.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "sched/schedule.h"
#include "sched/streaming.h"

namespace napkin {
namespace {

// Two levels: a CTA of 128 query rows streams K and V through smem in chunks of 128 (K in
// fp8), two warpgroups of 64 rows each consume them in sub-chunks of 64.
constexpr const char* kFlashTwoLevel =
    "smem{tile b=1 h=1 q=128; stream k=128:online_softmax; keep Q K:fp8e4m3 V; stages=2} "
    "rmem{tile q=64; stream k=64:online_softmax; keep O; groups=2}";
constexpr const char* kMatmulStreamed = "smem{tile m=128 n=128; stream k=64:add; keep A B; stages=4} rmem{tile m=64; keep C; groups=2}";
constexpr const char* kMatmulWholeK = "smem{tile m=128 n=128; keep A B C} rmem{tile m=64; keep C; groups=2}";

ir::Diagram example(const std::string& name) {
  auto r = ir::load_diagram((testing::source_dir() / "examples" / name).string());
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().format());
  return r.value().diagram;
}

const arch::Machine& h100() {
  static const arch::Machine m = [] {
    auto r = arch::find_machine("h100-sxm5", arch::default_machines_dir());
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().format());
    return r.value();
  }();
  return m;
}

sched::Schedule schedule(const char* text, const ir::Diagram& d) {
  auto s = sched::parse_schedule(text, d);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().format());
  return s.value();
}

sched::Schedule default_schedule(const ir::Diagram& d) {
  return cost::default_schedule(d, sched::analyse_streaming(d), h100());
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Pseudocode, EveryExampleWithTheDefaultScheduleMatchesGolden) {
  int count = 0;
  for (const auto& f : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    const ir::Diagram d = example(f.filename().string());
    testing::expect_golden("pseudocode/" + f.stem().string() + ".txt",
                           emit::pseudocode_text(d, default_schedule(d), &h100()));
    ++count;
  }
  EXPECT_GE(count, 10);
}

TEST(Pseudocode, HandWrittenSchedulesMatchGolden) {
  const ir::Diagram att = example("attention.napkin");
  const sched::Schedule flash = schedule(kFlashTwoLevel, att);
  testing::expect_golden("pseudocode/attention_two_level.txt", emit::pseudocode_text(att, flash, &h100()));
  testing::expect_golden("pseudocode/attention_two_level.md", emit::pseudocode_markdown(att, flash, &h100()));
  testing::expect_golden("pseudocode/attention.md", emit::pseudocode_markdown(att, default_schedule(att), &h100()));
  const ir::Diagram mm = example("matmul.napkin");
  testing::expect_golden("pseudocode/matmul_streamed.txt",
                         emit::pseudocode_text(mm, schedule(kMatmulStreamed, mm), &h100()));
  testing::expect_golden("pseudocode/matmul_whole_k.txt",
                         emit::pseudocode_text(mm, schedule(kMatmulWholeK, mm), nullptr));
}

TEST(Pseudocode, StartsWithProvenance) {
  const ir::Diagram att = example("attention.napkin");
  const sched::Schedule flash = schedule(kFlashTwoLevel, att);
  const std::string text = emit::pseudocode_text(att, flash, &h100());
  EXPECT_EQ(text.rfind("# napkin ", 0), 0u) << text;
  EXPECT_TRUE(contains(text, "# diagram attention.napkin: " + ir::diagram_key(att) + "\n"));
  EXPECT_TRUE(contains(text, "# schedule: " + sched::to_string(flash) + "\n"));
  EXPECT_TRUE(contains(text, "# machine: h100-sxm5\n"));
  EXPECT_EQ(text, emit::pseudocode_text(att, flash, &h100()));  // deterministic
}

TEST(Pseudocode, AttentionHasTheOnlineSoftmaxRecurrence) {
  for (const char* name : {"attention.napkin", "causal.napkin", "gqa.napkin", "alibi.napkin", "softcap.napkin",
                           "sliding_window.napkin"}) {
    SCOPED_TRACE(name);
    const ir::Diagram d = example(name);
    const std::string text = emit::pseudocode_text(d, default_schedule(d), &h100());
    EXPECT_TRUE(contains(text, "init:\n")) << text;
    EXPECT_TRUE(contains(text, "m <- -inf\n")) << text;
    EXPECT_TRUE(contains(text, "l <- 0\n")) << text;
    EXPECT_TRUE(contains(text, "O_acc <- 0\n")) << text;
    EXPECT_TRUE(contains(text, " chunks of k (64 each):")) << text;
    EXPECT_TRUE(contains(text, "m_new <- max(m, max_k(")) << text;
    EXPECT_TRUE(contains(text, "alpha <- exp(m_safe - m_safe_new)")) << text;
    EXPECT_TRUE(contains(text, "P <- exp(")) << text;
    EXPECT_TRUE(contains(text, "l <- alpha * l + sum_k(P)\n")) << text;
    EXPECT_TRUE(contains(text, "O_acc <- alpha * O_acc + (P @ V over k)\n")) << text;
    EXPECT_TRUE(contains(text, "m <- m_new; m_safe <- m_safe_new\n")) << text;
    EXPECT_TRUE(contains(text, "finalize:\n")) << text;
    EXPECT_TRUE(contains(text, "O <- (O_acc / l_safe) as bf16\n")) << text;
    // The divisor is deferred: the normalised P is never formed inside the loop.
    EXPECT_FALSE(contains(text, "/ l_safe\n")) << text;
  }
}

TEST(Pseudocode, AttentionTwoLevelNestsSubChunksAndLoadsOncePerChunk) {
  const ir::Diagram att = example("attention.napkin");
  const std::string text = emit::pseudocode_text(att, schedule(kFlashTwoLevel, att), &h100());
  EXPECT_TRUE(contains(text, "parallel for each of 2048 smem groups (b, h, q-tile of 128) on the SMs, 1 per SM:")) << text;
  EXPECT_TRUE(contains(text, "parallel for each of 2 rmem groups (q-tile of 64) in the smem group, 4096 in all:")) << text;
  EXPECT_TRUE(contains(text, "for each of 64 chunks of k (128 each):")) << text;
  EXPECT_TRUE(contains(text, "for each of 2 sub-chunks of k (64 each) in the chunk:")) << text;
  EXPECT_TRUE(contains(text, "load K[k:128 d:128] fp8e4m3 (from bf16): gmem -> smem")) << text;
  EXPECT_TRUE(contains(text, "load Q[q:128 d:128] bf16: gmem -> smem")) << text;
  // The loads come before the sub-chunk loop, the accumulators' init before the chunk loop.
  EXPECT_LT(text.find("load K["), text.find("sub-chunks"));
  EXPECT_LT(text.find("init:"), text.find("chunks of k"));
  EXPECT_TRUE(contains(text, "S           [q:64 k:64]    f32      rmem        16 KiB  per chunk of k")) << text;
  EXPECT_TRUE(contains(text, "O_acc       [q:64 d:128]   f32      rmem        32 KiB  accumulator (rescaled)")) << text;
}

TEST(Pseudocode, MatmulAccumulatesWithPlusEquals) {
  const ir::Diagram mm = example("matmul.napkin");
  for (const std::string& text : {emit::pseudocode_text(mm, default_schedule(mm), &h100()),
                                  emit::pseudocode_text(mm, schedule(kMatmulStreamed, mm), &h100())}) {
    EXPECT_TRUE(contains(text, "C_acc <- 0\n")) << text;
    EXPECT_TRUE(contains(text, "C_acc += A @ B over k\n")) << text;
    EXPECT_TRUE(contains(text, "C <- C_acc as bf16\n")) << text;
    EXPECT_FALSE(contains(text, "alpha")) << text;
    EXPECT_FALSE(contains(text, "max(")) << text;
  }
}

TEST(Pseudocode, NoLoopOverAnAxisTheScheduleDoesNotStream) {
  const ir::Diagram mm = example("matmul.napkin");
  const std::string text = emit::pseudocode_text(mm, schedule(kMatmulWholeK, mm), nullptr);
  EXPECT_FALSE(contains(text, "chunks of")) << text;
  EXPECT_FALSE(contains(text, "init:")) << text;
  EXPECT_FALSE(contains(text, "+=")) << text;
  EXPECT_TRUE(contains(text, "C <- (A @ B over k) as bf16\n")) << text;
  EXPECT_TRUE(contains(text, "load A[m:128 k:4096] bf16: gmem -> smem")) << text;
  // Layernorm's e cannot be streamed: a plain tiled loop, the reductions whole.
  const ir::Diagram ln = example("layernorm.napkin");
  const std::string plain = emit::pseudocode_text(ln, default_schedule(ln), &h100());
  EXPECT_FALSE(contains(plain, "chunks of")) << plain;
  EXPECT_TRUE(contains(plain, "sum_e(X)")) << plain;
}

TEST(Pseudocode, NormalisedContractionDefersTheDivisor) {
  const ir::Diagram d = example("rmsnorm_matmul.napkin");
  const std::string text = emit::pseudocode_text(d, default_schedule(d), &h100());
  EXPECT_TRUE(contains(text, "s += sum_e(X * X)\n")) << text;
  EXPECT_TRUE(contains(text, "N <- (X * gamma) as bf16   # N without / rms: applied once in finalize\n")) << text;
  EXPECT_TRUE(contains(text, "Y_acc += N @ W over e\n")) << text;
  EXPECT_TRUE(contains(text, "rms <- sqrt(s / 4096 + 1e-06)\n")) << text;
  EXPECT_TRUE(contains(text, "Y <- (Y_acc / rms) as bf16\n")) << text;
}

// Accumulators other than the examples': a logsumexp (running max and rescaled sum, finalized
// as m + log l) and a plain max, streamed together over k.
TEST(Pseudocode, LogsumexpAndMaxRecurrences) {
  auto r = ir::parse_diagram(SourceText{
      "lse.napkin",
      "axes q=256 k=1024 d=64\n"
      "in Q[q d] f16\nin K[k d] f16\n"
      "S = contract(Q, K over d)\n"
      "L = logsumexp(S over k)\n"
      "M = max(S over k)\n"
      "out L\nout M\n"});
  ASSERT_TRUE(r.ok()) << r.error().format();
  const ir::Diagram& d = r.value().diagram;
  const sched::StreamingReport rep = sched::analyse_streaming(d);
  ASSERT_EQ(sched::accumulators_text(rep.of(*d.find_axis("k")).accumulators), "max+logsumexp");
  const std::string text =
      emit::pseudocode_text(d, schedule("smem{tile q=64; stream k=128:max+logsumexp; stages=2}", d), &h100());
  testing::expect_golden("pseudocode/logsumexp_max.txt", text);
  EXPECT_TRUE(contains(text, "alpha <- exp(m_safe - m_safe_new)")) << text;
  EXPECT_TRUE(contains(text, "l <- alpha * l + sum_k(exp(S - m_safe_new))\n")) << text;
  EXPECT_TRUE(contains(text, "L <- m_safe + log(l)\n")) << text;
}

// The text up to the level totals (the command adds the cost model's live memory to those).
std::string before_totals(const std::string& text) {
  std::size_t end = text.size();
  for (const char* level : {"\n  l2: ", "\n  smem: ", "\n  rmem: ", "\n- l2: ", "\n- smem: ", "\n- rmem: "})
    end = std::min(end, text.find(level));
  return text.substr(0, end);
}

TEST(Pseudocode, CommandPrintsTheSameText) {
  const ir::Diagram att = example("attention.napkin");
  const auto r = testing::run_napkin("pseudocode examples/attention.napkin --machine h100-sxm5");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The CLI loads the file by its relative path; the provenance names the file only.
  EXPECT_EQ(before_totals(r.out), before_totals(emit::pseudocode_text(att, default_schedule(att), &h100())));
  EXPECT_TRUE(contains(r.out, "\n  rmem: 64.5 KiB live per group at the peak (the cost model's count, as analyze prints it); "
                              "capacity per group on h100-sxm5: 128 KiB; every variable listed, as if all were live at once: 81.8 KiB\n"))
      << r.out;
  const auto md = testing::run_napkin(std::string("pseudocode examples/attention.napkin --machine h100-sxm5 --markdown "
                                                  "--schedule '") + kFlashTwoLevel + "'");
  EXPECT_EQ(md.exit_code, 0) << md.err;
  EXPECT_EQ(before_totals(md.out), before_totals(emit::pseudocode_markdown(att, schedule(kFlashTwoLevel, att), &h100())));
  const auto bad = testing::run_napkin("pseudocode examples/attention.napkin --machine h100-sxm5 --schedule 'smem{tile x=1}'");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(contains(bad.err, "unknown axis 'x'")) << bad.err;
}

}  // namespace
}  // namespace napkin
