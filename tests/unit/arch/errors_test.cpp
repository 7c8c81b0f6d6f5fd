// SPDX-License-Identifier: Apache-2.0
// Expected-error tests: each tests/errors/machines/NAME.toml must fail to load with exactly the
// diagnostic in NAME.expected. NAPKIN_UPDATE_GOLDEN=1 rewrites the .expected files.
#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"

namespace napkin::arch {
namespace {

TEST(MachineErrors, EachBadFileGivesItsExactMessage) {
  const auto dir = testing::source_dir() / "tests/errors/machines";
  int count = 0;
  for (const auto& f : testing::files_in(dir, ".toml")) {
    SCOPED_TRACE(f.filename().string());
    const std::string name = "tests/errors/machines/" + f.filename().string();
    auto m = parse_machine(testing::read_text(f), name);
    ASSERT_FALSE(m.ok()) << "expected an error";
    auto expected_path = f;
    expected_path.replace_extension(".expected");
    if (const char* u = std::getenv("NAPKIN_UPDATE_GOLDEN"); u && std::string(u) == "1")
      std::ofstream(expected_path) << m.error().format() << "\n";
    ASSERT_TRUE(std::filesystem::exists(expected_path)) << "missing " << expected_path;
    EXPECT_EQ(m.error().format() + "\n", testing::read_text(expected_path));
    ++count;
  }
  EXPECT_GE(count, 25);
}

TEST(MachineErrors, UnreadableFileNamesThePath) {
  auto m = load_machine("no/such/machine.toml");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().headline(), "error: no/such/machine.toml: cannot read the machine file");
}

}  // namespace
}  // namespace napkin::arch
