// SPDX-License-Identifier: Apache-2.0
// NaN propagates through the reference interpreter as IEEE 754 makes it (issue #19): max and
// min are IEEE 754-2019 maximum/minimum, and a NaN in a reduced slice makes its max, sum,
// softmax and logsumexp NaN (tests/unit/exec/nan_test.cpp: the executor agrees).
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "ir/parser.h"
#include "reference/interpreter.h"

namespace napkin::reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

ir::Diagram parse(const std::string& text) {
  auto p = ir::parse_diagram(SourceText{"nan.napkin", text});
  EXPECT_TRUE(p.ok()) << p.error().format();
  return p->diagram;
}

Tensor tensor(const ir::Diagram& d, const std::string& input, std::vector<double> data) {
  Tensor t = Tensor::zeros(d, d.node(*d.find_node(input)).axes);
  EXPECT_EQ(t.data.size(), data.size());
  t.data = std::move(data);
  return t;
}

TEST(Nan, MaximumAndMinimumPropagateIt) {
  EXPECT_TRUE(std::isnan(maximum(1.0, kNaN)));
  EXPECT_TRUE(std::isnan(maximum(kNaN, 1.0)));
  EXPECT_TRUE(std::isnan(minimum(kNaN, -kInf)));
  EXPECT_EQ(maximum(-kInf, 2.0), 2.0);
  EXPECT_EQ(minimum(3.0, 2.0), 2.0);
  EXPECT_FALSE(std::signbit(maximum(-0.0, 0.0)));
  EXPECT_TRUE(std::signbit(minimum(0.0, -0.0)));
  EXPECT_TRUE(std::isnan(apply_binary(ir::OpKind::max, 1.0, kNaN)));
  EXPECT_TRUE(std::isnan(apply_binary(ir::OpKind::min, kNaN, 1.0)));
}

TEST(Nan, ReductionsAndSoftmaxOfASliceWithANaNAreNaN) {
  const ir::Diagram d = parse(
      "axes r=2 n=4\nin x[r n] f64\nm = max(x over n)\ns = sum(x over n)\n"
      "p = softmax(x over n)\nl = logsumexp(x over n)\nout m\nout s\nout p\nout l\n");
  // Row 0: [1, NaN, 2, 3] (NaN second, so a max that drops it would say 3); row 1: all NaN.
  auto out = evaluate(d, {{"x", tensor(d, "x", {1, kNaN, 2, 3, kNaN, kNaN, kNaN, kNaN})}});
  ASSERT_TRUE(out.ok()) << out.error().format();
  for (const char* name : {"m", "s", "p", "l"})
    for (double v : out->at(name).data) EXPECT_TRUE(std::isnan(v)) << name;
}

TEST(Nan, FullyMaskedSliceStillGivesZeroAndMinusInf) {
  const ir::Diagram d = parse(
      "axes n=3\nin x[n] f64\np = softmax(x over n)\nl = logsumexp(x over n)\nm = max(x over n)\n"
      "out p\nout l\nout m\n");
  auto out = evaluate(d, {{"x", tensor(d, "x", {-kInf, -kInf, -kInf})}});
  ASSERT_TRUE(out.ok());
  for (double v : out->at("p").data) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(out->at("l").data[0], -kInf);
  EXPECT_EQ(out->at("m").data[0], -kInf);
}

TEST(Nan, OneNaNInQMakesItsRowOfONaNAndLeavesTheOthers) {
  const ir::Diagram d = parse(
      "axes q=3 k=4 d=2\nin Q[q d] f32\nin K[k d] f32\nin V[k d] f32\n"
      "O = contract(softmax(contract(Q, K over d) over k), V over k)\nout O\n");
  TensorMap in = random_inputs(d, 3);
  in.at("Q").data[2] = kNaN;  // row q = 1
  auto out = evaluate(d, in);
  ASSERT_TRUE(out.ok());
  const Tensor& o = out->at("O");  // [q d]
  for (std::int64_t q = 0; q < 3; ++q)
    for (std::int64_t x = 0; x < 2; ++x)
      EXPECT_EQ(std::isnan(o.data[static_cast<std::size_t>(q * 2 + x)]), q == 1) << q << " " << x;
}

TEST(Nan, NonFiniteCountsAfterRoundingToTheDtype) {
  const ir::Diagram d = parse("axes n=5\nin x[n] f16\nout x\n");
  const Tensor t = tensor(d, "x", {1, kNaN, 1e6, -kInf, 0});
  const NonFinite f64 = count_non_finite(t);
  EXPECT_EQ(f64.nan, 1);
  EXPECT_EQ(f64.pos_inf, 0);
  EXPECT_EQ(f64.neg_inf, 1);
  const NonFinite f16 = count_non_finite(t, DType::f16);  // 1e6 overflows f16
  EXPECT_EQ(f16.total(), 3);
  EXPECT_EQ(non_finite_text(f16), "1 NaN, 1 +inf, 1 -inf");
  EXPECT_EQ(non_finite_text(NonFinite{}), "");
}

}  // namespace
}  // namespace napkin::reference
