// SPDX-License-Identifier: Apache-2.0
// The paper's performance model reproduced from napkin's own arithmetic (no constants from
// the paper appear below except as the expected values): the transfer bounds, the betas, the
// quantization gains and the H100 thresholds (docs/cost_model.md; the digest's section 6).
#include <algorithm>
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"
#include "cost/closed_form.h"
#include "cost/cost.h"
#include "ir/parser.h"

namespace napkin::cost {
namespace {

ir::Diagram load(const std::string& text) {
  auto p = ir::parse_diagram(SourceText{"t.napkin", text});
  EXPECT_TRUE(p.ok()) << p.error().format();
  return p->diagram;
}

ClosedForm form(const ir::Diagram& d) { return derive_closed_form(d, sched::analyse_streaming(d)); }

const char* kMatmul = "axes a=1024 b=512 c=2048\nin A[a b] f16\nin B[b c] f16\nC = contract(A, B over b)\nout C\n";
const char* kAttention =
    "axes q=4096 x=8192 d=128\nin Q[q d] f16\nin K[x d] f16\nin V[x d] f16\n"
    "O = contract(softmax(contract(Q, K over d) * 0.088 over x), V over x)\nout O\n";
const char* kMultiHead =
    "axes h=16 q=4096 x=8192 d=128\nin Q[h q d] f16\nin K[h x d] f16\nin V[h x d] f16\n"
    "O = contract(softmax(contract(Q, K over d) over x), V over x)\nout O\n";

TEST(ClosedForm, MatmulIsTwoAbcOverRootMPlusAc) {
  const ClosedForm f = form(load(kMatmul));
  const double a = 1024, b = 512, c = 2048;
  // H >= 2abc M^-1/2 + ac (Napkin section 3.1)
  EXPECT_NEAR(f.alpha_for(0.5), 2 * a * b * c, 1e-6 * 2 * a * b * c);
  EXPECT_NEAR(f.alpha_for(0.0), a * c, 1e-9 * a * c);
  EXPECT_EQ(f.terms.size(), 3u);
  for (const Term& t : f.terms) EXPECT_TRUE(t.beta == 0.5 || t.beta == 0.0) << t.tensor << " " << t.beta;
  // Square tiles: g_a = g_c = M^(1/2).
  ASSERT_EQ(f.relations.size(), 2u);
  EXPECT_EQ(f.relations[0].text, "g_a = M^(1/2)");
  EXPECT_EQ(f.relations[1].text, "g_c = M^(1/2)");
  EXPECT_NEAR(f.transfers(1 << 20), 2 * a * b * c / 1024 + a * c, 1e-6 * a * c);
}

TEST(ClosedForm, AttentionIsTwoQdPlusFourXqdSquaredOverM) {
  const ClosedForm f = form(load(kAttention));
  const double q = 4096, x = 8192, d = 128;
  // H >= 2qd + 4xqd^2/M (Napkin section 3.2): beta = 1, with g_q = M/(2d).
  EXPECT_NEAR(f.alpha_for(0.0), 2 * q * d, 1e-9 * q * d);
  EXPECT_NEAR(f.alpha_for(1.0), 4 * x * q * d * d, 1e-6 * 4 * x * q * d * d);
  ASSERT_EQ(f.relations.size(), 1u);
  EXPECT_EQ(f.relations[0].text, "g_q = M/(2*d)");
}

TEST(ClosedForm, MultiHeadAttention) {
  const ClosedForm f = form(load(kMultiHead));
  const double h = 16, q = 4096, x = 8192, d = 128;
  // H >= 2hqd + 4hxqd^2/M (Napkin Figure 22): heads are woven by every tensor, so tiling
  // them buys nothing and only q is worth tiling.
  EXPECT_NEAR(f.alpha_for(0.0), 2 * h * q * d, 1e-9 * h * q * d);
  EXPECT_NEAR(f.alpha_for(1.0), 4 * h * x * q * d * d, 1e-6 * 4 * h * x * q * d * d);
  EXPECT_EQ(f.tiled_axes, std::vector<std::string>{"q"});
}

TEST(ClosedForm, HalvingBytesPerValueCutsAttentionFourTimesAndMatmulTwoPointEightThree) {
  // q^(1 + beta): the M-dependent terms dominate at a small memory.
  // "Large" problems: a long contraction for matmul, long keys for attention.
  const ClosedForm att = form(load("axes q=4096 x=1048576 d=128\nin Q[q d] f16\nin K[x d] f16\nin V[x d] f16\n"
                                   "O = contract(softmax(contract(Q, K over d) over x), V over x)\nout O\n"));
  const ClosedForm mm = form(load("axes a=1024 b=1048576 c=2048\nin A[a b] f16\nin B[b c] f16\n"
                                  "C = contract(A, B over b)\nout C\n"));
  const double memory_bytes = 64 * 1024;
  const double att_gain = transfer_bytes(att, memory_bytes, 2) / transfer_bytes(att, memory_bytes, 1);
  const double mm_gain = transfer_bytes(mm, memory_bytes, 2) / transfer_bytes(mm, memory_bytes, 1);
  EXPECT_NEAR(att_gain, 4.0, 0.01);
  EXPECT_NEAR(mm_gain, 2.83, 0.01);
  // Term by term, exactly q^(1+beta).
  ClosedForm only_dependent = att;
  std::erase_if(only_dependent.terms, [](const Term& t) { return t.beta == 0; });
  EXPECT_NEAR(transfer_bytes(only_dependent, memory_bytes, 2) / transfer_bytes(only_dependent, memory_bytes, 1), 4.0, 1e-9);
}

TEST(ClosedForm, MultiLevelSumWeightsEachLevel) {
  const ClosedForm f = form(load(kAttention));
  const double t = multilevel_time_s(f, {{"l2", 1e6, 1e12}, {"smem", 1e4, 4e12}});
  EXPECT_NEAR(t, f.transfers(1e6) / 1e12 + f.transfers(1e4) / 4e12, 1e-15);
}

TEST(ClosedForm, ClusterLevelHelpsInProportionToOneMinusNToTheMinusBeta) {
  const ClosedForm f = form(load(kAttention));
  // H800: N=2 cluster link 3.27 TB/s against 2.04 TB/s plain (Napkin App. A.2.3).
  const double plain = 2.04e12 / 2, cross = 3.27e12 / 2, mc = 32768;
  const double without = f.transfers(mc) / plain;
  const double with = cluster_time_s(f, mc, 2, plain, cross);
  EXPECT_LT(with, without);
  // Only the beta = 1 term changes: dH = (1/plain - 1/cross) * alpha * Mc^-1 * (1 - 1/2).
  const double expected_gain = (1 / plain - 1 / cross) * f.alpha_for(1.0) / mc * 0.5 +
                               (1 / plain - 1 / cross) * 0;  // beta = 0 terms cancel
  EXPECT_NEAR(without - with, expected_gain, 1e-9 * without);
}

TEST(ClosedForm, H100ComputeBoundThresholds) {
  auto m = arch::find_machine("h100-sxm5", arch::default_machines_dir());
  ASSERT_TRUE(m.ok()) << m.error().format();
  const double flops = *m->peak_flop_per_s(arch::Unit::tensor_core, DType::f16);
  const double values = m->bytes_per_s("l2") / 2;  // HBM link, f16 values, no caching
  const ir::Diagram mm = load(kMatmul);
  const auto th = compute_bound_thresholds(form(mm), mm, flops, values);
  double memory = 0, axis = 0;
  std::string axis_text;
  for (const Threshold& t : th) {
    if (t.kind == "memory") memory = t.value;
    if (t.kind == "axis") { axis = t.value; axis_text = t.text; }
  }
  EXPECT_NEAR(axis, 295, 1.0);                      // the paper's "b >= 295 values"
  EXPECT_EQ(axis_text.rfind("b >= 295.", 0), 0u) << axis_text;
  EXPECT_NEAR(memory * 2 / 1024, 681, 1.0);         // the paper's "about 681 KiB"
  const ir::Diagram att = load(kAttention);
  for (const Threshold& t : compute_bound_thresholds(form(att), att, flops, values))
    if (t.kind == "tile") {
      EXPECT_NEAR(t.value, 295, 1.0);               // g_q >= 295 (Napkin section 5.7)
      EXPECT_EQ(t.text.rfind("g_q >= 295", 0), 0u) << t.text;
    }
}

// A batched matmul with shared weights: b and m are re-read alike (W lacks both), so only the
// product of their tiles matters; it gets one relation, and the fit is exact (issue #19: it
// printed g_b = 1.71779e-33*M^3.947).
TEST(ClosedForm, BatchAndRowTilesOfASharedWeightMatmulMatterOnlyAsAProduct) {
  const ClosedForm f = form(load("axes b=8 m=4096 k=4096 n=4096\nin A[b m k] bf16\nin W[k n] bf16\n"
                                 "C = contract(A, W over k) as bf16\nout C\n"));
  ASSERT_EQ(f.relations.size(), 2u);
  EXPECT_EQ(f.relations[0].text, "g_b*g_m = M^(1/2) (only the product matters)");
  EXPECT_EQ(f.relations[0].axes, (std::vector<std::string>{"b", "m"}));
  EXPECT_EQ(f.relations[1].text, "g_n = M^(1/2)");
  for (const Term& t : f.terms) EXPECT_TRUE(t.beta == 0.5 || t.beta == 0.0) << t.tensor << " " << t.beta;
  const double b = 8, m = 4096, k = 4096, n = 4096;
  EXPECT_NEAR(f.alpha_for(0.5), 2 * b * m * k * n, 1e-12 * b * m * k * n);
  EXPECT_EQ(f.text(), "H*(M) = 1.34218e+08 + 1.09951e+12*M^-0.5");
}

// Terms of one beta are one term, and the betas are exact where lower-order memory terms
// (doc_q holds q but not h) kept a fit at moderate M from reaching them (issue #19: two M^-0.5
// terms, beta = 0.500153).
TEST(ClosedForm, BetasAreExactAndEqualBetasMerge) {
  const ClosedForm f = form(load(
      "axes b=2 h=16 q=8192 k=8192 d=128\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n"
      "in doc_q[b q] i32\nin doc_k[b k] i32\nS = contract(Q, K over d)\n"
      "P = softmax(select(doc_q == doc_k, S, -inf) over k)\nO = contract(P, V over k) as bf16\nout O\n"));
  const double b = 2, h = 16, q = 8192, k = 8192, d = 128;
  for (const Term& t : f.terms) {
    if (t.tensor == "Q" || t.tensor == "O") EXPECT_EQ(t.beta, 0.0);
    if (t.tensor == "K" || t.tensor == "V" || t.tensor == "doc_q") EXPECT_EQ(t.beta, 0.5) << t.tensor;
    if (t.tensor == "doc_k") {
      EXPECT_EQ(t.beta, 1.0);
      // doc_k once per (h, q) tile, with g_h g_q = M/(2d).
      EXPECT_NEAR(t.alpha, b * k * h * q * 2 * d, 1e-12 * t.alpha);
    }
    // K once per q tile, with g_q = (k M)^(1/2) at the optimum.
    if (t.tensor == "K") EXPECT_NEAR(t.alpha, b * h * k * d * q / std::sqrt(k), 1e-12 * t.alpha);
  }
  EXPECT_EQ(f.text(), "H*(M) = 6.71089e+07 + 1.2148e+10*M^-0.5 + 5.49756e+11*M^-1");
  ASSERT_EQ(f.relations.size(), 2u);
  EXPECT_EQ(f.relations[1].exponent, 0.5);
  EXPECT_NEAR(f.relations[1].coefficient, std::sqrt(k), 1e-9 * std::sqrt(k));
}

// For every example: the fitted H*(M) is the optimum's transfers at a memory far above the
// smallest (the form is asymptotic), and the text has one term per distinct beta.
TEST(ClosedForm, FitEqualsTheOptimumForEveryExample) {
  for (const auto& path : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    auto p = ir::load_diagram(path.string());
    ASSERT_TRUE(p.ok()) << p.error().format();
    const ClosedForm f = form(p->diagram);
    double m0 = 0;
    for (const auto& m : f.memory_terms) m0 += m.coefficient;
    const double log_m = std::log(std::max(1.0, m0)) + 30 * std::log(10.0);
    const std::vector<double> x = f.optimal_log_tiles(log_m);
    double direct = 0;
    for (const auto& t : f.transfer_terms) {
      double e = std::log(t.coefficient);
      for (std::size_t g = 0; g < f.groups.size(); ++g) e += t.exponents[f.groups[g].front()] * x[g];
      direct += std::exp(e);
    }
    EXPECT_NEAR(f.transfers(std::exp(log_m)), direct, 1e-9 * direct) << path;
    std::set<double> betas;
    for (const Term& t : f.terms) betas.insert(t.beta);
    const std::string text = f.text();
    std::size_t terms = 1;
    for (std::size_t at = text.find(" + "); at != std::string::npos; at = text.find(" + ", at + 1)) ++terms;
    EXPECT_EQ(terms, betas.size()) << path << ": " << text;
    for (const TileRelation& r : f.relations) {
      EXPECT_TRUE(std::isfinite(r.exponent) && r.coefficient > 0) << path << ": " << r.text;
      // A tile's product never grows faster than M nor shrinks with it (no M^3.9 noise).
      EXPECT_TRUE(r.exponent >= 0 && r.exponent <= 1) << path << ": " << r.text;
    }
  }
}

}  // namespace
}  // namespace napkin::cost
