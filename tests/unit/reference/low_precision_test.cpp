// SPDX-License-Identifier: Apache-2.0
// The interpreter's low-precision arithmetic (the baseline of FlashAttention's error rule):
// every node rounded to its dtype, sums in float. Each expectation is a hand-written float loop;
// the f64 default is checked to be unchanged. Then the rule itself on constructed tensors, and
// on swiglu_mlp at napkin run's validation sizes (bench/NOTES.md: a baseline summing in f64 was
// exact there, so it judged a correct kernel wrong).
#include <algorithm>
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "ir/parser.h"
#include "reference/interpreter.h"

namespace napkin::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const EvalOptions kLow{Arithmetic::low_precision};

ir::Diagram parse(const std::string& text) {
  auto p = ir::parse_diagram(SourceText{"low_precision.napkin", text});
  EXPECT_TRUE(p.ok()) << p.error().format();
  return p->diagram;
}

// The input's tensor holding `data` (row-major in its declared order), rounded to its dtype as
// the interpreter rounds it, so that hand loops see the same values.
Tensor input(const ir::Diagram& d, const std::string& name, std::vector<double> data) {
  const ir::Node& n = d.node(*d.find_node(name));
  Tensor t = Tensor::zeros(d, n.axes);
  EXPECT_EQ(t.data.size(), data.size());
  t.data = std::move(data);
  for (double& x : t.data) x = round_to_dtype(x, n.dtype);
  return t;
}

TensorMap run(const ir::Diagram& d, const TensorMap& in, const EvalOptions& options = {}) {
  auto out = evaluate(d, in, options);
  EXPECT_TRUE(out.ok()) << out.error().format();
  return out.ok() ? *out : TensorMap{};
}

// Tie-breaking at bf16's last bit: 1 + 2^-8 is halfway between 1 and 1 + 2^-7, the next bf16.
// The f64 sum 1 + 2^-8 + 2^-30 lies above it (rounds up); float drops the 2^-30 (its ulp at 1
// is 2^-23), and the tie rounds to even: 1.
constexpr double kTie = 1.0 + 0x1p-8, kAboveTie = 1.0 + 0x1p-8 + 0x1p-30;

TEST(LowPrecision, ContractionSumsInFloatThenRoundsToTheNodeDtype) {
  const ir::Diagram d = parse(
      "axes m=2 n=2 k=3\nin A[m k] bf16\nin B[k n] bf16\nS = contract(A, B over k)\nC = S as bf16\n"
      "out S\nout C\n");
  const TensorMap in{{"A", input(d, "A", {1, 0x1p-8, 0x1p-30, 0.3, -1.7, 2.9})},
                     {"B", input(d, "B", {1, 0.7, 1, 1.3, 1, -0.45})}};
  const TensorMap low = run(d, in, kLow), f64 = run(d, in);

  // The entry at the tie: the two arithmetics round C differently.
  EXPECT_EQ(low.at("S").data[0], kTie);
  EXPECT_EQ(low.at("C").data[0], 1.0);
  EXPECT_EQ(f64.at("S").data[0], kAboveTie);
  EXPECT_EQ(f64.at("C").data[0], 1.0 + 0x1p-7);

  // Every entry: a float loop in k order, rounded to float (S is f32) and to bf16 (C).
  const std::vector<double>& a = in.at("A").data;
  const std::vector<double>& b = in.at("B").data;
  for (int m = 0; m < 2; ++m)
    for (int n = 0; n < 2; ++n) {
      float acc = 0;
      double exact = 0;
      for (int k = 0; k < 3; ++k) {
        acc += static_cast<float>(a[m * 3 + k]) * static_cast<float>(b[k * 2 + n]);
        exact += a[m * 3 + k] * b[k * 2 + n];
      }
      EXPECT_EQ(low.at("S").data[m * 2 + n], static_cast<double>(acc)) << m << " " << n;
      EXPECT_EQ(low.at("C").data[m * 2 + n], round_to_dtype(acc, DType::bf16)) << m << " " << n;
      EXPECT_EQ(f64.at("S").data[m * 2 + n], exact) << m << " " << n;
    }
}

TEST(LowPrecision, SumsOverAnAxisInFloatAndMaxRoundsToItsDtype) {
  // y = x * 1.001 is bf16 (a literal keeps x's dtype): rounded in the low-precision arithmetic,
  // not in f64; the max of it is bf16 too. sum is f32.
  const ir::Diagram d = parse(
      "axes r=2 n=3\nin x[r n] bf16\ns = sum(x over n)\nsb = s as bf16\ny = x * 1.001\n"
      "m = max(y over n)\nout s\nout sb\nout m\n");
  const TensorMap in{{"x", input(d, "x", {1, 0x1p-8, 0x1p-30, 2.3, -0.61, 5.7})}};
  const TensorMap low = run(d, in, kLow), f64 = run(d, in);
  EXPECT_EQ(low.at("s").data[0], kTie);
  EXPECT_EQ(low.at("sb").data[0], 1.0);
  EXPECT_EQ(f64.at("s").data[0], kAboveTie);
  EXPECT_EQ(f64.at("sb").data[0], 1.0 + 0x1p-7);

  const std::vector<double>& x = in.at("x").data;
  for (int r = 0; r < 2; ++r) {
    float acc = 0;
    double top = -kInf;
    for (int n = 0; n < 3; ++n) {
      acc += static_cast<float>(x[r * 3 + n]);
      top = std::max(top, x[r * 3 + n]);
    }
    EXPECT_EQ(low.at("s").data[r], static_cast<double>(acc));
    EXPECT_EQ(low.at("sb").data[r], round_to_dtype(acc, DType::bf16));
    EXPECT_EQ(low.at("m").data[r], round_to_dtype(top * 1.001, DType::bf16));
    EXPECT_EQ(f64.at("m").data[r], top * 1.001);
  }
  EXPECT_NE(low.at("m").data[1], f64.at("m").data[1]);  // 5.7 * 1.001 is not a bf16
}

TEST(LowPrecision, SoftmaxComputesInFloat) {
  const ir::Diagram d = parse("axes n=4\nin x[n] f32\np = softmax(x over n)\nout p\n");
  const TensorMap in{{"x", input(d, "x", {0.1, -2.3, 1.7, 0.45})}};
  const TensorMap low = run(d, in, kLow);
  const std::vector<double>& x = in.at("x").data;
  const double top = *std::max_element(x.begin(), x.end());
  std::vector<float> e;
  float s = 0;
  for (double v : x) {
    e.push_back(static_cast<float>(std::exp(v - top)));
    s += e.back();
  }
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(low.at("p").data[i], static_cast<double>(static_cast<float>(static_cast<double>(e[i]) / s))) << i;
}

TEST(LowPrecision, EveryElementwiseOpRoundsToItsDtype) {
  // exp of an f32 is f32, and so is q / 3: rounded to float. x * x + x on a bf16 x rounds after
  // the product and after the sum, as eager PyTorch in bf16 does.
  const ir::Diagram d = parse(
      "axes q=4\nin x[q] f32\nin b[q] bf16\ny = exp(x)\nz = q / 3\nh = b * b + b\nout y\nout z\nout h\n");
  const TensorMap in{{"x", input(d, "x", {0.1, -2.3, 1.7, 0.45})}, {"b", input(d, "b", {1.1, -2.3, 0.7, 3.3})}};
  const TensorMap low = run(d, in, kLow), f64 = run(d, in);
  for (std::size_t i = 0; i < 4; ++i) {
    const double x = in.at("x").data[i], b = in.at("b").data[i];
    EXPECT_EQ(low.at("y").data[i], static_cast<double>(static_cast<float>(std::exp(x))));
    EXPECT_EQ(f64.at("y").data[i], std::exp(x));
    EXPECT_EQ(low.at("z").data[i], static_cast<double>(static_cast<float>(static_cast<double>(i) / 3)));
    EXPECT_EQ(low.at("h").data[i], round_to_dtype(round_to_dtype(b * b, DType::bf16) + b, DType::bf16));
    EXPECT_EQ(f64.at("h").data[i], b * b + b);
  }
}

TEST(LowPrecision, F64NodesKeepF64Sums) {
  // An f64 contraction accumulates in f64 (docs/language.md), in both arithmetics.
  const ir::Diagram d = parse("axes k=3\nin a[k] f64\ns = contract(a, a over k)\nout s\n");
  const TensorMap in{{"a", input(d, "a", {1, 0x1p-4, 0x1p-15})}};
  EXPECT_EQ(run(d, in, kLow).at("s").data[0], 1.0 + 0x1p-8 + 0x1p-30);
}

TEST(LowPrecision, DefaultOptionsAreTheF64Specification) {
  const std::vector<ir::Binding> attention{{"b", 1, "b=1"}, {"h", 1, "h=1"}, {"q", 24, "q=24"}, {"k", 40, "k=40"},
                                           {"d", 16, "d=16"}};
  const std::vector<ir::Binding> mlp{{"t", 24, "t=24"}, {"e", 16, "e=16"}, {"f", 40, "f=40"}};
  const std::vector<std::pair<const char*, std::vector<ir::Binding>>> examples{
      {"attention.napkin", attention}, {"swiglu_mlp.napkin", mlp},
      {"layernorm.napkin", {{"t", 24, "t=24"}, {"e", 16, "e=16"}}}, {"matmul_rmsnorm.napkin", mlp}};
  for (const auto& [name, sizes] : examples) {
    auto p = ir::load_diagram((testing::source_dir() / "examples" / name).string(), sizes);
    ASSERT_TRUE(p.ok()) << p.error().format();
    const ir::Diagram& d = p->diagram;
    const TensorMap in = random_inputs(d, 3);
    auto plain = evaluate_all(d, in), f64 = evaluate_all(d, in, EvalOptions{Arithmetic::f64}),
         low = evaluate_all(d, in, kLow);
    ASSERT_TRUE(plain.ok() && f64.ok() && low.ok());
    bool differs = false;
    for (std::size_t i = 0; i < d.nodes.size(); ++i) {
      EXPECT_EQ(plain->at(i).data, f64->at(i).data) << name << " " << d.label(static_cast<ir::NodeId>(i));
      differs = differs || plain->at(i).data != low->at(i).data;
    }
    EXPECT_TRUE(differs) << name;  // the baseline is another arithmetic
  }
}

// FlashAttention's rule on constructed tensors.

struct RuleCase {
  ir::Diagram d = parse("axes n=4\nin x[n] bf16\ny = x * 2\nout y\n");
  Tensor reference = input(d, "x", {1, -2, 4, 0.5});  // max |x| = 4: slack one bf16 ulp there, 2^-5
  Tensor with(std::vector<double> error) const {
    Tensor t = reference;
    for (std::size_t i = 0; i < t.data.size(); ++i) t.data[i] += error[i];
    return t;
  }
};

TEST(FlashAttentionRule, AResultWithinTwiceTheBaselineErrorPasses) {
  const RuleCase c;
  const Tensor baseline = c.with({0.01, -0.02, 0, 0});
  const ErrorRuleVerdict v = flash_attention_rule(c.d, c.reference, baseline, c.with({0, 0, 0.03, -0.01}));
  EXPECT_TRUE(v.applied);
  EXPECT_TRUE(v.passed);
  EXPECT_NEAR(v.max_error, 0.03, 1e-12);
  EXPECT_NEAR(v.baseline_error, 0.02, 1e-12);
  EXPECT_DOUBLE_EQ(v.slack, 0.03125);
  EXPECT_NEAR(v.bound, 0.07125, 1e-12);
  EXPECT_EQ(v.message, "max error 0.03 <= 2 x 0.02 + 0.0312 (FlashAttention's rule: an f32-accumulating bf16 baseline)");
}

TEST(FlashAttentionRule, ThreeTimesTheBaselineErrorFails) {
  const RuleCase c;
  const Tensor baseline = c.with({0.01, -0.02, 0, 0});
  const ErrorRuleVerdict v = flash_attention_rule(c.d, c.reference, baseline, c.with({0, 0.08, 0, 0}));
  EXPECT_TRUE(v.applied);
  EXPECT_FALSE(v.passed);
  EXPECT_NEAR(v.max_error, 0.08, 1e-12);
  EXPECT_EQ(v.message, "max error 0.08 > 2 x 0.02 + 0.0312 (FlashAttention's rule: an f32-accumulating bf16 baseline)");
}

TEST(FlashAttentionRule, AnExactBaselineLeavesTheSlack) {
  const RuleCase c;
  const ErrorRuleVerdict in = flash_attention_rule(c.d, c.reference, c.reference, c.with({0, 0.03, 0, 0}));
  EXPECT_TRUE(in.passed);
  EXPECT_EQ(in.baseline_error, 0.0);
  EXPECT_DOUBLE_EQ(in.bound, 0.03125);
  const ErrorRuleVerdict out = flash_attention_rule(c.d, c.reference, c.reference, c.with({0, 0, -0.04, 0}));
  EXPECT_FALSE(out.passed);
  EXPECT_EQ(out.message, "max error 0.04 > 2 x 0 + 0.0312 (FlashAttention's rule: an f32-accumulating bf16 baseline)");
}

TEST(FlashAttentionRule, NonFiniteValues) {
  const RuleCase c;
  Tensor reference = c.reference;
  reference.data[3] = -kInf;  // a fully masked row's logsumexp
  Tensor result = reference;
  // The reference's own infinity is no error; a NaN where the reference is finite fails, even
  // against a baseline that overflowed there.
  EXPECT_TRUE(flash_attention_rule(c.d, reference, reference, result).passed);
  Tensor overflowed = reference;
  overflowed.data[0] = kInf;
  result.data[1] = kNaN;
  const ErrorRuleVerdict v = flash_attention_rule(c.d, reference, overflowed, result);
  EXPECT_FALSE(v.passed);
  EXPECT_EQ(v.max_error, kInf);
  EXPECT_DOUBLE_EQ(v.slack, 0.03125);  // over the finite reference elements
}

TEST(FlashAttentionRule, NotAppliedWithoutALowPrecisionDtype) {
  const ir::Diagram d = parse("axes n=2\nin x[n] f32\nin w[n] f64\ny = x * w\nout y\n");
  const Tensor r = input(d, "x", {1, 2});
  const ErrorRuleVerdict v = flash_attention_rule(d, r, r, input(d, "x", {5, 7}));
  EXPECT_FALSE(v.applied);
  EXPECT_TRUE(v.passed);
  EXPECT_EQ(v.message,
            "FlashAttention's rule not applied: every dtype of the diagram is f32 or wider, so there is "
            "no low-precision arithmetic to take as the baseline");
}

TEST(FlashAttentionRule, NamesEveryNarrowDtype) {
  const ir::Diagram d = parse("axes n=2\nin x[n] fp8e4m3\ny = x as f16\nout y\n");
  const Tensor r = Tensor::zeros(d, {});
  EXPECT_EQ(flash_attention_rule(d, r, r, r).message,
            "max error 0 <= 2 x 0 + 0 (FlashAttention's rule: an f32-accumulating f16/fp8e4m3 baseline)");
}

// swiglu_mlp at the validation sizes napkin run picks for it (t=328 e=72 f=328, seed 0). A
// kernel is modelled by the same math as a fused GPU kernel does it: sums in float in another
// order (e and f reversed: the inputs permuted along them), silu(G) * U in float, rounded once.
Tensor reversed(const Tensor& t, std::size_t axis) {
  Tensor out = t;
  std::int64_t inner = 1;
  for (std::size_t i = axis + 1; i < t.sizes.size(); ++i) inner *= t.sizes[i];
  const std::int64_t n = t.sizes[axis];
  for (std::size_t i = 0; i < t.data.size(); ++i) {
    const auto at = static_cast<std::int64_t>(i);
    const std::int64_t k = at / inner % n;
    out.data[static_cast<std::size_t>(at + (n - 1 - 2 * k) * inner)] = t.data[i];
  }
  return out;
}

TEST(FlashAttentionRule, SwigluBaselineSummingInFloatIsNotExactAndAFusedKernelPasses) {
  const std::vector<ir::Binding> sizes{{"t", 328, "t=328"}, {"e", 72, "e=72"}, {"f", 328, "f=328"}};
  auto p = ir::load_diagram((testing::source_dir() / "examples" / "swiglu_mlp.napkin").string(), sizes);
  ASSERT_TRUE(p.ok()) << p.error().format();
  const ir::Diagram& d = p->diagram;
  const TensorMap in = random_inputs(d, 0);
  const Tensor reference = run(d, in).at("Y"), baseline = run(d, in, kLow).at("Y");

  const ir::Diagram fused = parse(
      "axes t=328 e=72 f=328\nin X[t e] bf16\nin Wg[e f] bf16\nin Wu[e f] bf16\nin Wd[f e] bf16\n"
      "G = contract(X, Wg over e) as bf16\nU = contract(X, Wu over e) as bf16\nGf = G as f32\n"
      "H = Gf / (1 + exp(-Gf)) * U as bf16\nY = contract(H, Wd over f) as bf16\nout Y\n");
  const TensorMap permuted{{"X", reversed(in.at("X"), 1)},
                           {"Wg", reversed(reversed(in.at("Wg"), 0), 1)},
                           {"Wu", reversed(reversed(in.at("Wu"), 0), 1)},
                           {"Wd", reversed(in.at("Wd"), 0)}};
  const Tensor kernel = run(fused, permuted, kLow).at("Y");

  const ErrorRuleVerdict v = flash_attention_rule(d, reference, baseline, kernel);
  EXPECT_GT(v.baseline_error, 0.0);  // summing in f64 it was 0
  EXPECT_GT(v.max_error, 0.0);
  EXPECT_TRUE(v.passed) << v.message;  // seed 0: both 1 bf16 ulp (32 at |Y| ~ 5200), bound 2 x 32 + 32
}

}  // namespace
}  // namespace napkin::reference
