// SPDX-License-Identifier: Apache-2.0
// Kernel plans: every example derives a feasible plan in well under a second, with the plan a
// performance engineer expects (one attention kernel for the attention family, two GEMMs for a
// matmul chain, phi(K)^T V first for linear attention, scores stored q-innermost for a softmax
// over q, ...); the GEMM solver's ranking, rejections and bounds.
#include <algorithm>
#include <chrono>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"
#include "ir/parser.h"
#include "plan/plan.h"

namespace napkin {
namespace {

arch::Machine h100() {
  auto m = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  EXPECT_TRUE(m.ok());
  return *m;
}

ir::Diagram parse(const std::string& text) {
  SourceText src{"test.napkin", text};
  auto r = ir::parse_diagram(src);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().format());
  return r.ok() ? r->diagram : ir::Diagram{};
}

ir::Diagram example(const std::string& stem) {
  return parse(testing::read_text(testing::source_dir() / "examples" / (stem + ".napkin")));
}

plan::Derivation derive(const ir::Diagram& d) {
  auto r = plan::derive_plan(d, h100());
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : plan::Derivation{};
}

std::vector<plan::KernelKind> kinds(const plan::Plan& p) {
  std::vector<plan::KernelKind> k;
  for (const auto& x : p.kernels) k.push_back(x.kind);
  return k;
}

using K = plan::KernelKind;

TEST(Plan, EveryExampleDerivesAFeasiblePlanInUnderASecond) {
  const arch::Machine m = h100();
  for (const auto& f : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    SCOPED_TRACE(f.string());
    const ir::Diagram d = parse(testing::read_text(f));
    const auto t0 = std::chrono::steady_clock::now();
    auto r = plan::derive_plan(d, m);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_LT(s, 1.0);
    EXPECT_TRUE(r->chosen.infeasible.empty());
    EXPECT_FALSE(r->chosen.kernels.empty());
    EXPECT_GT(r->chosen.predicted_s, 0);
    double sum = 0;
    for (const auto& k : r->chosen.kernels) {
      EXPECT_GT(k.predicted_s, 0) << k.name;
      sum += k.predicted_s;
    }
    EXPECT_DOUBLE_EQ(sum, r->chosen.predicted_s);
    // No alternative that has a kernel is faster and runnable.
    for (const auto& a : r->alternatives)
      if (a.plan.infeasible.empty() && a.plan.note.empty()) EXPECT_GE(a.plan.predicted_s, r->chosen.predicted_s * 0.999) << a.why_not;
  }
}

TEST(Plan, AttentionFamilyExamplesAreOneAttentionKernel) {
  for (const char* e : {"attention", "causal", "gqa", "sliding_window", "softcap", "alibi", "key_padding", "relative_bias",
                        "document_mask", "prefix_lm", "chunked_local", "head_temperature", "attention_sinks",
                        "sigmoid_attention", "attention_hopper_paper"}) {
    SCOPED_TRACE(e);
    const auto r = derive(example(e));
    EXPECT_EQ(kinds(r.chosen), std::vector<K>{K::attention});
    EXPECT_TRUE(r.chosen.materialised.empty());
  }
  // A GQA group that does not divide a warpgroup's 64 rows (7 query heads a KV head, as Qwen2's
  // 28 over 4; K and V shared by 3 sequences): its heads are tiles of their own, not a 1.6 GB
  // materialised score matrix.
  for (const char* text : {"axes b=2 g=4 r=7 q=2048 k=2048 d=128\nin Q[b g r q d] bf16\nin K[b g k d] bf16\n"
                           "in V[b g k d] bf16\nO = contract(softmax(contract(Q, K over d) over k), V over k) as bf16\nout O\n",
                           "axes b=3 h=8 q=2048 k=2048 d=128\nin Q[b h q d] bf16\nin K[h k d] bf16\nin V[h k d] bf16\n"
                           "O = contract(softmax(contract(Q, K over d) over k), V over k) as bf16\nout O\n"}) {
    SCOPED_TRACE(text);
    const auto r = derive(parse(text));
    EXPECT_EQ(kinds(r.chosen), std::vector<K>{K::attention});
  }
}

// On a machine without the Hopper configuration solver (the A100: the cost-model search), the
// attention family is still one fused kernel: the search's l2 tile grows to hold its smem tile
// (it was left smaller for document_mask, whose segment ids widen what l2 keeps, and every
// candidate was invalid).
TEST(Plan, AttentionFamilyExamplesAreOneKernelOnTheA100Too) {
  auto a100 = arch::find_machine("a100-sxm4-80g", arch::default_machines_dir());
  ASSERT_TRUE(a100.ok());
  for (const char* e : {"attention", "causal", "document_mask", "key_padding", "alibi"}) {
    SCOPED_TRACE(e);
    auto r = plan::derive_plan(example(e), a100.value());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(kinds(r->chosen), std::vector<K>{K::attention});
  }
}

TEST(Plan, GemmFamilyPlans) {
  auto r = derive(example("matmul"));
  EXPECT_EQ(kinds(r.chosen), std::vector<K>{K::gemm});
  r = derive(example("matmul_chain"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm, K::gemm}));
  ASSERT_EQ(r.chosen.materialised.size(), 1u);
  EXPECT_NE(r.chosen.materialised[0].find("T[m n] bf16"), std::string::npos);
  // The chain fused into one streamed kernel re-reads B per output tile: far slower.
  for (const auto& a : r.alternatives)
    if (a.plan.name == "fully fused" && a.plan.infeasible.empty()) EXPECT_GT(a.plan.predicted_s, 10 * r.chosen.predicted_s);
  // The gate and up projections share X: one dual GEMM with the gate in its epilogue (neither
  // projection materialised), then the down projection.
  r = derive(example("swiglu_mlp"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::dual_gemm, K::gemm}));
  ASSERT_EQ(r.chosen.materialised.size(), 1u);
  EXPECT_EQ(r.chosen.materialised[0].rfind("H[t f] bf16", 0), 0u) << r.chosen.materialised[0];
  EXPECT_EQ(r.chosen.kernels[0].gemm->tile_n * 2, 256);  // one WGMMA tile over both products
  r = derive(example("layernorm"));
  EXPECT_EQ(kinds(r.chosen), std::vector<K>{K::row_reduction});
  r = derive(example("rmsnorm_matmul"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::row_reduction, K::gemm}));
  r = derive(example("gelu_mlp"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm, K::gemm}));  // bias and GELU in the first GEMM's epilogue
  r = derive(example("matmul_rmsnorm"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm, K::row_reduction}));
  r = derive(example("attention_of_attention"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::attention, K::attention}));
}

TEST(Plan, LinearAttentionIsReassociated) {
  const auto r = derive(example("linear_attention"));
  ASSERT_EQ(r.chosen.moves.size(), 1u);
  EXPECT_NE(r.chosen.moves[0].find("reassociated"), std::string::npos);
  EXPECT_EQ(r.chosen.moves[0].find("rounding"), std::string::npos) << "no rounding written between the products";
  // A rounding the user wrote between the products moves with the product it rounds: said so.
  const auto chain = derive(parse("axes m=1024 k=512 n=768 p=256\nin A[m k] bf16\nin B[k n] bf16\nin C[n p] bf16\n"
                                  "T = contract(A, B over k) as bf16\nU = contract(T, C over n) as bf16\nout U\n"));
  ASSERT_EQ(chain.chosen.moves.size(), 1u);
  EXPECT_NE(chain.chosen.moves[0].find("the rounding to bf16 written at 'T' now rounds BC (the result differs"), std::string::npos)
      << chain.chosen.moves[0];
  for (const auto& m : r.chosen.materialised) EXPECT_EQ(m.find("q k"), std::string::npos) << m;  // no q x k scores
  // The feature maps run as the GEMMs' operand prologues: two kernels, nothing but the state
  // materialised.
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm, K::gemm}));
  for (const auto& k : r.chosen.kernels) EXPECT_TRUE(k.gemm && k.gemm->prologue) << k.name;
  ASSERT_EQ(r.chosen.materialised.size(), 1u);
  EXPECT_EQ(r.chosen.materialised[0].rfind("FKV[", 0), 0u) << r.chosen.materialised[0];
}

// A diagram that is one attention kernel at a head dim TMA cannot move (44 in f16: rows of 88
// bytes) names that kernel's binding constraint first, not only the unfused GEMMs' layout.
TEST(Plan, AnInfeasibleAttentionNamesItsOwnConstraintFirst) {
  const ir::Diagram d = parse(R"(axes b=1 q=256 h=8 k=256 d=44
in Q[b q h d] f16
in K[b k h d] f16
in V[b k h d] f16
O = contract(softmax(contract(Q, K over d) * 0.15 over k), V over k) as f16
out O
)");
  auto r = plan::derive_plan(d, h100());
  ASSERT_FALSE(r.ok());
  const std::string& why = r.error().message;
  EXPECT_EQ(why.find("as one kernel: "), why.find("no feasible plan on h100-sxm5: ") + 31) << why;
  EXPECT_NE(why.find("rows of Q in f16 are 88 bytes, and TMA moves multiples of 16"), std::string::npos) << why;
}

// Differential attention: (P1 - lam P2) V is P1 V - lam (P2 V), two attention kernels (the
// first writing its O in f32, the second subtracting it in its epilogue); no q x k map is
// materialised. A difference of inputs is not distributed (one GEMM of it is cheaper).
TEST(Plan, DifferentialAttentionIsDistributedIntoTwoAttentionKernels) {
  const auto r = derive(example("differential_attention"));
  ASSERT_EQ(r.chosen.moves.size(), 1u);
  EXPECT_EQ(r.chosen.moves[0].rfind("distributed", 0), 0u) << r.chosen.moves[0];
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::attention, K::attention}));
  ASSERT_EQ(r.chosen.materialised.size(), 1u);
  EXPECT_NE(r.chosen.materialised[0].find("[b h q e] f32"), std::string::npos) << r.chosen.materialised[0];
  const auto plain = derive(parse(R"(axes m=512 n=512 k=512
in A[m k] bf16
in B[m k] bf16
in W[k n] bf16
O = contract(A - 0.5 * B, W over k) as bf16
out O
)"));
  for (const auto& m : plain.chosen.moves) EXPECT_EQ(m.find("distributed"), std::string::npos) << m;
  // A term over or times a constant, or negated, is distributed too (the constant by its value).
  std::string text = testing::read_text(testing::source_dir() / "examples" / "differential_attention.napkin");
  text.replace(text.find("P1 - lam * P2"), 13, "P1 - P2 / 2");
  const auto over = derive(parse(text));
  ASSERT_EQ(over.chosen.moves.size(), 1u);
  EXPECT_NE(over.chosen.moves[0].find("- ('P2' . 'V') / 2:"), std::string::npos) << over.chosen.moves[0];
  EXPECT_EQ(kinds(over.chosen), (std::vector<K>{K::attention, K::attention}));
}

// A sum of three maps is distributed in one move (three attention kernels, each later one adding
// the earlier outputs in its epilogue); a term that is an input contracts as a GEMM of its own,
// its factor in that GEMM's epilogue, rather than materialising lam * A.
TEST(Plan, ASumOfMapsAndInputsIsDistributedTermByTerm) {
  std::string text = testing::read_text(testing::source_dir() / "examples" / "differential_attention.napkin");
  text.replace(text.find("in V["), 0, "in Q3[b q h d] bf16\nin K3[b k h d] bf16\n");
  text.replace(text.find("O = "), 0, "P3 = softmax(contract(Q3, K3 over d) * 0.125 over k)\n");
  text.replace(text.find("P1 - lam * P2"), 13, "P1 - lam * P2 + P3");
  const auto three = derive(parse(text));
  ASSERT_EQ(three.chosen.moves.size(), 1u);
  EXPECT_NE(three.chosen.moves[0].find("as 'P1' . 'V' - 'lam' * ('P2' . 'V') + 'P3' . 'V':"), std::string::npos)
      << three.chosen.moves[0];
  EXPECT_EQ(kinds(three.chosen), (std::vector<K>{K::attention, K::attention, K::attention}));
  const auto input = derive(parse(R"(axes b=2 h=16 q=4096 k=4096 d=64 e=128
in Q[b h q d] bf16
in K[b h k d] bf16
in A[b h q k] bf16
in V[b h k e] bf16
param lam = 0.8
P = softmax(contract(Q, K over d) * 0.125 over k)
O = contract(P - lam * A, V over k) as bf16
out O
)"));
  ASSERT_EQ(input.chosen.moves.size(), 1u);
  EXPECT_NE(input.chosen.moves[0].find("- 'lam' * ('A' . 'V')"), std::string::npos) << input.chosen.moves[0];
  EXPECT_EQ(kinds(input.chosen), (std::vector<K>{K::attention, K::gemm}));
  for (const auto& m : input.chosen.materialised) EXPECT_EQ(m.find("[b h q k]"), std::string::npos) << m;
}

// P changed after its softmax (w[k] * P) is not the attention family's (its kernel multiplies V by
// the softmax itself): derive does not plan the attention kernel that build would refuse.
TEST(Plan, APChangedAfterItsSoftmaxIsNotOneAttentionKernel) {
  const auto r = plan::derive_plan(parse(R"(axes b=1 h=4 q=512 k=512 d=64
in Q[b h q d] bf16
in K[b h k d] bf16
in V[b h k d] bf16
in w[k] f32
O = contract(w * softmax(contract(Q, K over d) * 0.125 over k), V over k) as bf16
out O
)"), h100());
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (const auto& k : r->chosen.kernels) EXPECT_NE(k.kind, K::attention) << k.name;
}

// Normalised linear attention: the denominator sum_k (phi(Q) . phi(K)) is phi(Q) . sum_k phi(K)
// (a row reduction), which leaves the scores of single use, so the numerator reassociates too:
// no q x k matrix at all.
TEST(Plan, NormalisedLinearAttentionPushesTheSumAndReassociates) {
  const auto r = derive(parse(R"(axes b=2 h=8 q=2048 k=2048 d=64 e=64
in Q[b h q d] bf16
in K[b h k d] bf16
in V[b h k e] bf16
FQ = select(Q > 0, Q + 1, exp(Q))
FK = select(K > 0, K + 1, exp(K))
S = contract(FQ, FK over d)
N = contract(S, V over k)
Z = sum(S over k)
O = N / Z as bf16
out O
)"));
  // The sum pushed into FK and the product reassociated; each feature map is computed once, in
  // its GEMM's prologue, and its sum rides with that GEMM: sum(FK over k) beside FK^T V (a row sum
  // written out), Z = FQ . FK_sum beside FQ FKV (a row sum the epilogue divides by). Neither
  // feature map nor Z is materialised.
  auto has = [&](const std::string& what) {
    return std::any_of(r.chosen.moves.begin(), r.chosen.moves.end(), [&](const std::string& m) { return m.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(has("sum over k pushed into 'FK'"));
  EXPECT_TRUE(has("reassociated"));
  for (const auto& m : r.chosen.materialised) {
    EXPECT_EQ(m.find("q k"), std::string::npos) << m;
    EXPECT_EQ(m.find("FK["), std::string::npos) << m;
    EXPECT_EQ(m.find("FQ["), std::string::npos) << m;
    EXPECT_EQ(m.find("Z["), std::string::npos) << m;
  }
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm, K::gemm}));
  ASSERT_EQ(r.chosen.kernels.size(), 2u);
  EXPECT_EQ(r.chosen.kernels[0].diagram.outputs.size(), 2u);  // FKV and FK_sum
  for (const auto& k : r.chosen.kernels) EXPECT_TRUE(k.gemm && k.gemm->prologue);
}

// Statistics over the leading axis of X[t c] (batch-norm's): one column kernel reading X once,
// however large t; per-column code after the sums runs in the same kernel.
TEST(Plan, StatisticsOverALeadingAxisAreOneColumnKernel) {
  const auto r = derive(parse(R"(axes t=262144 c=1024
in X[t c] bf16
M = sum(X over t) / 262144
S = sum(X * X over t) / 262144
V = S - M * M
out M
out V
)"));
  EXPECT_EQ(kinds(r.chosen), std::vector<K>{K::column_reduction});
  EXPECT_TRUE(r.chosen.materialised.empty() || r.chosen.materialised[0].find("nothing") != std::string::npos);
  EXPECT_NEAR(r.chosen.kernels[0].hbm_bytes, 262144.0 * 1024 * 2 + 2 * 1024 * 4, 1.0);
}

// A grouped batched matmul whose output order [g h m n] splits the GEMM's rows (g m) around its
// batch (h): the GEMM writes [h g m n] in bf16 (its only reader rounds it) and an elementwise
// kernel writes the caller's order; A, declared [g h m k], is copied for the GEMM.
TEST(Plan, AGemmOutputInAnOrderItCannotWriteIsCopied) {
  const auto r = derive(parse(R"(axes g=4 h=8 m=512 k=256 n=384
in A[g h m k] bf16
in B[h k n] bf16
C = contract(A, B over k) as bf16
out C
)"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::elementwise, K::gemm, K::elementwise}));
  bool written = false;
  for (const auto& m : r.chosen.materialised)
    written = written || (m.find("[h g m n] bf16") != std::string::npos && m.find("stored as the GEMM writes it") != std::string::npos);
  EXPECT_TRUE(written) << fmt::format("{}", fmt::join(r.chosen.materialised, "; "));
  // The contraction itself the output (f32, no cast to carry the copy): the same, by the move.
  const auto bare = derive(parse(R"(axes g=4 h=8 m=512 k=256 n=384
in A[h g m k] bf16
in B[h k n] bf16
C = contract(A, B over k)
out C
)"));
  EXPECT_EQ(kinds(bare.chosen), (std::vector<K>{K::gemm, K::elementwise}));
  ASSERT_FALSE(bare.chosen.moves.empty());
  EXPECT_NE(bare.chosen.moves[0].find("C written by a copy of the GEMM's result"), std::string::npos) << bare.chosen.moves[0];
}

// MoE weights W[e k n] read over k: copied as [k e n] (whole rows of n, a cheap copy), not
// transposed to [e n k].
TEST(Plan, ARelayoutCopyKeepsTheUnitStrideAxisInnermost) {
  const auto r = derive(parse(R"(axes e=8 t=1024 k=2048 n=4096
in X[t k] bf16
in W[e k n] bf16
Y = contract(X, W over k) as bf16
out Y
)"));
  bool rows = false;
  for (const auto& m : r.chosen.materialised) rows = rows || m.find("W_copy[k e n] bf16") != std::string::npos;
  EXPECT_TRUE(rows) << fmt::format("{}", fmt::join(r.chosen.materialised, "; "));
  ASSERT_FALSE(r.chosen.kernels.empty());
  EXPECT_EQ(r.chosen.kernels[0].kind, K::elementwise);
  EXPECT_LT(r.chosen.kernels[0].hbm_bytes, 2.1 * 8 * 2048 * 4096 * 2);  // read and written once
}

// Statistics over axes the layout holds apart (NCHW: n, then c, then y x): a sum over each run
// of adjacent axes, a row kernel over y x and a column kernel over n.
TEST(Plan, StatisticsOverAxesHeldApartAreSplitIntoRuns) {
  const auto r = derive(parse(R"(axes n=32 c=256 y=28 x=28
in X[n c y x] bf16
mean = sum(X over n y x) / 25088
var = sum(X * X over n y x) / 25088 - mean * mean
out mean
out var
)"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::row_reduction, K::column_reduction}));
  ASSERT_GE(r.chosen.moves.size(), 1u);
  EXPECT_NE(r.chosen.moves[0].find("as sum(sum('X' over y x) over n)"), std::string::npos) << r.chosen.moves[0];
  // A max and a logsumexp split the same way (exact: the max of maxima, the lse of lses).
  for (const char* op : {"max", "logsumexp"}) {
    const auto m = derive(parse(fmt::format("axes n=32 c=256 y=28 x=28\nin X[n c y x] bf16\nM = {0}(X over n y x)\nout M\n", op)));
    ASSERT_FALSE(m.chosen.moves.empty());
    EXPECT_NE(m.chosen.moves[0].find(fmt::format("as {0}({0}('X' over y x) over n)", op)), std::string::npos) << m.chosen.moves[0];
  }
}

// A feature map read by a GEMM and by a sum over the GEMM's K axis: one kernel, the sum a row sum
// of the GEMM's operand as its mainloop loads it (napkin/gemm_prologue.h).
TEST(Plan, ASumOfAGemmOperandOverItsKAxisRidesWithTheGemm) {
  const auto r = derive(parse(R"(axes t=8192 d=64 e=64
in X[t d] bf16
in W[d e] bf16
F = exp(X * 0.125)
Y = contract(F, W over d) as bf16
s = sum(F over d)
out Y
out s
)"));
  EXPECT_TRUE(r.chosen.moves.empty());
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm}));
  ASSERT_EQ(r.chosen.kernels.size(), 1u);
  EXPECT_TRUE(r.chosen.kernels[0].gemm && r.chosen.kernels[0].gemm->prologue);
  for (const auto& m : r.chosen.materialised) EXPECT_EQ(m.find("F["), std::string::npos) << m;
}

// A feature map read by a GEMM and by a reduction that is no row sum (a max): each computes it
// from X as it loads (the GEMM's prologue, the reduction's body) instead of one kernel writing it
// for both.
TEST(Plan, AnElementwiseValueOfTwoConsumersIsRecomputedInEach) {
  const auto r = derive(parse(R"(axes t=8192 d=64 e=64
in X[t d] bf16
in W[d e] bf16
F = exp(X * 0.125)
Y = contract(F, W over d) as bf16
s = max(F over d)
out Y
out s
)"));
  ASSERT_EQ(r.chosen.moves.size(), 1u);
  EXPECT_NE(r.chosen.moves[0].find("recomputed 'F' from 'X' in each of its 2 consumers (F_2"), std::string::npos)
      << r.chosen.moves[0];
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm, K::row_reduction}));
  for (const auto& m : r.chosen.materialised) EXPECT_EQ(m.find("F["), std::string::npos) << m;
}

// A reduction whose result is used over an axis its operand lacks is not fused with that use: a
// row kernel's rows span every axis but the reduced one, so it would recompute the reduction for
// each element of the other axis (measured 311 us for 13 predicted, bench/NOTES.md 2026-11-27).
TEST(Plan, ARowKernelDoesNotRecomputeAReductionPerElementOfAnotherAxis) {
  const auto r = derive(parse(R"(axes q=4096 d=64 e=64
in X[q d] bf16
in N[q e] f32
Z = sum(exp(X) over d)
O = N / Z as bf16
out O
)"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::row_reduction, K::elementwise}));
  ASSERT_EQ(r.chosen.materialised.size(), 1u);
  EXPECT_EQ(r.chosen.materialised[0].rfind("Z[q]", 0), 0u) << r.chosen.materialised[0];
}

// An elementwise kernel that writes its output across its input's storage order touches a
// 32-byte sector per element on one side: the estimate counts that traffic (a transposing copy
// measured 41.5 us on the H100 where the bytes alone predicted 10.5).
TEST(Plan, ATransposingElementwiseKernelCountsItsSectors) {
  const auto along = derive(parse("axes a=4096 c=2048\nin X[a c] bf16\nY = exp(X) as f32\nout Y\n"));
  const auto across = derive(parse("axes a=4096 c=2048\nin X[a c] bf16\nY = exp(X) as f32\nout Y[c a]\n"));
  ASSERT_EQ(along.chosen.kernels.size(), 1u);
  ASSERT_EQ(across.chosen.kernels.size(), 1u);
  const double elements = 4096.0 * 2048.0;
  EXPECT_DOUBLE_EQ(along.chosen.kernels[0].hbm_bytes, elements * (2 + 4));
  EXPECT_DOUBLE_EQ(across.chosen.kernels[0].hbm_bytes, elements * (2 + 4) + elements * 30);  // X's bf16 read a sector each
  EXPECT_GT(across.chosen.predicted_s, 5 * along.chosen.predicted_s);
}

// Five such values: the planner offers the first few alone and all of them together (a bounded
// number of variants, each a fusion search), and takes all five.
TEST(Plan, ManyRecomputableValuesAreRecomputedTogether) {
  std::string text = "axes t=8192 d=64 e=64\nin W[d e] bf16\n";
  for (int i = 0; i < 5; ++i)
    text += fmt::format("in X{0}[t d] bf16\nF{0} = exp(X{0} * 0.125)\ns{0} = max(F{0} over d)\nY{0} = contract(F{0}, W over d) as bf16\n"
                        "out s{0}\nout Y{0}\n", i);
  const auto r = derive(parse(text));
  EXPECT_EQ(r.chosen.moves.size(), 5u);
  EXPECT_TRUE(r.chosen.materialised.empty() || r.chosen.materialised[0].find("nothing") != std::string::npos)
      << r.chosen.materialised[0];
  EXPECT_EQ(r.chosen.kernels.size(), 10u);
}

// Code read by one consumer, or by two elementwise consumers only, is not copied.
TEST(Plan, RecomputingNeedsTwoConsumersOneOfThemAReduction) {
  const auto one = derive(parse("axes t=4096 d=64 e=64\nin X[t d] bf16\nin W[d e] bf16\nF = exp(X)\nY = contract(F, W over d)\nout Y\n"));
  for (const auto& m : one.chosen.moves) EXPECT_EQ(m.find("recomputed"), std::string::npos) << m;
  const auto ew = derive(parse("axes t=4096 d=64\nin X[t d] bf16\nF = exp(X)\nA = F + 1\nB = F * 2\nout A\nout B\n"));
  for (const auto& m : ew.chosen.moves) EXPECT_EQ(m.find("recomputed"), std::string::npos) << m;
}

// A contraction whose operand has no axis of its own (no M or N for a GEMM) derives as a row
// reduction; before, no kernel family ran it.
TEST(Plan, AMatrixVectorContractionIsARowReduction) {
  const auto r = derive(parse("axes t=4096 e=1024\nin X[t e] bf16\nin w[e] bf16\nY = contract(X, w over e)\nout Y\n"));
  ASSERT_EQ(r.chosen.moves.size(), 1u);
  EXPECT_NE(r.chosen.moves[0].find("a row reduction"), std::string::npos) << r.chosen.moves[0];
  EXPECT_EQ(kinds(r.chosen), std::vector<K>{K::row_reduction});
}

// Attention and its output projection over (heads, head dim): an attention kernel, then one
// GEMM whose K mode flattens h and d.
TEST(Plan, AttentionThenItsOutputProjection) {
  const auto r = derive(parse(R"(axes b=2 h=16 q=2048 k=2048 d=128 c=2048
in Q[b h q d] bf16
in K[b h k d] bf16
in V[b h k d] bf16
in Wo[h d c] bf16
P = softmax(contract(Q, K over d) * 0.08838834764831845 over k)
O = contract(P, V over k) as bf16
Y = contract(O, Wo over h d) as bf16
out Y
)"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::attention, K::gemm}));
  // O is stored as the GEMM reads it: batch and query rows (M) together, h and d (K) together.
  ASSERT_EQ(r.chosen.materialised.size(), 1u);
  EXPECT_NE(r.chosen.materialised[0].find("O[b q h d] bf16"), std::string::npos) << r.chosen.materialised[0];
}

// An input whose GEMM mode is split in its storage order (O[b h q d] contracted over h and d):
// an elementwise kernel copies it, stored as the GEMM reads it, and the move names the order
// that would need no copy.
TEST(Plan, AGemmInputWithAModeSplitIsCopiedNamingTheOrderThatNeedsNone) {
  const auto r = derive(parse("axes b=2 q=64 h=4 d=32 c=128\nin O[b h q d] bf16\nin W[h d c] bf16\n"
                              "Y = contract(O, W over h d) as bf16\nout Y\n"));
  ASSERT_EQ(r.chosen.moves.size(), 1u);
  EXPECT_NE(r.chosen.moves[0].find("copied O[b h q d] as O_copy (declared O[b q h d], it would need none)"), std::string::npos)
      << r.chosen.moves[0];
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::elementwise, K::gemm}));
  const auto direct = derive(parse("axes b=2 q=64 h=4 d=32 c=128\nin O[b q h d] bf16\nin W[h d c] bf16\n"
                                   "Y = contract(O, W over h d) as bf16\nout Y\n"));
  EXPECT_TRUE(direct.chosen.moves.empty());
  EXPECT_EQ(kinds(direct.chosen), (std::vector<K>{K::gemm}));
}

// Attention normalised over the queries on (b, s, h, d) inputs: no GEMM batched over b and h
// reads them, so Q, K and V are copied, stored [b h s d] for the GEMMs.
TEST(Plan, HeadsInsideTheSequenceAreCopiedForTheGemms) {
  const auto r = derive(parse(testing::read_text(testing::source_dir() / "tests" / "diagrams" / "heads_inner.napkin")));
  ASSERT_EQ(r.chosen.moves.size(), 1u);
  EXPECT_EQ(r.chosen.moves[0].rfind("copied Q[b q h d] as Q_copy", 0), 0u) << r.chosen.moves[0];
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::elementwise, K::elementwise, K::elementwise, K::gemm, K::row_reduction,
                                             K::gemm, K::elementwise}));
  for (const char* copy : {"Q_copy[b h q d]", "K_copy[b h k d]", "V_copy[b h k d]"})
    EXPECT_TRUE(std::any_of(r.chosen.materialised.begin(), r.chosen.materialised.end(),
                            [&](const std::string& m) { return m.rfind(copy, 0) == 0; }))
        << copy;
}

// Attention that also writes its row logsumexp is one attention kernel, as napkin build emits it.
TEST(Plan, AttentionWithItsLogsumexpIsOneKernel) {
  auto r = derive(parse(testing::read_text(testing::source_dir() / "tests" / "diagrams" / "attention_lse.napkin")));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::attention}));
  EXPECT_TRUE(plan::one_attention_kernel(r.chosen));
}

// An operand with its batch axis innermost has no unit-stride mode for TMA: copied, naming the
// order that would need no copy.
TEST(Plan, ABatchAxisInnermostIsCopiedNamingTheOrderThatNeedsNone) {
  const char* head = "axes x=8 t=512 e=2048 f=1408\nin X[x t e] bf16\n";
  auto r = plan::derive_plan(parse(std::string(head) + "in W[e f x] bf16\nY = contract(X, W over e) as bf16\nout Y[t x f]\n"), h100());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->chosen.moves.size(), 1u);
  EXPECT_NE(r->chosen.moves[0].find("copied W[e f x] as W_copy (declared W[x e f], it would need none)"), std::string::npos)
      << r->chosen.moves[0];
  EXPECT_EQ(kinds(r->chosen), (std::vector<K>{K::elementwise, K::gemm}));
  EXPECT_TRUE(plan::derive_plan(parse(std::string(head) + "in W[x e f] bf16\nY = contract(X, W over e) as bf16\nout Y[t x f]\n"), h100()).ok());
  // An output written batch innermost: the GEMM writes the product as it can, an elementwise
  // kernel transposes it (an output's order is the caller's).
  r = plan::derive_plan(parse(std::string(head) + "in W[x e f] bf16\nY = contract(X, W over e) as bf16\nout Y[t f x]\n"), h100());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(kinds(r->chosen), (std::vector<K>{K::gemm, K::elementwise}));
}

// A contraction of three operands splits into GEMMs of two, the smaller product first.
TEST(Plan, AContractionOfThreeOperandsSplitsIntoGemms) {
  const auto r = derive(parse("axes m=4096 k=1024 n=4096 p=64\nin A[m k] bf16\nin B[k n] bf16\nin C[n p] bf16\n"
                              "D = contract(A, B, C over k n) as bf16\nout D\n"));
  ASSERT_EQ(r.chosen.moves.size(), 1u);
  EXPECT_NE(r.chosen.moves[0].find("BC = 'B' . 'C' first"), std::string::npos) << r.chosen.moves[0];
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm, K::gemm}));
}

TEST(Plan, SoftmaxOverQueriesStoresScoresQueryInnermost) {
  const auto r = derive(example("softmax_over_q"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm, K::row_reduction, K::gemm}));
  ASSERT_FALSE(r.chosen.materialised.empty());
  EXPECT_NE(r.chosen.materialised[0].find("S[b h k q] f32"), std::string::npos) << r.chosen.materialised[0];
}

TEST(Plan, RowScaleMoveWinsWithoutAGamma) {
  const auto r = derive(parse(R"(axes t=8192 e=4096 f=4096
in X[t e] bf16
in W[e f] bf16
N = rmsnorm(X over e, eps=1e-6) as bf16
Y = contract(N, W over e) as bf16
out Y
)"));
  ASSERT_EQ(r.chosen.moves.size(), 1u);
  EXPECT_NE(r.chosen.moves[0].find("row scale"), std::string::npos);
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::row_reduction, K::gemm}));
}

TEST(Plan, RefusesWhatNoKernelRunsWithTheReason) {
  auto r = plan::derive_plan(parse(R"(axes m=512 k=512 n=512
in A[m k] f32
in B[k n] f32
C = contract(A, B over k)
out C
)"), h100());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("two bf16 or two f16 operands"), std::string::npos) << r.error().message;
  // ... and the smallest change, which derives, and what it costs in precision.
  EXPECT_NE(r.error().message.find("make A and B bf16 or f16: declare an input so (in A[...] bf16), or round a computed "
                                   "value where the contraction reads it (contract(A as bf16, ...)), which rounds A's f32 "
                                   "values to bf16's 8-bit significand"),
            std::string::npos) << r.error().message;
  // A softmax also returned beside P V: P is f32 (an output); the hint rounds it where P V reads it, which derives.
  const std::string attention = "axes q=256 k=256 d=64\nin Q[q d] bf16\nin K[k d] bf16\nin V[k d] bf16\n"
                                "P = softmax(contract(Q, K over d) over k)\n";
  auto both = plan::derive_plan(parse(attention + "O = contract(P, V over k) as bf16\nout O\nout P\n"), h100());
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.error().message.find("make P bf16 or f16: declare an input so (in P[...] bf16), or round a computed value "
                                      "where the contraction reads it (contract(P as bf16, ...))"),
            std::string::npos) << both.error().message;
  EXPECT_TRUE(plan::derive_plan(parse(attention + "O = contract(P as bf16, V over k) as bf16\nout O\nout P\n"), h100()).ok());
  // An axis summed within one operand: the form that computes it.
  auto within = plan::derive_plan(parse("axes m=64 k=64 n=32\nin A[m k] bf16\nin B[k n] bf16\nC = contract(A, B over k n)\nout C\n"),
                                  h100());
  ASSERT_FALSE(within.ok());
  EXPECT_NE(within.error().message.find("axis n is summed within B alone: contract A with sum(B over n) instead"),
            std::string::npos) << within.error().message;
  EXPECT_TRUE(plan::derive_plan(parse("axes m=512 k=512 n=512\nin A[m k] f32\nin B[k n] f32\n"
                                      "C = contract(A as bf16, B as bf16 over k)\nout C\n"),
                                h100())
                  .ok());
  // Attention whose head dim TMA cannot move (rows of 72 bytes): the binding constraint, named.
  auto attention_at = [&](int d) {
    return plan::derive_plan(parse(fmt::format("axes q=256 k=256 d={}\nin Q[q d] bf16\nin K[k d] bf16\nin V[k d] bf16\n"
                                               "O = contract(softmax(contract(Q, K over d) over k), V over k) as bf16\nout O\n",
                                               d)),
                             h100());
  };
  const auto d36 = attention_at(36);
  ASSERT_TRUE(d36.ok());
  bool named = false;
  for (const auto& a : d36->alternatives)
    named = named || a.plan.infeasible.find("rows of Q in bf16 are 72 bytes, and TMA moves multiples of 16") != std::string::npos;
  EXPECT_TRUE(named);
  // Head dims that are no multiple of 64 are one attention kernel: 96 swizzled 64 bytes wide, 40
  // padded to WGMMA's K step of 16.
  for (int d : {96, 40}) {
    const auto fused = attention_at(d);
    ASSERT_TRUE(fused.ok());
    ASSERT_EQ(fused->chosen.kernels.size(), 1u) << d;
    EXPECT_EQ(fused->chosen.kernels[0].kind, plan::KernelKind::attention) << d;
  }
}

// A softmax over an axis its input does not hold innermost: no row kernel reads it, so it is its
// maxes and sums, which column kernels take; the move says why. Stored with the axis innermost,
// it is one row kernel.
TEST(Plan, ASoftmaxOfAnInputStoredAcrossItsRowsIsMaxesAndSums) {
  auto r = plan::derive_plan(parse("axes q=64 k=128\nin S[q k] f32\nP = softmax(S over q)\nout P\n"), h100());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->chosen.moves.front(), "'P' over q as exp('S' - m) / sum(exp('S' - m) over q), m = max('S' over q): 'S' [q k] does not "
                                     "hold them innermost");
  EXPECT_EQ(r->chosen.kernels.front().kind, plan::KernelKind::column_reduction);
  auto fixed = plan::derive_plan(parse("axes q=64 k=128\nin S[k q] f32\nP = softmax(S over q)\nout P\n"), h100());
  ASSERT_TRUE(fixed.ok()) << fixed.error().message;
  EXPECT_EQ(fixed->chosen.kernels.size(), 1u);
}

TEST(GemmSolver, RanksDistinctSchedulesAndCountsRejections) {
  search::GemmProblem p;
  p.m = p.n = p.k = 4096;
  auto r = search::solve_gemm(p, h100());
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->ranked.size(), 10u);
  int rejected = 0;
  for (const auto& [cls, n] : r->rejected) rejected += n;
  EXPECT_EQ(rejected + static_cast<int>(r->ranked.size()), r->considered);
  EXPECT_GT(r->rejected.at("divisibility"), 0);
  std::set<std::string> seen;
  for (const auto& c : r->ranked) EXPECT_TRUE(seen.insert(search::gemm_schedule_text(c.schedule)).second);
  for (std::size_t i = 1; i < r->ranked.size(); ++i)
    EXPECT_LE(r->ranked[i - 1].estimate.time_s, r->ranked[i].estimate.time_s);
}

TEST(GemmSolver, NeverBelowItsRoofline) {
  const arch::Machine m = h100();
  const double peak = *m.peak_flop_per_s(arch::Unit::tensor_core, DType::bf16);
  const double hbm = m.bytes_per_s(arch::kL2);
  for (std::int64_t s : {128, 1000, 4096, 8192}) {
    search::GemmProblem p;
    p.m = s, p.n = 11008, p.k = s / 2 + 64;
    auto r = search::solve_gemm(p, m);
    ASSERT_TRUE(r.ok());
    for (const auto& c : r->ranked) {
      EXPECT_GE(c.estimate.time_s, c.estimate.flops / peak);
      EXPECT_GE(c.estimate.time_s, c.estimate.compulsory_bytes / hbm);
    }
  }
}

// The prologue mainloop's one consumer warpgroup holds two stages: at 2 stages every K tile waits
// a whole TMA latency (measured on the H100 at 8192 x 4096 x 4096, 128 x 128 tiles: 1424 us at 2
// stages, 792 at 3, 699 at 6; CUTLASS's GEMM 359 us).
TEST(GemmSolver, ThePrologueMainloopWaitsOnItsLoadsWithTwoStages) {
  search::GemmProblem p;
  p.m = 8192, p.n = 4096, p.k = 4096;
  p.prologue = true;
  p.prologue_fma_a = 2;
  auto at = [&](int stages) {
    search::GemmSchedule s{128, 128, 64, 1, 1, stages, false};
    s.prologue = true;
    const auto v = search::estimate_gemm(p, s, h100());
    EXPECT_TRUE(v.fits) << v.reason;
    return v.estimate.time_s;
  };
  EXPECT_GT(at(2), 1.6 * at(3));
  EXPECT_GT(at(2), 1.1e-3);  // the latency-bound K loop, not WGMMA's 278 us
  EXPECT_GE(at(3), at(6));
  EXPECT_GT(at(6), 550e-6);  // the warpgroup's serial transform, barrier and WGMMAs
}

// A prologue launch of one unit a CTA is its units' chain: the CTA's first loads, two K tiles and
// the epilogue's code per value (tests/diagrams/gated_softplus on the H100: 11.0 us measured; the
// estimate without the epilogue and the start was 4.4 us, 2.5x off).
TEST(GemmSolver, AOneUnitPrologueLaunchCountsItsEpilogueAndItsStart) {
  search::GemmProblem p;
  p.m = 3000, p.n = 192, p.k = 80;
  p.operand = DType::f16;
  p.prologue = true;
  p.prologue_sfu_a = 2, p.prologue_fma_a = 4;
  search::GemmSchedule s{64, 64, 64, 1, 1, 3, false};
  s.prologue = true;
  const double bare = search::estimate_gemm(p, s, h100()).estimate.time_s;
  p.epilogue_sfu_per_element = 1, p.epilogue_fma_per_element = 5, p.epilogue_leaves = 1;
  const auto v = search::estimate_gemm(p, s, h100());
  ASSERT_TRUE(v.fits) << v.reason;
  EXPECT_GT(v.estimate.time_s, 11.0e-6 / 2) << v.estimate.detail;  // within 2x of the measured time
  EXPECT_LT(v.estimate.time_s, 11.0e-6) << v.estimate.detail;
  EXPECT_GT(v.estimate.time_s, bare + 0.5e-6);  // the epilogue's code and its leaf load, a unit
  EXPECT_NE(v.estimate.detail.find("1 unit a CTA"), std::string::npos) << v.estimate.detail;
}

// The prologue GEMM's split along K: two CTAs a SM where the tiles are few, each split at least
// eight K tiles (measured on the H100: normalised linear attention's state GEMM 0.90x the time at
// 8 splits of its 17 at two K tiles a split minimum).
TEST(GemmSolver, PrologueSplitsKeepEightKTilesASplit) {
  auto splits = [](std::int64_t l, std::int64_t k) {
    search::GemmProblem p;
    p.m = p.n = 64, p.k = k, p.l = l;
    p.prologue = true;
    p.prologue_fma_a = 2;
    search::GemmSchedule s{64, 64, 64, 1, 1, 3, false};
    s.prologue = true;
    const std::string d = search::estimate_gemm(p, s, h100()).estimate.detail;
    const auto x = d.find(" x "), e = d.find(" splits");
    return x == std::string::npos || e == std::string::npos ? -1 : std::stoi(d.substr(x + 3, e - x - 3));
  };
  EXPECT_EQ(splits(16, 4096), 8);   // normalised linear attention's state GEMM
  EXPECT_EQ(splits(64, 4096), 6);   // linear attention's: as many units as resident CTAs (3 a SM)
  EXPECT_EQ(splits(16, 960), 1);    // 15 K tiles: too short to split
  EXPECT_EQ(splits(200, 4096), 1);  // the tiles fill the SMs
  EXPECT_EQ(splits(1, 1 << 20), 32);
}

// A cheap elementwise producer before a compute-bound GEMM is materialised: the prologue
// mainloop runs the GEMM below CUTLASS's rate (one warpgroup: its transform, then its WGMMAs; two
// cannot hold a 128 x 128 tile's accumulators in the registers ptxas leaves them).
TEST(Plan, AScaleBeforeAComputeBoundGemmIsMaterialised) {
  // (X + 1, not X * 0.5: a scale would move out of the contraction, into the GEMM's epilogue.)
  const auto r = derive(parse("axes t=8192 e=4096 f=4096\nin X[t e] bf16\nin W[e f] bf16\nF = X + 1 as bf16\n"
                              "Y = contract(F, W over e) as bf16\nout Y\n"));
  ASSERT_EQ(r.chosen.kernels.size(), 2u);
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::elementwise, K::gemm}));
  EXPECT_FALSE(r.chosen.kernels[1].gemm->prologue);
  // The fused alternative says what binds it.
  bool said = false;
  for (const auto& a : r.alternatives) said = said || a.why_not.find("the slowest (gemm Y <- X W)") != std::string::npos;
  EXPECT_TRUE(said);
}

// Two consumer warpgroups take a unit's K tiles in turn: where each thread's transform is the
// pipeline's bound (a tile of 64 x 64, several K tiles a unit) the solver takes them; a tile
// whose accumulators need more registers than 288 threads leave (168, ptxas), or two stages
// (each warpgroup holds one), is rejected with its reason.
TEST(GemmSolver, TwoConsumerWarpgroupsWhereTheTransformBinds) {
  search::GemmProblem p;
  p.m = 512, p.n = 256, p.k = 256;
  p.prologue = true;
  p.prologue_fma_a = 2;
  search::GemmSchedule s{64, 64, 64, 1, 1, 4, false};
  s.prologue = true;
  const auto one = search::estimate_gemm(p, s, h100());
  s.warpgroups = 2;
  const auto two = search::estimate_gemm(p, s, h100());
  ASSERT_TRUE(one.fits && two.fits);
  EXPECT_LT(two.estimate.time_s, one.estimate.time_s);
  EXPECT_NE(search::gemm_schedule_text(s).find("2 consumer warpgroups"), std::string::npos);
  s.stages = 2;
  EXPECT_EQ(search::estimate_gemm(p, s, h100()).reason_class, "smem");
  s.stages = 4, s.tile_m = s.tile_n = 128;
  const auto big = search::estimate_gemm(p, s, h100());
  EXPECT_EQ(big.reason_class, "registers");
  EXPECT_NE(big.reason.find("leave 168"), std::string::npos) << big.reason;
}

// A row sum stored in a dtype the kernel does not write (f64) is no part of the GEMM kernel: the
// plan computes it apart, and every kernel it plans is one the emitter writes.
TEST(Plan, ARowSumTheKernelCannotStoreIsComputedApart) {
  const auto r = derive(parse("axes t=512 d=64 e=64\nin X[t d] bf16\nin W[d e] bf16\nF = exp(X)\n"
                              "Y = contract(F, W over d) as bf16\ns = sum(F as f64 over d)\nout Y\nout s\n"));
  ASSERT_EQ(r.chosen.kernels.size(), 2u);
  // (The row kernel computes F beside s, as a sibling that reads X, and the GEMM reads F.)
  for (const auto& k : r.chosen.kernels)
    if (k.kind == K::gemm) EXPECT_EQ(k.diagram.outputs.size(), 1u) << k.name;
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::row_reduction, K::gemm}));
}

// What is no row sum of the GEMM's operand says why.
TEST(Plan, RowSumsSayWhyNot) {
  auto why = [](const std::string& body) {
    return plan::row_sums(parse("axes t=64 d=64 e=64\nin X[t d] bf16\nin W[d e] bf16\nin w[d] f32\nF = exp(X)\n"
                                "Y = contract(F, W over d) as bf16\n" + body + "out Y\nout s\n")).why;
  };
  EXPECT_EQ(why("s = sum(F over d)\n"), "");
  EXPECT_EQ(why("s = contract(F, w over d)\n"), "");
  EXPECT_NE(why("s = max(F over d)\n").find("only sums ride"), std::string::npos);
  EXPECT_NE(why("s = sum(F over t)\n").find("not a sum over exactly the GEMM's K axes"), std::string::npos);
  EXPECT_NE(why("s = sum(exp(X * 2) over d)\n").find("reads X, not a bf16, f16, f32 or f64 tensor over K and L axes alone"),
            std::string::npos);
  EXPECT_NE(why("param p = 2\ns = sum(F * p over d)\n").find("reads param 'p'"), std::string::npos);
}

TEST(GemmSolver, OverCapacitySchedulesGetNoTime) {
  search::GemmProblem p;
  p.m = p.n = p.k = 4096;
  const search::GemmVerdict v = search::estimate_gemm(p, {256, 256, 128, 1, 1, 0, false}, h100());
  EXPECT_FALSE(v.fits);
  EXPECT_EQ(v.reason_class, "registers");
  EXPECT_EQ(v.estimate.time_s, 0);
  const search::GemmVerdict w = search::estimate_gemm(p, {128, 256, 64, 1, 1, 9, false}, h100());
  EXPECT_FALSE(w.fits);
  EXPECT_EQ(w.reason_class, "smem");
}

// The H100 sweep's rankings (bench/NOTES.md, GEMM sweep; bench/results/gemm_sweep_h100_20261125):
// 128x256 cooperative tiles on large problems, 128x192 where 128x256 leaves a wave 45 % empty,
// no 64-row ping-pong tiles, and the scheduler's swizzle only where a wave's band fits the problem.
// The solver's first schedule for an m x n x k bf16 GEMM on the H100; no ranked schedule is
// stream-K with ping-pong (CUTLASS runs stream-K on the cooperative kernel only).
search::GemmSchedule best_gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  search::GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  auto r = search::solve_gemm(p, h100());
  EXPECT_TRUE(r.ok());
  for (const auto& c : r->ranked) EXPECT_FALSE(c.schedule.stream_k && c.schedule.pingpong);
  return r->ranked.front().schedule;
}

TEST(GemmSolver, RanksAsTheH100SweepMeasured) {
  auto best = best_gemm;
  const search::GemmSchedule square = best(4096, 4096, 4096);
  EXPECT_EQ(square.tile_m, 128);
  EXPECT_EQ(square.tile_n, 256);
  EXPECT_FALSE(square.pingpong);
  EXPECT_EQ(square.swizzle, 8);
  const search::GemmSchedule qkv_1k = best(1024, 6144, 4096);
  EXPECT_EQ(qkv_1k.tile_n, 192) << search::gemm_schedule_text(qkv_1k);
  EXPECT_EQ(qkv_1k.swizzle, 1) << "a problem 8 tiles tall is narrower than a band of 8";
  for (std::int64_t tokens : {1024, 4096, 16384})
    for (auto [k, n] : {std::pair<std::int64_t, std::int64_t>{4096, 6144}, {4096, 4096}, {4096, 14336}, {14336, 4096}}) {
      const search::GemmSchedule s = best(tokens, n, k);
      EXPECT_GE(s.tile_m, 128) << tokens << "x" << n << "x" << k << ": " << search::gemm_schedule_text(s);
    }
  // CUTLASS's scheduler pads the tile grid to a multiple of the swizzle: 8192 x 11008 has 43 column
  // tiles of 256, and swizzle 8 measured 0.68x cuBLAS where 1 measured 0.97x (run of 2026-11-25).
  for (std::int64_t tokens : {2048, 8192, 16384}) {
    const search::GemmSchedule s = best(tokens, 11008, 4096);
    const std::int64_t m_tiles = (tokens + s.tile_m - 1) / s.tile_m, n_tiles = (11008 + s.tile_n - 1) / s.tile_n;
    EXPECT_EQ(m_tiles % (s.swizzle * s.cluster_m), 0) << search::gemm_schedule_text(s);
    EXPECT_EQ(n_tiles % (s.swizzle * s.cluster_n), 0) << search::gemm_schedule_text(s);
  }
  EXPECT_EQ(best(8192, 11008, 4096).swizzle, 1);
}

// Stream-K where the last wave runs much of the SMs empty, as measured on one H200 against the
// same tiles without it (bench/NOTES.md, 2026-11-25 fifth): 1024 x 14336 x 4096 (3.39 waves of
// 128 x 256 tiles) -17 %; not at 7.76 or 16 waves (+2 %, even), and never with ping-pong.
TEST(GemmSolver, StreamKWhereTheLastWaveIsMostlyEmpty) {
  auto solve = best_gemm;
  EXPECT_TRUE(solve(1024, 14336, 4096).stream_k);
  EXPECT_FALSE(solve(2048, 16384, 4096).stream_k);  // 7.76 waves
  EXPECT_FALSE(solve(8192, 8192, 8192).stream_k);   // 15.5 waves
  EXPECT_FALSE(solve(128, 128, 4096).stream_k);     // one tile: no full wave to balance
  search::GemmSchedule s{128, 256, 64, 1, 1, 0, false};
  s.stream_k = true;
  EXPECT_EQ(search::gemm_schedule_text(s), "tile 128x256x64 cluster 1x1 stages auto cooperative stream-K");
  search::GemmProblem full;  // 132 x 2 tiles of 128 x 256: whole waves
  full.m = 128 * 132, full.n = 512, full.k = 4096;
  const search::GemmVerdict v = search::estimate_gemm(full, s, h100());
  EXPECT_FALSE(v.fits);
  EXPECT_EQ(v.reason_class, "stream-K");
}

TEST(GemmSolver, SwizzleAppearsInTheScheduleText) {
  search::GemmSchedule s{128, 256, 64, 1, 1, 0, false};
  EXPECT_EQ(search::gemm_schedule_text(s), "tile 128x256x64 cluster 1x1 stages auto cooperative");
  s.swizzle = 4;
  EXPECT_EQ(search::gemm_schedule_text(s), "tile 128x256x64 cluster 1x1 stages auto cooperative swizzle 4");
}

// Two contractions sharing their first operand become one dual GEMM only where one descriptor
// can read both B operands (same dtype and storage order); its epilogue reads inputs over all or
// none of each class of the output's axes (biases, per-expert ones with the batch).
TEST(Plan, DualGemm) {
  auto kinds = [](const plan::Plan& p) {
    std::vector<K> k;
    for (const auto& x : p.kernels) k.push_back(x.kind);
    return k;
  };
  // nn.Linear's K-major weights, a param in the gate, t not a multiple of any tile.
  auto r = derive(parse(testing::read_text(testing::source_dir() / "tests" / "diagrams" / "geglu_linear.napkin")));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::dual_gemm, K::gemm}));
  const char* head = "axes t=2048 e=4096 f=11008\nin X[t e] bf16\n";
  // B operands stored in different orders: two GEMMs, the gate in the second's epilogue.
  r = derive(parse(std::string(head) + "in Wg[e f] bf16\nin Wu[f e] bf16\nG = contract(X, Wg over e) as bf16\n"
                   "U = contract(X, Wu over e) as bf16\nH = G * U as bf16\nout H\n"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm, K::gemm}));
  // An epilogue input besides the two products (a bias), and biases per expert: one dual GEMM.
  r = derive(parse(std::string(head) + "in Wg[e f] bf16\nin Wu[e f] bf16\nin b[f] f32\nG = contract(X, Wg over e) as bf16\n"
                   "U = contract(X, Wu over e) as bf16\nH = (G + b) * U as bf16\nout H\n"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::dual_gemm}));
  r = derive(parse(testing::read_text(testing::source_dir() / "tests" / "diagrams" / "biased_swiglu.napkin")));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::dual_gemm}));
  // A bias over part of the batch axes (x of x and y): the dual GEMM refuses it, two GEMMs run it.
  r = derive(parse("axes x=2 y=3 t=256 e=512 f=1024\nin X[x y t e] bf16\nin Wg[x y e f] bf16\nin Wu[x y e f] bf16\n"
                   "in b[x f] f32\nH = (contract(X, Wg over e) + b) * contract(X, Wu over e) as bf16\nout H\n"));
  EXPECT_NE(kinds(r.chosen), (std::vector<K>{K::dual_gemm}));
  // Both products are outputs: each is written, no dual GEMM reads them away.
  r = derive(parse(std::string(head) + "in Wg[e f] bf16\nin Wu[e f] bf16\nG = contract(X, Wg over e) as bf16\n"
                   "U = contract(X, Wu over e) as bf16\nout G\nout U\n"));
  EXPECT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm, K::gemm}));
}

// A GEMM whose product is only reduced over N: its epilogue folds the rows, nothing of the
// product is stored (a fused linear cross-entropy), and what keeps the product refuses with why.
TEST(Plan, AGemmReducedOverNIsFoldedInItsEpilogue) {
  auto r = derive(example("linear_cross_entropy"));
  ASSERT_EQ(kinds(r.chosen), (std::vector<K>{K::gemm_reduction}));
  EXPECT_TRUE(r.chosen.materialised.empty());
  const plan::Kernel& k = r.chosen.kernels[0];
  ASSERT_TRUE(k.gemm.has_value());
  EXPECT_FALSE(k.gemm->stream_k);
  EXPECT_EQ(k.gemm->cluster_m * k.gemm->cluster_n, 1);
  EXPECT_NE(k.detail.find("row partials folded by a second launch"), std::string::npos) << k.detail;
  // Against storing the logits in f32 and reducing them: at least the 4.2 GB written and read back.
  bool unfused = false;
  for (const auto& a : r.alternatives)
    if (a.plan.infeasible.empty()) unfused = unfused || a.plan.predicted_s > r.chosen.predicted_s * 1.2;
  EXPECT_TRUE(unfused);
  // The classes, the folds and the states the epilogue keeps.
  const plan::GemmReduction gr = plan::gemm_reduction(k.diagram);
  ASSERT_TRUE(gr.why.empty()) << gr.why;
  EXPECT_EQ(gr.reductions.size(), 2u);
  EXPECT_EQ(gr.states, 3);  // a sum, and a logsumexp's (max, sum)
  EXPECT_EQ(gr.leaves.size(), 1u);  // target
  // A softmax over N keeps the product's axes: no fold, the reason says so.
  const char* head = "axes t=512 e=256 v=1024\nin X[t e] bf16\nin W[v e] bf16\nL = contract(X, W over e)\n";
  const plan::GemmReduction soft = plan::gemm_reduction(parse(std::string(head) + "P = softmax(L over v)\nout P\n"));
  EXPECT_NE(soft.why.find("keeps its axes"), std::string::npos) << soft.why;
  // A reduction over M is no fold over N.
  const plan::GemmReduction over_m = plan::gemm_reduction(parse(std::string(head) + "Z = sum(L over t)\nout Z\n"));
  EXPECT_NE(over_m.why.find("not exactly the GEMM's N axes"), std::string::npos) << over_m.why;
  // A summand that reads another fold needs two passes over the row.
  const plan::GemmReduction two = plan::gemm_reduction(parse(std::string(head) + "Z = sum(exp(L - max(L over v)) over v)\nout Z\n"));
  EXPECT_NE(two.why.find("a folded summand is elementwise code"), std::string::npos) << two.why;
  // Both the product and its fold as outputs: the product is stored by a GEMM.
  r = derive(parse(std::string(head) + "Z = logsumexp(L over v)\nout L\nout Z\n"));
  const std::vector<K> stored = kinds(r.chosen);
  EXPECT_EQ(std::count(stored.begin(), stored.end(), K::gemm_reduction), 0);
}

// The solver's constraints of the dual GEMM: one WGMMA tile over both products (N <= 256 in
// multiples of 64 per product), no clusters, no stream-K; a partial last tile costs a launch.
TEST(Plan, DualGemmSchedules) {
  auto m = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  ASSERT_TRUE(m.ok());
  search::GemmProblem p;
  p.m = 2048, p.n = 11008, p.k = 4096, p.outputs = 2;
  auto fits = [&](search::GemmSchedule s) { return search::estimate_gemm(p, s, *m).fits; };
  EXPECT_TRUE(fits({128, 128, 64, 1, 1, 0, false}));
  EXPECT_TRUE(fits({128, 64, 64, 1, 1, 0, false}));
  EXPECT_FALSE(fits({128, 256, 64, 1, 1, 0, false}));  // 512 columns of WGMMA
  EXPECT_FALSE(fits({128, 192, 64, 1, 1, 0, false}));
  EXPECT_FALSE(fits({128, 128, 64, 2, 1, 0, false}));  // a cluster
  search::GemmSchedule sk{128, 128, 64, 1, 1, 0, false};
  sk.stream_k = true;
  EXPECT_FALSE(fits(sk));
  // An N that no tile divides: the last columns are a second launch over padded copies, which
  // costs a launch more than the same tiles over a whole N.
  const double whole = search::estimate_gemm(p, {128, 128, 64, 1, 1, 0, false}, *m).estimate.time_s;
  p.n = 11008 - 28;
  const auto tail = search::estimate_gemm(p, {128, 128, 64, 1, 1, 0, false}, *m);
  ASSERT_TRUE(tail.fits);
  EXPECT_GT(tail.estimate.time_s, whole + search::kKernelFixedS * 0.9);
}

}  // namespace
// An output computed from indices and constants alone has a kernel that writes it (inlined where
// it is read, it would otherwise be written by none); an input named as an output is refused at
// its line and column, not left unwritten.
// Every kernel of a plan reads the diagram's inputs and what earlier kernels wrote: the launch
// order is the plan's. A kernel writing P and a statistic defined after P V (the statistic's
// node comes last) had run after P V's kernel, which read P before it was written.
void expect_kernels_in_dependency_order(const plan::Plan& p, const ir::Diagram& d) {
  std::set<std::string> written;
  for (ir::NodeId n : d.inputs()) written.insert(d.node(n).name);
  for (const auto& k : p.kernels) {
    for (ir::NodeId n : k.diagram.inputs())
      EXPECT_TRUE(written.count(k.diagram.node(n).name)) << k.name << " reads " << k.diagram.node(n).name << " before it is written";
    for (const auto& o : k.diagram.outputs) written.insert(k.diagram.node(o.node).name);
  }
}

TEST(Plan, KernelsRunAfterTheKernelsTheyRead) {
  const std::string head = "axes b=2 h=8 q=1024 k=1024 d=64\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n"
                           "S = contract(Q, K over d) * 0.125\nO = contract(softmax(S over k), V over k) as bf16\n";
  for (const std::string stat : {"Z = sum(exp(S) over k)", "Z = max(S over k)"}) {
    SCOPED_TRACE(stat);
    const ir::Diagram d = parse(head + stat + "\nout O\nout Z\n");
    const auto r = derive(d);
    ASSERT_GE(r.chosen.kernels.size(), 2u);
    expect_kernels_in_dependency_order(r.chosen, d);
  }
  for (const char* dir : {"examples", "tests/diagrams"})
    for (const auto& f : testing::files_in(testing::source_dir() / dir, ".napkin")) {
      SCOPED_TRACE(f.string());
      const ir::Diagram d = parse(testing::read_text(f));
      auto r = plan::derive_plan(d, h100());
      if (!r.ok()) continue;  // (refusals are tested elsewhere)
      expect_kernels_in_dependency_order(r->chosen, d);
      for (const auto& a : r->alternatives)
        if (a.plan.infeasible.empty()) expect_kernels_in_dependency_order(a.plan, d);
    }
}

TEST(Plan, EveryOutputIsWrittenByAKernel) {
  const auto d = derive(parse("axes t=64 s=64 e=32 f=32\nin X[t e] bf16\nin W[e f] bf16\n"
                              "Y = contract(X, W over e) as bf16\nM = select(t >= s, 0, -inf) as f32\nout Y\nout M\n"));
  std::set<std::string> written;
  for (const auto& k : d.chosen.kernels)
    for (const auto& o : k.diagram.outputs) written.insert(k.diagram.node(o.node).name);
  EXPECT_EQ(written, (std::set<std::string>{"Y", "M"}));
  EXPECT_EQ(kinds(d.chosen), (std::vector<K>{K::gemm, K::elementwise}));
  auto r = plan::derive_plan(parse("axes t=64 e=32 f=32\nin X[t e] bf16\nin W[e f] bf16\n"
                                   "Y = contract(X, W over e) as bf16\nout Y\nout X\n"),
                             h100());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find(":6:5: output 'X' is an input of the diagram"), std::string::npos) << r.error().message;
}

// A GEMM whose rows TMA cannot move at the diagram's sizes (a vocabulary of 50257, 2 bytes an
// element): the plan stands, with a warning that names the tensor and the smallest padding (the
// library refuses such a call at launch).
TEST(Plan, ATmaRowOfOddBytesIsAWarningWithThePadding) {
  const auto d = derive(parse("axes t=64 e=768 v=50257\nin H[t e] bf16\nin W[e v] bf16\nY = contract(H, W over e) as bf16\nout Y\n"));
  ASSERT_EQ(d.chosen.warnings.size(), 1u);
  EXPECT_NE(d.chosen.warnings[0].find("W's innermost GEMM mode [v] holds 50257 elements"), std::string::npos) << d.chosen.warnings[0];
  EXPECT_NE(d.chosen.warnings[0].find("pad v to 50264"), std::string::npos) << d.chosen.warnings[0];
  EXPECT_TRUE(derive(parse("axes t=64 e=768 v=50264\nin H[t e] bf16\nin W[e v] bf16\nY = contract(H, W over e) as bf16\nout Y\n"))
                  .chosen.warnings.empty());
}

// Where the padded axis is normalised downstream (a softmax over the vocabulary), zeros would
// enter the softmax: the hint says so and names the mask that keeps the result, which then runs.
TEST(Plan, APaddingThatWouldChangeASoftmaxSaysSoAndNamesTheMask) {
  const auto d = derive(parse("axes t=64 e=768 v=50257\nin H[t e] bf16\nin W[e v] bf16\n"
                              "P = softmax(contract(H, W over e) over v) as bf16\nout P\n"));
  ASSERT_EQ(d.chosen.warnings.size(), 1u);
  const std::string& w = d.chosen.warnings[0];
  EXPECT_NE(w.find("Padding v to 50264 alone would change the result: the padded elements enter the softmax at 4:5 over v"),
            std::string::npos) << w;
  EXPECT_NE(w.find("--set v=50264 and select(v < 50257, ..., -inf) before it"), std::string::npos) << w;
  EXPECT_EQ(w.find("sliced off"), std::string::npos) << w;
  EXPECT_TRUE(derive(parse("axes t=64 e=768 v=50264\nin H[t e] bf16\nin W[e v] bf16\n"
                           "P = softmax(select(v < 50257, contract(H, W over e), -inf) over v) as bf16\nout P\n"))
                  .chosen.warnings.empty());
  const auto norm = derive(parse("axes t=64 e=768 v=50257\nin H[t e] bf16\nin W[e v] bf16\n"
                                 "Y = rmsnorm(contract(H, W over e) over v) as bf16\nout Y\n"));
  ASSERT_EQ(norm.chosen.warnings.size(), 1u);
  EXPECT_NE(norm.chosen.warnings[0].find("(its mean counts them); no padding of the inputs runs v=50257 as written"),
            std::string::npos) << norm.chosen.warnings[0];
}

// A plain sum over rows longer than registers hold (64 rows of 262144) fewer than the SMs: its
// axis is cut in two (32 x 8192) so that 2048 rows fill the GPU four times over, then a column
// kernel sums the 32; a problem larger than the GPU's memory warns.
TEST(Plan, LongRowsDeriveAndOversizedProblemsWarn) {
  const auto d = derive(parse("axes t=64 v=262144\nin X[t v] f32\nZ = sum(X over v)\nout Z\n"));
  EXPECT_EQ(kinds(d.chosen), (std::vector<K>{K::row_reduction, K::column_reduction}));
  ASSERT_EQ(d.chosen.cut_axes.size(), 1u);
  EXPECT_EQ(d.chosen.cut_axes[0].name, "v");
  EXPECT_EQ(d.chosen.cut_axes[0].inner_size, 8192);
  EXPECT_LT(d.chosen.predicted_s, 2 * 67.1e6 / 3.35e12);  // better than 64 of 132 SMs streaming it
  EXPECT_GT(d.chosen.predicted_s, 67.1e6 / 3.35e12);
  EXPECT_TRUE(d.chosen.warnings.empty());
  const auto huge = derive(parse("axes m=1000000 k=1000000 n=64\nin A[m k] bf16\nin B[k n] bf16\nY = contract(A, B over k) as bf16\nout Y\n"));
  ASSERT_EQ(huge.chosen.warnings.size(), 1u);
  EXPECT_NE(huge.chosen.warnings[0].find("more than h100-sxm5's"), std::string::npos) << huge.chosen.warnings[0];
}

// Axes reduced together and adjacent in every tensor are one axis to the kernels (a row kernel
// reduces over one): the plan says so and keeps the merge for the launch's views.
// Past the fusion search's bound (128 ops) every op is its own kernel, and the plan says so.
// Past 128 ops the search fuses windows of consecutive ops and says so: a chain of 130
// elementwise ops is a few kernels, not 130; a 12-layer MLP's layers fuse as one layer alone does.
TEST(Plan, ADiagramPastTheSearchBoundFusesInWindows) {
  std::string text = "axes t=1024 e=256\nin X[t e] bf16\nT0 = X * 1.5\n";
  for (int i = 1; i <= 130; ++i) text += fmt::format("T{} = exp(T{}) * 0.5\n", i, i - 1);
  text += "Y = T130 as bf16\nout Y\n";
  const auto d = derive(parse(text));
  EXPECT_LE(d.chosen.kernels.size(), 4u);
  // (The whole chain fused into one kernel wins here: no window bounds it, so no warning.)
  EXPECT_EQ(d.chosen.warnings.empty(), d.chosen.kernels.size() == 1);
  expect_kernels_in_dependency_order(d.chosen, parse(text));
  auto layers = [](int n) {
    std::string t = "axes t=1024 e=1024 f=2048\nin X[t e] bf16\n";
    std::string x = "X";
    for (int i = 0; i < n; ++i) {
      t += fmt::format("in W{0}[e f] bf16\nin U{0}[f e] bf16\nin g{0}[e] bf16\nN{0} = rmsnorm({1} over e) * g{0} as bf16\n"
                       "H{0} = contract(N{0}, W{0} over e) as bf16\nA{0} = H{0} * (1 / (1 + exp(-H{0}))) as bf16\n"
                       "Y{0} = contract(A{0}, U{0} over f) as bf16\nR{0} = {1} + Y{0} as bf16\n", i, x);
      x = fmt::format("R{}", i);
    }
    return t + "out " + x + "\n";
  };
  const auto one = derive(parse(layers(1)));
  const auto twelve = derive(parse(layers(12)));
  ASSERT_FALSE(twelve.chosen.warnings.empty());
  EXPECT_NE(twelve.chosen.warnings.back().find("more than the 128 the fusion search takes at once"), std::string::npos)
      << twelve.chosen.warnings.back();
  EXPECT_NE(twelve.chosen.warnings.back().find("fused windows of 48 consecutive ops"), std::string::npos);
  EXPECT_LE(twelve.chosen.kernels.size(), 12 * one.chosen.kernels.size() + 6);
  EXPECT_LT(twelve.chosen.predicted_s, 12 * one.chosen.predicted_s * 1.1);
  expect_kernels_in_dependency_order(twelve.chosen, parse(layers(12)));
  EXPECT_TRUE(derive(parse("axes t=1024 e=256\nin X[t e] bf16\nY = exp(X) as bf16\nout Y\n")).chosen.warnings.empty());
}

TEST(Plan, AxesReducedTogetherAreTakenAsOne) {
  auto r = plan::derive_plan(parse("axes t=64 h=4 d=32\nin X[t h d] bf16\nin g[h d] bf16\n"
                                   "Y = rmsnorm(X over h d) * g as bf16\nout Y\n"), h100());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->chosen.merged_axes.size(), 1u);
  EXPECT_EQ(r->chosen.merged_axes[0].name, "h_d");
  EXPECT_EQ(r->chosen.merged_axes[0].parts, (std::vector<std::string>{"h", "d"}));
  EXPECT_EQ(r->chosen.moves.front(), "axes h d taken as one axis h_d (reduced together, adjacent in every tensor)");
  ASSERT_EQ(r->chosen.kernels.size(), 1u);
  EXPECT_EQ(r->chosen.kernels[0].kind, plan::KernelKind::row_reduction);
  // The merged axis's name is fresh among axes and values alike (an input named h_d).
  auto named = plan::derive_plan(parse("axes t=64 h=4 d=32\nin X[t h d] bf16\nin h_d[t] bf16\n"
                                       "Y = rmsnorm(X over h d) * h_d as bf16\nout Y\n"), h100());
  ASSERT_TRUE(named.ok()) << named.error().message;
  EXPECT_EQ(named->chosen.merged_axes.at(0).name, "h_d_");
  // Not where a tensor holds them apart, an index expression reads one of them, an input has
  // part of them or another reduction takes part: the norm is then its statistics, split into
  // the runs that can be one axis, and the move says why.
  for (const auto& [body, why] :
       {std::pair{"in X[t h d] bf16\nin g[d h] bf16\nY = rmsnorm(X over h d) * g as bf16\nout Y\n",
                  "h d cannot be one axis: 'g' [d h] holds them in another order"},
        std::pair{"in X[t h d] bf16\nY = rmsnorm(X over h d) * h as bf16\nout Y\n", "reads the index of h"},
        // (an input over part of them: GroupNorm's per-channel gamma; the reason says how it would merge)
        std::pair{"in X[t h d] bf16\nin g[h] bf16\nY = rmsnorm(X over h d) * g as bf16\nout Y\n",
                  "'g' [h] lacks d (declared over all of them, g[h d] with its values repeated, it would merge)"},
        std::pair{"in X[t h d] bf16\nY = rmsnorm(X over h d) as bf16\nZ = sum(X over d)\nout Y\nout Z\n", "'Z' [t h] lacks d"}}) {
    auto other = plan::derive_plan(parse(std::string("axes t=64 h=4 d=32\n") + body), h100());
    ASSERT_TRUE(other.ok()) << body << other.error().message;
    EXPECT_TRUE(other->chosen.merged_axes.empty()) << body;
    EXPECT_TRUE(std::any_of(other->chosen.moves.begin(), other->chosen.moves.end(),
                            [&](const std::string& m) { return m.find(why) != std::string::npos; }))
        << body << fmt::format("{}", fmt::join(other->chosen.moves, "\n"));
  }
}

// Reductions that no row or column kernel takes as written, split into reductions over runs of
// axes: a softmax over axes held apart is exp(S - logsumexp) with the logsumexp split; soft-argmax
// reads an index of the axes it reduces (they cannot merge), so one reduction per axis; a loss
// summed over every axis is cut so that its first reduction fills the GPU, where that is faster.
TEST(Plan, ReductionsNoKernelTakesAreSplitIntoRuns) {
  auto apart = plan::derive_plan(parse("axes b=4 y=8 x=8 c=64\nin X[b y c x] bf16\nM = softmax(X over b y x) * 2\nout M\n"), h100());
  ASSERT_TRUE(apart.ok()) << apart.error().message;
  EXPECT_EQ(apart->chosen.moves.front(), "the 'softmax' at 3:5 over b y x as exp('X' - logsumexp(logsumexp('X' over x) over b y)): "
                                         "'X' holds them apart");
  auto argmax = plan::derive_plan(parse("axes b=16 y=64 x=64\nin H[b y x] f32\nP = softmax(H over y x)\n"
                                        "ex = sum(P * x over y x)\nout ex\n"), h100());
  ASSERT_TRUE(argmax.ok()) << argmax.error().message;
  EXPECT_NE(argmax->chosen.moves.at(1).find("'ex' over y x as sum(sum(the '*' at 4:12 over x) over y): y x cannot be one axis: "
                                            "the axis index 'x' at 4:14 reads the index of x"), std::string::npos)
      << argmax->chosen.moves.at(1);
  const std::string loss = "axes b=8 s=4096 d=4096\nin X[b s d] bf16\nin Y[b s d] bf16\nE = X - Y\nL = sum(E * E over b s d)\nout L\n";
  auto split = plan::derive_plan(parse(loss), h100());
  ASSERT_TRUE(split.ok()) << split.error().message;
  EXPECT_EQ(split->chosen.moves.front(), "'L' over b s d as sum(sum(the '*' at 5:11 over d) over b s): 32768 rows fill the GPU where 1 cannot");
  ASSERT_EQ(split->chosen.kernels.size(), 2u);
  ASSERT_FALSE(split->alternatives.empty());
  EXPECT_EQ(split->alternatives.front().plan.name, "reductions not split for parallelism");
  EXPECT_GT(split->alternatives.front().plan.predicted_s, 20 * split->chosen.predicted_s);  // one SM's bandwidth
  // Rows enough already, or too few elements to pay a second launch: not split.
  for (const std::string& text : {std::string("axes t=16384 v=32000\nin Z[t v] bf16\nL = logsumexp(Z over v)\nout L\n"),
                                  std::string("axes s=64 d=512\nin X[s d] bf16\nL = sum(X over s d)\nout L\n")}) {
    auto r = plan::derive_plan(parse(text), h100());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->chosen.kernels.size(), 1u) << text;
  }
}

// An elementwise value of one input and of computed values much smaller than it (BatchNorm's
// X - mean) is recomputed in its consumers, also where they reach a reduction through
// elementwise code (d * d): never materialised in f32.
TEST(Plan, AValueOfAnInputAndSmallStatisticsIsRecomputedWhereItIsRead) {
  auto r = plan::derive_plan(parse(testing::read_text(testing::source_dir() / "tests/diagrams/batchnorm_nchw.napkin")), h100());
  ASSERT_TRUE(r.ok()) << r.error().message;
  for (const std::string& m : r->chosen.materialised) EXPECT_EQ(m.find("d["), std::string::npos) << m;
  EXPECT_TRUE(std::any_of(r->chosen.moves.begin(), r->chosen.moves.end(),
                          [](const std::string& m) { return m.rfind("recomputed 'd' from 'X'", 0) == 0; }));
  EXPECT_LT(r->chosen.predicted_s, 60e-6);  // X read three times, Y written: ~40 us of HBM
}

// A norm written as its statistics divides by its count as a number: the plan names the axes it
// holds so (the library refuses a call at other sizes of them); a split sum holds none.
TEST(Plan, ANormAsItsStatisticsNamesTheAxesItsCountFixes) {
  auto r = plan::derive_plan(parse(testing::read_text(testing::source_dir() / "tests/diagrams/group_norm.napkin")), h100());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->chosen.sized_axes, (std::vector<std::string>{"c", "x", "y"}));
  auto loss = plan::derive_plan(parse(testing::read_text(testing::source_dir() / "tests/diagrams/squared_error_loss.napkin")), h100());
  ASSERT_TRUE(loss.ok());
  EXPECT_TRUE(loss->chosen.sized_axes.empty());
}

// Fewer output tiles than SMs over a long K (a weight gradient, 8 tiles): split-K, the K axis cut
// in two (t = 64 x 2048), a GEMM batched over the 64 writing f32 partial products and a column
// kernel adding them, not 8 tiles on 8 SMs; stream-K (its fix-ups one after another) is the
// alternative, and so is one tile over a 1M K.
TEST(Plan, FewTilesOverALongKAreSplitK) {
  auto r = plan::derive_plan(parse(testing::read_text(testing::source_dir() / "tests/diagrams/weight_gradient.napkin")), h100());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(kinds(r->chosen), (std::vector<K>{K::gemm, K::column_reduction}));
  ASSERT_EQ(r->chosen.cut_axes.size(), 1u);
  EXPECT_EQ(r->chosen.cut_axes[0].name, "t");
  EXPECT_EQ(r->chosen.cut_axes[0].inner_size, 2048);
  EXPECT_LT(r->chosen.predicted_s, 110e-6);
  ASSERT_FALSE(r->alternatives.empty());
  const plan::Plan& stream_k = r->alternatives[0].plan;
  EXPECT_EQ(stream_k.name, "reductions not split for parallelism");
  ASSERT_EQ(stream_k.kernels.size(), 1u);
  EXPECT_TRUE(stream_k.kernels[0].gemm && stream_k.kernels[0].gemm->stream_k);
  auto one = plan::derive_plan(parse(testing::read_text(testing::source_dir() / "tests/diagrams/long_k_product.napkin")), h100());
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_EQ(kinds(one->chosen), (std::vector<K>{K::gemm, K::column_reduction}));
  EXPECT_LT(one->chosen.predicted_s, 100e-6);  // 268 MB of HBM: 80 us
}

// Masked mean pooling: the sum over t of X[b t e] with a mask m[b t] that lacks e is one column
// kernel reading m once per token (not a materialised select(m, X, 0)), which also counts the
// tokens kept into each column (no row kernel for the counts).
TEST(Plan, AColumnKernelReadsAMaskWithoutItsInnerAxes) {
  auto r = plan::derive_plan(parse(testing::read_text(testing::source_dir() / "tests/diagrams/masked_mean_pool.napkin")), h100());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(kinds(r->chosen), (std::vector<K>{K::column_reduction}));
  EXPECT_LT(r->chosen.predicted_s, 25e-6);  // X (50 MB) read once: 15 us of HBM
}

// A three-operand contraction (a trilinear form) derives whichever pair its sizes put first: the
// split that needs a further move (a matrix-vector product as a row reduction) is followed by it.
TEST(Plan, AThreeOperandContractionDerivesWhicheverPairComesFirst) {
  for (const char* a : {"256", "128"}) {
    SCOPED_TRACE(a);
    auto r = plan::derive_plan(parse(std::string("axes t=4096 a=") + a + " b=256 c=256\nin X[t a] bf16\nin Y[t b] bf16\n"
                                     "in W[a b c] bf16\nZ = contract(X, Y, W over a b) as bf16\nout Z\n"), h100());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_GE(r->chosen.moves.size(), 2u);
  }
}

// A plan's refusal names an unnamed value by its op and place in the source, not by the name the
// plan gives it at a kernel boundary ("t1").
TEST(Plan, ARefusalNamesUnnamedValuesByTheirPlace) {
  // (No GEMM is generated for f32 operands.)
  auto r = plan::derive_plan(parse("axes m=64 k=128 n=64\nin A[m k] f32\nin B[k n] f32\nM = contract(A, B over k) * 2\nout M\n"), h100());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no kernel family runs {the 'contract' at 4:5}: the GEMM's operands are f32 and f32"),
            std::string::npos) << r.error().message;
  // It points at the op in the diagram's file, and says what would derive.
  EXPECT_EQ(r.error().headline().substr(0, 14), "test.napkin:4:") << r.error().headline();
  EXPECT_NE(r.error().message.find("make A and B bf16 or f16"), std::string::npos) << r.error().message;
}

}  // namespace napkin

namespace napkin {
namespace {

ir::Diagram attention_at(const std::string& axes, const std::string& score) {
  return parse("axes " + axes + "\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\nS = " + score +
               "\nO = contract(S, V over k) as bf16\nout O\n");
}

// A plan whose kernels run at these sizes wins over a faster one with a kernel that cannot (90
// keys: P's rows of 180 bytes are no TMA rows, which the fused kernel never writes).
TEST(Plan, APlanThatRunsBeatsAFasterOneThatCannot) {
  auto r = plan::derive_plan(attention_at("b=1 h=3 q=70 k=90 d=136", "sigmoid(contract(Q, K over d) * 0.08)"), h100());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->chosen.runs_at_these_sizes);
  EXPECT_TRUE(r->chosen.warnings.empty());
  ASSERT_EQ(r->chosen.kernels.size(), 1u);
  EXPECT_EQ(r->chosen.kernels[0].kind, plan::KernelKind::attention);
}

// A decoding step is one attention kernel, as napkin build emits it, where three kernels are
// predicted within 5 % (derive's row layout predicts the fused kernel 2 % slower at d = 96).
TEST(Plan, ADecodingStepIsOneKernel) {
  auto r = plan::derive_plan(attention_at("b=8 h=13 q=1 k=8192 d=96", "softmax(contract(Q, K over d) * 0.1 over k)"), h100());
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->chosen.kernels.size(), 1u);
  EXPECT_EQ(r->chosen.kernels[0].kind, plan::KernelKind::attention);
}

}  // namespace
}  // namespace napkin
