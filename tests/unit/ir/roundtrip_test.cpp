// SPDX-License-Identifier: Apache-2.0
// Property tests of the canonical printer: parse(print(d)) == d for parsed diagrams, and
// print is a fixed point for builder diagrams, over the examples and many random diagrams.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "unit/ir/random_diagram.h"

namespace napkin::ir {
namespace {

Result<ParsedDiagram> reparse(const Diagram& d) {
  return parse_diagram(SourceText{d.source_name, print_diagram(d)});
}

TEST(RoundTrip, Examples) {
  for (const auto& f : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    auto p = load_diagram(f.string());
    ASSERT_TRUE(p.ok()) << p.error().format();
    auto again = reparse(p->diagram);
    ASSERT_TRUE(again.ok()) << f << "\n" << again.error().format();
    EXPECT_TRUE(again->diagram == p->diagram) << f << "\n" << print_diagram(p->diagram);
    EXPECT_EQ(print_diagram(again->diagram), print_diagram(p->diagram));
  }
}

TEST(RoundTrip, RandomDiagrams) {
  int tested = 0;
  for (unsigned seed = 1; seed <= 400; ++seed) {
    auto d = testing::random_diagram(seed, 1 + static_cast<int>(seed % 20));
    ASSERT_TRUE(d.ok()) << "seed " << seed << ": " << d.error().format();
    const std::string text = print_diagram(d.value());
    auto p = parse_diagram(SourceText{"random.napkin", text});
    ASSERT_TRUE(p.ok()) << "seed " << seed << "\n" << text << "\n" << p.error().format();
    EXPECT_EQ(print_diagram(p->diagram), text) << "seed " << seed;
    auto q = reparse(p->diagram);
    ASSERT_TRUE(q.ok());
    EXPECT_TRUE(q->diagram == p->diagram) << "seed " << seed << "\n" << text;
    ++tested;
  }
  EXPECT_EQ(tested, 400);
}

TEST(RoundTrip, NumbersPrintExactly) {
  for (double v : {0.08838834764831845, 1e-06, 1e300, 0.1, -2.5, 448.0}) {
    EXPECT_EQ(std::strtod(format_number(v).c_str(), nullptr), v);
  }
  EXPECT_EQ(format_number(-INFINITY), "-inf");
}

TEST(RoundTrip, DiagramKeyIsStable) {
  auto p = load_diagram((testing::source_dir() / "examples/matmul.napkin").string());
  ASSERT_TRUE(p.ok());
  const std::string key = diagram_key(p->diagram);
  EXPECT_EQ(key.rfind("m=4096 k=4096 n=4096 #", 0), 0u) << key;
  EXPECT_EQ(key, diagram_key(reparse(p->diagram)->diagram));
}

}  // namespace
}  // namespace napkin::ir
