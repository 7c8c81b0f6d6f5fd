// SPDX-License-Identifier: Apache-2.0
// A fused subgraph of a diagram, written as a diagram of its own (the kernel diagrams of a plan,
// plan.h), and the kernel families that can run one.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "arch/machine.h"
#include "ir/builder.h"
#include "ir/ir.h"
#include "search/kernel_solver.h"
#include "search/search.h"
#include "support/diagnostic.h"

namespace napkin::plan {

// What kind of kernel a fused subgraph is, which decides its solver and its code generator.
//   gemm           one contraction of two operands (batched over shared axes), with elementwise
//                  epilogue code over the accumulator, row/column vectors, scalars and
//                  same-shaped tensors (bias, activation, scales, gating, residual, cast)
//   dual_gemm      two contractions sharing their first operand (X Wg, X Wu), combined by
//                  elementwise epilogue code (a gated MLP reads X once)
//   gemm_reduction a GEMM whose product is reduced over all of N in its epilogue (sum, max,
//                  logsumexp of elementwise code) and never stored: a fused linear cross-entropy
//   attention      the attention family (contract, score code, softmax or none, contract):
//                  one streamed kernel, the configuration solver's schedule
//   row_reduction  reductions over the innermost axis of rows (norm statistics, row sums),
//                  with elementwise code before and after (a whole layernorm is one)
//   column_reduction  reductions over an axis that is not innermost (a sum over k of K[b h k d],
//                  batch statistics), elementwise code before them and per column after
//   elementwise    elementwise code only
enum class KernelKind : std::uint8_t { gemm, dual_gemm, gemm_reduction, attention, row_reduction, column_reduction, elementwise };
std::string_view kernel_kind_name(KernelKind k);

// How a tensor crosses a kernel boundary through global memory: its name in every kernel, its
// dtype there and its storage order (axis names).
struct Boundary {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::string> order;
  std::string note;  // why the dtype or order differs from the value's own, or empty
  bool gemm_order = false;  // a contraction's value stored as its GEMM writes it, not in its own order
};

// What the plan search computes once for a diagram and reads for every candidate kernel (so that
// a candidate's cost does not grow with the diagram): its index expressions and each node's users
// in ascending order.
struct DiagramIndex {
  std::vector<bool> index_expr;
  std::vector<std::vector<ir::NodeId>> users;
  std::unordered_set<std::string> names;  // every value's and axis's name (one namespace)
  explicit DiagramIndex(const ir::Diagram& d);
};

// A partition of a diagram's nodes into kernels: each live non-leaf node's kernel, -1 for the
// others (leaves, inputs, dead values).
using Owner = std::function<int(ir::NodeId)>;

// The boundaries of a partition of `d`: for every value that one kernel computes and another
// reads (or that is an output), how it is stored. `owner` maps each non-leaf node to its kernel.
// A value read by another kernel's contraction as an operand is stored in that contraction's
// narrow dtype (the tensor cores take bf16/f16, not f32); a value a softmax or norm (a composite)
// reduces over axis r is stored with r innermost (sums and maxes read it as stored: a column
// kernel where r is not innermost). `values`: only those (what one candidate kernel reads and
// writes); null: all of them.
std::map<ir::NodeId, Boundary> boundaries(const ir::Diagram& d, const Owner& owner, const DiagramIndex& index,
                                          const std::vector<ir::NodeId>* values = nullptr);

// The nodes of one kernel of the partition as a diagram: the values it reads from global
// memory are its inputs, the values it writes its outputs (named as the boundaries name them),
// the scalar leaves it uses (constants, params, axis indices) copied in. Axes it does not use are
// left out. `members`: the kernel's nodes, ascending (the work is in them and what they read,
// not in the diagram's size: the plan search builds one per candidate).
Result<ir::Diagram> kernel_diagram(const ir::Diagram& d, const Owner& owner, const std::vector<ir::NodeId>& members,
                                   const std::map<ir::NodeId, Boundary>& bounds, const DiagramIndex& index);

// Node `node` of another diagram rebuilt in `b` over `ops` (its operands there), its axes mapped
// by `axis`; names are the caller's to give.
ir::Value replay_node(ir::Builder& b, const ir::Node& node, const std::vector<ir::Value>& ops,
                      const std::function<ir::AxisId(ir::AxisId)>& axis);

// Leaves a kernel copies rather than reads: constants, params and axis indices.
bool is_leaf(const ir::Node& n);
// Per node: whether it is made of leaves alone (a mask over axis indices, a constant
// expression). Kernels copy these in rather than read them from memory.
std::vector<bool> index_expressions(const ir::Diagram& d);
// Per node: whether an output depends on it (a move leaves the value it replaced behind, read by
// nothing).
std::vector<bool> live_nodes(const ir::Diagram& d);

// A contraction's operand computed from one input by elementwise code as the GEMM loads it (the
// prologue GEMM, napkin/gemm_prologue.h): the input, the code's nodes in order (the operand
// last; none where the operand is the input itself), its arithmetic per element, and its value
// where the input is 0 (the mainloop zero-fills loads past the tensor's edge).
struct Prologue {
  ir::NodeId source = -1;
  std::vector<ir::NodeId> nodes;
  double sfu = 0, fma = 0;
  double at_zero = 0;
  std::string why;  // when the operand is no such code
};
// Refuses (`why`) code not finite at 0.
Prologue operand_prologue(const ir::Diagram& kd, ir::NodeId operand);
// Why the two operands' prologues cannot run together (both nonzero at 0: the zero-filled K tail
// would add f(0) g(0)), or "".
std::string prologue_pair_error(const Prologue& a, const Prologue& b);

// A row sum of a GEMM's A operand, computed in the prologue GEMM's mainloop from the stages it
// loads (napkin/gemm_prologue.h): a node over exactly the M and L axes that sums, over exactly the
// K axes, elementwise code of the operand A' (the contraction's first operand, as the WGMMAs read
// it) and of leaves over K and L alone (a weight w[k]): sum(f(A') over K) or contract(f(A'), w
// over K). Linear attention's normaliser sum(phi(K) over k) beside phi(K)^T V, or phi(Q) . z
// beside phi(Q) S, are row sums; the GEMM's epilogue may read them as row values.
struct RowSum {
  ir::NodeId node = -1;
  std::vector<ir::NodeId> factors;  // multiplied to give the summand: the sum's operand, or the contraction's two
  std::vector<ir::NodeId> leaves;   // the inputs the summand reads, in node order
  std::vector<ir::NodeId> nodes;    // the summand's code and the row sum itself, in node order
  double sfu = 0, fma = 0;          // arithmetic per element of A (the product and the sum included)
};
struct RowSums {
  ir::NodeId contraction = -1;  // the GEMM's
  std::vector<RowSum> sums;     // in node order
  std::string why;              // when the kernel's contractions and reductions are not one GEMM and row sums of its A
};
// The GEMM and row sums of a kernel diagram with at least one contraction, or why it is not one.
RowSums row_sums(const ir::Diagram& kd);

// A GEMM whose product is reduced over all of its N axes in the epilogue and never stored
// (napkin/gemm_reduction.h): each tile folds its columns into partial states per row, and a
// second launch folds a row's tiles and runs the code after the reductions. The kernel diagram:
//   P = contract(A, B over K)            A, B bf16 or f16 inputs, read only by the contraction
//   R_j = fold_j(f_j(P, leaves, indices, params) over N)    fold: sum, max or logsumexp
//   outputs = g(R, leaves, indices, params)                  over exactly M and L
// f_j and g elementwise; leaves are inputs over M, N and L axes alone (a target index t[m], a
// bias over N); no summand reads another reduction (one pass over the tile's registers).
struct GemmReduction {
  ir::NodeId contraction = -1;
  std::vector<ir::NodeId> reductions;  // in node order
  std::vector<ir::NodeId> leaves;      // inputs besides A and B, in node order
  std::set<ir::AxisId> m, n, k, l;     // the axis classes
  double sfu = 0, fma = 0;             // the epilogue's arithmetic per product element
  int states = 0;                      // floats of a row's partial (2 a logsumexp, 1 a sum or max)
  int passes = 1;                      // over the tile's registers: 2 where a logsumexp needs its row max first
  std::string why;                     // when the kernel is no such GEMM
};
GemmReduction gemm_reduction(const ir::Diagram& kd);

// The family of a kernel diagram and its estimate, or why no family runs it.
struct Family {
  bool valid = false;
  std::string why;                    // when not valid
  KernelKind kind{};
  search::KernelEstimate estimate;
  std::optional<search::GemmSchedule> gemm;
  std::vector<search::GemmCandidate> gemm_top;  // distinct ranked GEMM schedules
  std::optional<search::RowSchedule> rows;
  std::optional<search::Ranked> streamed;     // attention: the configuration solver's best
  std::map<std::string, int> rejected;        // the solver's rejections by reason class
  int considered = 0;
};
Family classify(const ir::Diagram& kd, const arch::Machine& m, const search::SearchOptions& so, int top);

// Whether the axes of `order` in a class form one run of adjacent positions: the GEMM kernel
// flattens each class of axes (L, M, N, K) into one mode (emit/gemm_kernel.cpp).
bool one_run(const std::vector<ir::AxisId>& order, const std::function<bool(ir::AxisId)>& in_class);
// The class of axis `a` of the operand of `contraction` whose other operand is `other`: 0 batch
// (L, on both operands and the product), 1 the operand's own (M or N), 2 contracted (K).
int gemm_axis_class(const ir::Diagram& d, const ir::Node& contraction, ir::NodeId other, ir::AxisId a);
// Of a two-operand contraction's value stored in `order`: empty where a GEMM writes that order
// (batch, the first operand's own and the second's, each one run of adjacent dims), else the
// order it writes instead: batch, rows, columns, each in `order`'s order.
std::vector<ir::AxisId> gemm_write_order(const ir::Diagram& d, const ir::Node& contraction,
                                         const std::vector<ir::AxisId>& order);

// Why a GEMM-family kernel cannot move its operands or output as stored at the diagram's sizes
// (TMA: rows of a multiple of 16 bytes; its launch refuses such a call), with the smallest
// padding that would; empty where it can. A warning on a plan, not a refusal: sizes are the
// library's run-time arguments, and the plan is right for the sizes that run.
struct TmaRows {
  std::string problem;  // which tensor's rows, and the rule
  std::string axis;     // the axis whose padding fixes it: from `size` to `padded`
  std::int64_t size = 0, padded = 0;
  bool empty() const { return problem.empty(); }
  std::string text() const;  // the problem and the padding, with how zeros keep the result
};
TmaRows tma_layout_error(const ir::Diagram& kd, const arch::Machine& m, KernelKind kind);

}  // namespace napkin::plan
