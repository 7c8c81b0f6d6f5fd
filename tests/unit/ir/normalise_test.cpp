// SPDX-License-Identifier: Apache-2.0
// normalise: composites become primitive ops, names and types are kept, the result verifies,
// and normalising twice changes nothing. Agreement with the reference interpreter is checked
// in tests/unit/reference/normalise_agreement_test.cpp (that test needs the interpreter).
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "ir/builder.h"
#include "ir/normalise.h"
#include "ir/parser.h"
#include "ir/verifier.h"

namespace napkin::ir {
namespace {

Diagram parse(const std::string& text) {
  auto p = parse_diagram(SourceText{"test.napkin", text});
  EXPECT_TRUE(p.ok()) << p.error().format();
  return p->diagram;
}

std::vector<std::filesystem::path> examples() {
  return testing::files_in(testing::source_dir() / "examples", ".napkin");
}

TEST(Normalise, EveryExampleLosesItsCompositesAndKeepsItsNamesAndTypes) {
  ASSERT_FALSE(examples().empty());
  for (const auto& path : examples()) {
    SCOPED_TRACE(path.filename().string());
    auto p = load_diagram(path.string());
    ASSERT_TRUE(p.ok()) << p.error().format();
    const Diagram& d = p->diagram;
    const Normalised n = normalise_with_origin(d);
    ASSERT_EQ(n.origin.size(), n.diagram.nodes.size());
    EXPECT_TRUE(verify(n.diagram, nullptr).ok());
    EXPECT_EQ(n.diagram.axes, d.axes);
    for (const Node& x : n.diagram.nodes) EXPECT_NE(op_class(x.op), OpClass::composite);
    for (const Node& x : d.nodes) {
      if (x.name.empty()) continue;
      const auto id = n.diagram.find_node(x.name);
      ASSERT_TRUE(id.has_value()) << x.name;
      EXPECT_EQ(n.diagram.node(*id).axes, x.axes) << x.name;
      EXPECT_EQ(n.diagram.node(*id).dtype, x.dtype) << x.name;
      EXPECT_EQ(d.node(n.origin[static_cast<std::size_t>(*id)]).name, x.name);
    }
    ASSERT_EQ(n.diagram.outputs.size(), d.outputs.size());
    for (std::size_t i = 0; i < d.outputs.size(); ++i) {
      EXPECT_EQ(n.diagram.node(n.diagram.outputs[i].node).name, d.node(d.outputs[i].node).name);
      EXPECT_EQ(n.diagram.outputs[i].axes, d.outputs[i].axes);
    }
    EXPECT_EQ(normalise(n.diagram), n.diagram) << "normalise is idempotent";
  }
}

TEST(Normalise, DiagramWithoutCompositesComesBackEqual) {
  const Diagram d = parse("axes m=2 k=3 n=4\nin A[m k] f32\nin B[k n] f32\n"
                          "C = contract(A, B over k)\nout C\n");
  EXPECT_EQ(normalise(d), d);
}

TEST(Normalise, SoftmaxBecomesGuardedMaxSubExpSumDiv) {
  const Diagram d = parse("axes q=2 k=3\nin S[q k] bf16\nP = softmax(S over k)\nout P\n");
  const Diagram n = normalise(d);
  std::vector<OpKind> ops;
  for (const Node& x : n.nodes)
    if (x.op != OpKind::constant) ops.push_back(x.op);
  const std::vector<OpKind> want = {OpKind::input, OpKind::reduce_max, OpKind::eq,
                                    OpKind::select, OpKind::sub, OpKind::exp,
                                    OpKind::reduce_sum, OpKind::eq, OpKind::select, OpKind::div};
  EXPECT_EQ(ops, want);
  const Node& p = n.node(*n.find_node("P"));
  EXPECT_EQ(p.op, OpKind::div);
  EXPECT_EQ(p.dtype, DType::f32);  // the composite's accumulator dtype
}

TEST(Normalise, NormsUseSumsAndNoSqrt) {
  for (std::string op : {"rmsnorm", "layernorm", "logsumexp"}) {
    SCOPED_TRACE(op);
    const Diagram d = parse("axes t=2 e=5\nin X[t e] f16\nY = " + op + "(X over e)\nout Y\n");
    const Diagram n = normalise(d);
    int sums = 0;
    for (const Node& x : n.nodes) sums += x.op == OpKind::reduce_sum;
    EXPECT_EQ(sums, op == "layernorm" ? 2 : 1);
    EXPECT_EQ(n.node(*n.find_node("Y")).dtype, d.node(*d.find_node("Y")).dtype);
  }
}

TEST(Normalise, KeepsTheCompositeLocationOnItsExpansion) {
  const Diagram d = parse("axes q=2 k=3\nin S[q k] f32\nP = softmax(S over k)\nout P\n");
  const Diagram n = normalise(d);
  const SourceLoc loc = d.node(*d.find_node("P")).loc;
  for (std::size_t i = 2; i < n.nodes.size(); ++i)
    if (n.nodes[i].op != OpKind::constant) EXPECT_EQ(n.nodes[i].loc, loc) << i;
}

}  // namespace
}  // namespace napkin::ir
