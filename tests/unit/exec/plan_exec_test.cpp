// SPDX-License-Identifier: Apache-2.0
// Every plan runs on the CPU and matches the reference interpreter: each example and diagram
// derived at random sizes that are not multiples of any tile, its kernels run in order
// (streamed and GEMM kernels through their tiled loop nests), compared with
// reference::evaluate of the whole diagram. Intermediates are stored rounded (bf16 where the
// tensor cores read them), so the bound is bf16's: 2^-8 relative to the output's scale, with
// room for a few roundings.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"
#include "exec/plan_exec.h"
#include "ir/parser.h"
#include "ir/printer.h"

namespace napkin {
namespace {

double scaled_error(const reference::Tensor& got, const reference::Tensor& want) {
  double err = 0, scale = 1e-30;
  for (std::size_t i = 0; i < want.data.size(); ++i) {
    if (std::isnan(want.data[i]) && std::isnan(got.data[i])) continue;
    err = std::max(err, std::abs(got.data[i] - want.data[i]));
    scale = std::max(scale, std::abs(want.data[i]));
  }
  return err / scale;
}

// The chosen plan of `text`, of two kernels or more, run on the CPU against the reference.
void expect_chosen_plan_matches(const std::string& text, const arch::Machine& m) {
  SCOPED_TRACE(text);
  auto p = ir::parse_diagram(SourceText{"t.napkin", text});
  ASSERT_TRUE(p.ok()) << p.error().format();
  const ir::Diagram& d = p->diagram;
  auto r = plan::derive_plan(d, m);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_GE(r->chosen.kernels.size(), 2u);
  const auto inputs = reference::random_inputs(d, 5);
  auto want = reference::evaluate(d, inputs);
  ASSERT_TRUE(want.ok());
  auto got = exec::execute_plan(r->chosen, d, inputs);
  ASSERT_TRUE(got.ok()) << got.error().message;
  for (const auto& [name, t] : *want) {
    ASSERT_TRUE(got->outputs.count(name)) << name;
    EXPECT_LT(scaled_error(got->outputs.at(name), t), 3e-2) << name;
  }
}

TEST(PlanExec, EveryPlanMatchesTheReferenceAtOddSizes) {
  auto m = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  ASSERT_TRUE(m.ok());
  std::mt19937 rng(11);
  int plans = 0;
  std::vector<std::filesystem::path> files = testing::files_in(testing::source_dir() / "examples", ".napkin");
  for (const auto& f : testing::files_in(testing::source_dir() / "tests" / "diagrams", ".napkin")) files.push_back(f);
  for (const auto& f : files) {
    const std::string text = testing::read_text(f);
    SourceText src{f.string(), text};
    auto full = ir::parse_diagram(src);
    ASSERT_TRUE(full.ok());
    for (int trial = 0; trial < 2; ++trial) {
      // Small odd sizes for every axis but the head dims (fixed per kernel, as in the GPU's).
      std::vector<ir::Binding> sets;
      for (const ir::Axis& a : full->diagram.axes) {
        std::int64_t s = std::uniform_int_distribution<std::int64_t>(3, 70)(rng);
        if (a.name == "d" || a.name == "e") s = a.size;  // head dims: as the kernels are built
        if (a.name == "g" || a.name == "h" || a.name == "b") s = std::min<std::int64_t>(a.size, 1 + trial);
        if (a.size <= s) s = a.size;
        sets.push_back({a.name, static_cast<double>(s), a.name});
      }
      auto p = ir::parse_diagram(src, sets);
      ASSERT_TRUE(p.ok()) << p.error().format();
      const ir::Diagram& d = p->diagram;
      SCOPED_TRACE(f.string() + " at " + ir::diagram_key(d));
      auto r = plan::derive_plan(d, *m);
      if (!r.ok()) {
        // Tiny sizes can leave an attention example without a configuration; never a crash.
        ADD_FAILURE() << r.error().message;
        continue;
      }
      const auto inputs = reference::random_inputs(d, 100 + static_cast<std::uint64_t>(trial));
      auto want = reference::evaluate(d, inputs);
      ASSERT_TRUE(want.ok());
      auto got = exec::execute_plan(r->chosen, d, inputs);
      ASSERT_TRUE(got.ok()) << got.error().message;
      ++plans;
      for (const auto& [name, t] : *want) {
        ASSERT_TRUE(got->outputs.count(name)) << name;
        EXPECT_LT(scaled_error(got->outputs.at(name), t), 3e-2) << name;
      }
    }
  }
  EXPECT_GE(plans, 60);
}

// Plans the fusion search shapes in other ways: a statistic defined after P V (its kernel runs
// before P V's: a topological order), siblings of one value merged (a softmax and its
// logsumexp), and a diagram past 128 ops fused in windows (a 10-layer MLP).
TEST(PlanExec, SiblingsOrderAndWindowsMatchTheReference) {
  auto m = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  ASSERT_TRUE(m.ok());
  std::string mlp = "axes t=37 e=64 f=128\nin X[t e] bf16\n";
  std::string x = "X";
  for (int i = 0; i < 10; ++i) {
    mlp += fmt::format("in W{0}[e f] bf16\nin U{0}[f e] bf16\nin g{0}[e] bf16\nN{0} = rmsnorm({1} over e) * g{0} as bf16\n"
                       "H{0} = contract(N{0}, W{0} over e) as bf16\nA{0} = H{0} * (1 / (1 + exp(-H{0}))) as bf16\n"
                       "Y{0} = contract(A{0}, U{0} over f) * 0.25 as bf16\nR{0} = {1} + Y{0} as bf16\n", i, x);
    x = fmt::format("R{}", i);
  }
  mlp += "out " + x + "\n";
  const std::string diagrams[] = {
      "axes q=45 k=53 d=64\nin Q[q d] bf16\nin K[k d] bf16\nin V[k d] bf16\nS = contract(Q, K over d) * 0.125\n"
      "O = contract(softmax(S over k), V over k) as bf16\nZ = sum(exp(S) over k)\nout O\nout Z\n",
      "axes t=29 e=64 v=301\nin X[t e] bf16\nin W[v e] bf16\nL = contract(X, W over e)\nP = softmax(L over v) as bf16\n"
      "Z = logsumexp(L over v)\nout P\nout Z\n",
      mlp};
  for (const std::string& text : diagrams) expect_chosen_plan_matches(text, *m);
}

// Plans that the algebraic moves rewrote: a sum pushed into a contraction's operand, the
// contraction left of single use then reassociated, and a matrix-vector contraction run as a
// row reduction. The chosen plan and every feasible alternative match the reference.
TEST(PlanExec, MovedPlansMatchTheReference) {
  auto m = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  ASSERT_TRUE(m.ok());
  const char* prefix = "axes b=1 h=2 q=37 k=53 d=64 e=64\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k e] bf16\n"
                       "FQ = select(Q > 0, Q + 1, exp(Q))\nFK = select(K > 0, K + 1, exp(K))\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"normalised linear attention", "S = contract(FQ, FK over d)\nN = contract(S, V over k)\nZ = sum(S over k)\n"
                                      "O = N / Z as bf16\nout O\n"},
      {"a matrix-vector contraction", "KS = sum(FK over k)\nZ = contract(FQ, KS over d)\nout Z\n"},
      {"a vector on the left", "KS = sum(FK over k)\nZ = contract(KS, FQ over d) as bf16\nout Z\n"},
      {"a contraction of three operands", "W = contract(FQ, FK, V over d k) as bf16\nout W\n"},
      {"a contraction of four operands", "W = contract(Q, FQ, FK, V over d k) as bf16\nout W\n"},
      {"three maps distributed", "P1 = softmax(contract(Q, K over d) * 0.125 over k)\n"
                                 "P2 = softmax(contract(FQ, FK over d) * 0.01 over k)\n"
                                 "P3 = softmax(contract(Q, FK over d) * 0.1 over k)\n"
                                 "O = contract(P1 - P2 / 2 + P3, V over k) as bf16\nout O\n"},
      {"a map and an input distributed", "in A[b h q k] bf16\nP1 = softmax(contract(Q, K over d) * 0.125 over k)\n"
                                         "O = contract(P1 - 0.3 * A, V over k) as bf16\nout O\n"}};
  for (const auto& [what, body] : cases) {
    SCOPED_TRACE(what);
    auto p = ir::parse_diagram(SourceText{"<test>", prefix + body});
    ASSERT_TRUE(p.ok()) << p.error().format();
    const ir::Diagram& d = p->diagram;
    auto r = plan::derive_plan(d, *m);
    ASSERT_TRUE(r.ok()) << r.error().message;
    const auto inputs = reference::random_inputs(d, 7);
    auto want = reference::evaluate(d, inputs);
    ASSERT_TRUE(want.ok());
    // (At these sizes the moved plans lose to fewer launches: they run as alternatives.)
    std::vector<const plan::Plan*> plans{&r->chosen};
    for (const auto& a : r->alternatives)
      if (a.plan.infeasible.empty()) plans.push_back(&a.plan);
    EXPECT_TRUE(std::any_of(plans.begin(), plans.end(), [](const plan::Plan* p) { return !p->moves.empty(); }));
    for (const plan::Plan* plan : plans) {
      SCOPED_TRACE(plan->name);
      auto got = exec::execute_plan(*plan, d, inputs);
      ASSERT_TRUE(got.ok()) << got.error().message;
      for (const auto& [name, t] : *want) EXPECT_LT(scaled_error(got->outputs.at(name), t), 3e-2) << name;
    }
  }
}

// A GEMM output asked in an order the GEMM cannot write (its rows g m around its batch h): the
// GEMM's result stored in its own order and copied, at odd sizes.
// Reductions split into runs (plan::split_reductions): a loss over every axis cut for
// parallelism (past 2^16 elements), soft-argmax's reductions per axis, and a softmax over axes
// held apart as exp(S - logsumexp) with rows that are all -inf (0, as softmax gives).
TEST(PlanExec, ReductionsSplitIntoRunsMatch) {
  auto machine = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  ASSERT_TRUE(machine.ok());
  const arch::Machine& m = *machine;
  expect_chosen_plan_matches("axes b=3 s=170 d=129\nin X[b s d] bf16\nin Y[b s d] bf16\nE = X - Y\n"
                             "L = sum(E * E over b s d) / 65790\nM = max(X over b s d)\nout L\nout M\n", m);
  expect_chosen_plan_matches("axes b=3 c=5 y=13 x=11\nin H[b c y x] f32\nP = softmax(H over y x)\n"
                             "ex = sum(P * x over y x)\ney = sum(P * y over y x)\nout ex\nout ey\n", m);
  expect_chosen_plan_matches("axes b=3 y=7 c=5 x=9\nin X[b y c x] f32\nin keep[b y c x] bool\n"
                             "M = softmax(select(keep && (c > 1), X, -inf) over b y x)\nout M\n", m);
  // Norms as their statistics: GroupNorm's per-channel gamma (c y x cannot be one axis), a norm
  // over every axis cut for parallelism, a softmax and a logsumexp of inputs that hold the axis
  // outside the innermost place (maxes and sums in column kernels).
  expect_chosen_plan_matches("axes n=3 g=2 c=5 y=7 x=9\nin X[n g c y x] f16\nin w[g c] f32\nin bb[g c] f32\n"
                             "Y = layernorm(X over c y x) * w + bb as f16\nout Y\n", m);
  expect_chosen_plan_matches("axes b=300 d=257\nin X[b d] bf16\nY = layernorm(X over b d) as bf16\nZ = rmsnorm(X over b d)\n"
                             "out Y\nout Z\n", m);
  expect_chosen_plan_matches("axes a=37 b=50\nin X[a b] f32\nin s[a] bool\nP = softmax(select(s, X, -inf) over a)\n"
                             "L = logsumexp(X over a)\nout P\nout L\n", m);
}

// An axis reduced alone, cut in two where the reduction leaves too few rows (plan::AxisCut): a
// sum, a softmax and a logsumexp and a norm over one axis of 262144, and split-K (a contraction
// over a long K into one tile), the caller's tensors viewed with the axis as two.
TEST(PlanExec, AxesCutInTwoMatch) {
  auto machine = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  ASSERT_TRUE(machine.ok());
  const arch::Machine& m = *machine;
  expect_chosen_plan_matches("axes n=262144\nin g[n] f32\nss = sum(g * g over n)\nmx = max(g over n)\nout ss\nout mx\n", m);
  expect_chosen_plan_matches("axes n=262144\nin x[n] bf16\ny = softmax(x over n) as bf16\nl = logsumexp(x over n)\n"
                             "z = rmsnorm(x over n)\nout y\nout l\nout z\n", m);
  expect_chosen_plan_matches("axes m=16 k=147456 n=24\nin A[m k] bf16\nin B[n k] bf16\nC = contract(A, B over k) * 0.5 as bf16\n"
                             "out C[n m]\n", m);
}

// A GEMM's prologue value is rounded to its 16-bit dtype as the kernel rounds it for the tensor
// cores: exp(X * 12) in f16 overflows there (X > 0.93), and so it does in the plan's run, where
// the f64 reference stays finite.
TEST(PlanExec, APrologueOperandIsRoundedAsTheTensorCoresReadIt) {
  auto machine = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  ASSERT_TRUE(machine.ok());
  auto p = ir::parse_diagram(SourceText{"t.napkin", "axes t=9 e=16 f=8\nin X[t e] f16\nin W[e f] f16\nF = exp(X * 12)\n"
                                                    "Y = contract(F, W over e) * 0.0001\nout Y\n"});
  ASSERT_TRUE(p.ok());
  const ir::Diagram& d = p->diagram;
  auto r = plan::derive_plan(d, *machine);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->chosen.kernels.size() == 1 && r->chosen.kernels[0].gemm);
  const auto inputs = reference::random_inputs(d, 1);
  auto want = reference::evaluate(d, inputs);
  auto got = exec::execute_plan(r->chosen, d, inputs);
  ASSERT_TRUE(want.ok() && got.ok());
  const auto finite = [](const reference::Tensor& t) { return std::all_of(t.data.begin(), t.data.end(), [](double v) { return std::isfinite(v); }); };
  EXPECT_TRUE(finite(want->at("Y")));
  EXPECT_FALSE(finite(got->outputs.at("Y")));
}

TEST(PlanExec, AGemmOutputCopiedIntoTheOrderAskedMatches) {
  auto m = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  ASSERT_TRUE(m.ok());
  for (const char* body : {"C = contract(A, B over k)\nout C\n", "C = contract(A, B over k) as bf16\nout C[n g m h]\n"})
    expect_chosen_plan_matches(std::string("axes g=3 h=5 m=37 k=40 n=24\nin A[h g m k] bf16\nin B[h k n] bf16\n") + body, *m);
}

// A contraction over two axes is one GEMM whose K mode flattens both (emit/gemm_kernel.cpp).
TEST(PlanExec, AContractionOverTwoAxesIsOneGemmAndMatches) {
  auto m = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  ASSERT_TRUE(m.ok());
  auto p = ir::parse_diagram(SourceText{"<test>", "axes m=67 k=9 l=13 n=45\nin A[m k l] bf16\nin B[k l n] bf16\n"
                                                   "C = contract(A, B over k l) as bf16\nout C\n"});
  ASSERT_TRUE(p.ok()) << p.error().format();
  auto r = plan::derive_plan(p->diagram, *m);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->chosen.kernels.size(), 1u);
  EXPECT_EQ(r->chosen.kernels[0].kind, plan::KernelKind::gemm);
  const auto inputs = reference::random_inputs(p->diagram, 3);
  auto want = reference::evaluate(p->diagram, inputs);
  ASSERT_TRUE(want.ok());
  auto got = exec::execute_plan(r->chosen, p->diagram, inputs);
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_LT(scaled_error(got->outputs.at("C"), want->at("C")), 3e-2);
}

}  // namespace
}  // namespace napkin
