// SPDX-License-Identifier: Apache-2.0
// `derive -v` lists every rejected candidate with its reason also when none is feasible, which
// is when the error tells the user to run it (issue #19: it printed nothing more).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"

namespace napkin {
namespace {

using testing::run_napkin;

TEST(DeriveVerbose, ListsEveryReasonWhenNothingIsFeasible) {
  // d = 256 with one row per thread: no configuration fits the registers.
  auto plain = run_napkin("derive examples/softcap.napkin --machine h100-sxm5");
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_NE(plain.err.find("no feasible configuration among 864 candidates:"), std::string::npos) << plain.err;
  EXPECT_NE(plain.err.find("(run with -v for each reason)"), std::string::npos) << plain.err;

  auto v = run_napkin("derive examples/softcap.napkin --machine h100-sxm5 -v");
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.out.rfind("rejected:\n", 0), 0u) << v.out;
  std::size_t lines = 0;
  for (char c : v.out) lines += c == '\n';
  EXPECT_EQ(lines, 1u + 864u) << v.out.substr(0, 400);
  EXPECT_NE(v.out.find("  w=128 s=32 N=1 stages=1 sequential"), std::string::npos);
  EXPECT_NE(v.out.find("registers: "), std::string::npos);
  EXPECT_NE(v.err.find("(each reason above)"), std::string::npos) << v.err;
  EXPECT_EQ(v.err.find("run with -v"), std::string::npos) << v.err;

  auto j = run_napkin("derive examples/softcap.napkin --machine h100-sxm5 -v --json");
  EXPECT_EQ(j.exit_code, 1);
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["ok"], false);
  ASSERT_TRUE(doc.contains("rejections"));
  EXPECT_EQ(doc["rejections"].size(), 864u);
  EXPECT_TRUE(doc["rejections"][0].contains("candidate") && doc["rejections"][0].contains("reason"));
}

}  // namespace
}  // namespace napkin
