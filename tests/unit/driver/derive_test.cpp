// SPDX-License-Identifier: Apache-2.0
// `napkin derive` as a script and a reader use it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"

namespace napkin {
namespace {

using testing::run_napkin;

TEST(Derive, JsonContract) {
  auto r = run_napkin("derive examples/attention.napkin --machine h100-sxm5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"schedule", "predicted_time_s", "tflops", "bound", "groups_per_sm", "rejected"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["method"], "configuration solver");
  EXPECT_GE(j["groups_per_sm"].get<int>(), 1);
  int rejected = 0;
  for (const auto& [reason, n] : j["rejected"].items()) rejected += n.get<int>();
  EXPECT_EQ(rejected + j["feasible"].get<int>(), j["considered"].get<int>());
  EXPECT_LT(j["search_s"].get<double>(), 0.5);
}

TEST(Derive, PaperExampleTextMatchesGolden) {
  auto r = run_napkin("derive examples/attention_hopper_paper.napkin --machine h100-sxm5 --accumulator f16 --subloops 32,8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  testing::expect_golden("derive/attention_hopper_paper_h100-sxm5.txt", r.out);
  auto v = run_napkin("derive examples/attention.napkin --machine h100-sxm5 -v");
  ASSERT_EQ(v.exit_code, 0);
  EXPECT_NE(v.out.find("rejected:\n"), std::string::npos);
  EXPECT_NE(v.out.find("divisibility: w_q = 64 is not a multiple of 128"), std::string::npos) << v.out.substr(0, 2000);
}

TEST(Derive, PseudocodeOfTheBestSchedule) {
  auto r = run_napkin("derive examples/causal.napkin --machine h100-sxm5 --top 1 --pseudocode");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto at = r.out.find("pseudocode of the best schedule:");
  ASSERT_NE(at, std::string::npos);
  EXPECT_NE(r.out.find("O_acc <- alpha * O_acc + (P @ V over k)", at), std::string::npos) << r.out.substr(at);
}

TEST(Derive, BadArguments) {
  auto acc = run_napkin("derive examples/attention.napkin --machine h100-sxm5 --accumulator i32");
  EXPECT_EQ(acc.exit_code, 1);
  EXPECT_EQ(acc.err.substr(0, acc.err.find('\n')), "error: --accumulator: 'i32' is not a floating-point dtype");
  auto a100 = run_napkin("derive examples/attention_hopper_paper.napkin --machine a100-sxm4-80g");
  EXPECT_EQ(a100.exit_code, 1);
  EXPECT_NE(a100.err.find("a100-sxm4-80g"), std::string::npos) << a100.err;
}

}  // namespace
}  // namespace napkin
