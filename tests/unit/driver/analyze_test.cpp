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
                      "'smem{tile m=128 n=256; stream k=64:add; stages=4}'");
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

TEST(Analyze, BadArguments) {
  auto m = run_napkin("analyze examples/attention.napkin --machine h900");
  EXPECT_EQ(m.exit_code, 1);
  EXPECT_NE(m.err.find("h900"), std::string::npos) << m.err;
  auto s = run_napkin("analyze examples/attention.napkin --machine h100-sxm5 --schedule 'smem{tile z=4}'");
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_NE(s.err.find("--schedule:1:"), std::string::npos) << s.err;
  auto dt = run_napkin("compare examples/attention.napkin --machines h100-sxm5 --dtypes int4");
  EXPECT_EQ(dt.exit_code, 1);
  EXPECT_EQ(dt.err.substr(0, dt.err.find('\n')),
            "error: --dtypes: 'int4' is not an input precision; expected bf16, f16, fp8 (= fp8e4m3), fp8e5m2, tf32 or f32");
}

}  // namespace
}  // namespace napkin
