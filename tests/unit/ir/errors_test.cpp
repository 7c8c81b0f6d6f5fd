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

// A byte-order mark that an editor wrote first is skipped; a character that may not show is
// named by its code point.
TEST(Errors, ByteOrderMarksAndInvisibleCharacters) {
  EXPECT_TRUE(parse_diagram(SourceText{"bom.napkin", "\xEF\xBB\xBF" "axes m=4\nin A[m] bf16\nout A\n"}).ok());
  auto p = parse_diagram(SourceText{"nbsp.napkin", "axes m=4\xC2\xA0k=4\n"});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("unexpected character U+00A0"), std::string::npos) << p.error().message;
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
