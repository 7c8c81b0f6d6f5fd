// SPDX-License-Identifier: Apache-2.0
// A softmax or logsumexp written out by hand and the composite it is recognised as
// (ir/recognise.h) agree in value on random inputs; on an all -inf slice the composite's
// rule holds (0 and -inf where the written arithmetic gives NaN).
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "ir/builder.h"
#include "reference/interpreter.h"

namespace napkin::reference {
namespace {

// Builds out = f(S) with S = mask ? X : -inf over [r c]; returns {as written, as recognised}.
template <typename F>
std::pair<ir::Diagram, ir::Diagram> both(F f) {
  ir::Builder b;
  const ir::AxisId r = b.axis("r", 4), c = b.axis("c", 6);
  ir::Value x = b.input("X", {r, c}, DType::f32);
  ir::Value keep = b.input("keep", {r, c}, DType::boolean);
  ir::Value s = b.named("S", b.select(keep, x, b.constant(-std::numeric_limits<double>::infinity())));
  b.output(b.named("Y", f(b, s, c)));
  auto recognised = b.finish();
  EXPECT_TRUE(recognised.ok());
  return {b.diagram(), *recognised};
}

void expect_agree(const std::pair<ir::Diagram, ir::Diagram>& d, ir::OpKind op, double all_masked) {
  ASSERT_EQ(d.second.node(d.second.outputs[0].node).op, op);
  ASSERT_NE(d.first.node(d.first.outputs[0].node).op, op);
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    TensorMap in = random_inputs(d.first, seed);
    Tensor& keep = in.at("keep");
    for (std::size_t i = 0; i < 6; ++i) keep.data[i] = 0;  // row 0 entirely masked
    for (std::size_t i = 6; i < keep.data.size(); ++i) keep.data[i] = i % 6 == 0 ? 1 : keep.data[i];
    auto written = evaluate(d.first, in);
    auto recognised = evaluate(d.second, in);
    ASSERT_TRUE(written.ok() && recognised.ok());
    const Tensor& w = written->at("Y");
    const Tensor& g = recognised->at("Y");
    for (std::size_t i = 0; i < g.data.size(); ++i) {
      const bool masked_row = i < g.data.size() / 4;
      if (masked_row) {
        EXPECT_TRUE(std::isnan(w.data[i])) << "the written arithmetic: 0/0 or -inf - -inf";
        EXPECT_EQ(g.data[i], all_masked) << i;
      } else {
        EXPECT_NEAR(g.data[i], w.data[i], 1e-12 * (1 + std::fabs(w.data[i]))) << i << " seed " << seed;
      }
    }
  }
}

TEST(RecogniseAgreement, Softmax) {
  expect_agree(both([](ir::Builder& b, ir::Value s, ir::AxisId c) {
                 ir::Value e = b.unary(ir::OpKind::exp, s - b.reduce(ir::OpKind::reduce_max, s, {c}));
                 return e / b.reduce(ir::OpKind::reduce_sum, e, {c});
               }),
               ir::OpKind::softmax, 0.0);
}

TEST(RecogniseAgreement, SoftmaxWithATemperatureAfterTheMax) {
  expect_agree(both([](ir::Builder& b, ir::Value s, ir::AxisId c) {
                 ir::Value e = b.unary(ir::OpKind::exp, (s - b.reduce(ir::OpKind::reduce_max, s, {c})) / b.constant(3.0));
                 return e / b.reduce(ir::OpKind::reduce_sum, e, {c});
               }),
               ir::OpKind::softmax, 0.0);
}

TEST(RecogniseAgreement, BaseTwoSoftmax) {
  expect_agree(both([](ir::Builder& b, ir::Value s, ir::AxisId c) {
                 ir::Value e = b.unary(ir::OpKind::exp2, (s - b.reduce(ir::OpKind::reduce_max, s, {c})) * 0.18033688011112042);
                 return e / b.reduce(ir::OpKind::reduce_sum, e, {c});
               }),
               ir::OpKind::softmax, 0.0);
}

TEST(RecogniseAgreement, Logsumexp) {
  expect_agree(both([](ir::Builder& b, ir::Value s, ir::AxisId c) {
                 ir::Value m = b.reduce(ir::OpKind::reduce_max, s, {c});
                 ir::Value z = b.reduce(ir::OpKind::reduce_sum, b.unary(ir::OpKind::exp, s - m), {c});
                 return m + b.unary(ir::OpKind::log, z);
               }),
               ir::OpKind::logsumexp, -std::numeric_limits<double>::infinity());
}


// FlashAttention's deferred normalisation, contract(E, V) / sum(E), is the softmax's contraction.
TEST(RecogniseAgreement, DeferredNormalisation) {
  ir::Builder b;
  const ir::AxisId r = b.axis("r", 4), c = b.axis("c", 6), e = b.axis("e", 3);
  ir::Value x = b.input("X", {r, c}, DType::f32);
  ir::Value keep = b.input("keep", {r, c}, DType::boolean);
  ir::Value v = b.input("V", {c, e}, DType::bf16);
  ir::Value s = b.select(keep, x, b.constant(-std::numeric_limits<double>::infinity()));
  ir::Value num = b.unary(ir::OpKind::exp, s - b.reduce(ir::OpKind::reduce_max, s, {c}));
  b.output(b.named("Y", b.contract({num, v}, {c}) / b.reduce(ir::OpKind::reduce_sum, num, {c})));
  auto recognised = b.finish();
  ASSERT_TRUE(recognised.ok());
  const ir::Node& y = recognised->node(recognised->outputs[0].node);
  ASSERT_EQ(y.op, ir::OpKind::contract);
  ASSERT_EQ(recognised->node(y.operands[0]).op, ir::OpKind::softmax);
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    TensorMap in = random_inputs(b.diagram(), seed);
    Tensor& keep = in.at("keep");
    for (std::size_t i = 0; i < 6; ++i) keep.data[i] = 0;  // row 0 entirely masked, the others not
    for (std::size_t i = 6; i < keep.data.size(); ++i) keep.data[i] = i % 6 == 0 ? 1 : keep.data[i];
    auto written = evaluate(b.diagram(), in);
    auto got = evaluate(*recognised, in);
    ASSERT_TRUE(written.ok() && got.ok());
    const Tensor& w = written->at("Y");
    const Tensor& g = got->at("Y");
    for (std::size_t i = 0; i < g.data.size(); ++i) {
      if (i < 3) {
        EXPECT_TRUE(std::isnan(w.data[i]));
        EXPECT_EQ(g.data[i], 0.0);
      } else {
        EXPECT_NEAR(g.data[i], w.data[i], 1e-12 * (1 + std::fabs(w.data[i]))) << i;
      }
    }
  }
}

// Masks moved to the reduction they feed (ir::hoist_masks) give the values written, bit for bit,
// on random inputs with rows partly and wholly masked.
template <typename F>
void expect_hoisted_agree(F f) {
  ir::Builder b;
  const ir::AxisId r = b.axis("r", 4), c = b.axis("c", 6);
  ir::Value x = b.input("X", {r, c}, DType::f32);
  ir::Value keep = b.input("keep", {r, c}, DType::boolean);
  ir::Value near = b.binary(ir::OpKind::ge, b.index(r), b.index(c) - b.constant(1.0));
  b.output(b.named("Y", f(b, x, keep, near, c)));
  auto hoisted = b.finish();
  ASSERT_TRUE(hoisted.ok());
  ASSERT_FALSE(*hoisted == b.diagram()) << "nothing was hoisted";
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    TensorMap in = random_inputs(b.diagram(), seed);
    for (std::size_t i = 0; i < 6; ++i) in.at("keep").data[i] = 0;  // row 0 entirely masked
    auto written = evaluate(b.diagram(), in);
    auto moved = evaluate(*hoisted, in);
    ASSERT_TRUE(written.ok() && moved.ok());
    const Tensor& w = written->at("Y");
    const Tensor& g = moved->at("Y");
    for (std::size_t i = 0; i < g.data.size(); ++i)
      EXPECT_TRUE(g.data[i] == w.data[i] || (std::isnan(g.data[i]) && std::isnan(w.data[i]))) << i << ": " << g.data[i] << " against " << w.data[i];
  }
}

TEST(HoistAgreement, AMaskUnderAPositiveScale) {
  expect_hoisted_agree([](ir::Builder& b, ir::Value x, ir::Value keep, ir::Value, ir::AxisId c) {
    return b.softmax(b.select(keep, x, b.constant(-std::numeric_limits<double>::infinity())) * 0.125, {c});
  });
}

TEST(HoistAgreement, AdditiveMasks) {
  expect_hoisted_agree([](ir::Builder& b, ir::Value x, ir::Value keep, ir::Value near, ir::AxisId c) {
    const ir::Value minus_inf = b.constant(-std::numeric_limits<double>::infinity());
    return b.softmax(x + b.select(keep, b.constant(0.0), minus_inf) + b.select(near, b.constant(0.0), minus_inf), {c});
  });
}

TEST(HoistAgreement, AMaskedLogsumexp) {
  expect_hoisted_agree([](ir::Builder& b, ir::Value x, ir::Value keep, ir::Value near, ir::AxisId c) {
    const ir::Value minus_inf = b.constant(-std::numeric_limits<double>::infinity());
    return b.composite(ir::OpKind::logsumexp, (b.select(keep, x, minus_inf) - b.constant(1.5)) / b.constant(4.0) +
                                                  b.select(near, b.constant(0.0), minus_inf), {c});
  });
}

TEST(HoistAgreement, ASubtractedInfinity) {
  expect_hoisted_agree([](ir::Builder& b, ir::Value x, ir::Value keep, ir::Value near, ir::AxisId c) {
    const ir::Value inf = b.constant(std::numeric_limits<double>::infinity());
    return b.softmax(x - b.select(keep, b.constant(0.0), inf) - b.select(near, inf, b.constant(0.0)), {c});
  });
}

TEST(HoistAgreement, MaskedFillsForm) {
  expect_hoisted_agree([](ir::Builder& b, ir::Value x, ir::Value keep, ir::Value near, ir::AxisId c) {
    const ir::Value minus_inf = b.constant(-std::numeric_limits<double>::infinity());
    return b.softmax(b.select(keep, minus_inf, x * 0.5) + b.select(near, b.constant(0.0), minus_inf), {c});
  });
}

// Factors moved out of a contraction (ir::pull_factors_out_of_contractions) give the values
// written up to f64's rounding: the reference computes in real arithmetic.
TEST(PullFactorsAgreement, AScaleAndAPerRowTemperature) {
  ir::Builder b;
  const ir::AxisId h = b.axis("h", 3), q = b.axis("q", 5), k = b.axis("k", 4), d = b.axis("d", 6);
  ir::Value Q = b.input("Q", {h, q, d}, DType::bf16);
  ir::Value K = b.input("K", {h, k, d}, DType::bf16);
  ir::Value t = b.input("t", {h}, DType::f32);
  b.output(b.named("S", b.contract({Q * 0.125 / t, K * b.constant(3.0)}, {d})));
  auto moved = b.finish();
  ASSERT_TRUE(moved.ok());
  ASSERT_FALSE(*moved == b.diagram()) << "nothing moved";
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    const TensorMap in = random_inputs(b.diagram(), seed);
    auto written = evaluate(b.diagram(), in);
    auto got = evaluate(*moved, in);
    ASSERT_TRUE(written.ok() && got.ok());
    const Tensor& w = written->at("S");
    const Tensor& g = got->at("S");
    for (std::size_t i = 0; i < g.data.size(); ++i) EXPECT_NEAR(g.data[i], w.data[i], 1e-12 * (1 + std::abs(w.data[i]))) << i;
  }
}

}  // namespace
}  // namespace napkin::reference
