// SPDX-License-Identifier: Apache-2.0
// Expected-error tests: each tests/errors/NAME.napkin must fail with exactly the diagnostic in
// tests/errors/NAME.expected (as `napkin check` prints it).
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "ir/parser.h"
#include "ir/printer.h"

namespace napkin::ir {
namespace {

TEST(Errors, EachBadFileGivesItsExactMessage) {
  const auto dir = testing::source_dir() / "tests/errors";
  int count = 0;
  for (const auto& f : testing::files_in(dir, ".napkin")) {
    SCOPED_TRACE(f.filename().string());
    const std::string name = "tests/errors/" + f.filename().string();
    auto p = parse_diagram(SourceText{name, testing::read_text(f)});
    ASSERT_FALSE(p.ok()) << "expected an error";
    auto expected_path = f;
    expected_path.replace_extension(".expected");
    if (const char* u = std::getenv("NAPKIN_UPDATE_GOLDEN"); u && std::string(u) == "1")
      std::ofstream(expected_path) << p.error().format() << "\n";
    ASSERT_TRUE(std::filesystem::exists(expected_path)) << "missing " << expected_path;
    EXPECT_EQ(p.error().format() + "\n", testing::read_text(expected_path));
    ++count;
  }
  EXPECT_GE(count, 25);
}

// Every input that ever crashed the fuzzer, and every seed, checked for what the fuzzer
// checks (tests/fuzz/fuzz_parser.cpp): a value or an error, and a value prints and re-parses
// equal.
TEST(Errors, FuzzRegressionsDoNotCrash) {
  for (const char* sub : {"tests/fuzz/regressions/parser", "tests/errors"}) {
    for (const auto& f : testing::files_in(testing::source_dir() / sub, "")) {
      auto p = parse_diagram(SourceText{f.string(), testing::read_text(f)});
      if (!p.ok()) {
        EXPECT_FALSE(p.error().message.empty()) << f;
        continue;
      }
      const std::string printed = print_diagram(p->diagram);
      auto again = parse_diagram(SourceText{"printed.napkin", printed});
      ASSERT_TRUE(again.ok()) << f << "\n" << printed << "\n" << again.error().format();
      EXPECT_TRUE(equivalent(again->diagram, p->diagram)) << f << "\n" << printed;
    }
  }
}

}  // namespace
}  // namespace napkin::ir
