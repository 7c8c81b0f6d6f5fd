// SPDX-License-Identifier: Apache-2.0
#include "plan/subgraph.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/builder.h"
#include "reference/interpreter.h"
#include "sched/streaming.h"

namespace napkin::plan {

using ir::AxisId;
using ir::Node;
using ir::NodeId;
using ir::OpClass;
using ir::OpKind;

bool is_leaf(const Node& n) { return n.op == OpKind::constant || n.op == OpKind::iota; }

// Whether the op is a transcendental (the SFU's) rather than FMA-pipe arithmetic.
static bool on_sfu(OpKind k) {
  return k == OpKind::exp || k == OpKind::exp2 || k == OpKind::log || k == OpKind::tanh || k == OpKind::softcap;
}

std::vector<bool> index_expressions(const ir::Diagram& d) {
  std::vector<bool> r(d.nodes.size(), false);
  for (NodeId n = 0; n < static_cast<NodeId>(d.nodes.size()); ++n) {
    const Node& node = d.node(n);
    if (is_leaf(node)) {
      r[static_cast<std::size_t>(n)] = true;
      continue;
    }
    if (!ir::is_elementwise(node.op)) continue;
    bool all = true;
    for (NodeId o : node.operands) all = all && r[static_cast<std::size_t>(o)];
    r[static_cast<std::size_t>(n)] = all;
  }
  return r;
}

std::vector<bool> live_nodes(const ir::Diagram& d) {
  std::vector<bool> live(d.nodes.size(), false);
  for (const ir::Output& o : d.outputs) live[static_cast<std::size_t>(o.node)] = true;
  for (NodeId n = static_cast<NodeId>(d.nodes.size()) - 1; n >= 0; --n)  // ids ascend in topological order
    if (live[static_cast<std::size_t>(n)])
      for (NodeId op : d.node(n).operands) live[static_cast<std::size_t>(op)] = true;
  return live;
}

static bool is_narrow_float(DType t) { return t == DType::bf16 || t == DType::f16; }

Prologue operand_prologue(const ir::Diagram& kd, NodeId operand) {
  Prologue p;
  auto refuse = [&](std::string why) {
    p.why = std::move(why);
    return p;
  };
  if (kd.node(operand).op == OpKind::input) {
    p.source = operand;
    return p;
  }
  // The operand's non-leaf ancestors, each elementwise, with one input among them.
  std::set<NodeId> code;
  std::vector<NodeId> stack{operand};
  while (!stack.empty()) {
    const NodeId n = stack.back();
    stack.pop_back();
    const Node& node = kd.node(n);
    if (node.op == OpKind::input) {
      if (p.source >= 0 && p.source != n)
        return refuse(fmt::format("the operand {} reads two inputs ({} and {}): a prologue transforms one",
                                  kd.label(operand), kd.node(p.source).name, node.name));
      p.source = n;
      continue;
    }
    if (node.op == OpKind::constant) {
      if (!node.name.empty())
        return refuse(fmt::format("the operand {} reads param '{}': a prologue's code is compiled in (constants only)",
                                  kd.label(operand), node.name));
      continue;
    }
    if (node.op == OpKind::iota) return refuse(fmt::format("the operand {} depends on an index", kd.label(operand)));
    if (!ir::is_elementwise(node.op))
      return refuse(fmt::format("the operand {} is computed by {}: a prologue is elementwise code", kd.label(operand),
                                kd.label(n)));
    if (!code.insert(n).second) continue;
    for (NodeId o : node.operands) stack.push_back(o);
  }
  if (p.source < 0) return refuse(fmt::format("the operand {} reads no input", kd.label(operand)));
  const Node& src = kd.node(p.source);
  if (!is_narrow_float(src.dtype))
    return refuse(fmt::format("the operand {} is computed from {} {}: the prologue mainloop reads bf16 or f16",
                              kd.label(operand), dtype_name(src.dtype), src.name));
  // The tensor cores take the input's dtype: an operand rounded to another narrow dtype would be
  // rounded twice.
  const DType od = kd.node(operand).dtype;
  if ((is_narrow_float(od) || od == DType::fp8e4m3 || od == DType::fp8e5m2) && od != src.dtype)
    return refuse(fmt::format("the operand {} is {} where its input {} is {}: the prologue mainloop multiplies in the "
                              "input's dtype", kd.label(operand), dtype_name(od), src.name, dtype_name(src.dtype)));
  std::vector<AxisId> want = src.axes;
  std::sort(want.begin(), want.end());
  for (NodeId n : code) {
    std::vector<AxisId> ax = kd.node(n).axes;
    std::sort(ax.begin(), ax.end());
    if (ax != want) return refuse(fmt::format("{} is not over {}'s axes: a prologue maps each element", kd.label(n), src.name));
    if (n == operand) continue;
    for (NodeId u : kd.users(n))
      if (!code.count(u)) return refuse(fmt::format("{} is read besides the operand's code", kd.label(n)));
  }
  for (NodeId u : kd.users(p.source))
    if (!code.count(u)) return refuse(fmt::format("'{}' is read besides the operand's code", src.name));
  p.nodes.assign(code.begin(), code.end());  // ids are topological
  // Its value where the input is 0, and its arithmetic per element.
  std::map<NodeId, double> value{{p.source, 0.0}};
  for (NodeId n : p.nodes) {
    const Node& node = kd.node(n);
    auto operand_value = [&](int i) {
      const Node& o = kd.node(node.operands[static_cast<std::size_t>(i)]);
      return o.op == OpKind::constant ? o.scalar : value.at(node.operands[static_cast<std::size_t>(i)]);
    };
    switch (ir::op_class(node.op)) {
      case OpClass::unary: value[n] = reference::apply_unary(node, operand_value(0)); break;
      case OpClass::binary: value[n] = reference::apply_binary(node.op, operand_value(0), operand_value(1)); break;
      default: value[n] = operand_value(0) != 0 ? operand_value(1) : operand_value(2); break;  // select
    }
    (on_sfu(node.op) ? p.sfu : p.fma) += 1;
  }
  p.at_zero = value.at(operand);
  if (!std::isfinite(p.at_zero))
    return refuse(fmt::format("the operand {} is not finite where its input is 0 ({}): the prologue mainloop zero-fills "
                              "loads past the tensor's edge", kd.label(operand), p.at_zero));
  return p;
}

std::string prologue_pair_error(const Prologue& a, const Prologue& b) {
  if (a.at_zero != 0 && b.at_zero != 0)
    return "both operands are nonzero where their inputs are 0: the zero-filled K tail would add f(0) g(0) (materialise "
           "one of them)";
  return "";
}

namespace {

bool is_reduction(OpKind k) {
  const OpClass c = ir::op_class(k);
  return c == OpClass::reduction || c == OpClass::composite;
}

std::string axis_names(const ir::Diagram& d, const std::vector<AxisId>& axes) {
  std::vector<std::string> names;
  for (AxisId a : axes) names.push_back(d.axis(a).name);
  return fmt::format("{}", fmt::join(names, " "));
}

// A name for an unnamed value crossing a kernel boundary: "t" and its node id, unless taken.
std::string boundary_name(const ir::Diagram& d, const DiagramIndex& index, NodeId n) {
  if (!d.node(n).name.empty()) return d.node(n).name;
  std::string name = fmt::format("t{}", n);
  while (index.names.count(name)) name += "_";
  return name;
}

// Each class of a GEMM operand's axes (batch L, its own M or N, contracted K) must be adjacent in
// its storage order: the kernel flattens a class into one mode (emit/gemm_kernel.cpp). An
// intermediate stored otherwise (an attention output [b h q d] read over h and d) is stored as
// [L, M, K]: L and K in the other operand's order, so the two flatten alike, K innermost (or
// [L, K, M] where its innermost axis is of M).
void gemm_operand_order(const ir::Diagram& d, const Node& contraction, NodeId o, Boundary& b) {
  const NodeId other = contraction.operands[0] == o ? contraction.operands[1] : contraction.operands[0];
  const auto& mine = d.node(o).axes;
  const auto& theirs = d.node(other).axes;
  auto has = [](const std::vector<AxisId>& v, AxisId a) { return std::find(v.begin(), v.end(), a) != v.end(); };
  auto cls = [&](AxisId a) { return gemm_axis_class(d, contraction, other, a); };
  std::vector<AxisId> order;
  for (const std::string& n : b.order) order.push_back(*d.find_axis(n));
  bool adjacent = true;
  for (int c = 0; c < 3; ++c) adjacent = adjacent && one_run(order, [&](AxisId a) { return cls(a) == c; });
  // A copy of an input (relayout_inputs) is laid out from the input's own storage order.
  const Node& self = d.node(o);
  const bool copied_input = self.op == OpKind::cast && d.node(self.operands[0]).op == OpKind::input;
  if (copied_input) order = d.node(self.operands[0]).axes;
  else if (adjacent) return;
  // Its own class innermost where its unit-stride axis is of it (a row-major B: W[e k n] read over
  // k as [k e n]; an M-major A: A[h k b m] as [h b k m]), so that the copy moves whole rows; else
  // K innermost.
  const bool own_inner = !order.empty() && cls(order.back()) == 1;
  std::vector<std::string> fixed;
  for (int c : own_inner ? std::vector<int>{0, 2, 1} : std::vector<int>{0, 1, 2})
    for (AxisId a : c == 1 ? order : theirs)
      if (has(mine, a) && cls(a) == c) fixed.push_back(d.axis(a).name);
  if (fixed == b.order) return;
  b.note = fmt::format("stored as [{}] for the GEMM that reads it (each class of axes one mode)", fmt::join(fixed, " "));
  b.order = std::move(fixed);
}

// How consumer `node` (in another kernel) wants the value `o` it reads stored.
void read_across(const ir::Diagram& d, const Node& node, NodeId o, Boundary& b) {
  if (node.op == OpKind::contract && !is_narrow_float(b.dtype)) {
    // The tensor cores read the other operand's narrow dtype.
    for (NodeId other : node.operands)
      if (other != o && is_narrow_float(d.node(other).dtype)) {
        b.note = fmt::format("rounded from {} to {} for the tensor cores", dtype_name(b.dtype), dtype_name(d.node(other).dtype));
        b.dtype = d.node(other).dtype;
      }
  }
  if (node.op == OpKind::contract && node.operands.size() == 2) gemm_operand_order(d, node, o, b);
  // A softmax or norm over r writes along r: its row kernel reads r innermost. A sum or max
  // reads the value as stored (a column kernel where r is not innermost).
  if (ir::op_class(node.op) == OpClass::composite && node.over.size() == 1) {
    const std::string r = d.axis(node.over[0]).name;
    auto it = std::find(b.order.begin(), b.order.end(), r);
    if (it != b.order.end() && it + 1 != b.order.end()) {
      b.order.erase(it);
      b.order.push_back(r);
      b.note = fmt::format("stored with {} innermost for the row kernel that reduces it", r);
    }
  }
}

// The axis a row kernel writes `n` along: that of the normalisation over one axis (softmax,
// rmsnorm, layernorm) `n` is, or is an elementwise function of alone (a cast); -1 if none.
AxisId written_along(const ir::Diagram& d, NodeId n) {
  for (;;) {
    const Node& node = d.node(n);
    if (ir::op_class(node.op) == OpClass::composite) return node.over.size() == 1 ? node.over[0] : -1;
    if (ir::op_class(node.op) != OpClass::unary || node.operands.size() != 1) return -1;
    n = node.operands[0];
  }
}

// Whether `node` is a GEMM's value: a contraction of two operands, neither a softmax or norm (not
// attention's P V, whose kernel writes O in any order).
bool gemm_value(const ir::Diagram& d, const Node& node) {
  return node.op == OpKind::contract && node.operands.size() == 2 && written_along(d, node.operands[0]) < 0 &&
         written_along(d, node.operands[1]) < 0;
}

Boundary& boundary_entry(const ir::Diagram& d, const DiagramIndex& index, std::map<NodeId, Boundary>& out, NodeId n) {
  auto [it, fresh] = out.try_emplace(n);
  if (fresh) {
    const Node& node = d.node(n);
    it->second.name = boundary_name(d, index, n);
    it->second.dtype = node.dtype;
    // Stored as its row kernel writes it, the normalised axis innermost (coalesced rows); a
    // consumer reorders it where it must (read_across).
    const AxisId along = written_along(d, n);
    for (AxisId a : node.axes)
      if (a != along) it->second.order.push_back(d.axis(a).name);
    if (std::find(node.axes.begin(), node.axes.end(), along) != node.axes.end()) it->second.order.push_back(d.axis(along).name);
    // A contraction's value stored as a GEMM writes it where the value's own order would split a
    // class of its axes (grouped_bmm's [g h m n], h the batch and g m the rows): batch, rows,
    // columns, each in the value's order. (An output keeps the caller's order: a copy writes it.)
    if (gemm_value(d, node) && node.operands[0] != node.operands[1]) {
      if (const std::vector<AxisId> written = gemm_write_order(d, node, node.axes); !written.empty()) {
        it->second.order.clear();
        for (AxisId a : written) it->second.order.push_back(d.axis(a).name);
        it->second.note = "stored as the GEMM writes it (each class of axes one mode)";
        it->second.gemm_order = true;
      } else if (const std::vector<NodeId>& readers = index.users[static_cast<std::size_t>(n)]; readers.size() == 1) {
        // Copied into an output's order (relayout_outputs): its rows and columns in the output's
        // order, the batch first as the GEMM writes it, so that the copy moves whole rows.
        for (const ir::Output& o : d.outputs) {
          if (o.node != readers[0] || !ir::is_elementwise(d.node(o.node).op)) continue;
          const auto batch = [&](AxisId a) {
            const auto& x = d.node(node.operands[0]).axes;
            const auto& y = d.node(node.operands[1]).axes;
            return std::find(x.begin(), x.end(), a) != x.end() && std::find(y.begin(), y.end(), a) != y.end();
          };
          std::vector<AxisId> order;
          for (AxisId a : node.axes)
            if (batch(a)) order.push_back(a);
          for (AxisId a : o.axes)
            if (!batch(a) && std::find(node.axes.begin(), node.axes.end(), a) != node.axes.end()) order.push_back(a);
          if (order.size() != node.axes.size() || !gemm_write_order(d, node, order).empty()) break;
          it->second.order.clear();
          for (AxisId a : order) it->second.order.push_back(d.axis(a).name);
          break;
        }
      }
    }
  }
  return it->second;
}

void output_boundaries(const ir::Diagram& d, const DiagramIndex& index, std::map<NodeId, Boundary>& out,
                       const std::function<bool(NodeId)>& wanted) {
  for (const ir::Output& o : d.outputs) {
    if (d.node(o.node).op == OpKind::input || !wanted(o.node)) continue;
    Boundary& b = boundary_entry(d, index, out, o.node);
    b.order.clear();
    for (AxisId a : o.axes) b.order.push_back(d.axis(a).name);
    b.dtype = d.node(o.node).dtype;
  }
}

}  // namespace

bool one_run(const std::vector<AxisId>& order, const std::function<bool(AxisId)>& in_class) {
  int first = -1, last = -1, count = 0;
  for (int i = 0; i < static_cast<int>(order.size()); ++i)
    if (in_class(order[static_cast<std::size_t>(i)])) first = first < 0 ? i : first, last = i, ++count;
  return count == 0 || last - first + 1 == count;
}

std::vector<AxisId> gemm_write_order(const ir::Diagram& d, const Node& contraction, const std::vector<AxisId>& order) {
  auto has = [&](NodeId x, AxisId a) {
    const auto& v = d.node(x).axes;
    return std::find(v.begin(), v.end(), a) != v.end();
  };
  auto cls = [&](AxisId a) {  // 0 L (both operands'), 1 the first's own, 2 the second's
    return has(contraction.operands[0], a) ? (has(contraction.operands[1], a) ? 0 : 1) : 2;
  };
  bool split = false;
  for (int c = 0; c < 3; ++c) split = split || !one_run(order, [&](AxisId a) { return cls(a) == c; });
  std::vector<AxisId> written;
  if (split)
    for (int c = 0; c < 3; ++c)
      for (AxisId a : order)
        if (cls(a) == c) written.push_back(a);
  return written;
}

int gemm_axis_class(const ir::Diagram& d, const Node& contraction, NodeId other, AxisId a) {
  auto has = [](const std::vector<AxisId>& v, AxisId x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  return has(d.node(other).axes, a) ? (has(contraction.axes, a) ? 0 : 2) : 1;
}

std::map<NodeId, Boundary> boundaries(const ir::Diagram& d, const Owner& owner, const DiagramIndex& index,
                                      const std::vector<NodeId>* values) {
  std::map<NodeId, Boundary> out;
  std::vector<NodeId> all;
  if (values == nullptr)
    for (NodeId o = 0; o < static_cast<NodeId>(d.nodes.size()); ++o) all.push_back(o);
  else {
    all = *values;
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
  }
  for (NodeId o : all) {
    // An input, a leaf or a dead value: copied or not read.
    if (owner(o) < 0) continue;
    for (NodeId n : index.users[static_cast<std::size_t>(o)]) {
      if (owner(n) < 0 || owner(n) == owner(o)) continue;
      for (NodeId x : d.node(n).operands)
        if (x == o) read_across(d, d.node(n), o, boundary_entry(d, index, out, o));
      // A GEMM's f32 result read only by a kernel that rounds it (as it copies it into the
      // caller's order): stored so rounded, half the bytes, the same values.
      const Node& reader = d.node(n);
      Boundary& b = boundary_entry(d, index, out, o);
      // (Not where a contraction reads the rounded value: its own boundary is narrow already, and the
      // cast belongs in the GEMM's epilogue, not in the reader's prologue.)
      const auto& cast_users = index.users[static_cast<std::size_t>(n)];
      const bool read_by_gemm = std::any_of(cast_users.begin(), cast_users.end(),
                                            [&](NodeId u) { return d.node(u).op == OpKind::contract; });
      if (gemm_value(d, d.node(o)) && !read_by_gemm && index.users[static_cast<std::size_t>(o)].size() == 1 && reader.op == OpKind::cast &&
          is_narrow_float(reader.dtype) && b.dtype == DType::f32 && d.node(o).dtype == DType::f32) {
        b.dtype = reader.dtype;
        b.note += fmt::format("{}rounded to {} as its only reader rounds it", b.note.empty() ? "" : "; ", dtype_name(reader.dtype));
      }
    }
  }
  output_boundaries(d, index, out, [&](NodeId n) { return std::binary_search(all.begin(), all.end(), n); });
  return out;
}

DiagramIndex::DiagramIndex(const ir::Diagram& d) : index_expr(index_expressions(d)), users(d.nodes.size()) {
  for (const ir::Axis& a : d.axes) names.insert(a.name);
  for (const Node& n : d.nodes)
    if (!n.name.empty()) names.insert(n.name);
  for (NodeId n = 0; n < static_cast<NodeId>(d.nodes.size()); ++n)
    for (NodeId o : d.node(n).operands) {
      auto& u = users[static_cast<std::size_t>(o)];
      if (u.empty() || u.back() != n) u.push_back(n);
    }
}

Result<ir::Diagram> kernel_diagram(const ir::Diagram& d, const Owner& owner, const std::vector<NodeId>& members,
                                   const std::map<NodeId, Boundary>& bounds, const DiagramIndex& index) {
  auto member = [&](NodeId n) { return std::binary_search(members.begin(), members.end(), n); };
  std::set<NodeId> used_leaf, read;
  std::set<AxisId> axes_used;
  const std::vector<bool>& index_expr = index.index_expr;
  // Index expressions (masks over axis indices and constants) are copied into every kernel
  // that uses them, with what they are made of.
  std::function<void(NodeId)> copy_leaf = [&](NodeId o) {
    if (!used_leaf.insert(o).second) return;
    for (AxisId a : d.node(o).axes) axes_used.insert(a);
    if (d.node(o).op == OpKind::iota) axes_used.insert(d.node(o).axis);
    for (NodeId x : d.node(o).operands) copy_leaf(x);
  };
  for (NodeId n : members) {
    const Node& node = d.node(n);
    for (AxisId a : node.axes) axes_used.insert(a);
    for (AxisId a : node.over) axes_used.insert(a);
    for (NodeId o : node.operands) {
      if (member(o)) continue;
      if (index_expr[static_cast<std::size_t>(o)]) {
        copy_leaf(o);
        continue;
      }
      read.insert(o);
      for (AxisId a : d.node(o).axes) axes_used.insert(a);
    }
  }
  ir::Builder b(d.source_name);
  std::map<AxisId, AxisId> axis_map;
  for (AxisId a : axes_used) axis_map[a] = b.axis(d.axis(a).name, d.axis(a).size);
  auto map_axes = [&](const std::vector<AxisId>& v) {
    std::vector<AxisId> r;
    for (AxisId a : v) r.push_back(axis_map.at(a));
    return r;
  };
  auto axis_named = [&](const std::string& name) { return axis_map.at(*d.find_axis(name)); };
  // In node order (operands first): what the kernel reads, the leaves it copies, its members.
  std::set<NodeId> involved(members.begin(), members.end());
  involved.insert(read.begin(), read.end());
  involved.insert(used_leaf.begin(), used_leaf.end());
  std::map<NodeId, ir::Value> value;
  auto operand_values = [&](const Node& node) {
    std::vector<ir::Value> ops;
    for (NodeId o : node.operands) ops.push_back(value.at(o));
    return ops;
  };
  for (NodeId n : involved) {
    const Node& node = d.node(n);
    if (read.count(n)) {
      if (node.op == OpKind::input) {
        value[n] = b.input(node.name, map_axes(node.axes), node.dtype, node.loc);
      } else {
        const Boundary& bd = bounds.at(n);
        std::vector<AxisId> order;
        for (const std::string& a : bd.order) order.push_back(axis_named(a));
        value[n] = b.input(bd.name, order, bd.dtype);
      }
      continue;
    }
    if (!member(n)) {  // a leaf copied in
      value[n] = replay_node(b, node, operand_values(node), [&](AxisId a) { return axis_map.at(a); });
      continue;
    }
    const std::vector<ir::Value> ops = operand_values(node);
    auto bd = bounds.find(n);
    // A cast of a value already stored in its dtype (a boundary rounded for the tensor cores) is
    // no code: the kernel reads the value as it is (a GEMM operand, not a prologue).
    if (node.op == OpKind::cast && bd == bounds.end() && b.diagram().node(ops[0].id).dtype == node.dtype) {
      value[n] = ops[0];
      continue;
    }
    ir::Value r = replay_node(b, node, ops, [&](AxisId a) { return axis_map.at(a); });
    if (bd != bounds.end() && bd->second.dtype != node.dtype) r = b.named(bd->second.name + "_unrounded", r, node.loc);
    else if (bd != bounds.end()) r = b.named(bd->second.name, r, node.loc);
    else if (!node.name.empty() && node.op != OpKind::constant && node.op != OpKind::input) r = b.named(node.name, r, node.loc);
    value[n] = r;
  }
  // Outputs: the members read by other kernels, and the diagram's outputs this kernel computes.
  std::set<NodeId> outs;
  for (NodeId n : members)
    for (NodeId u : index.users[static_cast<std::size_t>(n)])
      if (!member(u) && owner(u) >= 0) outs.insert(n);
  for (const ir::Output& o : d.outputs)
    if (member(o.node)) outs.insert(o.node);
  for (NodeId n : outs) {
    const Boundary& bd = bounds.at(n);
    std::vector<AxisId> order;
    for (const std::string& a : bd.order) order.push_back(axis_named(a));
    ir::Value v = value.at(n);
    if (bd.dtype != d.node(n).dtype) v = b.named(bd.name, b.cast(v, bd.dtype, d.node(n).loc), d.node(n).loc);
    b.output(v, order);
  }
  return b.finish();
}

ir::Value replay_node(ir::Builder& b, const Node& node, const std::vector<ir::Value>& ops,
                      const std::function<AxisId(AxisId)>& axis) {
  auto axes = [&](const std::vector<AxisId>& v) {
    std::vector<AxisId> r;
    for (AxisId a : v) r.push_back(axis(a));
    return r;
  };
  switch (ir::op_class(node.op)) {
    case OpClass::leaf:
      if (node.op == OpKind::iota) return b.index(axis(node.axis), node.loc);
      if (node.op == OpKind::constant)
        return node.name.empty() ? b.constant(node.scalar, node.loc) : b.param(node.name, node.scalar, node.loc);
      return b.input(node.name, axes(node.axes), node.dtype, node.loc);
    case OpClass::unary:
      if (node.op == OpKind::cast) return b.cast(ops[0], node.dtype, node.loc);
      if (node.op == OpKind::scale) return b.scale(ops[0], node.scalar, node.loc);
      if (node.op == OpKind::softcap) return b.softcap(ops[0], node.scalar, node.loc);
      return b.unary(node.op, ops[0], node.loc);
    case OpClass::binary: return b.binary(node.op, ops[0], ops[1], node.loc);
    case OpClass::ternary: return b.select(ops[0], ops[1], ops[2], node.loc);
    case OpClass::reduction: return b.reduce(node.op, ops[0], axes(node.over), node.loc);
    case OpClass::contraction: return b.contract(ops, axes(node.over), node.loc);
    case OpClass::composite: return b.composite(node.op, ops[0], axes(node.over), node.scalar, node.loc);
  }
  return {};
}

namespace {

struct Census {
  std::vector<NodeId> contracts, reductions, inputs;
  bool iota = false;
};
Census census(const ir::Diagram& kd) {
  Census c;
  for (NodeId n = 0; n < static_cast<NodeId>(kd.nodes.size()); ++n) {
    const Node& node = kd.node(n);
    if (node.op == OpKind::contract) c.contracts.push_back(n);
    else if (is_reduction(node.op)) c.reductions.push_back(n);
    else if (node.op == OpKind::input) c.inputs.push_back(n);
    else if (node.op == OpKind::iota) c.iota = true;
  }
  return c;
}

std::set<AxisId> axis_set(const std::vector<AxisId>& v) { return {v.begin(), v.end()}; }

double product(const ir::Diagram& d, const std::set<AxisId>& axes) {
  double p = 1;
  for (AxisId a : axes) p *= static_cast<double>(d.axis(a).size);
  return p;
}

// Bytes of every input and output of a kernel diagram, each once.
double io_bytes(const ir::Diagram& kd) {
  double bytes = 0;
  for (NodeId n : kd.inputs()) bytes += static_cast<double>(kd.elements(kd.node(n).axes)) * dtype_bytes(kd.node(n).dtype);
  for (const ir::Output& o : kd.outputs)
    bytes += static_cast<double>(kd.elements(kd.node(o.node).axes)) * dtype_bytes(kd.node(o.node).dtype);
  return bytes;
}

// Transcendental and other arithmetic over the elements each elementwise node produces.
std::pair<double, double> alu_ops(const ir::Diagram& kd) {
  double sfu = 0, fma = 0;
  for (const Node& n : kd.nodes) {
    const double e = static_cast<double>(kd.elements(n.axes));
    if (on_sfu(n.op)) {
      sfu += e;
      continue;
    }
    // A reduction's work is over its operand's elements (a logsumexp's exp too).
    const double over = n.operands.empty() ? e : static_cast<double>(kd.elements(kd.node(n.operands[0]).axes));
    switch (n.op) {
      case OpKind::softmax: sfu += e; fma += 3 * e; break;
      case OpKind::logsumexp: sfu += over; fma += 3 * over; break;
      case OpKind::rmsnorm: case OpKind::layernorm: fma += 3 * e; break;
      default:
        if (ir::op_class(n.op) == OpClass::reduction) fma += over;
        else if (ir::is_elementwise(n.op)) fma += e;
    }
  }
  return {sfu, fma};
}

Family invalid(std::string why) {
  Family f;
  f.why = std::move(why);
  return f;
}

// A contraction as a Hopper GEMM's mainloop runs it: two bf16 or f16 input operands whose axes
// fall into the classes M, N, K and L, each class one run of adjacent dims in every tensor.
struct GemmClasses {
  std::set<AxisId> m, n, k, l;
  Prologue a, b;    // the operands' inputs and the code that computes each as it loads
  std::string why;  // when the contraction is no GEMM
};
// Why TMA cannot move the rows of a tensor stored in `order` (a GEMM operand or output), or
// nothing: its innermost mode (the class of its last axis, adjacent dims flattened) must hold a
// multiple of 16 bytes, as every stride but the unit one must; with the smallest padding.
TmaRows tma_rows_error(const ir::Diagram& kd, const std::string& name, const std::vector<AxisId>& order, DType dtype,
                       const std::vector<const std::set<AxisId>*>& classes) {
  if (order.empty()) return {};
  const std::set<AxisId>* inner = nullptr;
  for (const std::set<AxisId>* cls : classes)
    if (cls->count(order.back())) inner = cls;
  if (inner == nullptr) return {};
  const std::int64_t bytes = static_cast<std::int64_t>(dtype_bytes(dtype));
  const std::int64_t per16 = bytes > 0 && 16 % bytes == 0 ? 16 / bytes : 1;
  const std::int64_t extent = static_cast<std::int64_t>(product(kd, *inner));
  if (extent % per16 == 0) return {};
  const ir::Axis& last = kd.axis(order.back());
  const std::int64_t rest = extent / last.size;  // the mode's other axes
  std::int64_t padded = last.size + 1;
  while (padded * rest % per16 != 0) ++padded;
  std::vector<std::string> axes;
  for (AxisId x : order)
    if (inner->count(x)) axes.push_back(kd.axis(x).name);
  return {fmt::format("{}'s innermost GEMM mode [{}] holds {} elements ({} bytes) a row: TMA moves rows of a multiple of 16 "
                      "bytes (every stride but the unit one too)",
                      name, fmt::join(axes, " "), extent, extent * bytes),
          last.name, last.size, padded};
}

// `order`'s axis names with the batch axes `l` first, the others as they stand: the order that
// gives a GEMM tensor a unit-stride M, N or K innermost.
std::string batch_first(const ir::Diagram& kd, const std::vector<AxisId>& order, const std::set<AxisId>& l) {
  std::vector<std::string> names;
  for (bool batch : {true, false})
    for (AxisId x : order)
      if (l.count(x) == (batch ? 1u : 0u)) names.push_back(kd.axis(x).name);
  return fmt::format("{}", fmt::join(names, " "));
}

// Why a GEMM does not sum axis x that only `own` has, with the form that computes it.
std::string summed_within(const ir::Diagram& kd, AxisId x, const Node& own, const Node& other) {
  return fmt::format("axis {0} is summed within {1} alone: contract {2} with sum({1} over {0}) instead (a row kernel, then "
                     "the GEMM)",
                     kd.axis(x).name, own.name, other.name);
}

// `prologues`: operands may be elementwise code of one input each (the prologue GEMM); else
// they are inputs, as TMA reads them.
GemmClasses gemm_classes(const ir::Diagram& kd, NodeId ct, const arch::Machine& m, bool prologues = false) {
  GemmClasses g;
  auto invalid = [&](std::string why) {
    g.why = std::move(why);
    return g;
  };
  const Node& cn = kd.node(ct);
  if (cn.operands.size() != 2) return invalid("a contraction of other than two operands has no GEMM kernel");
  for (NodeId o : cn.operands)
    if (kd.node(o).op != OpKind::input && !prologues)
      return invalid(fmt::format("the GEMM's operand {} is computed in the kernel: the TMA mainloop reads operands "
                                 "as they are in memory (no prologue)", kd.label(o)));
  g.a = operand_prologue(kd, cn.operands[0]);
  g.b = operand_prologue(kd, cn.operands[1]);
  for (const Prologue* p : {&g.a, &g.b})
    if (!p->why.empty()) return invalid(p->why);
  if (std::string why = prologue_pair_error(g.a, g.b); !why.empty()) return invalid(why);
  if (g.a.source == g.b.source) return invalid("both operands are computed from one input");
  const Node& a = kd.node(g.a.source);
  const Node& bnode = kd.node(g.b.source);
  if (!is_narrow_float(a.dtype) || a.dtype != bnode.dtype) {
    // The smallest change that derives: operands the tensor cores take on this machine.
    // (In the kernel's diagram an intermediate read from memory is an input too: the hint names
    // both ways, declaring an input and rounding a computed value where the GEMM reads it.)
    std::vector<std::string> wide;
    for (const Node* x : {&a, &bnode})
      if (!is_narrow_float(x->dtype)) wide.push_back(x->name);
    if (wide.empty()) wide = {a.name, bnode.name};  // bf16 beside f16
    const std::string& first = wide.front();
    std::string hint = fmt::format("; make {} bf16 or f16: declare an input so (in {}[...] bf16), or round a computed value "
                                   "where the contraction reads it (contract({} as bf16, ...))",
                                   fmt::join(wide, " and "), first, first);
    if ((a.dtype == DType::fp8e4m3 || a.dtype == DType::fp8e5m2) &&
        !m.ops_per_clk_per_sm(arch::Unit::tensor_core, a.dtype))
      hint = fmt::format(" ({} has no {} tensor cores){}", m.name, dtype_name(a.dtype), hint);
    else if (a.dtype == DType::fp8e4m3 || a.dtype == DType::fp8e5m2)
      hint = " (fp8 GEMMs are not generated yet)" + hint;
    // A wider operand rounded to bf16 is another computation: say so beside the cast.
    for (const Node* x : {&a, &bnode})
      if (!is_narrow_float(x->dtype) && is_float(x->dtype)) {
        hint += fmt::format(", which rounds {}'s {} values to bf16's 8-bit significand (f32, tf32 and f64 GEMMs are not "
                            "generated yet)",
                            x->name, dtype_name(x->dtype));
        break;
      }
    return invalid(fmt::format("the GEMM's operands are {} and {}: the kernel takes two bf16 or two f16 operands{}",
                               dtype_name(a.dtype), dtype_name(bnode.dtype), hint));
  }
  const std::set<AxisId> sa = axis_set(a.axes), sb = axis_set(bnode.axes), so = axis_set(cn.axes);
  std::set<AxisId>&mset = g.m, &nset = g.n, &kset = g.k, &lset = g.l;
  for (AxisId x : sa) {
    if (sb.count(x) && so.count(x)) lset.insert(x);
    else if (sb.count(x)) kset.insert(x);
    else if (so.count(x)) mset.insert(x);
    else return invalid(summed_within(kd, x, a, bnode));
  }
  for (AxisId x : sb)
    if (!sa.count(x)) {
      if (so.count(x)) nset.insert(x);
      else return invalid(summed_within(kd, x, bnode, a));
    }
  if (kset.empty())
    return invalid(fmt::format("the contraction sums over no axis: an outer product, not a GEMM (write it {} * {}, an "
                               "elementwise kernel)",
                               a.name, bnode.name));
  // Each class one run of adjacent dims in every tensor, as the kernel flattens it into a mode:
  // the axes of the last class that is not, or "".
  auto runs = [&](const std::vector<AxisId>& order, const std::vector<const std::set<AxisId>*>& classes) {
    std::string broken;
    for (const std::set<AxisId>* cls : classes) {
      if (one_run(order, [&](AxisId x) { return cls->count(x) > 0; })) continue;
      std::vector<std::string> names;
      for (AxisId x : order)
        if (cls->count(x)) names.push_back(kd.axis(x).name);
      broken = fmt::format("{}", fmt::join(names, " "));
    }
    return broken;
  };
  const std::vector<std::pair<const Node*, std::vector<const std::set<AxisId>*>>> operands = {
      {&a, {&lset, &mset, &kset}}, {&bnode, {&lset, &nset, &kset}}};
  for (const auto& [t, classes] : operands)
    if (std::string broken = runs(t->axes, classes); !broken.empty()) {
      std::vector<std::string> fixed;  // batch axes, its own, the contracted ones
      for (const std::set<AxisId>* cls : classes)
        for (AxisId x : t->axes)
          if (cls->count(x)) fixed.push_back(kd.axis(x).name);
      return invalid(fmt::format("{}'s axes [{}] are one GEMM mode but not adjacent in its storage order (the kernel "
                                 "flattens each class of axes into one mode): declare it as {}[{}]",
                                 t->name, broken, t->name, fmt::join(fixed, " ")));
    }
  // TMA reads an operand along a unit-stride mode: A's innermost axis is of M or K, B's of N or K
  // (emit/gemm_kernel.cpp refuses a batch axis there).
  for (const auto& [t, own] : {std::pair{&a, &mset}, std::pair{&bnode, &nset}}) {
    const AxisId last = t->axes.back();
    if (own->count(last) || kset.count(last)) continue;
    return invalid(fmt::format("{} [{}]: its innermost axis {} is a batch axis (L); TMA reads a GEMM operand along a "
                               "unit-stride {} or K axis: declare it as {}[{}]",
                               t->name, axis_names(kd, t->axes), kd.axis(last).name, t == &a ? "M" : "N", t->name,
                               batch_first(kd, t->axes, lset)));
  }
  // The kernel flattens each class of axes into one mode (emit/gemm_kernel.cpp), up to four.
  for (const auto* cls : {&mset, &nset, &kset, &lset})
    if (cls->size() > 4)
      return invalid(fmt::format("{} axes of one class (M, N, K or L): the GEMM kernel flattens at most 4 into a mode",
                                 cls->size()));
  if (mset.empty() || nset.empty()) return invalid("a GEMM needs an axis of each operand alone (M and N)");
  return g;
}

// tma_rows_error of the GEMM's TMA-read operands: A's source, and B's with `b_too`.
TmaRows operand_rows_error(const ir::Diagram& kd, const GemmClasses& g, bool b_too) {
  const Node& a = kd.node(g.a.source);
  if (TmaRows why = tma_rows_error(kd, a.name, a.axes, a.dtype, {&g.l, &g.m, &g.k}); !why.empty()) return why;
  if (!b_too) return {};
  const Node& b = kd.node(g.b.source);
  return tma_rows_error(kd, b.name, b.axes, b.dtype, {&g.l, &g.n, &g.k});
}

// " class count" per reason class of a solver's rejections, for "no schedule fits" messages.
std::string rejection_counts(const std::map<std::string, int>& rejected) {
  std::string reasons;
  for (const auto& [cls, n] : rejected) reasons += fmt::format(" {} {}", cls, n);
  return reasons;
}

// The family of a GEMM problem: its solver's best schedules, or why none fits.
Family solved_gemm(const search::GemmProblem& p, const arch::Machine& m, int top, KernelKind kind) {
  auto r = search::solve_gemm(p, m);
  if (!r) return invalid(r.error().message);
  Family f;
  f.considered = r->considered;
  f.rejected = r->rejected;
  if (r->ranked.empty())
    return invalid(fmt::format("no {} schedule fits among {} candidates:{}", kind == KernelKind::dual_gemm ? "dual GEMM" : "GEMM",
                               r->considered, rejection_counts(r->rejected)));
  f.valid = true;
  f.kind = kind;
  f.gemm = r->ranked.front().schedule;
  f.estimate = r->ranked.front().estimate;
  for (const auto& cand : r->ranked) {
    if (static_cast<int>(f.gemm_top.size()) >= std::max(top, 1)) break;
    f.gemm_top.push_back(cand);
  }
  return f;
}

search::GemmProblem gemm_problem(const ir::Diagram& kd, const GemmClasses& g, DType operand, NodeId out) {
  search::GemmProblem p;
  p.m = static_cast<std::int64_t>(product(kd, g.m));
  p.n = static_cast<std::int64_t>(product(kd, g.n));
  p.k = static_cast<std::int64_t>(product(kd, g.k));
  p.l = static_cast<std::int64_t>(product(kd, g.l));
  p.operand = operand;
  p.out_bytes_per_element = dtype_bytes(kd.node(out).dtype);
  return p;
}

// Why the GEMM's output, stored in `order`, cannot be written as its (M, N, L) modes (each class
// of axes one run of adjacent dims, as the emitter flattens them), or "".
std::string output_modes_error(const ir::Diagram& kd, const GemmClasses& g, const std::string& name, const std::vector<AxisId>& order) {
  if (!order.empty() && g.l.count(order.back()))
    return fmt::format("the output {} [{}]: its innermost axis {} is a batch axis (L); a GEMM writes along a unit-stride M "
                       "or N axis: write it as {}[{}]",
                       name, axis_names(kd, order), kd.axis(order.back()).name, name, batch_first(kd, order, g.l));
  for (const std::set<AxisId>* cls : {&g.l, &g.m, &g.n}) {
    if (one_run(order, [&](AxisId x) { return cls->count(x) > 0; })) continue;
    std::vector<std::string> fixed;  // batch axes, then M, then N
    for (const std::set<AxisId>* c : {&g.l, &g.m, &g.n})
      for (AxisId x : order)
        if (c->count(x)) fixed.push_back(kd.axis(x).name);
    return fmt::format("the output {} [{}] splits a class of axes (each of L, M and N one run of adjacent dims): a GEMM writes "
                       "it as [{}]", name, axis_names(kd, order), fmt::join(fixed, " "));
  }
  return "";
}

// `rs`: the GEMM's row sums (the prologue mainloop computes them), or null.
Family classify_gemm(const ir::Diagram& kd, const Census& c, const arch::Machine& m, int top, const RowSums* rs = nullptr) {
  const NodeId ct = rs ? rs->contraction : c.contracts[0];
  if (c.iota) return invalid("index-dependent epilogue code has no place in the GEMM's epilogue visitor tree");
  const std::vector<RowSum> no_sums;
  const std::vector<RowSum>& sums = rs ? rs->sums : no_sums;
  std::set<NodeId> sum_nodes, sum_leaves;
  for (const RowSum& r : sums) {
    sum_nodes.insert(r.node);
    sum_leaves.insert(r.leaves.begin(), r.leaves.end());
  }
  // The GEMM's output, and the row sums written as outputs of their own.
  const ir::Output* main_out = nullptr;
  for (const ir::Output& o : kd.outputs) {
    if (sum_nodes.count(o.node)) continue;
    if (main_out) return invalid("a GEMM kernel writes one output (and its row sums)");
    main_out = &o;
  }
  if (!main_out) return invalid("a GEMM kernel writes its product (its row sums alone are a row or column kernel)");
  const NodeId out = main_out->node;
  if (!kd.depends_on(out, ct)) return invalid("the output does not depend on the contraction");
  const GemmClasses g = gemm_classes(kd, ct, m, /*prologues=*/true);
  if (!g.why.empty()) return invalid(g.why);
  if (std::string why = output_modes_error(kd, g, kd.node(out).name, main_out->axes); !why.empty()) return invalid(why);
  for (const ir::Output& o : kd.outputs)
    if (sum_nodes.count(o.node)) {
      if (const DType t = kd.node(o.node).dtype; t != DType::f32 && t != DType::bf16 && t != DType::f16)
        return invalid(fmt::format("row sum {} is {}: the kernel stores f32, bf16 or f16", kd.label(o.node), dtype_name(kd.node(o.node).dtype)));
      if (std::string why = output_modes_error(kd, g, kd.node(o.node).name, o.axes); !why.empty()) return invalid(why);
    }
  const std::set<AxisId>&mset = g.m, &nset = g.n, &lset = g.l;
  // Epilogue inputs, as emit/gemm_kernel's leaves take them: a scalar, a vector along all of M
  // or all of N (innermost there, for unit-stride reads), or a tensor over all of the output's
  // axes (an aux load by TMA); each with all of the batch axes or none, in a float dtype.
  for (NodeId n : sum_leaves)
    for (const std::set<AxisId>* cls : {&g.k, &g.l})
      if (!one_run(kd.node(n).axes, [&](AxisId x) { return cls->count(x) > 0; }))
        return invalid(fmt::format("row sum input {} [{}] splits a class of axes (each of K and L one run of adjacent dims)",
                                   kd.node(n).name, axis_names(kd, kd.node(n).axes)));
  for (NodeId n : c.inputs) {
    if (n == g.a.source || n == g.b.source || sum_leaves.count(n)) continue;
    const Node& leaf = kd.node(n);
    if (!is_float(leaf.dtype))
      return invalid(fmt::format("epilogue input {} is {}: the epilogue reads float inputs", leaf.name, dtype_name(leaf.dtype)));
    const std::set<AxisId> s = axis_set(leaf.axes);
    std::set<AxisId> batch, rest;
    for (AxisId x : s) (lset.count(x) ? batch : rest).insert(x);
    if (!batch.empty() && batch != lset)
      return invalid(fmt::format("epilogue input {} has some of the batch axes: all or none", leaf.name));
    std::set<AxisId> mn = mset;
    mn.insert(nset.begin(), nset.end());
    const bool innermost_m = !leaf.axes.empty() && mset.count(leaf.axes.back());
    const bool innermost_n = !leaf.axes.empty() && nset.count(leaf.axes.back());
    if (rest.empty() || (rest == mset && innermost_m) || (rest == nset && innermost_n)) continue;
    if (rest == mn && batch == lset) continue;  // a tensor over the output: an aux load
    return invalid(fmt::format("epilogue input {} is not a scalar, a vector along all of M or N (innermost there) or a "
                               "tensor over all of the output's axes",
                               leaf.name));
  }
  search::GemmProblem p = gemm_problem(kd, g, kd.node(g.a.source).dtype, out);
  p.prologue = !g.a.nodes.empty() || !g.b.nodes.empty() || !sum_nodes.empty();
  p.prologue_sfu_a = g.a.sfu, p.prologue_fma_a = g.a.fma, p.prologue_sfu_b = g.b.sfu, p.prologue_fma_b = g.b.fma;
  for (const RowSum& r : sums) p.prologue_sfu_a += r.sfu, p.prologue_fma_a += r.fma;
  const double out_elems = static_cast<double>(kd.elements(kd.node(out).axes));
  double epi = 0;  // bytes besides the product a output element: epilogue inputs, row sums' leaves and outputs
  for (NodeId n : c.inputs)
    if (n != g.a.source && n != g.b.source)
      epi += static_cast<double>(kd.elements(kd.node(n).axes)) * dtype_bytes(kd.node(n).dtype);
  for (const ir::Output& o : kd.outputs)
    if (sum_nodes.count(o.node)) epi += static_cast<double>(kd.elements(kd.node(o.node).axes)) * dtype_bytes(kd.node(o.node).dtype);
  p.epilogue_bytes_per_element = epi / out_elems;
  // The epilogue's code: what the output reads past the contraction, the operands' code and the
  // row sums' summands (each evaluated per output element by the epilogue functor). Node ids are
  // topological, so one backward sweep marks each set.
  std::vector<bool> before(kd.nodes.size(), false), read(kd.nodes.size(), false);
  before[static_cast<std::size_t>(ct)] = true;
  for (const RowSum& r : sums) before[static_cast<std::size_t>(r.node)] = true;
  read[static_cast<std::size_t>(out)] = true;
  for (auto n = static_cast<NodeId>(kd.nodes.size()) - 1; n >= 0; --n) {
    const auto i = static_cast<std::size_t>(n);
    for (NodeId o : kd.node(n).operands) {
      if (before[i]) before[static_cast<std::size_t>(o)] = true;
      if (read[i] && !before[i]) read[static_cast<std::size_t>(o)] = true;
    }
    if (!read[i] || before[i] || is_leaf(kd.node(n))) continue;
    if (kd.node(n).op == OpKind::input)
      ++p.epilogue_leaves;
    else
      (on_sfu(kd.node(n).op) ? p.epilogue_sfu_per_element : p.epilogue_fma_per_element) += 1;
  }
  return solved_gemm(p, m, top, KernelKind::gemm);
}

// Two contractions that share their first operand (X Wg, X Wu) over the same axes, whose products
// only the epilogue's elementwise code combines: a dual GEMM (napkin/gemm_dual.h). Returns "" when
// `c` has that shape, else why not (another family may run it).
std::string dual_shape(const ir::Diagram& kd, const Census& c) {
  if (c.contracts.size() != 2) return "not two contractions";
  const Node& c0 = kd.node(c.contracts[0]);
  const Node& c1 = kd.node(c.contracts[1]);
  if (c0.operands.size() != 2 || c1.operands.size() != 2) return "contractions of other than two operands";
  if (c0.operands[0] != c1.operands[0]) return "the contractions do not share their first operand";
  if (kd.depends_on(c.contracts[1], c.contracts[0])) return "the second contraction reads the first";
  if (axis_set(c0.axes) != axis_set(c1.axes) || axis_set(c0.over) != axis_set(c1.over))
    return "the contractions differ in their axes";
  return "";
}

Family classify_dual_gemm(const ir::Diagram& kd, const Census& c, const arch::Machine& m, int top) {
  const Node& c0 = kd.node(c.contracts[0]);
  const Node& c1 = kd.node(c.contracts[1]);
  if (c.iota) return invalid("index-dependent epilogue code has no place in the dual GEMM's epilogue");
  if (!c.reductions.empty())
    return invalid(fmt::format("{} and two contractions in one kernel: no family reduces a GEMM's output", kd.label(c.reductions[0])));
  if (kd.outputs.size() != 1) return invalid("a dual GEMM kernel writes one output");
  const NodeId out = kd.outputs[0].node;
  if (!kd.depends_on(out, c.contracts[0]) || !kd.depends_on(out, c.contracts[1]))
    return invalid("the output does not combine both contractions");
  const Node& b0 = kd.node(c0.operands[1]);
  const Node& b1 = kd.node(c1.operands[1]);
  // One TMA descriptor reads both: the same dtype and storage order (the strides are checked at
  // launch). With A shared and the same axes, the second contraction then has the first's GEMM
  // modes, and what gemm_classes checks of one holds for the other.
  if (b0.dtype != b1.dtype || b0.axes != b1.axes)
    return invalid(fmt::format("{} and {} differ in dtype or storage order: a dual GEMM reads them through one descriptor", b0.name,
                               b1.name));
  const GemmClasses g0 = gemm_classes(kd, c.contracts[0], m);
  if (!g0.why.empty()) return invalid(g0.why);
  if (std::string why = output_modes_error(kd, g0, kd.node(out).name, kd.outputs[0].axes); !why.empty()) return invalid(why);
  // Epilogue inputs (a bias on either product, a scale): read from registers at each element's
  // coordinates, so any layout, with all or none of each class of the output's axes.
  double epi = 0;
  for (NodeId n : c.inputs) {
    if (n == c0.operands[0] || n == c0.operands[1] || n == c1.operands[1]) continue;
    const Node& leaf = kd.node(n);
    if (!is_float(leaf.dtype))
      return invalid(fmt::format("epilogue input {} is {}: the epilogue reads float inputs", leaf.name, dtype_name(leaf.dtype)));
    for (const std::set<AxisId>* cls : {&g0.l, &g0.m, &g0.n}) {
      const auto in = std::count_if(leaf.axes.begin(), leaf.axes.end(), [&](AxisId x) { return cls->count(x) > 0; });
      if (in != 0 && in != static_cast<long>(cls->size()))
        return invalid(fmt::format("epilogue input {} [{}] has part of a class of the output's axes (L, M or N): all or none",
                                   leaf.name, axis_names(kd, leaf.axes)));
    }
    epi += static_cast<double>(kd.elements(leaf.axes)) * dtype_bytes(leaf.dtype);
  }
  search::GemmProblem p = gemm_problem(kd, g0, kd.node(c0.operands[0]).dtype, out);
  p.outputs = 2;
  p.epilogue_bytes_per_element = epi / static_cast<double>(kd.elements(kd.node(out).axes));
  return solved_gemm(p, m, top, KernelKind::dual_gemm);
}

// A GEMM folded over N (gemm_reduction): the solver's schedules for its mainloop, the epilogue's
// arithmetic per product element and its partial states.
Family classify_gemm_reduction(const ir::Diagram& kd, const GemmReduction& gr, const arch::Machine& m, int top) {
  const GemmClasses g = gemm_classes(kd, gr.contraction, m);
  if (!g.why.empty()) return invalid(g.why);
  search::GemmProblem p = gemm_problem(kd, g, kd.node(g.a.source).dtype, gr.contraction);
  p.out_bytes_per_element = 0;  // the product is folded in registers, never stored
  p.epilogue_sfu_per_element = gr.sfu;
  p.epilogue_fma_per_element = gr.fma;
  p.reduction_states = gr.states;
  p.reduction_passes = gr.passes;
  return solved_gemm(p, m, top, KernelKind::gemm_reduction);
}

// Why a kernel that reduces over r, with `first` an input that stores r not innermost, is no column
// kernel (emit/row_kernel.h), or "": the inputs with r store the same axes after it as `first` (or
// r alone), every other axis is one of `first`'s, every output is over exactly the columns (the
// axes but r), and no reduction reads another (one pass over r).
std::string column_form_error(const ir::Diagram& kd, const Census& c, AxisId r, NodeId first) {
  const Node& p = kd.node(first);
  auto after_r = [&](const Node& x) { return std::vector<AxisId>(std::find(x.axes.begin(), x.axes.end(), r) + 1, x.axes.end()); };
  std::set<AxisId> cols(p.axes.begin(), p.axes.end());
  cols.erase(r);
  const std::string what = fmt::format("a column kernel (reducing {} of {}[{}], not innermost)", kd.axis(r).name, p.name,
                                       axis_names(kd, p.axes));
  const std::vector<AxisId> inner = after_r(p);
  for (NodeId n : c.inputs) {
    const Node& x = kd.node(n);
    // (An input with none of the inner axes is read once per step of r: a mask m[b t].)
    const bool lacks_inner = std::none_of(inner.begin(), inner.end(), [&](AxisId a) { return std::find(x.axes.begin(), x.axes.end(), a) != x.axes.end(); });
    if (std::find(x.axes.begin(), x.axes.end(), r) != x.axes.end() && !lacks_inner && after_r(x) != inner)
      return fmt::format("input {}[{}] stores other axes after {}: {} reads its inputs along the same inner axes", x.name,
                         axis_names(kd, x.axes), kd.axis(r).name, what);
  }
  std::vector<bool> reduced(kd.nodes.size(), false);
  for (NodeId n = 0; n < static_cast<NodeId>(kd.nodes.size()); ++n) {
    const Node& x = kd.node(n);
    for (AxisId a : x.axes)
      if (a != r && !cols.count(a)) return fmt::format("{} is over {}, not an axis of {}: {}", kd.label(n), kd.axis(a).name, p.name, what);
    if (ir::op_class(x.op) == OpClass::composite)
      return fmt::format("{} is a {}: {} runs sums and maxes", kd.label(n), ir::op_name(x.op), what);
    bool reads = false;
    for (NodeId o : x.operands) reads = reads || reduced[static_cast<std::size_t>(o)];
    if (reads && is_reduction(x.op)) return fmt::format("{} reads another reduction: {} makes one pass", kd.label(n), what);
    reduced[static_cast<std::size_t>(n)] = reads || is_reduction(x.op);
  }
  for (const ir::Output& o : kd.outputs)
    if (std::set<AxisId>(o.axes.begin(), o.axes.end()) != cols)
      return fmt::format("output {} is not over the columns: {} writes one value per column", kd.node(o.node).name, what);
  return "";
}

Family classify_rows(const ir::Diagram& kd, const Census& c, const arch::Machine& m) {
  std::optional<AxisId> r;
  for (NodeId n : c.reductions) {
    const Node& node = kd.node(n);
    if (node.over.size() != 1) {
      std::vector<std::string> names;
      std::int64_t size = 1;
      for (AxisId a : node.over) names.push_back(kd.axis(a).name), size *= kd.axis(a).size;
      return invalid(fmt::format("{} reduces over {} axes ({}): a row kernel reduces over one; where they are adjacent in "
                                 "every tensor, declare them as one axis of size {}",
                                 kd.label(n), node.over.size(), fmt::join(names, " "), size));
    }
    if (r && *r != node.over[0])
      return invalid(fmt::format("reductions over {} and {}: a row kernel reduces over one axis", kd.axis(*r).name,
                                 kd.axis(node.over[0]).name));
    r = node.over[0];
  }
  search::RowProblem p;
  p.bytes = io_bytes(kd);
  auto [sfu, fma] = alu_ops(kd);
  p.sfu_ops = sfu;
  p.fma_ops = fma;
  // Block-wide reductions per row, as the kernel runs them: a softmax's, a logsumexp's and a
  // layernorm's two (the max, or the mean, first), an rmsnorm's one.
  for (NodeId n : c.reductions) {
    const OpKind op = kd.node(n).op;
    p.reductions += op == OpKind::softmax || op == OpKind::logsumexp || op == OpKind::layernorm ? 2 : 1;
  }
  double widest = 1;
  for (const Node& n : kd.nodes) widest = std::max(widest, static_cast<double>(kd.elements(n.axes)));
  if (r) {
    for (NodeId n : c.inputs) {
      const auto& ax = kd.node(n).axes;
      if (std::find(ax.begin(), ax.end(), *r) != ax.end() && ax.back() != *r) {
        if (std::string why = column_form_error(kd, c, *r, n); !why.empty()) {
          std::vector<std::string> order;
          for (AxisId x : ax)
            if (x != *r) order.push_back(kd.axis(x).name);
          order.push_back(kd.axis(*r).name);
          return invalid(fmt::format("input {} is not stored with the reduced axis {} innermost (a row kernel reads rows "
                                     "contiguously): declare it as {}[{}] (nor is it a column kernel: {})",
                                     kd.node(n).name, kd.axis(*r).name, kd.node(n).name, fmt::join(order, " "), why));
        }
        p.columns = true;
        break;
      }
    }
    // The kernel's rows are every axis but the reduced one; a reduction whose operand lacks one of
    // them would be recomputed for each of its elements (its operand read again each time). Not
    // in a column kernel: there each thread adds it into each of its columns from values it
    // reads once per step anyway (a mask's count beside the masked sum).
    std::set<AxisId> row_axes;
    for (const Node& n : kd.nodes) row_axes.insert(n.axes.begin(), n.axes.end());
    row_axes.erase(*r);
    for (NodeId n : p.columns ? std::vector<NodeId>{} : c.reductions) {
      std::set<AxisId> own;
      for (NodeId o : kd.node(n).operands) own.insert(kd.node(o).axes.begin(), kd.node(o).axes.end());
      for (AxisId x : row_axes)
        if (!own.count(x))
          return invalid(fmt::format("{} would be recomputed for each element of axis {} (a row kernel's rows span every "
                                     "axis but the reduced one): its result is materialised instead",
                                     kd.label(n), kd.axis(x).name));
    }
    p.row_elements = kd.axis(*r).size;
    // (Rows too long for registers are re-read from L1/L2 in each pass: emit/row_kernel.)
    for (NodeId n : c.inputs)
      if (std::find(kd.node(n).axes.begin(), kd.node(n).axes.end(), *r) != kd.node(n).axes.end()) p.row_bytes_per_element += dtype_bytes(kd.node(n).dtype);
    for (const ir::Output& o : kd.outputs) {
      const bool along_rows = std::find(o.axes.begin(), o.axes.end(), *r) != o.axes.end();
      p.writes_rows = p.writes_rows || along_rows;
      // A row written across its storage order (the caller's output order) goes element by
      // element, a 32-byte sector each (as the elementwise kernel's, below).
      if (along_rows && o.axes.back() != *r && !p.columns)
        p.strided_bytes += static_cast<double>(kd.elements(o.axes)) * std::max(0.0, 32.0 - dtype_bytes(kd.node(o.node).dtype));
    }
    if (p.row_elements > (std::int64_t{1} << 30) && !p.columns)
      return invalid(fmt::format("rows of {} elements: a row kernel takes at most 2^30", p.row_elements));
    p.rows = static_cast<std::int64_t>(widest) / p.row_elements;
  } else {
    p.rows = 1;
    p.row_elements = static_cast<std::int64_t>(widest);
    // The elementwise kernel runs along its first output's innermost axis (emit/row_kernel.cpp): a
    // tensor over that axis stored with another innermost is read or written element by element,
    // each element a 32-byte sector of memory traffic (a transposing copy of 25 MB measured
    // 41.5 us on the H100, 1.1x this; bench/NOTES.md 2026-11-27).
    if (!kd.outputs.empty() && !kd.outputs.front().axes.empty()) {
      const AxisId along = kd.outputs.front().axes.back();
      auto strided = [&](const std::vector<AxisId>& stored, DType t) {
        if (stored.empty() || stored.back() == along || std::find(stored.begin(), stored.end(), along) == stored.end()) return 0.0;
        return static_cast<double>(kd.elements(stored)) * std::max(0.0, 32.0 - dtype_bytes(t));
      };
      for (NodeId n : c.inputs) p.strided_bytes += strided(kd.node(n).axes, kd.node(n).dtype);
      for (const ir::Output& o : kd.outputs) p.strided_bytes += strided(o.axes, kd.node(o.node).dtype);
    }
  }
  Family f;
  const search::RowCandidate rc = search::solve_rows(p, m);
  f.valid = true;
  f.kind = !r ? KernelKind::elementwise : p.columns ? KernelKind::column_reduction : KernelKind::row_reduction;
  f.rows = rc.schedule;
  f.estimate = rc.estimate;
  f.considered = 1;
  return f;
}

// The attention family's shape: contract(Q, K) of two inputs, code over the scores (a softmax or
// none over one key axis), contract(P, V) over that key axis with V an input.
std::string attention_shape(const ir::Diagram& kd, const Census& c) {
  const Node& c1 = kd.node(c.contracts[0]);
  const Node& c2 = kd.node(c.contracts[1]);
  if (c1.operands.size() != 2 || c2.operands.size() != 2) return "contractions of other than two operands";
  // An input, or an input converted on load (fp8 operands).
  auto loaded = [&](NodeId o) {
    if (kd.node(o).op == OpKind::cast) o = kd.node(o).operands[0];
    return kd.node(o).op == OpKind::input;
  };
  for (NodeId o : c1.operands)
    if (!loaded(o)) return fmt::format("the score's operand {} is computed in the kernel", kd.label(o));
  NodeId p = -1, v = -1;
  for (NodeId o : c2.operands) (kd.depends_on(o, c.contracts[0]) ? p : v) = o;
  if (p < 0 || v < 0 || !loaded(v)) return "the second contraction does not read the scores and an input V";
  // O, and optionally the row logsumexp of the softmax's input as a second output (f32).
  const std::size_t o_index = kd.outputs.size() == 2 && kd.node(kd.outputs[0].node).op == OpKind::logsumexp ? 1 : 0;
  if (kd.outputs.size() == 2) {
    const Node& l = kd.node(kd.outputs[1 - o_index].node);
    if (l.op != OpKind::logsumexp || l.dtype != DType::f32)
      return "a second output that is not the row logsumexp (f32)";
  } else if (kd.outputs.size() != 1) {
    return "an attention kernel writes one output (and its row logsumexp)";
  }
  const DType out = kd.node(kd.outputs[o_index].node).dtype;
  const DType v_dtype = kd.node(kd.node(v).op == OpKind::cast ? kd.node(v).operands[0] : v).dtype;
  if (out != v_dtype && out != DType::f32)
    return fmt::format("the output is {}: attention kernels write O in V's dtype ({}) or f32", dtype_name(out),
                       dtype_name(v_dtype));
  // Under a softmax, P V reads the softmax's output as it is (the kernel's online softmax feeds P
  // V): a P changed after its softmax (w * P, P / 2) is not the family's.
  const bool normalised = std::any_of(c.reductions.begin(), c.reductions.end(),
                                      [&](NodeId r) { return kd.node(r).op == OpKind::softmax; });
  NodeId pn = p;
  while (kd.node(pn).op == OpKind::cast) pn = kd.node(pn).operands[0];
  if (normalised && kd.node(pn).op != OpKind::softmax)
    return fmt::format("P V reads {}, computed after the softmax: the kernel multiplies V by the softmax itself", kd.label(pn));
  if (c2.over.size() != 1) return "the second contraction sums over other than one key axis";
  for (NodeId r : c.reductions)
    if (kd.node(r).over != c2.over || (kd.node(r).op != OpKind::softmax && kd.node(r).op != OpKind::logsumexp))
      return fmt::format("{} is not a softmax over the key axis", kd.label(r));
  return "";
}

Family classify_attention(const ir::Diagram& kd, const arch::Machine& m, const search::SearchOptions& so) {
  if (std::string why = attention_shape(kd, census(kd)); !why.empty()) return invalid("not the attention family: " + why);
  auto r = search::search(kd, sched::analyse_streaming(kd), m, so);
  if (r && r->ranked.empty() && so.row_layout != search::RowLayout::quad) {
    // The kernel's own row layout (WGMMA's: four threads per row) where the paper's one row per
    // thread leaves nothing that fits (d = 256).
    search::SearchOptions quad = so;
    quad.row_layout = search::RowLayout::quad;
    r = search::search(kd, sched::analyse_streaming(kd), m, quad);
  }
  if (!r) return invalid(r.error().message);
  Family f;
  f.considered = r->considered;
  f.rejected = r->rejected;
  if (r->ranked.empty()) {
    const std::string reasons = rejection_counts(r->rejected);
    // The binding constraint: the reason of the most common class, as one candidate met it.
    std::string example;
    int most = 0;
    for (const auto& [cls, n] : r->rejected)
      if (n > most) {
        most = n;
        for (const auto& rej : r->rejections)
          if (search::reason_class(rej.reason) == cls) {
            example = fmt::format(" (e.g. {}: {})", rej.candidate, rej.reason);
            break;
          }
      }
    return invalid(fmt::format("no attention configuration fits among {} candidates:{}{}", r->considered, reasons, example));
  }
  const search::Ranked& best = r->ranked.front();
  f.valid = true;
  f.kind = KernelKind::attention;
  f.streamed = best;
  f.estimate.time_s = best.predicted_time_s;
  f.estimate.flops = best.tflops * 1e12 * best.predicted_time_s;
  f.estimate.hbm_bytes = f.estimate.compulsory_bytes = io_bytes(kd);
  f.estimate.bound = best.bound;
  f.estimate.detail = best.summary;
  return f;
}

}  // namespace

RowSums row_sums(const ir::Diagram& kd) {
  RowSums out;
  const Census parts = census(kd);
  const std::vector<NodeId>& contracts = parts.contracts;
  if (contracts.empty()) {
    out.why = "no contraction";
    return out;
  }
  // Why `r` is no row sum of the GEMM `ct` (classes m, k, l; its A operand `a`), or "" with `sum` filled.
  auto as_row_sum = [&](NodeId r, NodeId a, const std::set<AxisId>& mset, const std::set<AxisId>& kset,
                        const std::set<AxisId>& lset, RowSum& sum) -> std::string {
    const Node& x = kd.node(r);
    std::set<AxisId> ml = mset;
    ml.insert(lset.begin(), lset.end());
    const bool sum_op = x.op == OpKind::reduce_sum, dot = x.op == OpKind::contract && x.operands.size() == 2;
    if (!sum_op && !dot) return fmt::format("{} is a {} beside the GEMM: only sums ride with its mainloop", kd.label(r), ir::op_name(x.op));
    if (axis_set(x.over) != kset || axis_set(x.axes) != ml)
      return fmt::format("{} is not a sum over exactly the GEMM's K axes to its M and L axes", kd.label(r));
    sum.node = r;
    sum.factors = x.operands;
    sum.fma = static_cast<double>(x.operands.size());  // the product and the sum
    std::set<AxisId> kl = kset;
    kl.insert(lset.begin(), lset.end());
    bool reads_a = false;
    std::set<NodeId> seen, leaves;
    std::vector<NodeId> stack(x.operands.begin(), x.operands.end());
    while (!stack.empty()) {
      const NodeId n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      if (n == a) {
        reads_a = true;
        continue;
      }
      const Node& y = kd.node(n);
      if (y.op == OpKind::constant) {
        if (!y.name.empty()) return fmt::format("{} reads param '{}': a row sum's code is compiled in (constants only)", kd.label(r), y.name);
        continue;
      }
      if (y.op == OpKind::input) {
        const bool read = y.dtype == DType::bf16 || y.dtype == DType::f16 || y.dtype == DType::f32 || y.dtype == DType::f64;
        if (!std::all_of(y.axes.begin(), y.axes.end(), [&](AxisId ax) { return kl.count(ax) > 0; }) || !read)
          return fmt::format("{} reads {}, not a bf16, f16, f32 or f64 tensor over K and L axes alone", kd.label(r), y.name);
        leaves.insert(n);
        continue;
      }
      if (!ir::is_elementwise(y.op)) return fmt::format("{} reads {}: a row sum's summand is elementwise code", kd.label(r), kd.label(n));
      sum.fma += 1;
      if (on_sfu(y.op)) sum.sfu += 1;
      sum.nodes.push_back(n);
      for (NodeId o : y.operands) stack.push_back(o);
    }
    if (!reads_a) return fmt::format("{} does not read the GEMM's operand {}", kd.label(r), kd.label(a));
    sum.leaves.assign(leaves.begin(), leaves.end());
    sum.nodes.push_back(r);
    std::sort(sum.nodes.begin(), sum.nodes.end());
    return "";
  };
  std::string first_why;
  for (NodeId ct : contracts) {
    const Node& c = kd.node(ct);
    if (c.operands.size() != 2) continue;
    const std::set<AxisId> sa = axis_set(kd.node(c.operands[0]).axes), sb = axis_set(kd.node(c.operands[1]).axes), so = axis_set(c.axes);
    std::set<AxisId> mset, nset, kset, lset;
    for (AxisId x : sa) (sb.count(x) ? (so.count(x) ? lset : kset) : mset).insert(x);
    for (AxisId x : sb)
      if (!sa.count(x)) nset.insert(x);
    if (mset.empty() || nset.empty() || kset.empty()) continue;  // not a GEMM: perhaps a row sum
    RowSums cand;
    cand.contraction = ct;
    std::vector<NodeId> others = parts.reductions;
    for (NodeId n : contracts)
      if (n != ct) others.push_back(n);
    std::sort(others.begin(), others.end());
    for (NodeId r : others) {
      RowSum sum;
      if (std::string why = as_row_sum(r, c.operands[0], mset, kset, lset, sum); !why.empty()) {
        cand.why = why;
        break;
      }
      cand.sums.push_back(std::move(sum));
    }
    if (cand.why.empty()) return cand;
    if (first_why.empty()) first_why = cand.why;
  }
  out.why = first_why.empty() ? "no contraction of two operands with axes of their own (M and N)" : first_why;
  return out;
}

GemmReduction gemm_reduction(const ir::Diagram& kd) {
  GemmReduction out;
  auto refuse = [&](std::string why) {
    out.why = std::move(why);
    return out;
  };
  const Census c = census(kd);
  if (c.contracts.size() != 1) return refuse(fmt::format("{} contractions: a GEMM folded over N has one", c.contracts.size()));
  if (c.reductions.empty()) return refuse("no reduction of the product");
  const NodeId ct = c.contracts[0];
  out.contraction = ct;
  const Node& cn = kd.node(ct);
  if (cn.operands.size() != 2) return refuse("a contraction of other than two operands has no GEMM kernel");
  for (NodeId o : cn.operands)
    if (kd.node(o).op != OpKind::input)
      return refuse(fmt::format("the GEMM's operand {} is computed in the kernel: a GEMM folded over N reads its operands as "
                                "they are in memory",
                                kd.label(o)));
  const NodeId a = cn.operands[0], b = cn.operands[1];
  const std::set<AxisId> sa = axis_set(kd.node(a).axes), sb = axis_set(kd.node(b).axes), so = axis_set(cn.axes);
  for (AxisId x : sa) (sb.count(x) ? (so.count(x) ? out.l : out.k) : out.m).insert(x);
  for (AxisId x : sb)
    if (!sa.count(x)) out.n.insert(x);
  if (out.m.empty() || out.n.empty() || out.k.empty()) return refuse("the contraction is no GEMM (an axis of each operand alone, one contracted)");
  std::set<AxisId> ml = out.m;
  ml.insert(out.l.begin(), out.l.end());
  // The summands: each reduction's code down to the product, the leaves and the indices.
  std::set<NodeId> summand_code;
  for (NodeId r : c.reductions) {
    const Node& x = kd.node(r);
    if (x.op != OpKind::reduce_sum && x.op != OpKind::reduce_max && x.op != OpKind::logsumexp)
      return refuse(fmt::format("{} over the product keeps its axes: the GEMM's epilogue folds sums, maxima and logsumexps "
                                "(materialise the product for a row kernel)",
                                kd.label(r)));
    if (axis_set(x.over) != out.n)
      return refuse(fmt::format("{} reduces over [{}], not exactly the GEMM's N axes [{}]", kd.label(r), axis_names(kd, x.over),
                                axis_names(kd, {out.n.begin(), out.n.end()})));
    std::vector<NodeId> stack{x.operands[0]};
    std::set<NodeId> seen;
    while (!stack.empty()) {
      const NodeId n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second || n == ct) continue;
      const Node& y = kd.node(n);
      if (y.op == OpKind::input || y.op == OpKind::constant || y.op == OpKind::iota) continue;
      if (!ir::is_elementwise(y.op))
        return refuse(fmt::format("{} reads {}: a folded summand is elementwise code of the product (one pass over the tile)",
                                  kd.label(r), kd.label(n)));
      if (summand_code.insert(n).second) (on_sfu(y.op) ? out.sfu : out.fma) += x.op == OpKind::logsumexp ? 2 : 1;
      for (NodeId o : y.operands) stack.push_back(o);
    }
    out.reductions.push_back(r);
    out.states += x.op == OpKind::logsumexp ? 2 : 1;
    if (x.op == OpKind::logsumexp) out.passes = 2;
    if (x.op == OpKind::logsumexp) out.sfu += 1, out.fma += 2;  // exp(x - max); the max and the sum
    else out.fma += 1;
  }
  // What follows the reductions: elementwise code over M and L that reads no product.
  std::set<NodeId> reductions(out.reductions.begin(), out.reductions.end());
  for (NodeId n = 0; n < static_cast<NodeId>(kd.nodes.size()); ++n) {
    const Node& y = kd.node(n);
    if (n == ct || reductions.count(n) || summand_code.count(n) || y.op == OpKind::constant || y.op == OpKind::iota) continue;
    if (y.op == OpKind::input) {
      if (n == a || n == b) continue;
      for (AxisId x : y.axes)
        if (!ml.count(x) && !out.n.count(x))
          return refuse(fmt::format("epilogue input {} has axis {}: a folded GEMM's inputs besides A and B are over its M, N and L "
                                    "axes",
                                    y.name, kd.axis(x).name));
      if (y.dtype == DType::fp8e4m3 || y.dtype == DType::fp8e5m2 || y.dtype == DType::tf32)
        return refuse(fmt::format("epilogue input {} is {}: the epilogue reads bf16, f16, f32, f64, i32 and bool inputs", y.name,
                                  dtype_name(y.dtype)));
      out.leaves.push_back(n);
      continue;
    }
    if (!ir::is_elementwise(y.op))
      return refuse(fmt::format("{} after the folds: a folded GEMM runs elementwise code after its reductions", kd.label(n)));
    for (AxisId x : y.axes)
      if (!ml.count(x))
        return refuse(fmt::format("{} is over {}, which the folds reduce: after them the kernel holds one value a row (its M and L "
                                  "axes); the product is not stored",
                                  kd.label(n), kd.axis(x).name));
  }
  for (NodeId operand : {a, b})
    for (NodeId user : kd.users(operand))
      if (user != ct)
        return refuse(fmt::format("{} reads the GEMM's operand {}: the kernel reads it in its mainloop only", kd.label(user),
                                  kd.node(operand).name));
  for (const ir::Output& o : kd.outputs) {
    if (o.node == ct || summand_code.count(o.node))
      return refuse(fmt::format("the kernel writes {}, which varies along N: a folded GEMM writes one value a row", kd.label(o.node)));
    if (axis_set(o.axes) != ml)
      return refuse(fmt::format("output {} is over [{}], not the GEMM's M and L axes", kd.label(o.node), axis_names(kd, o.axes)));
  }
  if (!std::any_of(summand_code.begin(), summand_code.end(), [&](NodeId n) {
        const auto& ops = kd.node(n).operands;
        return std::find(ops.begin(), ops.end(), ct) != ops.end();
      }) &&
      !std::any_of(out.reductions.begin(), out.reductions.end(), [&](NodeId r) { return kd.node(r).operands[0] == ct; }))
    return refuse("no reduction reads the product");
  return out;
}

Family classify(const ir::Diagram& kd, const arch::Machine& m, const search::SearchOptions& so, int top) {
  const Census c = census(kd);
  if (c.contracts.empty()) return classify_rows(kd, c, m);
  if (const RowSums rs = row_sums(kd); rs.why.empty() && !rs.sums.empty()) return classify_gemm(kd, c, m, top, &rs);
  if (c.contracts.size() == 1) {
    if (!c.reductions.empty()) {
      const GemmReduction gr = gemm_reduction(kd);
      if (!gr.why.empty()) return invalid(gr.why);
      return classify_gemm_reduction(kd, gr, m, top);
    }
    return classify_gemm(kd, c, m, top);
  }
  if (c.contracts.size() == 2) return dual_shape(kd, c).empty() ? classify_dual_gemm(kd, c, m, top) : classify_attention(kd, m, so);
  return invalid(fmt::format("{} contractions in one kernel: at most two (the attention family, a dual GEMM)", c.contracts.size()));
}

TmaRows tma_layout_error(const ir::Diagram& kd, const arch::Machine& m, KernelKind kind) {
  if (kind != KernelKind::gemm && kind != KernelKind::dual_gemm && kind != KernelKind::gemm_reduction) return {};
  NodeId ct = -1;
  for (NodeId n = 0; n < static_cast<NodeId>(kd.nodes.size()) && ct < 0; ++n)
    if (kd.node(n).op == OpKind::contract) ct = n;
  if (ct < 0) return {};
  const GemmClasses g = gemm_classes(kd, ct, m, /*prologues=*/kind == KernelKind::gemm);
  if (!g.why.empty()) return {};
  // The dual GEMM copies B0 and B1 side by side where one descriptor cannot read them, and
  // writes its output from registers: A alone is read as stored.
  if (TmaRows why = operand_rows_error(kd, g, /*b_too=*/kind != KernelKind::dual_gemm); !why.empty()) return why;
  if (kind == KernelKind::gemm)
    for (const ir::Output& o : kd.outputs)  // the product (row sums, stored plainly, lack N)
      if (std::any_of(o.axes.begin(), o.axes.end(), [&](AxisId x) { return g.n.count(x) > 0; }))
        if (TmaRows why = tma_rows_error(kd, kd.node(o.node).name, o.axes, kd.node(o.node).dtype, {&g.l, &g.m, &g.n});
            !why.empty())
          return why;
  return {};
}

std::string TmaRows::text() const {
  return fmt::format("{}: pad {} to {} (--set {}={}; zeros along a contracted axis, sliced off along an output axis)", problem,
                     axis, padded, axis, padded);
}

}  // namespace napkin::plan
