// SPDX-License-Identifier: Apache-2.0
// Algebraic moves the paper's relabellings allow, as rewrites of a diagram into an equal one
// (equal up to where intermediates are rounded):
//   row scale     rmsnorm(X over e) * g, contracted with W over e, is
//                 diag(1/rms(X)) (X (g o W)): a statistics pass, a scaled weight, and the
//                 normalisation in the GEMM's epilogue (N is never materialised)
//   reassociate   contract(contract(A, B), C) computed as contract(A, contract(B, C)) (or with
//                 (A, C) first) when that takes fewer FLOPs: linear attention computes phi(K)^T V
//                 once per head instead of a q x k score matrix
//   distribute    contract(A - c B + ..., W) as contract(A, W) - c contract(B, W) + ... where a
//                 term is a map a reduction computes (differential attention: two attention
//                 kernels)
//   relayout      an input no GEMM reads as stored (Q[b q h d] batched over b and h) copied by an
//                 elementwise kernel, stored as the GEMM reads it
//   recompute     an elementwise value of one input read by several consumers (one of them a
//                 contraction or reduction) copied into each, so each computes it as it loads
//   (and a sum pushed into an operand, a matrix-vector contraction as a row reduction, a
//   contraction of three operands split into pairs: moves.cpp)
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "ir/ir.h"

namespace napkin::plan {

// An axis taken as two (cut_long_axes): the caller's axis `name` as `outer` x `inner`, `inner`
// holding `inner_size` indices (name = outer * inner_size + inner). The kernels' tensors are
// views of the caller's; a call whose `name` is not a multiple of inner_size is refused.
struct AxisCut {
  std::string name, outer, inner;
  std::int64_t inner_size = 1;
};

struct Variant {
  ir::Diagram diagram;
  std::vector<std::string> moves;  // one line per move applied
  // Axes whose sizes the rewritten diagram holds as numbers (a norm's count of elements): a
  // kernel built from it is right at those sizes only.
  std::vector<std::string> sized_axes = {};
  // Axes of the caller's tensors the rewritten diagram takes as two (cut_long_axes).
  std::vector<AxisCut> cut_axes = {};
};

// Rebuilds `d` node by node; `replace` gives, for the nodes it knows, their new value from the
// builder and the values of earlier nodes (it returns an invalid Value for the others, which are
// replayed with their names).
using Replace = std::function<ir::Value(ir::NodeId, ir::Builder&, const std::vector<ir::Value>&)>;
std::optional<ir::Diagram> rebuild(const ir::Diagram& d, const Replace& replace);

// Each move that applies to `d`, applied alone (one variant per place it applies; recomputes: the
// first few alone and all together). `recompute`: whether to offer recomputes at all (they pay
// only where the plan fuses: not past the planner's bound on fused kernels).
// `relayout`: whether to offer inputs copied for the GEMMs that cannot read them as stored, and
// outputs copied from GEMMs that cannot write them in the order asked.
std::vector<Variant> applicable_moves(const ir::Diagram& d, bool recompute = true, bool relayout = false);

// Whether some input is stored so that a GEMM reading it cannot, or some output is asked in an
// order its GEMM cannot write (the relayout moves apply).
bool relayout_applies(const ir::Diagram& d);

// Axes merged into one (their product), outermost first: `name` stands for `parts`.
struct AxisMerge {
  std::string name;
  std::vector<std::string> parts;
};
struct MergedAxes {
  ir::Diagram diagram;
  std::vector<AxisMerge> merges;
  std::vector<std::string> refused;  // runs of axes reduced together not merged, each with why
};
// The axes a reduction runs over together, as one axis of their product, where every tensor
// that carries one carries all of them, adjacent and in one order, every reduction or
// contraction takes all or none, and no index expression reads them (a row kernel reduces over
// one axis: BatchNorm's statistics over b y x, a norm over a token's heads and head dims). The
// merged diagram's inputs and outputs are its tensors' views, with the same data.
MergedAxes merge_reduced_axes(const ir::Diagram& d);

// A sum, max or logsumexp as nested reductions, one over each run of its axes, innermost first
// (a contraction: over its innermost run, then sums over the others):
// sum(sum(X over y x) over n) (each then one row or column reduction), where
//   - its operand holds the axes apart (BatchNorm's statistics over n y x of X[n c y x]);
//   - a run cannot be one axis of the diagram (an index reads one: soft-argmax): one per axis;
//   - min_rows > 0 and it leaves fewer than min_rows values (a loss summed over every axis, one
//     row on one SM): its innermost run is cut so that the first reduction has min_rows rows
//     (where it has two axes or more to cut between); a contraction, only so, where its result
//     has fewer GEMM tiles than min_rows / 2.
// A softmax whose axes split so is exp(S - logsumexp(S)), the logsumexp split. Exact in real
// arithmetic; a sum is then added in another order.
std::optional<Variant> split_reductions(const ir::Diagram& d, std::int64_t min_rows = 0);

// A reduction over one long axis that leaves fewer than min_rows rows (a sum over x[n]), or a
// contraction over one that leaves fewer GEMM tiles than min_rows / 2 (a weight gradient over
// 131072 tokens into 8 tiles): that axis taken as two, outer x inner (AxisCut), the inner one
// holding a divisor of its size, so that split_reductions then reduces over the inner axis first
// with the outer one's rows beside it (split-K, with the partial sums in memory and added by a
// second kernel in a fixed order). None where no axis is cut (no divisor fits, or an index reads
// the axis).
std::optional<Variant> cut_long_axes(const ir::Diagram& d, std::int64_t min_rows);

}  // namespace napkin::plan
