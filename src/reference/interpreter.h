// SPDX-License-Identifier: Apache-2.0
// The reference interpreter: the specification every schedule and kernel is checked against.
//
// Semantics: every op is computed in f64 exactly as ir.h defines it. Inputs are first rounded
// to their declared dtype and `cast` rounds to its target dtype; nothing else rounds (the
// dtypes of intermediate values are storage choices for the cost model, not arithmetic).
// NaN propagates as IEEE 754 arithmetic makes it: `max` and `min` are IEEE 754-2019
// maximum/minimum (a NaN operand gives NaN, never the other operand), so a NaN anywhere in a
// reduced slice makes the max, sum, softmax or logsumexp of that slice NaN.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "reference/tensor.h"

namespace napkin::reference {

using TensorMap = std::map<std::string, Tensor>;  // by input or output name

// Seeded inputs: floats ~ N(0, 1) (Box-Muller on splitmix64, identical on every platform);
// i32 and bool in runs of 53 along the last axis (shifted every 61 along the one before): an
// i32 run holds one value uniform in [-8, 8], a bool run is all true, all false or uniform in
// {0, 1}. Each tensor in its declared axis order.
TensorMap random_inputs(const ir::Diagram& d, std::uint64_t seed);

// The scalar semantics of elementwise ops (ir.h), shared with every executor so that they
// cannot drift apart. Pre: op_class(n.op) is unary / binary.
double apply_unary(const ir::Node& n, double x);
double apply_binary(ir::OpKind op, double a, double b);

// IEEE 754-2019 maximum and minimum: NaN if either operand is NaN (std::fmax and std::max
// drop it), and -0 < +0.
double maximum(double a, double b);
double minimum(double a, double b);

// Non-finite elements of a tensor, for the summaries that report them.
struct NonFinite {
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  std::int64_t total() const { return nan + pos_inf + neg_inf; }
};
// Counted after rounding each element to `as` (an input's declared dtype: 1e6 is +inf in f16).
NonFinite count_non_finite(const Tensor& t, DType as = DType::f64);
// "2 NaN, 1 +inf" (the non-zero counts), or "" when every element is finite.
std::string non_finite_text(const NonFinite& n);

// Scalar steps evaluating d takes: the size of each node's loop space (composites count 4
// passes). Used to refuse evaluations that would take minutes.
double work_estimate(const ir::Diagram& d);

// Evaluates every output (in its Output axis order). `inputs` must hold a tensor for every
// input, over exactly its declared axes and sizes; errors name the input.
Result<TensorMap> evaluate(const ir::Diagram& d, const TensorMap& inputs);

// Evaluates every node; result[i] is node i's value over node i's axes. For tests and
// executors that compare intermediate values.
Result<std::vector<Tensor>> evaluate_all(const ir::Diagram& d, const TensorMap& inputs);

}  // namespace napkin::reference
