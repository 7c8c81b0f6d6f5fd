// SPDX-License-Identifier: Apache-2.0
#include "ir/parser.h"

#include <cmath>

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "ir/builder.h"
#include "ir/printer.h"

namespace napkin::ir {
namespace {

Result<ParsedDiagram> parse(const std::string& text, const std::vector<Binding>& bindings = {}) {
  return parse_diagram(SourceText{"t.napkin", text}, bindings);
}

TEST(Parser, AttentionTypes) {
  auto p = parse(testing::read_text(testing::source_dir() / "examples/attention.napkin"));
  ASSERT_TRUE(p.ok()) << p.error().format();
  const Diagram& d = p->diagram;
  const Node& s = d.node(*d.find_node("S"));
  EXPECT_EQ(axes_text(d, s.axes), "[b h q k]");
  EXPECT_EQ(s.dtype, DType::f32);  // contractions accumulate in f32
  const Node& o = d.node(*d.find_node("O"));
  EXPECT_EQ(o.op, OpKind::cast);
  EXPECT_EQ(o.dtype, DType::bf16);
  EXPECT_EQ(axes_text(d, o.axes), "[b h q d]");
  ASSERT_EQ(d.outputs.size(), 1u);
  EXPECT_TRUE(p->warnings.empty());
}

// Index arithmetic stays i32 with whole numbers and becomes f32 with a fraction or a param (whose
// value a caller may rebind): 0.5 * |q - k| is never truncated to an integer.
TEST(Parser, AnIndexTimesAFractionIsReal) {
  auto p = parse("axes q=8 k=8\nparam c = 2\nA = q - k + 1\nB = 0.5 * abs(q - k)\nC = c * q\nD = q * 2.0\nE = q / 2\n"
                 "out A\nout B\nout C\nout D\nout E\n");
  ASSERT_TRUE(p.ok()) << p.error().format();
  const Diagram& d = p->diagram;
  for (const auto& [name, dtype] : std::vector<std::pair<const char*, DType>>{
           {"A", DType::i32}, {"B", DType::f32}, {"C", DType::f32}, {"D", DType::i32}, {"E", DType::f32}})
    EXPECT_EQ(d.node(*d.find_node(name)).dtype, dtype) << name;
}

// The builder API and the parser produce the same IR for the same diagram.
TEST(Parser, BuilderProducesTheSameIr) {
  Builder b("t.napkin");
  const AxisId ab = b.axis("b", 2), h = b.axis("h", 16), q = b.axis("q", 8192), k = b.axis("k", 8192),
               d = b.axis("d", 128);
  Value Q = b.input("Q", {ab, h, q, d}, DType::bf16);
  Value K = b.input("K", {ab, h, k, d}, DType::bf16);
  Value V = b.input("V", {ab, h, k, d}, DType::bf16);
  Value S = b.named("S", b.contract({Q, K}, {d}) * 0.08838834764831845);
  Value P = b.named("P", b.softmax(S, {k}));
  Value O = b.named("O", b.cast(b.contract({P, V}, {k}), DType::bf16));
  b.output(O);
  auto built = b.finish();
  ASSERT_TRUE(built.ok()) << built.error().format();
  auto parsed = parse(testing::read_text(testing::source_dir() / "examples/attention.napkin"));
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(built.value() == parsed->diagram);
  EXPECT_EQ(print_diagram(built.value()), print_diagram(parsed->diagram));
}

// The activations are the diagrams of their written-out forms (no IR node of their own), so
// every emitter, executor and solver sees them as it would the hand-written expression.
// The diagram of `Y = expr` over X[t e] (and a param c = 30).
Diagram diagram(const std::string& expr) {
  auto p = parse("axes t=4 e=8\nparam c = 30\nin X[t e] f32\nY = " + expr + "\nout Y\n");
  EXPECT_TRUE(p.ok()) << expr << ": " << (p.ok() ? "" : p.error().format());
  return p.ok() ? p->diagram : Diagram{};
}

TEST(Parser, ActivationsAreTheirWrittenOutForms) {
  EXPECT_TRUE(diagram("silu(X)") == diagram("X / (1 + exp(-X))"));
  EXPECT_TRUE(diagram("sigmoid(X)") == diagram("1 / (1 + exp(-X))"));
  EXPECT_TRUE(diagram("relu(X)") == diagram("max(X, 0)"));
  EXPECT_TRUE(diagram("gelu_tanh(X)") ==
              diagram("X * 0.5 * (1 + tanh(0.7978845608028654 * (X + 0.044715 * X * X * X)))"));
  EXPECT_FALSE(diagram("silu(X)") == diagram("sigmoid(X)"));
  auto two = parse("axes t=4\nin X[t] f32\nY = silu(X, X)\nout Y\n");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.error().format().find("silu expects one operand: silu(x)"), std::string::npos) << two.error().format();
  auto unknown = parse("axes t=4\nin X[t] f32\nY = gelu(X)\nout Y\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().format().find("gelu_tanh"), std::string::npos) << unknown.error().format();
}

// A min over axes is -max(-x): exact, one reduction the kernels know.
TEST(Parser, AMinReductionIsMinusTheMaxOfTheNegation) {
  auto p = parse("axes t=4 e=8\nin X[t e] f32\nm = min(X over e)\nout m\n");
  ASSERT_TRUE(p.ok()) << p.error().format();
  auto q = parse("axes t=4 e=8\nin X[t e] f32\nm = -max(-X over e)\nout m\n");
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(p->diagram == q->diagram);
}

// scale and softcap by a param keep the param a value of the diagram (a kernel argument), as
// their written-out forms; by a number they stay one op with the number folded in.
TEST(Parser, ScaleAndSoftcapByAParamAreTheirWrittenOutForms) {
  EXPECT_TRUE(diagram("softcap(X, c)") == diagram("c * tanh(X / c)"));
  EXPECT_TRUE(diagram("scale(X, c)") == diagram("X * c"));
  EXPECT_EQ(diagram("softcap(X, 30)").node(*diagram("softcap(X, 30)").find_node("Y")).op, OpKind::softcap);
  auto expr = parse("axes t=4\nin X[t] f32\nY = softcap(X, X)\nout Y\n");
  ASSERT_FALSE(expr.ok());
  EXPECT_NE(expr.error().format().find("must be a number or a param"), std::string::npos) << expr.error().format();
}

TEST(Parser, BindingsOverrideSizesAndParams) {
  auto p = parse("axes q=8 k=8\nparam w = 3\nin S[q k] f32\nM = select(|q - k| < w, S, 0)\nout M\n",
                 {{"q", 4, "q=4"}, {"w", 2, "w=2"}});
  ASSERT_TRUE(p.ok()) << p.error().format();
  EXPECT_EQ(p->diagram.axis(*p->diagram.find_axis("q")).size, 4);
  EXPECT_EQ(p->diagram.node(*p->diagram.find_node("w")).scalar, 2.0);
}

TEST(Parser, BindingErrorsNameTheArgument) {
  auto bad_name = parse("axes q=8\nin X[q] f32\nout X\n", {{"z", 4, "z=4"}});
  ASSERT_FALSE(bad_name.ok());
  EXPECT_EQ(bad_name.error().format(),
            "error: --set z=4: t.napkin has no axis or param named 'z' (axes: q)");
  auto bad_size = parse("axes q=8\nin X[q] f32\nout X\n", {{"q", 0, "q=0"}});
  ASSERT_FALSE(bad_size.ok());
  EXPECT_EQ(bad_size.error().format(), "error: --set q=0: axis 'q' needs a positive integer size");
  auto infinite_size = parse("axes q=8\nin X[q] f32\nout X\n", {{"q", INFINITY, "q=inf"}});
  ASSERT_FALSE(infinite_size.ok());
  EXPECT_EQ(infinite_size.error().format(), "error: --set q=inf: axis 'q' needs a positive integer size");
  auto syntax = parse_binding("q8192");
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.error().message, "--set q8192: expected NAME=VALUE, e.g. --set q=8192");
  auto not_number = parse_binding("q=big");
  ASSERT_FALSE(not_number.ok());
  EXPECT_EQ(not_number.error().message,
            "--set q=big: 'big' is not a decimal number such as 8192, 0.5 or 1e-6, nor inf or -inf");
  for (const char* bad : {"q=0x100", "q=Inf", "q=nan", "q= 8", "q=1e400", "q=1e-400", "q=1e", "q=--1"})
    EXPECT_FALSE(parse_binding(bad).ok()) << bad;
  // inf and -inf bind params as in a diagram (an axis refuses them: a size is an integer).
  for (const char* good : {"q=8192", "q=-0.5", "q=.25", "q=1e-6", "q=+3", "q=8.0", "w=inf", "w=-inf"})
    EXPECT_TRUE(parse_binding(good).ok()) << good;
  auto not_name = parse_binding("9q=1");
  ASSERT_FALSE(not_name.ok());
  EXPECT_EQ(not_name.error().message, "--set 9q=1: '9q' is not a name (letters, digits and _, not first a digit)");
}

TEST(Parser, DefinitionsMayComeInAnyOrder) {
  auto p = parse("axes q=4\nout Y\nY = X2 * 2\nX2 = exp(X)\nin X[q] f32\n");
  ASSERT_TRUE(p.ok()) << p.error().format();
  EXPECT_LT(*p->diagram.find_node("X2"), *p->diagram.find_node("Y"));  // topological order
}

TEST(Parser, UnusedInputsAndValuesWarn) {
  auto p = parse("axes q=4\nin X[q] f32\nin Unused[q] f32\nT = exp(X)\nY = X * 2\nout Y\n");
  ASSERT_TRUE(p.ok()) << p.error().format();
  ASSERT_EQ(p->warnings.size(), 2u);
  EXPECT_EQ(p->warnings[0].headline(), "t.napkin:3:4: warning: input 'Unused' is never used");
  EXPECT_EQ(p->warnings[1].headline(), "t.napkin:4:1: warning: 'T' is computed but never used");
}

TEST(Parser, WeavingMatchesAxesByName) {
  // slope[h] is broadcast over q and k; (k - q) over h.
  auto p = parse("axes h=2 q=3 k=5\nin slope[h] f32\nB = slope[h] * (k - q)\nout B[k h q]\n");
  ASSERT_TRUE(p.ok()) << p.error().format();
  const Diagram& d = p->diagram;
  EXPECT_EQ(axes_text(d, d.node(*d.find_node("B")).axes), "[h q k]");
  EXPECT_EQ(d.node(*d.find_node("B")).dtype, DType::f32);
  EXPECT_EQ(axes_text(d, d.outputs[0].axes), "[k h q]");
}

TEST(Parser, ExpressionsWrapInsideParentheses) {
  auto p = parse("axes q=4\nin X[q] f32\nY = max(X,\n        exp(X)) # comment\nout Y\n");
  ASSERT_TRUE(p.ok()) << p.error().format();
}

TEST(Parser, AllExamplesParseWithoutWarnings) {
  int count = 0;
  for (const auto& f : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    auto p = load_diagram(f.string());
    ASSERT_TRUE(p.ok()) << p.error().format();
    EXPECT_TRUE(p->warnings.empty()) << f;
    ++count;
  }
  EXPECT_GE(count, 10);
}

TEST(Parser, SizesWhoseProductOverflowsAreRejected) {
  auto p = parse("axes a=4294967296 b=4294967296 c=4\nin X[a b c] f32\nout X\n");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().message, "a tensor over [a b c] would have more than 2^63 elements");
}

}  // namespace
}  // namespace napkin::ir
