// SPDX-License-Identifier: Apache-2.0
// `napkin analyze` and `napkin compare` as scripts and readers use them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"

namespace napkin {
namespace {

using testing::run_napkin;

TEST(Analyze, JsonContract) {
  auto r = run_napkin("analyze examples/attention.napkin --machine h100-sxm5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"machine", "schedule", "predicted_time_s", "tflops", "bound", "levels", "streamable"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["machine"], "h100-sxm5");
  for (const auto& l : j["levels"]) {
    EXPECT_TRUE(l.contains("name") && l.contains("transfer_bytes") && l.contains("peak_bytes")) << l.dump();
  }
  bool k_online = false, d_refused = false;
  for (const auto& a : j["streamable"]) {
    EXPECT_TRUE(a.contains("accumulator") != a.contains("refused")) << a.dump();
    if (a["axis"] == "k") k_online = a["accumulator"] == "online_softmax";
    if (a["axis"] == "d") d_refused = a.contains("refused");
  }
  EXPECT_TRUE(k_online);
  EXPECT_TRUE(d_refused);
  EXPECT_GT(j["tflops"].get<double>(), 100);
  EXPECT_LT(j["analysis_s"].get<double>(), 0.5);
}

TEST(Analyze, TextAndCompareMatchGolden) {
  auto a = run_napkin("analyze examples/attention.napkin --machine h100-sxm5");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  testing::expect_golden("analyze/attention_h100-sxm5.txt", a.out);
  auto s = run_napkin("analyze examples/matmul.napkin --machine h200 --schedule "
                      "'smem{tile m=128 n=256; stream k=64:add; stages=2} rmem{tile m=64 n=256; stream k=64:add; keep C; groups=2}'");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  testing::expect_golden("analyze/matmul_h200_schedule.txt", s.out);
  auto c = run_napkin("compare examples/attention.napkin --machines a100-sxm4-80g,h100-sxm5,h200,b200 --dtypes bf16,fp8");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  testing::expect_golden("analyze/compare_attention.txt", c.out);
  // A causal mask: the blocks above the diagonal are skipped (docs/cost_model.md §12).
  auto m = run_napkin("analyze examples/causal.napkin --machine h100-sxm5");
  ASSERT_EQ(m.exit_code, 0) << m.err;
  testing::expect_golden("analyze/causal_h100-sxm5.txt", m.out);
  EXPECT_NE(m.out.find("smem: a mask leaves 50.8% of the (tile, chunk) blocks visible"), std::string::npos) << m.out;
}

// A schedule over a capacity gets no estimate: exit 1, the error names the capacity exceeded,
// and stdout shows what it would need but no time (issue #19).
TEST(Analyze, NoEstimateForAScheduleThatDoesNotFit) {
  const std::string schedule = "'smem{tile b=1 h=1 q=128; stream k=64:online_softmax; stages=1000000}'";
  auto r = run_napkin("analyze examples/attention.napkin --machine h100-sxm5 --schedule " + schedule);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "error: --schedule: the schedule does not fit on h100-sxm5: smem: one group needs 32000161.00 KiB, "
                   "over its capacity of 227.00 KiB (the per-block limit); no estimate\n");
  EXPECT_NE(r.out.find("! smem: one group needs 32000161.00 KiB, over its capacity of 227.00 KiB (the per-block limit): "
                       "this schedule does not fit"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("predicted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  smem   l2->smem           4.36 G      8.72 GB          - 32000161.00 KiB    227.00 KiB\n"),
            std::string::npos) << r.out;  // no time on any link either
  auto j = run_napkin("analyze examples/attention.napkin --machine h100-sxm5 --json --schedule " + schedule);
  EXPECT_EQ(j.exit_code, 1);
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["ok"], false);
  EXPECT_EQ(doc.find("predicted_time_s"), doc.end());
  // Registers: the capacity is the SM's register file over the warpgroups sharing it.
  auto regs = run_napkin("analyze examples/attention.napkin --machine h100-sxm5 --schedule "
                         "'smem{tile b=1 h=1 q=128; stream k=64:online_softmax} rmem{tile b=1 h=1 q=128; stream k=64:online_softmax; groups=2}'");
  EXPECT_EQ(regs.exit_code, 1);
  EXPECT_NE(regs.err.find("rmem: one group needs"), std::string::npos) << regs.err;
  EXPECT_NE(regs.err.find("over its capacity of 128.00 KiB (256.00 KiB per SM / 2 groups)"), std::string::npos) << regs.err;
  // The default schedule of a diagram no schedule of that shape fits (SwiGLU keeps whole rows).
  auto swiglu = run_napkin("analyze examples/swiglu_mlp.napkin --machine h100-sxm5");
  EXPECT_EQ(swiglu.exit_code, 1);
  EXPECT_EQ(swiglu.err.rfind("error: the default schedule (", 0), 0u) << swiglu.err;
  EXPECT_NE(swiglu.err.find("does not fit on h100-sxm5: l2: one group needs"), std::string::npos) << swiglu.err;
  EXPECT_NE(swiglu.err.find("(give one that fits with --schedule)"), std::string::npos) << swiglu.err;
  EXPECT_NE(swiglu.out.find("closed form"), std::string::npos);  // the rest of the analysis stands
  // compare: such a row says so, in place of times.
  auto c = run_napkin("compare examples/swiglu_mlp.napkin --machines h100-sxm5 --dtypes bf16");
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("h100-sxm5      bf16     n/a: the default schedule does not fit: l2: one group needs"),
            std::string::npos) << c.out;
}

TEST(Analyze, BadArguments) {
  auto m = run_napkin("analyze examples/attention.napkin --machine h900");
  EXPECT_EQ(m.exit_code, 1);
  EXPECT_NE(m.err.find("h900"), std::string::npos) << m.err;
  auto s = run_napkin("analyze examples/attention.napkin --machine h100-sxm5 --schedule 'smem{tile z=4}'");
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_NE(s.err.find("--schedule:1:"), std::string::npos) << s.err;
  auto dt = run_napkin("compare examples/attention.napkin --machines h100-sxm5 --dtypes int4");
  EXPECT_EQ(dt.exit_code, 2);  // a usage error (tools/napkin/cli.h)
  EXPECT_EQ(dt.err.substr(0, dt.err.find('\n')), "error: --dtypes int4: expected one of: bf16 f16 fp8 fp8e4m3 fp8e5m2 tf32 f32");
}

}  // namespace
}  // namespace napkin
