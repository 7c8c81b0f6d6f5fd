// SPDX-License-Identifier: Apache-2.0
// A generator of random well-typed diagrams through the builder, for property tests.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "ir/builder.h"

namespace napkin::testing {

// Builds a random diagram with `ops` operations over 2-4 small axes. Every op is chosen so
// that it type-checks; names are given to about a third of the values.
inline Result<ir::Diagram> random_diagram(unsigned seed, int ops) {
  using namespace ir;
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  Builder b("<random>");
  std::vector<AxisId> axes;
  const int n_axes = 2 + pick(3);
  for (int i = 0; i < n_axes; ++i) axes.push_back(b.axis("a" + std::to_string(i), 1 + pick(4)));
  const DType floats[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
  std::vector<Value> values;
  const int n_inputs = 1 + pick(3);
  const DType narrow = floats[pick(3)];  // one narrow format, so contractions type-check
  for (int i = 0; i < n_inputs; ++i) {
    std::vector<AxisId> in_axes;
    for (AxisId a : axes)
      if (pick(3) != 0) in_axes.push_back(a);
    if (in_axes.empty()) in_axes.push_back(axes[0]);
    std::shuffle(in_axes.begin(), in_axes.end(), rng);
    values.push_back(b.input("X" + std::to_string(i), in_axes, pick(2) ? narrow : DType::f32));
  }
  auto any = [&] { return values[static_cast<std::size_t>(pick(static_cast<int>(values.size())))]; };
  auto some_axis_of = [&](Value v) -> std::vector<AxisId> {
    const auto& ax = b.diagram().node(v.id).axes;
    if (ax.empty()) return {};
    return {ax[static_cast<std::size_t>(pick(static_cast<int>(ax.size())))]};
  };
  int named = 0;
  for (int i = 0; i < ops && !b.failed(); ++i) {
    Value x = any();
    Value v;
    switch (pick(12)) {
      case 0: v = b.unary(OpKind::exp, b.unary(OpKind::tanh, x)); break;
      case 1: v = x + any(); break;
      case 2: v = x * any() - b.constant(0.5 * pick(5)); break;
      case 3: v = b.binary(OpKind::max, x, any()); break;
      case 4: v = b.scale(x, 0.25 * (1 + pick(4))); break;
      case 5: v = b.softcap(x, 1.0 + pick(30)); break;
      case 6: {
        auto over = some_axis_of(x);
        v = over.empty() ? -x : b.reduce(pick(2) ? OpKind::reduce_sum : OpKind::reduce_max, x, over);
        break;
      }
      case 7: {
        Value y = any();
        auto over = some_axis_of(x);
        v = over.empty() ? x / (y * y + b.constant(1.0)) : b.contract({x, y}, over);
        break;
      }
      case 8: {
        auto over = some_axis_of(x);
        const OpKind kinds[] = {OpKind::softmax, OpKind::logsumexp, OpKind::rmsnorm, OpKind::layernorm};
        v = over.empty() ? b.unary(OpKind::abs, x) : b.composite(kinds[pick(4)], x, over, 1e-5);
        break;
      }
      case 9: {
        Value c = b.binary(OpKind::ge, b.index(axes[0]), b.index(axes[static_cast<std::size_t>(pick(n_axes))]));
        v = b.select(c, x, b.constant(-INFINITY));
        break;
      }
      case 10: v = b.cast(x, pick(2) ? narrow : (pick(2) ? DType::f32 : DType::f64)); break;
      default: v = b.unary(OpKind::neg, x); break;
    }
    if (!v.valid()) break;
    if (pick(3) == 0) v = b.named("v" + std::to_string(named++), v);
    values.push_back(v);
  }
  Value last = values.back();
  if (b.diagram().node(last.id).name.empty()) last = b.named("result", last);
  b.output(last);
  return b.finish();
}

}  // namespace napkin::testing
