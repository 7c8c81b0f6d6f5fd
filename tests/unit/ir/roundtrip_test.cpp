// SPDX-License-Identifier: Apache-2.0
// Property tests of the canonical printer: parse(print(d)) == d for parsed diagrams (equivalent
// where recognition reordered nodes), and
// print is a fixed point for builder diagrams, over the examples and many random diagrams.
#include <algorithm>

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

// Every diagram napkin ships (the test diagrams seed the parser's fuzzing, which checks this).
TEST(RoundTrip, ExamplesAndTestDiagrams) {
  for (const char* dir : {"examples", "tests/diagrams"})
    for (const auto& f : testing::files_in(testing::source_dir() / dir, ".napkin")) {
      auto p = load_diagram(f.string());
      ASSERT_TRUE(p.ok()) << p.error().format();
      auto again = reparse(p->diagram);
      ASSERT_TRUE(again.ok()) << f << "\n" << again.error().format();
      // (Equivalent, not equal: a mask moved to its softmax leaves the nodes in an order of their own.)
      EXPECT_TRUE(equivalent(again->diagram, p->diagram)) << f << "\n" << print_diagram(p->diagram);
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

// equivalent: node order aside, a different value, name, input order or output breaks it.
TEST(RoundTrip, EquivalentIgnoresNodeOrderOnly) {
  auto parse_text = [](const std::string& t) {
    auto p = parse_diagram(SourceText{"t.napkin", t});
    EXPECT_TRUE(p.ok()) << p.error().format();
    return p->diagram;
  };
  const std::string head = "axes q=4 k=4\nin A[q k] f32\nin B[q k] f32\n";
  const Diagram d = parse_text(head + "C = A + B * 2\nout C\n");
  // The literal 2 moved to the front, every operand renumbered.
  Diagram reordered = d;
  const auto two = static_cast<std::size_t>(std::find_if(d.nodes.begin(), d.nodes.end(), [](const Node& n) {
                                                return n.op == OpKind::constant;
                                              }) - d.nodes.begin());
  ASSERT_LT(two, d.nodes.size());
  reordered.nodes.erase(reordered.nodes.begin() + static_cast<std::ptrdiff_t>(two));
  reordered.nodes.insert(reordered.nodes.begin(), d.nodes[two]);
  auto renumber = [&](NodeId n) { return n == static_cast<NodeId>(two) ? 0 : n < static_cast<NodeId>(two) ? n + 1 : n; };
  for (Node& n : reordered.nodes)
    for (NodeId& o : n.operands) o = renumber(o);
  for (Output& o : reordered.outputs) o.node = renumber(o.node);
  EXPECT_FALSE(reordered == d);
  EXPECT_TRUE(equivalent(d, reordered));
  EXPECT_FALSE(equivalent(d, parse_text(head + "C = A + B * 3\nout C\n")));
  EXPECT_FALSE(equivalent(d, parse_text(head + "C = B + A * 2\nout C\n")));
  EXPECT_FALSE(equivalent(d, parse_text("axes q=4 k=4\nin B[q k] f32\nin A[q k] f32\nC = A + B * 2\nout C\n")));
  EXPECT_FALSE(equivalent(d, parse_text(head + "D = A + B * 2\nout D\n")));
  // The written-out base-2 causal softmax: its mask moved, reparsed in another order, equivalent.
  const Diagram moved = parse_text(
      "axes q=8 k=8 d=4\nin Q[q d] bf16\nin K[k d] bf16\nS = contract(Q, K over d) + select(q >= k, 0, -inf)\n"
      "M = max(S over k)\nE = exp2((S - M) * 1.4426950408889634)\nP = E / sum(E over k)\nout P\n");
  const Diagram again = parse_text(print_diagram(moved));
  EXPECT_FALSE(again == moved);
  EXPECT_TRUE(equivalent(again, moved));
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
