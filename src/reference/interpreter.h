// SPDX-License-Identifier: Apache-2.0
// The reference interpreter: the specification every schedule and kernel is checked against.
//
// Semantics: every op is computed in f64 exactly as ir.h defines it. Inputs are first rounded
// to their declared dtype and `cast` rounds to its target dtype; nothing else rounds (the
// dtypes of intermediate values are storage choices for the cost model, not arithmetic).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "reference/tensor.h"

namespace napkin::reference {

using TensorMap = std::map<std::string, Tensor>;  // by input or output name

// Seeded inputs: floats ~ N(0, 1) (Box-Muller on splitmix64, identical on every platform),
// i32 uniform in [-8, 8], bool uniform in {0, 1}. Each tensor in its declared axis order.
TensorMap random_inputs(const ir::Diagram& d, std::uint64_t seed);

// The scalar semantics of elementwise ops (ir.h), shared with every executor so that they
// cannot drift apart. Pre: op_class(n.op) is unary / binary.
double apply_unary(const ir::Node& n, double x);
double apply_binary(ir::OpKind op, double a, double b);

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
