// SPDX-License-Identifier: Apache-2.0
#include "ir/ir.h"

#include <algorithm>
#include <cctype>

#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>

namespace napkin::ir {

OpClass op_class(OpKind k) {
  switch (k) {
    case OpKind::input: case OpKind::constant: case OpKind::iota: return OpClass::leaf;
    case OpKind::exp: case OpKind::exp2: case OpKind::log: case OpKind::neg: case OpKind::tanh:
    case OpKind::abs: case OpKind::floor: case OpKind::logical_not: case OpKind::cast: case OpKind::scale:
    case OpKind::softcap: return OpClass::unary;
    case OpKind::add: case OpKind::sub: case OpKind::mul: case OpKind::div: case OpKind::max:
    case OpKind::min: case OpKind::lt: case OpKind::le: case OpKind::gt: case OpKind::ge:
    case OpKind::eq: case OpKind::ne: case OpKind::logical_and: case OpKind::logical_or:
      return OpClass::binary;
    case OpKind::select: return OpClass::ternary;
    case OpKind::reduce_sum: case OpKind::reduce_max: return OpClass::reduction;
    case OpKind::contract: return OpClass::contraction;
    case OpKind::softmax: case OpKind::logsumexp: case OpKind::rmsnorm: case OpKind::layernorm:
      return OpClass::composite;
  }
  return OpClass::leaf;
}

std::string_view op_name(OpKind k) {
  switch (k) {
    case OpKind::input: return "in";
    case OpKind::constant: return "constant";
    case OpKind::iota: return "iota";
    case OpKind::exp: return "exp";
    case OpKind::exp2: return "exp2";
    case OpKind::log: return "log";
    case OpKind::neg: return "neg";
    case OpKind::tanh: return "tanh";
    case OpKind::abs: return "abs";
    case OpKind::floor: return "floor";
    case OpKind::logical_not: return "not";
    case OpKind::cast: return "cast";
    case OpKind::scale: return "scale";
    case OpKind::softcap: return "softcap";
    case OpKind::add: return "add";
    case OpKind::sub: return "sub";
    case OpKind::mul: return "mul";
    case OpKind::div: return "div";
    case OpKind::max: return "max";
    case OpKind::min: return "min";
    case OpKind::lt: return "lt";
    case OpKind::le: return "le";
    case OpKind::gt: return "gt";
    case OpKind::ge: return "ge";
    case OpKind::eq: return "eq";
    case OpKind::ne: return "ne";
    case OpKind::logical_and: return "and";
    case OpKind::logical_or: return "or";
    case OpKind::select: return "select";
    case OpKind::reduce_sum: return "sum";
    case OpKind::reduce_max: return "max";
    case OpKind::contract: return "contract";
    case OpKind::softmax: return "softmax";
    case OpKind::logsumexp: return "logsumexp";
    case OpKind::rmsnorm: return "rmsnorm";
    case OpKind::layernorm: return "layernorm";
  }
  return "?";
}

std::string_view op_symbol(OpKind k) {
  switch (k) {
    case OpKind::add: return "+";
    case OpKind::sub: return "-";
    case OpKind::mul: return "*";
    case OpKind::div: return "/";
    case OpKind::lt: return "<";
    case OpKind::le: return "<=";
    case OpKind::gt: return ">";
    case OpKind::ge: return ">=";
    case OpKind::eq: return "==";
    case OpKind::ne: return "!=";
    case OpKind::logical_and: return "&&";
    case OpKind::logical_or: return "||";
    case OpKind::logical_not: return "!";
    case OpKind::neg: return "-";
    default: return op_name(k);
  }
}

bool is_elementwise(OpKind k) {
  const OpClass c = op_class(k);
  return c == OpClass::unary || c == OpClass::binary || c == OpClass::ternary;
}

bool Node::operator==(const Node& o) const {
  const bool same_scalar =
      scalar == o.scalar || (std::isnan(scalar) && std::isnan(o.scalar));
  return op == o.op && operands == o.operands && axes == o.axes && over == o.over &&
         dtype == o.dtype && same_scalar && axis == o.axis && name == o.name;
}

std::optional<AxisId> Diagram::find_axis(std::string_view name) const {
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i].name == name) return static_cast<AxisId>(i);
  return std::nullopt;
}

std::optional<NodeId> Diagram::find_node(std::string_view name) const {
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (!name.empty() && nodes[i].name == name) return static_cast<NodeId>(i);
  return std::nullopt;
}

std::vector<NodeId> Diagram::inputs() const {
  std::vector<NodeId> out;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].op == OpKind::input) out.push_back(static_cast<NodeId>(i));
  return out;
}

std::int64_t Diagram::elements(const std::vector<AxisId>& ids) const {
  std::int64_t n = 1;
  for (AxisId a : ids) n *= axis(a).size;
  return n;
}

bool equivalent(const Diagram& a, const Diagram& b) {
  if (!(a.axes == b.axes) || a.nodes.size() != b.nodes.size() || a.outputs.size() != b.outputs.size()) return false;
  const std::vector<NodeId> ia = a.inputs(), ib = b.inputs();
  if (ia.size() != ib.size()) return false;
  std::map<std::pair<NodeId, NodeId>, bool> memo;
  std::vector<std::pair<NodeId, NodeId>> stack;  // pairs still to compare (no recursion: any depth)
  // An unnamed value read twice prints as a temporary `_tN`, which a parse names.
  auto temporary = [](const std::string& name) {
    return name.size() > 2 && name.compare(0, 2, "_t") == 0 &&
           std::all_of(name.begin() + 2, name.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  auto same_name = [&](const std::string& x, const std::string& y) {
    return x == y || (x.empty() && temporary(y)) || (y.empty() && temporary(x));
  };
  auto same_node = [&](NodeId x, NodeId y) {
    const Node& n = a.node(x);
    const Node& m = b.node(y);
    return n.op == m.op && n.axes == m.axes && n.over == m.over && n.dtype == m.dtype && n.scalar == m.scalar &&
           n.axis == m.axis && same_name(n.name, m.name) && n.operands.size() == m.operands.size();
  };
  auto push = [&](NodeId x, NodeId y) {
    if (memo.emplace(std::make_pair(x, y), true).second) stack.emplace_back(x, y);
  };
  for (std::size_t i = 0; i < ia.size(); ++i) push(ia[i], ib[i]);
  for (std::size_t i = 0; i < a.outputs.size(); ++i) {
    if (a.outputs[i].axes != b.outputs[i].axes) return false;
    push(a.outputs[i].node, b.outputs[i].node);
  }
  while (!stack.empty()) {
    const auto [x, y] = stack.back();
    stack.pop_back();
    if (!same_node(x, y)) return false;
    for (std::size_t k = 0; k < a.node(x).operands.size(); ++k) push(a.node(x).operands[k], b.node(y).operands[k]);
  }
  return true;
}

bool Diagram::reads_leaves_only(NodeId n) const {
  std::vector<bool> seen(nodes.size(), false);
  std::vector<NodeId> stack{n};
  while (!stack.empty()) {
    const NodeId x = stack.back();
    stack.pop_back();
    if (seen[static_cast<std::size_t>(x)]) continue;
    seen[static_cast<std::size_t>(x)] = true;
    const Node& y = node(x);
    if (y.op == OpKind::input || y.op == OpKind::iota || y.op == OpKind::constant) continue;
    if (!is_elementwise(y.op)) return false;
    stack.insert(stack.end(), y.operands.begin(), y.operands.end());
  }
  return true;
}

bool Diagram::depends_on(NodeId n, NodeId target) const {
  if (n < target) return false;
  std::vector<bool> dep(static_cast<std::size_t>(n - target) + 1, false);
  dep[0] = true;
  for (NodeId i = target + 1; i <= n; ++i)
    for (NodeId o : node(i).operands)
      if (o >= target && dep[static_cast<std::size_t>(o - target)]) {
        dep[static_cast<std::size_t>(i - target)] = true;
        break;
      }
  return dep.back();
}

std::vector<NodeId> Diagram::users(NodeId n) const {
  std::vector<NodeId> out;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    for (NodeId o : nodes[i].operands)
      if (o == n) {
        out.push_back(static_cast<NodeId>(i));
        break;
      }
  return out;
}

std::string Diagram::label(NodeId n) const {
  const Node& nd = node(n);
  // A plan names the unnamed values its kernels pass "t<id>" (plan::boundary_name), and their
  // values before rounding "t<id>_unrounded": where such a value was written in the source, the
  // op and its place say more to the user.
  std::string_view stem = nd.name;
  if (stem.size() > 10 && stem.substr(stem.size() - 10) == "_unrounded") stem.remove_suffix(10);
  const bool generated = stem.size() > 1 && stem[0] == 't' &&
                         std::all_of(stem.begin() + 1, stem.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '_'; });
  if (!nd.name.empty() && !(generated && nd.loc.line > 0)) return "'" + nd.name + "'";
  std::string what = fmt::format("'{}'", op_symbol(nd.op));
  if (nd.op == OpKind::constant) what = "constant";
  if (nd.op == OpKind::iota) what = fmt::format("axis index '{}'", axis(nd.axis).name);
  if (nd.loc.line > 0) return fmt::format("the {} at {}:{}", what, nd.loc.line, nd.loc.column);
  return fmt::format("the {} (node {})", what, n);
}

}  // namespace napkin::ir
