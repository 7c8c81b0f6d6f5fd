// SPDX-License-Identifier: Apache-2.0
// The streamability analysis on the diagrams the paper derives by hand: matmul, attention
// (plain, causal, GQA), softmax alone, normalised contractions, and refusals.
#include <algorithm>

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "ir/parser.h"
#include "sched/streaming.h"

namespace napkin::sched {
namespace {

struct Analysed {
  ir::Diagram diagram;
  StreamingReport report;
  const AxisStreaming& operator[](const std::string& axis) const {
    return report.of(*diagram.find_axis(axis));
  }
};

Analysed analyse_text(const std::string& text) {
  auto p = ir::parse_diagram(SourceText{"t.napkin", text});
  EXPECT_TRUE(p.ok()) << p.error().format();
  return {p->diagram, analyse_streaming(p->diagram)};
}

Analysed analyse_example(const std::string& name) {
  auto p = ir::load_diagram((testing::source_dir() / "examples" / name).string());
  EXPECT_TRUE(p.ok()) << p.error().format();
  return {p->diagram, analyse_streaming(p->diagram)};
}

using Accs = std::vector<Accumulator>;
using Names = std::vector<std::string>;

TEST(Streaming, AttentionStreamsKeysWithTheOnlineSoftmaxAndWeavesBatchHeadsQueries) {
  const Analysed a = analyse_example("attention.napkin");
  for (const char* axis : {"b", "h", "q"}) {
    EXPECT_EQ(a[axis].kind, AxisKind::woven) << axis;
    EXPECT_TRUE(a[axis].accumulators.empty()) << axis;
  }
  EXPECT_EQ(a["k"].kind, AxisKind::streamed);
  EXPECT_EQ(a["k"].accumulators, Accs{Accumulator::online_softmax});
  EXPECT_EQ(a["k"].reason,
            "max over k in softmax 'P', sum over k in softmax 'P' and contract 'O' over k form an "
            "online softmax-contraction: a running max, and a running sum and output rescaled by "
            "exp(max_old - max_new)");
  // d is contracted by QK^T (so not woven), and O runs along d: no chunk of O is final.
  EXPECT_EQ(a["d"].kind, AxisKind::none);
  EXPECT_EQ(a["d"].reason,
            "contract 'O' over k multiplies 'V', which runs along d, by 'P', which varies along "
            "k and depends on contract over d in 'S', so its partial results cannot be rescaled");
  EXPECT_EQ(a["d"].fold_labels, Names{"contract over d in 'S'"});
}

TEST(Streaming, InputsNotWovenOverATiledAxisAreReReadPerTile) {
  const Analysed a = analyse_example("attention.napkin");
  EXPECT_EQ(a["q"].woven_inputs, (Names{"Q"}));
  EXPECT_EQ(a["q"].broadcast_inputs, (Names{"K", "V"}));
  EXPECT_EQ(a["k"].woven_inputs, (Names{"K", "V"}));
  EXPECT_EQ(a["k"].broadcast_inputs, (Names{"Q"}));
  EXPECT_EQ(a["h"].broadcast_inputs, Names{});
}

TEST(Streaming, AttentionReportMatchesGolden) {
  testing::expect_golden("streaming/attention.txt", report_text(analyse_example("attention.napkin").report));
}

TEST(Streaming, PlainSoftmaxDoesNotStreamOverItsOwnAxis) {
  const Analysed a = analyse_text(
      "axes b=2 q=8 k=8 d=4\nin Q[b q d] f32\nin K[b k d] f32\n"
      "S = contract(Q, K over d)\nP = softmax(S over k)\nout P\n");
  EXPECT_EQ(a["k"].kind, AxisKind::none);
  EXPECT_EQ(a["k"].reason,
            "output 'P' spans k, and every element of it depends on max over k in softmax 'P' and "
            "sum over k in softmax 'P', which are known only after the last chunk of k, so no "
            "chunk of 'P' is final before the whole of k is read");
  EXPECT_EQ(a["q"].kind, AxisKind::woven);
  EXPECT_EQ(a["b"].kind, AxisKind::woven);
  // S is accumulated over d first; the softmax then runs once, at the end.
  EXPECT_EQ(a["d"].kind, AxisKind::streamed);
  EXPECT_EQ(a["d"].accumulators, Accs{Accumulator::add});
}

TEST(Streaming, MatmulStreamsTheContractedAxisWithAddAndTilesTheOthers) {
  const Analysed a = analyse_example("matmul.napkin");
  EXPECT_EQ(a["m"].kind, AxisKind::woven);
  EXPECT_EQ(a["n"].kind, AxisKind::woven);
  EXPECT_EQ(a["k"].kind, AxisKind::streamed);
  EXPECT_EQ(a["k"].accumulators, Accs{Accumulator::add});
  EXPECT_EQ(a["k"].reason, "contract 'C' over k accumulates by addition");
  EXPECT_EQ(a["m"].broadcast_inputs, Names{"B"});
  EXPECT_EQ(a["n"].broadcast_inputs, Names{"A"});
}

// Masks, biases and caps are woven over k, so they pre-compose (the fusion theorem).
TEST(Streaming, MasksBiasesAndCapsPreCompose) {
  for (const char* example : {"causal.napkin", "alibi.napkin", "sliding_window.napkin", "softcap.napkin"}) {
    SCOPED_TRACE(example);
    const Analysed a = analyse_example(example);
    EXPECT_EQ(a["k"].kind, AxisKind::streamed) << a["k"].reason;
    EXPECT_EQ(a["k"].accumulators, Accs{Accumulator::online_softmax});
    EXPECT_EQ(a["q"].kind, AxisKind::woven);
    EXPECT_EQ(a["d"].kind, AxisKind::none);
  }
}

TEST(Streaming, GroupedQueryAttentionWeavesTheGroupAxesAndReReadsKVPerQueryTile) {
  const Analysed a = analyse_example("gqa.napkin");
  EXPECT_EQ(a["k"].accumulators, Accs{Accumulator::online_softmax});
  for (const char* axis : {"b", "g", "r", "q"}) EXPECT_EQ(a[axis].kind, AxisKind::woven) << axis;
  EXPECT_EQ(a["r"].broadcast_inputs, (Names{"K", "V"}));  // shared by the r query heads of a group
  EXPECT_EQ(a["g"].broadcast_inputs, Names{});
}

TEST(Streaming, SumThenBroadcastIsRefused) {
  const Analysed a = analyse_text("axes r=4 k=8\nin X[r k] f32\ns = sum(X over k)\nY = X * s\nout Y\n");
  EXPECT_EQ(a["k"].kind, AxisKind::none);
  EXPECT_EQ(a["k"].reason,
            "output 'Y' spans k, and every element of it depends on sum 's' over k, which is known "
            "only after the last chunk of k, so no chunk of 'Y' is final before the whole of k is "
            "read");
  EXPECT_EQ(a["r"].kind, AxisKind::woven);
}

TEST(Streaming, CenteringIsRefusedBecauseOnlyExpOfADifferenceRescales) {
  const Analysed a = analyse_text(
      "axes r=4 k=8\nin X[r k] f32\nc = X - max(X over k)\nY = sum(c * c over k)\nout Y\n");
  EXPECT_EQ(a["k"].kind, AxisKind::none);
  EXPECT_EQ(a["k"].reason,
            "mul in 'Y' uses 'c', a difference of values along k and max over k in 'c', other "
            "than through exp; only exp of such a difference can be rescaled");
}

TEST(Streaming, LogsumexpKeepsARunningMaxAndARescaledSum) {
  const Analysed a = analyse_text("axes q=4 k=8\nin S[q k] f32\nL = logsumexp(S over k)\nout L\n");
  EXPECT_EQ(a["k"].kind, AxisKind::streamed);
  EXPECT_EQ(a["k"].accumulators, Accs{Accumulator::logsumexp});
}

TEST(Streaming, AttentionWithLseOutputStillNeedsOneOnlineSoftmax) {
  // Written by hand (no composite), with the log-sum-exp taken from the same max and sum.
  const Analysed a = analyse_text(
      "axes q=4 k=8 d=2\nin Q[q d] f32\nin K[k d] f32\nin V[k d] f32\n"
      "S = contract(Q, K over d)\nm = max(S over k)\nE = exp(S - m)\nz = sum(E over k)\n"
      "O = contract(E / z, V over k)\nL = m + log(z)\nout O\nout L\n");
  EXPECT_EQ(a["k"].kind, AxisKind::streamed) << a["k"].reason;
  EXPECT_EQ(a["k"].accumulators, Accs{Accumulator::online_softmax});
}

TEST(Streaming, RmsnormBeforeAMatmulIsANormalisedContraction) {
  const Analysed a = analyse_example("rmsnorm_matmul.napkin");
  EXPECT_EQ(a["e"].kind, AxisKind::streamed) << a["e"].reason;
  EXPECT_EQ(a["e"].accumulators, Accs{Accumulator::normalised_contraction});
  EXPECT_EQ(a["t"].kind, AxisKind::woven);
  EXPECT_EQ(a["f"].kind, AxisKind::woven);
}

TEST(Streaming, NormsAloneAreRefusedOverTheirAxis) {
  EXPECT_EQ(analyse_example("layernorm.napkin")["e"].kind, AxisKind::none);
  const Analysed r = analyse_text("axes t=2 e=8\nin X[t e] f32\nY = rmsnorm(X over e)\nout Y\n");
  EXPECT_EQ(r["e"].kind, AxisKind::none);
}

TEST(Streaming, MlpStreamsTheHiddenAxisButNotTheModelAxis) {
  const Analysed a = analyse_example("swiglu_mlp.napkin");
  EXPECT_EQ(a["f"].kind, AxisKind::streamed);
  EXPECT_EQ(a["f"].accumulators, Accs{Accumulator::add});
  EXPECT_EQ(a["e"].kind, AxisKind::none);  // Y runs along e and needs G and U whole over e
}

TEST(Streaming, IndependentReductionsGiveATupleOfAccumulators) {
  const Analysed a = analyse_text(
      "axes q=4 k=8\nin S[q k] f32\nm = max(S over k)\nt = sum(S over k)\nout m\nout t\n");
  EXPECT_EQ(a["k"].accumulators, (Accs{Accumulator::add, Accumulator::max}));
  EXPECT_EQ(accumulators_text(a["k"].accumulators), "add+max");
}

TEST(Streaming, UnnormalisedSoftmaxContractionOfExpWithoutMaxIsANormalisedContraction) {
  const Analysed a = analyse_text(
      "axes q=4 k=8 d=2\nin S[q k] f32\nin V[k d] f32\nE = exp(S)\n"
      "O = contract(E / sum(E over k), V over k)\nout O\n");
  EXPECT_EQ(a["k"].accumulators, Accs{Accumulator::normalised_contraction});
}

TEST(Streaming, EveryExampleGivesOneEntryPerAxisWithAReason) {
  for (const auto& path : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    SCOPED_TRACE(path.filename().string());
    auto p = ir::load_diagram(path.string());
    ASSERT_TRUE(p.ok());
    const StreamingReport r = analyse_streaming(p->diagram);
    ASSERT_EQ(r.axes.size(), p->diagram.axes.size());
    for (const AxisStreaming& s : r.axes) {
      EXPECT_FALSE(s.reason.empty());
      EXPECT_EQ(s.kind == AxisKind::woven, s.folds.empty());
      EXPECT_EQ(s.kind == AxisKind::streamed, !s.accumulators.empty());
      EXPECT_TRUE(std::is_sorted(s.accumulators.begin(), s.accumulators.end()));
    }
  }
}

TEST(Streaming, AccumulatorNamesRoundTrip) {
  for (Accumulator a : {Accumulator::add, Accumulator::max, Accumulator::logsumexp,
                        Accumulator::normalised_contraction, Accumulator::online_softmax})
    EXPECT_EQ(parse_accumulator(accumulator_name(a)), a);
  EXPECT_FALSE(parse_accumulator("sum").has_value());
  EXPECT_EQ(accumulators_text({}), "none");
}

}  // namespace
}  // namespace napkin::sched
