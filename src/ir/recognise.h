// SPDX-License-Identifier: Apache-2.0
// Recognition: the inverse of normalisation for the composites users write out by hand, so a
// softmax spelled in primitive ops is the same diagram as `softmax(...)` and reaches the same
// fused kernels (the attention emitter and the planner's row kernels match the composite).
//
//   exp(x - max(x over A)) / sum(exp(x - max(x over A)) over A)   -> softmax(x over A)
//   the same with exp((x - max(x over A)) * c), c a literal > 0      -> softmax(x * c over A)
//     (also c * (...), (...) / c, scale(..., c): a temperature written after the max)
//   the same with exp2((x - max(x over A)) * c), c a literal > 0    -> softmax(x * (c ln 2) over A)
//     (FlashAttention's base-2 form; also without c, and c *, / c, scale(..., c))
//   max(x over A) + log(sum(exp(x - max(x over A)) over A))        -> logsumexp(x over A)
//
// A match whose exponentials, their sum or its log another value reads too stays as written
// (recognised, they would be computed twice). Equal subexpressions may be one named value or
// written twice (`E / sum(E over k)` or `exp(S - M) / sum(exp(S - M) over k)`); the add may have
// its operands either way round.
// The one place the written arithmetic differs, the composite's rule holds (docs/language.md):
// a slice that is all -inf gives 0 (softmax) or -inf (logsumexp), not NaN. exp(x) without the
// max is not recognised: it overflows where softmax does not, and streams without a running max
// (a normalised contraction, sched/streaming.h), so it stays the user's choice.
#pragma once

#include <map>
#include <utility>

#include "ir/ir.h"

namespace napkin::ir {

// Whether two nodes compute the same value: one node, or the same op on the same values.
// Distinct inputs are distinct tensors; a param is equal only to itself (it may be rebound).
// Memoised per instance (d outlives it).
class SameValue {
 public:
  explicit SameValue(const Diagram& d);
  bool operator()(NodeId a, NodeId b);

 private:
  const Diagram& d_;
  std::map<std::pair<NodeId, NodeId>, bool> memo_;
};

// Pre: d is verified. Post: verified; each matched node is replaced by its composite (keeping
// its name, location and type: a match whose composite would have another dtype is left as
// written), and the nodes only the matched forms used are dropped (nodes that were already
// unused are kept, so their warnings stand). FlashAttention's deferred normalisation
// `contract(E, V over A) / sum(E over A)`, E a softmax's numerator read by nothing else, is
// normalised first: `contract(softmax(x over A), V over A)`. A diagram with nothing to recognise
// comes back equal, node ids included. Idempotent.
Diagram recognise_composites(const Diagram& d);

// Factors of a contraction's operands that are constant along the contracted axes and computed
// from leaves alone (a literal, a param, a per-head temperature) move out of it:
//   contract(Q * c, K over d)  -> contract(Q, K over d) * c
//   contract(Q / t[h], K over d) -> contract(Q, K over d) / t[h]
// so a scale written on Q is the scores' factor (one attention kernel; a GEMM's epilogue). The
// reference computes in real arithmetic (f64), where the two agree; the operand's own rounding
// to its dtype is a low-precision effect the moved form does not have. Literal 0 and infinite
// factors stay, as does a move that would change the result's type. Pre/post as
// recognise_composites.
Diagram pull_factors_out_of_contractions(const Diagram& d);

// Masks moved to the reduction they feed, so a masked softmax is `softmax(select(p, s, -inf))`
// however it was written, and every consumer (block skipping in derive, the kernels' masks)
// reads one form:
//   softmax(select(p, S, -inf) * c)   -> softmax(select(p, S * c, -inf))   (c a literal > 0)
//   softmax(S + select(p, 0, -inf))    -> softmax(select(p, S, -inf))
//   softmax(select(p, -inf, S))        -> softmax(select(!p, S, -inf))   (masked_fill's form)
//   softmax(S - select(p, 0, inf))     -> softmax(select(p, S, -inf))
// for softmax, logsumexp and max, through + (either operand), - (the first), positive literal
// scales, products and quotients, min, and casts between floats. A predicate is hoisted when it
// reads indices, inputs, params and literals alone (a mask on the scores' own values stays where
// it was written); several come out as nested selects. Where every predicate holds, the value is
// the one written; where one fails it is -inf in both forms as long as the other terms are below
// +inf (S + (-inf) with S = +inf is NaN as written, -inf hoisted: docs/language.md).
// Pre/post as recognise_composites; a reduction whose hoisted form would change its operand's
// type is left as written.
Diagram hoist_masks(const Diagram& d);

}  // namespace napkin::ir
