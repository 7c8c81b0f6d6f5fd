// SPDX-License-Identifier: Apache-2.0
// The reference interpreter: the specification every schedule and kernel is checked against.
//
// Semantics: every op is computed in f64 exactly as ir.h defines it. Inputs are first rounded
// to their declared dtype and `cast` rounds to its target dtype; nothing else rounds (the
// dtypes of intermediate values are storage choices for the cost model, not arithmetic).
// NaN propagates as IEEE 754 arithmetic makes it: `max` and `min` are IEEE 754-2019
// maximum/minimum (a NaN operand gives NaN, never the other operand), so a NaN anywhere in a
// reduced slice makes the max, sum, softmax or logsumexp of that slice NaN.
//
// A second arithmetic, Arithmetic::low_precision, is the baseline of FlashAttention's error rule
// (flash_attention_rule below): the diagram as eager PyTorch would compute it in the diagram's
// dtypes. Every node's value is rounded to the node's dtype (f32 to float, bf16 to bf16, ...;
// i32 and bool values are integers and stay as they are), and contract, sum and the sums inside
// softmax, logsumexp, rmsnorm and layernorm accumulate in float (in double for an f64 node),
// one term at a time in index order; their intermediate values are rounded to float too.
// Elementwise ops compute in f64 from their rounded operands before the node's rounding.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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

enum class Arithmetic : std::uint8_t {
  f64,            // the specification: nothing rounds but inputs and casts
  low_precision,  // every node rounded to its dtype, sums in float (see the top of this file)
};
struct EvalOptions {
  Arithmetic arithmetic = Arithmetic::f64;
};

// Evaluates every output (in its Output axis order). `inputs` must hold a tensor for every
// input, over exactly its declared axes and sizes; errors name the input. The default options
// are the f64 specification.
Result<TensorMap> evaluate(const ir::Diagram& d, const TensorMap& inputs, const EvalOptions& options = {});

// Evaluates every node; result[i] is node i's value over node i's axes. For tests and
// executors that compare intermediate values.
Result<std::vector<Tensor>> evaluate_all(const ir::Diagram& d, const TensorMap& inputs,
                                         const EvalOptions& options = {});

// FlashAttention's error rule (the FlashAttention repository's tests; bench/attention and
// bench/gemm apply it at full size): a result is accurate if its max absolute error against the
// f64 reference is at most twice the max absolute error of a low-precision baseline (the
// Arithmetic::low_precision evaluation) against the same reference, plus a slack of one unit
// in the last place of the diagram's narrowest dtype at the reference's max |x|: a kernel's last
// rounding may land one ulp from where the baseline's rounding of the same value went (f32
// sums in another order), and a baseline that happens to be exact must not demand an exact
// result. Errors are taken over the elements where the reference is finite; a non-finite result
// there is an infinite error, and elsewhere a result that is not the reference's own value (the
// same infinity, or NaN for NaN) is one too.
struct ErrorRuleVerdict {
  bool applied = false;       // false: the diagram has no dtype narrower than f32
  bool passed = true;         // true when not applied
  double max_error = 0;       // max |result - reference|
  double baseline_error = 0;  // max |baseline - reference|
  double slack = 0;           // one ulp of the narrowest dtype at max |reference|
  double bound = 0;           // 2 * baseline_error + slack
  // "max error 0.0123 <= 2 x 0.0081 + 0.0005 (FlashAttention's rule: an f32-accumulating bf16
  // baseline)" (">" when it fails), or why the rule is not applied.
  std::string message;
};
// Pre: reference, baseline and result hold the same number of elements, in the same order
// (the baseline evaluated on the same inputs as the reference). d is the diagram they come from:
// the rule applies when one of its nodes is tf32, bf16, f16 or fp8, whose names the message
// gives. Post: applied == false exactly when no node has such a dtype.
ErrorRuleVerdict flash_attention_rule(const ir::Diagram& d, const Tensor& reference, const Tensor& baseline,
                                      const Tensor& result);

}  // namespace napkin::reference
