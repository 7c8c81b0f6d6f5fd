// SPDX-License-Identifier: Apache-2.0
// `napkin machines` end to end: its table and JSON against golden files (NAPKIN_UPDATE_GOLDEN=1
// rewrites them), and a bad directory's error.
#include <gtest/gtest.h>

#include "common/test_util.h"

namespace napkin::arch {
namespace {

TEST(MachinesCommand, TableMatchesGolden) {
  const auto r = testing::run_napkin("machines");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  testing::expect_golden("machines.txt", r.out);
}

TEST(MachinesCommand, JsonMatchesGolden) {
  const auto r = testing::run_napkin("machines --json --dir machines");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  testing::expect_golden("machines.json", r.out);
}

TEST(MachinesCommand, BadFileFailsWithItsDiagnostic) {
  const auto r = testing::run_napkin("machines --dir tests/errors/machines");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("tests/errors/machines/bad-cluster-size.toml:", 0), 0u) << r.err;
}

}  // namespace
}  // namespace napkin::arch
