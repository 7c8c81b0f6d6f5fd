// SPDX-License-Identifier: Apache-2.0
// The diagram IR: every node kind napkin understands, and their semantics.
//
// A Diagram is a DAG of Nodes over named Axes. Each node produces one tensor whose type is a
// set of axes and a dtype. Operations are *woven* (broadcast) over every axis they do not
// name: operands are matched by axis name, and an operand lacking an axis is copied along it.
//
// Semantics of each OpKind (x, y, z are operands; A is the node's `over` axes):
//   input            a declared input; `axes` is its storage order (as declared)
//   constant         a scalar (no axes): `scalar`. Named constants are `param`s
//   iota             the index along axis `axis` (i32), e.g. `q` in `q >= k`
//   exp exp2 log neg tanh abs floor  elementwise on x (floor: the largest integer <= x)
//   logical_not      !x on bool
//   cast             x rounded to `dtype`
//   scale            x * `scalar`
//   softcap          `scalar` * tanh(x / `scalar`)       (Gemma 2)
//   add sub mul div max min          elementwise on x, y (max/min: IEEE 754-2019 maximum/minimum,
//                                    NaN if either is NaN)
//   lt le gt ge eq ne                comparisons -> bool
//   logical_and logical_or           on bool
//   select           x ? y : z   (x bool)
//   reduce_sum reduce_max            reduce x over A (a NaN in the slice gives NaN)
//   contract         sum over A of the product of all operands (einsum by axis name)
//   softmax          exp(x - max_A x) / sum_A exp(x - max_A x); a slice that is all -inf gives 0
//   logsumexp        max_A x + log sum_A exp(x - max_A x); all -inf gives -inf
//   rmsnorm          x / sqrt(mean_A x^2 + `scalar`)                 (`scalar` = eps)
//   layernorm        (x - mean_A x) / sqrt(var_A x + `scalar`)       (biased variance)
//
// The result's axes are the union of the operands' axes minus A, listed in the diagram's
// axis order (the order of the `axes` statement); inputs keep their declared order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/diagnostic.h"
#include "support/dtype.h"

namespace napkin::ir {

using AxisId = int;  // index into Diagram::axes
using NodeId = int;  // index into Diagram::nodes

enum class OpKind : std::uint8_t {
  input, constant, iota,
  exp, exp2, log, neg, tanh, abs, floor, logical_not, cast, scale, softcap,
  add, sub, mul, div, max, min, lt, le, gt, ge, eq, ne, logical_and, logical_or,
  select,
  reduce_sum, reduce_max, contract,
  softmax, logsumexp, rmsnorm, layernorm,
};

enum class OpClass : std::uint8_t { leaf, unary, binary, ternary, reduction, contraction, composite };
OpClass op_class(OpKind k);
std::string_view op_name(OpKind k);  // the spelling in .napkin files ("reduce_sum" is "sum")
// How users write the op: the operator symbol ("+", ">=", "!") or else op_name.
std::string_view op_symbol(OpKind k);
bool is_elementwise(OpKind k);       // unary, binary or ternary (woven over all its axes)

struct Axis {
  std::string name;
  std::int64_t size = 0;
  SourceLoc loc;
  bool operator==(const Axis& o) const { return name == o.name && size == o.size; }
};

struct Node {
  OpKind op = OpKind::constant;
  std::vector<NodeId> operands;
  std::vector<AxisId> axes;  // result axes (storage order for inputs, diagram order otherwise)
  std::vector<AxisId> over;  // axes reduced, contracted or normalised over (diagram order)
  DType dtype = DType::f64;
  double scalar = 0.0;       // constant value, scale factor, softcap cap, or eps
  AxisId axis = -1;          // iota only
  std::string name;          // value name; empty for an unnamed temporary
  SourceLoc loc;             // where it was written; {0,0} when built in C++

  bool operator==(const Node& o) const;  // structural; ignores loc
};

struct Output {
  NodeId node = -1;
  std::vector<AxisId> axes;  // the order the output is written in
  SourceLoc loc;
  bool operator==(const Output& o) const { return node == o.node && axes == o.axes; }
};

// A verified diagram: nodes are in topological order (operands before users), every node's
// type is consistent with its operands, and outputs name existing nodes. Immutable by
// convention once returned from the builder or the parser.
struct Diagram {
  std::vector<Axis> axes;
  std::vector<Node> nodes;
  std::vector<Output> outputs;
  std::string source_name;  // the file it came from, or "<builder>"

  const Axis& axis(AxisId a) const { return axes.at(static_cast<std::size_t>(a)); }
  const Node& node(NodeId n) const { return nodes.at(static_cast<std::size_t>(n)); }
  std::optional<AxisId> find_axis(std::string_view name) const;
  std::optional<NodeId> find_node(std::string_view name) const;
  std::vector<NodeId> inputs() const;
  // Number of elements of a tensor over `axes` (verified not to overflow).
  std::int64_t elements(const std::vector<AxisId>& axes) const;
  // Nodes that use n as an operand, in id order.
  std::vector<NodeId> users(NodeId n) const;
  // A short human label for a node: its name, or "<op> at line:col".
  std::string label(NodeId n) const;
  // Whether node n is `target` or computed from it (node ids are topological).
  bool depends_on(NodeId n, NodeId target) const;
  // Whether n is computed from inputs, indices, params and literals by elementwise ops alone
  // (no reduction, contraction or composite under it): a mask's predicate, not the scores'.
  bool reads_leaves_only(NodeId n) const;

  bool operator==(const Diagram& o) const {
    return axes == o.axes && nodes == o.nodes && outputs == o.outputs;
  }
};

// Whether a and b are one computation up to node order: the same axes, the same inputs in the
// same order, the same number of nodes, and outputs computed by equal nodes (op, type, names,
// scalars) over equivalent operands; an unnamed node equals one named as the printer names a
// temporary (`_t1`). Recognition (ir/recognise.h) may leave nodes in an order the parser of the
// printed text would not; this is the equality such a reparse keeps.
bool equivalent(const Diagram& a, const Diagram& b);

}  // namespace napkin::ir
