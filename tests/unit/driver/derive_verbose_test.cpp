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
  // The plan configures the attention kernel with the kernel's own row layout.
  auto plain = run_napkin("derive examples/softcap.napkin --machine h100-sxm5");
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("chosen plan: 1 kernel"), std::string::npos) << plain.out;

  // -v: then every candidate of the paper's layout with its reason.
  auto v = run_napkin("derive examples/softcap.napkin --machine h100-sxm5 -v");
  EXPECT_EQ(v.exit_code, 0) << v.err;
  const auto at = v.out.find("rejected:\n");
  ASSERT_NE(at, std::string::npos) << v.out;
  std::size_t lines = 0;
  for (std::size_t i = at; i < v.out.size(); ++i) lines += v.out[i] == '\n';
  EXPECT_EQ(lines, 1u + 864u) << v.out.substr(at, 400);
  EXPECT_NE(v.out.find("  w=128 s=32 N=1 stages=1 sequential"), std::string::npos);
  EXPECT_NE(v.out.find("registers: "), std::string::npos);
  EXPECT_EQ(v.err.find("run with -v"), std::string::npos) << v.err;

  // Nothing at all feasible (fp32 operands: no kernel family takes them): -v lists why.
  auto none = run_napkin("derive examples/matmul.napkin --machine a100-sxm4-80g --set m=8 --set k=8 --set n=8 -v");
  EXPECT_TRUE(none.exit_code == 0 || none.exit_code == 1) << none.err;
}

}  // namespace
}  // namespace napkin
