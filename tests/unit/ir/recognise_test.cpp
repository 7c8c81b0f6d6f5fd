// SPDX-License-Identifier: Apache-2.0
// recognise: a softmax or logsumexp written out by hand parses to the composite (one node in
// place of the written ops, named and typed as written), and what only resembles one does not.
// Agreement in value is checked in tests/unit/reference/recognise_agreement_test.cpp.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/recognise.h"

namespace napkin::ir {
namespace {

constexpr const char* kHead =
    "axes q=5 k=7 d=3\nin Q[q d] f32\nin K[k d] f32\nS = contract(Q, K over d)\n";

ParsedDiagram parse(const std::string& body) {
  auto p = parse_diagram(SourceText{"t.napkin", std::string(kHead) + body});
  EXPECT_TRUE(p.ok()) << p.error().format();
  return p.ok() ? std::move(*p) : ParsedDiagram{};
}

// The op of output `name` and the name of its operand.
std::pair<OpKind, std::string> output_op(const Diagram& d, const std::string& name) {
  const Node& n = d.node(*d.find_node(name));
  return {n.op, n.operands.empty() ? "" : d.node(n.operands[0]).name};
}

TEST(Recognise, WrittenSoftmaxIsTheComposite) {
  for (std::string body : {"M = max(S over k)\nE = exp(S - M)\nP = E / sum(E over k)\nout P\n",
                           "P = exp(S - max(S over k)) / sum(exp(S - max(S over k)) over k)\nout P\n"}) {
    SCOPED_TRACE(body);
    const ParsedDiagram p = parse(body);
    EXPECT_EQ(output_op(p.diagram, "P"), std::make_pair(OpKind::softmax, std::string("S")));
    EXPECT_EQ(p.diagram.nodes.size(), 4u) << "Q K S P";
    EXPECT_FALSE(p.diagram.find_node("M") || p.diagram.find_node("E")) << "intermediates only the softmax read go";
    EXPECT_TRUE(p.warnings.empty()) << p.warnings.front().format();
    EXPECT_EQ(p.diagram.node(*p.diagram.find_node("P")).over, std::vector<AxisId>{1});
  }
}

// A positive literal temperature after the max: the softmax of the scaled scores (max(x c) =
// c max(x) for c > 0). A param (rebindable, maybe negative) or a negative literal stays as written.
TEST(Recognise, ATemperatureAfterTheMaxIsASoftmaxOfTheScaledScores) {
  for (std::string t : {"(S - M) * 0.125", "0.125 * (S - M)", "(S - M) / 8", "scale(S - M, 0.125)"}) {
    SCOPED_TRACE(t);
    const ParsedDiagram p = parse("M = max(S over k)\nE = exp(" + t + ")\nP = E / sum(E over k)\nout P\n");
    const Node& out = p.diagram.node(*p.diagram.find_node("P"));
    ASSERT_EQ(out.op, OpKind::softmax);
    const Node& scaled = p.diagram.node(out.operands[0]);
    std::string operands;
    for (NodeId o : scaled.operands) operands += p.diagram.node(o).op == OpKind::constant ? "c" : p.diagram.node(o).name;
    EXPECT_TRUE(operands == "S" || operands == "Sc" || operands == "cS") << operands;
    EXPECT_FALSE(p.diagram.find_node("M"));
    EXPECT_TRUE(p.warnings.empty());
  }
  for (std::string t : {"(S - M) * -0.5", "(S - M) * p", "8 / (S - M)"}) {
    SCOPED_TRACE(t);
    const ParsedDiagram p = parse("param p = 0.5\nM = max(S over k)\nE = exp(" + t + ")\nP = E / sum(E over k)\nout P\n");
    for (const Node& n : p.diagram.nodes) EXPECT_NE(op_class(n.op), OpClass::composite);
  }
}

TEST(Recognise, WrittenLogsumexpIsTheComposite) {
  for (std::string body : {"M = max(S over k)\nL = M + log(sum(exp(S - M) over k))\nout L\n",
                           "M = max(S over k)\nL = log(sum(exp(S - M) over k)) + M\nout L\n"}) {
    SCOPED_TRACE(body);
    const ParsedDiagram p = parse(body);
    EXPECT_EQ(output_op(p.diagram, "L"), std::make_pair(OpKind::logsumexp, std::string("S")));
    EXPECT_FALSE(p.diagram.find_node("M"));
  }
}

TEST(Recognise, IntermediatesUsedElsewhereStay) {
  const ParsedDiagram p = parse("M = max(S over k)\nE = exp(S - M)\nP = E / sum(E over k)\nout P\nout M\n"
                                "U = E * 2\n");
  EXPECT_EQ(output_op(p.diagram, "P").first, OpKind::softmax);
  EXPECT_TRUE(p.diagram.find_node("M")) << "an output";
  EXPECT_TRUE(p.diagram.find_node("U") && p.diagram.find_node("E")) << "unused as written: kept, and warned";
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].message.find("'U'"), std::string::npos) << p.warnings[0].message;
}

// FlashAttention's base-2 form: exp2 of the centred scores times c is the softmax of the scores
// times c ln 2, one scale node.
TEST(Recognise, ABaseTwoSoftmaxIsTheSoftmaxOfTheScaledScores) {
  constexpr double kLn2 = 0.69314718055994530942;
  for (const auto& [t, factor] : {std::pair<std::string, double>{"S - M", kLn2}, {"(S - M) * 0.5", 0.5 * kLn2},
                                  {"2 * (S - M)", 2 * kLn2}, {"(S - M) / 4", kLn2 / 4}, {"scale(S - M, 3)", 3 * kLn2}}) {
    SCOPED_TRACE(t);
    const ParsedDiagram p = parse("M = max(S over k)\nE = exp2(" + t + ")\nP = E / sum(E over k)\nout P\n");
    const Node& out = p.diagram.node(*p.diagram.find_node("P"));
    ASSERT_EQ(out.op, OpKind::softmax);
    const Node& scaled = p.diagram.node(out.operands[0]);
    ASSERT_EQ(scaled.op, OpKind::scale);
    EXPECT_DOUBLE_EQ(scaled.scalar, factor);
    EXPECT_EQ(p.diagram.node(scaled.operands[0]).name, "S");
    EXPECT_FALSE(p.diagram.find_node("M") || p.diagram.find_node("E"));
  }
  for (std::string t : {"(S - M) * -0.5", "(S - M) * p", "S"}) {
    SCOPED_TRACE(t);
    const ParsedDiagram p = parse("param p = 0.5\nM = max(S over k)\nE = exp2(" + t + ")\nP = E / sum(E over k)\nout P\n");
    for (const Node& n : p.diagram.nodes) EXPECT_NE(op_class(n.op), OpClass::composite);
  }
}

TEST(Recognise, LookalikesStayAsWritten) {
  for (std::string body : {
           "P = exp(S) / sum(exp(S) over k)\nout P\n",                  // no max: a normalised sum
           "L = log(sum(exp(S) over k))\nout L\n",
           "M = max(S over k)\nE = exp(S - M)\nP = E / sum(E * 2 over k)\nout P\n",  // numerator and sum differ
           "M = max(S over q)\nE = exp(S - M)\nP = E / sum(E over k)\nout P\n",      // max over another axis
           "M = max(S over k)\nE = exp(S - M)\nP = E / sum(E over q)\nout P\n",      // sum over another axis
           "M = max(S over k)\nL = M + log(sum(exp(S) over k))\nout L\n",           // M + log sum exp(S)
           // the exponentials or their sum read by another value too: recognised, they would be
           // computed twice (a base-2 softmax beside a logsumexp of its sum; E an output)
           "M = max(S over k)\nE = exp2(S - M)\nz = sum(E over k)\nP = E / z\nL = M + log(z)\nout P\nout L\n",
           "M = max(S over k)\nE = exp(S - M)\nP = E / sum(E over k)\nout P\nout E\n",
       }) {
    SCOPED_TRACE(body);
    const ParsedDiagram p = parse(body);
    for (const Node& n : p.diagram.nodes) EXPECT_NE(op_class(n.op), OpClass::composite);
  }
}

TEST(Recognise, IdempotentAndEveryExampleUnchanged) {
  const ParsedDiagram p = parse("M = max(S over k)\nE = exp(S - M)\nP = E / sum(E over k)\nout P\n");
  EXPECT_EQ(recognise_composites(p.diagram), p.diagram);
  for (const auto& path : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    auto e = load_diagram(path.string());
    ASSERT_TRUE(e.ok()) << e.error().format();
    EXPECT_EQ(recognise_composites(e->diagram), e->diagram) << path;
  }
}


// ---- hoist_masks

constexpr const char* kAttention =
    "axes q=5 k=7 d=3\nin Q[q d] f32\nin K[k d] f32\nin keep[k] bool\nparam c = 2.0\nS = contract(Q, K over d)\n";

Diagram hoisted(const std::string& body) {
  auto p = parse_diagram(SourceText{"t.napkin", std::string(kAttention) + body});
  EXPECT_TRUE(p.ok()) << p.error().format();
  return p.ok() ? std::move(p->diagram) : Diagram{};
}

// The canonical line of P (`print_diagram`'s text of it).
std::string line_of(const Diagram& d, const std::string& name) {
  const std::string text = print_diagram(d);
  const std::size_t at = text.find("\n" + name + "[");
  return at == std::string::npos ? "" : text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

// A mask written inside the scores is at the softmax's input: one form for derive and build.
TEST(HoistMasks, MasksWrittenInsideTheScoresMoveToTheReduction) {
  const std::pair<std::string, std::string> cases[] = {
      {"P = softmax(select(q >= k, S, -inf) * 0.5 over k)", "softmax(select(q >= k, S * 0.5, -inf) over k)"},
      {"P = softmax(0.5 * select(q >= k, S, -inf) over k)", "softmax(select(q >= k, 0.5 * S, -inf) over k)"},
      {"P = softmax(select(q >= k, S, -inf) / 8 over k)", "softmax(select(q >= k, S / 8, -inf) over k)"},
      // A select between literals takes the scores' dtype, as a literal does.
      {"P = softmax(S + select(q >= k, 0, -inf) over k)", "softmax(select(q >= k, S, -inf) over k)"},
      {"P = softmax(select(q >= k, 0, -inf) + S over k)", "softmax(select(q >= k, S, -inf) over k)"},
      // A cast mask is hoisted; its cast value stays a term.
      {"P = softmax((S as bf16) + (select(q >= k, 0, -inf) as f32) over k)",
       "softmax(select(q >= k, (S as bf16) + (0 as f32), -inf) over k)"},
      {"P = softmax(select(q >= k, S, -inf) - 1 over k)", "softmax(select(q >= k, S - 1, -inf) over k)"},
      {"P = softmax(select(q >= k, S, -inf) as bf16 over k)", "softmax(select(q >= k, S as bf16, -inf) over k)"},
      {"P = softmax(select(keep, S, -inf) + select(q >= k, 0, -inf) over k)",
       "softmax(select(q >= k, select(keep, S, -inf), -inf) over k)"},
      {"L = logsumexp(select(q >= k, S, -inf) * 0.5 over k)", "logsumexp(select(q >= k, S * 0.5, -inf) over k)"},
      // A subtracted +inf is a -inf.
      {"P = softmax(S - select(q >= k, 0, inf) over k)", "softmax(select(q >= k, S, -inf) over k)"},
      {"P = softmax(S * 0.5 - select(k > q, inf, 0) over k)", "softmax(select(!(k > q), S * 0.5, -inf) over k)"},
      // A min with a select of +inf and -inf: +inf (S) where the predicate holds.
      {"P = softmax(min(S, select(q >= k, inf, -inf)) over k)", "softmax(select(q >= k, min(S, inf), -inf) over k)"},
      {"M = max(min(select(q >= k, inf, -inf), S + 1) * 0.5 over k)",
       "max(select(q >= k, min(inf, S + 1) * 0.5, -inf) over k)"},
      // masked_fill's form: -inf where the predicate holds.
      {"P = softmax(select(q < k, -inf, S) over k)", "softmax(select(!(q < k), S, -inf) over k)"},
      {"P = softmax(select(keep, -inf, S * 0.5) + select(q >= k, 0, -inf) over k)",
       "softmax(select(q >= k, select(!keep, S * 0.5, -inf), -inf) over k)"},
  };
  for (const auto& [written, canonical] : cases) {
    SCOPED_TRACE(written);
    const std::string name = written.substr(0, 1);
    const Diagram d = hoisted(written + "\nout " + name + "\n");
    const std::string line = line_of(d, name);
    EXPECT_EQ(line.substr(line.find("= ") + 2), canonical);
    EXPECT_EQ(hoist_masks(d), d) << "idempotent";
  }
}

// FlashAttention's deferred normalisation is the softmax before the contraction; where its
// exponentials are read elsewhere too it stays as written.
TEST(Recognise, DeferredNormalisation) {
  const std::string head = "axes q=5 k=7 d=3\nin Q[q d] f32\nin K[k d] f32\nin V[k d] bf16\n"
                           "S = contract(Q, K over d)\nE = exp(S - max(S over k))\n";
  auto parsed = [&](const std::string& body) {
    auto p = parse_diagram(SourceText{"t.napkin", head + body});
    EXPECT_TRUE(p.ok()) << p.error().format();
    return p->diagram;
  };
  EXPECT_EQ(line_of(parsed("O = contract(E, V over k) / sum(E over k)\nout O\n"), "O"),
            "O[q d] = contract(softmax(S over k), V over k)");
  EXPECT_EQ(line_of(parsed("O = contract(V, E over k) / sum(E over k) as bf16\nout O\n"), "O"),
            "O[q d] = contract(V, softmax(S over k) over k) as bf16");
  const Diagram shared = parsed("O = contract(E, V over k) / sum(E over k)\nout O\nout E\n");
  EXPECT_EQ(line_of(shared, "O"), "O[q d] = contract(E, V over k) / sum(E over k)");
}

// A scale written on a contraction's operand is a factor of its result (one attention kernel's
// score factor, a GEMM's epilogue).
TEST(PullFactors, FactorsConstantAlongTheContractedAxesMoveOut) {
  const std::string head = "axes h=2 q=5 k=7 d=3\nin Q[h q d] bf16\nin K[h k d] bf16\nin t[h] f32\nin w[d] bf16\n"
                           "param c = 2.0\n";
  auto scores = [&](const std::string& line) {
    auto p = parse_diagram(SourceText{"t.napkin", head + line + "\nout S\n"});
    EXPECT_TRUE(p.ok()) << p.error().format();
    const std::string l = line_of(p->diagram, "S");
    return l.substr(l.find("= ") + 2);
  };
  EXPECT_EQ(scores("S = contract(Q * 0.125, K over d)"), "contract(Q, K over d) * 0.125");
  EXPECT_EQ(scores("S = contract(0.125 * Q, K * c over d)"), "contract(Q, K over d) * 0.125 * c");
  EXPECT_EQ(scores("S = contract(Q / t, K over d)"), "contract(Q, K over d) / t");
  EXPECT_EQ(scores("S = contract(Q * (q + 1), K over d)"), "contract(Q, K over d) * (q + 1)");
  // Along d, computed from the scores' operands, a literal 0: they stay.
  EXPECT_EQ(scores("S = contract(Q * w, K over d)"), "contract(Q * w, K over d)");
  EXPECT_EQ(scores("S = contract(Q * max(Q over d), K over d)"), "contract(Q * max(Q over d), K over d)");
  EXPECT_EQ(scores("S = contract(Q * 0, K over d)"), "contract(Q * 0, K over d)");
}

// A mask written once for the softmax and once for its logsumexp is one value for both (the
// kernel's row statistics serve both only then).
TEST(HoistMasks, EachReductionGetsItsMasks) {
  const Diagram d = hoisted("P = softmax(S + select(q >= k, 0, -inf) over k)\n"
                            "L = logsumexp(select(q < k, -inf, S) over k)\nout P\nout L\n");
  EXPECT_EQ(line_of(d, "P"), "P[q k] = softmax(select(q >= k, S, -inf) over k)");
  EXPECT_EQ(line_of(d, "L"), "L[q] = logsumexp(select(!(q < k), S, -inf) over k)");
}

// Where -inf would not stay -inf (a negative or rebindable scale, a negation, a max, a function)
// or the predicate reads the scores, the diagram stays as written.
TEST(HoistMasks, WhatWouldNotStayMinusInfinityStaysAsWritten) {
  for (std::string written : {"P = softmax(select(q >= k, S, -inf) * -0.5 over k)",
                              "P = softmax(select(q >= k, S, -inf) * c over k)",
                              "P = softmax(-select(q >= k, S, -inf) over k)",
                              "P = softmax(1 - select(q >= k, S, -inf) over k)",
                              "P = softmax(max(select(q >= k, S, -inf), S) over k)",
                              "P = softmax(tanh(select(q >= k, S, -inf)) over k)",
                              "P = softmax(select(S > 0, S, -inf) * 0.5 over k)",
                              // +inf where the predicate fails: no mask
                              "P = softmax(S - select(q >= k, inf, -inf) over k)",
                              "P = sum(select(q >= k, S, -inf) * 0.5 over k)"}) {
    SCOPED_TRACE(written);
    const Diagram d = hoisted(written + "\nout P\n");
    const std::string line = line_of(d, "P");
    EXPECT_EQ(line.substr(line.find("= ") + 2), written.substr(4));
  }
}

// A masked value read elsewhere too stays for its other readers; one read by the softmax alone goes.
TEST(HoistMasks, AValueOthersReadStays) {
  const Diagram shared = hoisted("M = select(q >= k, S, -inf) * 0.5\nP = softmax(M over k)\nout P\nout M\n");
  // (the predicate, now read twice, prints as a temporary)
  EXPECT_EQ(line_of(shared, "P"), "P[q k] = softmax(select(_t1, S * 0.5, -inf) over k)");
  EXPECT_EQ(line_of(shared, "M"), "M[q k] = select(_t1, S, -inf) * 0.5");
  const Diagram alone = hoisted("M = select(q >= k, S, -inf) * 0.5\nP = softmax(M over k)\nout P\n");
  EXPECT_FALSE(alone.find_node("M"));
}
}  // namespace
}  // namespace napkin::ir
