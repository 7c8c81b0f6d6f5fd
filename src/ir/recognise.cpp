// SPDX-License-Identifier: Apache-2.0
#include "ir/recognise.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "ir/builder.h"
#include "ir/verifier.h"

namespace napkin::ir {

namespace {

struct Composite {
  OpKind op;
  NodeId x;
  std::vector<AxisId> over;
  // A positive temperature written after the max, exp((x - max) * c): the composite is of
  // x * c, a node to add (its operands the diagram's).
  std::optional<Node> scaled;
};

// c is a literal (not a param: it may be rebound) greater than 0.
bool positive_literal(const Node& c) {
  return c.op == OpKind::constant && c.name.empty() && c.scalar > 0 && std::isfinite(c.scalar);
}

class Matcher {
 public:
  explicit Matcher(const Diagram& d) : d_(d) {}

  // Whether a and b compute the same value: one node, or the same op on the same values.
  // Distinct inputs are distinct tensors; a param is equal only to itself (it may be rebound).
  bool same(NodeId a, NodeId b) {
    if (a == b) return true;
    const Node& x = d_.node(a);
    const Node& y = d_.node(b);
    if (x.op != y.op || x.op == OpKind::input || x.axes != y.axes || x.over != y.over || x.dtype != y.dtype ||
        x.axis != y.axis || x.operands.size() != y.operands.size())
      return false;
    if (x.op == OpKind::constant) return x.scalar == y.scalar && x.name.empty() && y.name.empty();
    if (x.scalar != y.scalar) return false;
    const auto key = std::minmax(a, b);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    bool equal = true;
    for (std::size_t i = 0; equal && i < x.operands.size(); ++i) equal = same(x.operands[i], y.operands[i]);
    memo_[key] = equal;
    return equal;
  }

  // The composite node n computes, written out, if any.
  std::optional<Composite> match(NodeId n) {
    const Node& node = d_.node(n);
    std::optional<Composite> c;
    if (node.op == OpKind::div) c = softmax(node.operands[0], node.operands[1]);
    if (node.op == OpKind::add) {
      c = logsumexp(node.operands[0], node.operands[1]);
      if (!c) c = logsumexp(node.operands[1], node.operands[0]);
    }
    if (!c || !same_type(n, *c)) return std::nullopt;
    return c;
  }

 private:
  const Node& at(NodeId n) const { return d_.node(n); }

  // x where max_x is max(x over A) (given A).
  std::optional<NodeId> max_operand(NodeId max_x, const std::vector<AxisId>& over) const {
    const Node& m = at(max_x);
    if (m.op != OpKind::reduce_max || m.over != over) return std::nullopt;
    return m.operands[0];
  }

  // x where y = x - max(x over A).
  std::optional<NodeId> centred(NodeId y, const std::vector<AxisId>& over) {
    if (at(y).op != OpKind::sub) return std::nullopt;
    auto x = max_operand(at(y).operands[1], over);
    if (!x || !same(*x, at(y).operands[0])) return std::nullopt;
    return at(y).operands[0];
  }

  // The softmax over A whose numerator is e: e = exp(x - max(x over A)), or with a positive
  // literal temperature after the max (* c, c *, / c, scale(., c)): softmax of x times it.
  std::optional<Composite> exponent(NodeId e, const std::vector<AxisId>& over) {
    if (at(e).op != OpKind::exp) return std::nullopt;
    const NodeId y = at(e).operands[0];
    if (auto x = centred(y, over)) return Composite{OpKind::softmax, *x, over, std::nullopt};
    const Node& t = at(y);
    Node scaled = t;
    scaled.name.clear();
    if (t.op == OpKind::scale && t.scalar > 0 && std::isfinite(t.scalar)) {
      if (auto x = centred(t.operands[0], over); x && is_float(at(*x).dtype)) {
        scaled.operands = {*x};
        return Composite{OpKind::softmax, *x, over, scaled};
      }
    }
    if (t.op == OpKind::mul || t.op == OpKind::div)
      for (std::size_t i : {std::size_t{0}, std::size_t{1}}) {
        if (t.op == OpKind::div && i == 1) break;  // c / (x - max) is no temperature
        const NodeId c = t.operands[1 - i];
        if (!positive_literal(at(c))) continue;
        if (auto x = centred(t.operands[i], over); x && is_float(at(*x).dtype)) {
          scaled.operands[i] = *x;
          return Composite{OpKind::softmax, *x, over, scaled};
        }
      }
    return std::nullopt;
  }

  // e / sum(e over A).
  std::optional<Composite> softmax(NodeId e, NodeId z) {
    if (at(z).op != OpKind::reduce_sum || !same(e, at(z).operands[0])) return std::nullopt;
    return exponent(e, at(z).over);
  }

  // max(x over A) + log(sum(exp(x - max(x over A)) over A)).
  std::optional<Composite> logsumexp(NodeId m, NodeId log_z) {
    if (at(log_z).op != OpKind::log || at(m).op != OpKind::reduce_max) return std::nullopt;
    const NodeId z = at(log_z).operands[0];
    if (at(z).op != OpKind::reduce_sum || at(z).over != at(m).over) return std::nullopt;
    const NodeId e = at(z).operands[0];
    if (at(e).op != OpKind::exp || at(at(e).operands[0]).op != OpKind::sub) return std::nullopt;
    const Node& y = at(at(e).operands[0]);
    if (!same(y.operands[1], m) || !same(y.operands[0], at(m).operands[0])) return std::nullopt;
    return Composite{OpKind::logsumexp, y.operands[0], at(m).over};
  }

  // The composite's type equals the written form's (else the written form stays). A temperature
  // keeps its float operand's dtype (a literal takes no part), so x's type stands for x * c.
  bool same_type(NodeId n, const Composite& c) const {
    Node probe;
    probe.op = c.op;
    probe.operands = {c.x};
    probe.over = c.over;
    auto t = infer_type(d_, probe);
    return std::holds_alternative<InferredType>(t) && std::get<InferredType>(t).dtype == at(n).dtype &&
           std::get<InferredType>(t).axes == at(n).axes;
  }

  const Diagram& d_;
  std::map<std::pair<NodeId, NodeId>, bool> memo_;
};

// Nodes an output depends on.
std::vector<bool> live_nodes(const Diagram& d) {
  std::vector<bool> live(d.nodes.size(), false);
  for (const Output& o : d.outputs) live[static_cast<std::size_t>(o.node)] = true;
  for (std::size_t i = d.nodes.size(); i-- > 0;)
    if (live[i])
      for (NodeId o : d.nodes[i].operands) live[static_cast<std::size_t>(o)] = true;
  return live;
}

}  // namespace

Diagram recognise_composites(const Diagram& d) {
  Matcher matcher(d);
  Diagram out;
  out.axes = d.axes;
  out.source_name = d.source_name;
  std::vector<NodeId> id(d.nodes.size(), -1);  // d's node -> out's
  std::vector<NodeId> origin;                   // out's node -> d's
  auto add = [&](Node n, NodeId from) {
    for (NodeId& o : n.operands) o = id[static_cast<std::size_t>(o)];
    out.nodes.push_back(std::move(n));
    origin.push_back(from);
    return static_cast<NodeId>(out.nodes.size() - 1);
  };
  bool changed = false;
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const NodeId from = static_cast<NodeId>(i);
    Node n = d.nodes[i];
    if (auto c = matcher.match(from)) {
      changed = true;
      NodeId x = id[static_cast<std::size_t>(c->x)];
      if (c->scaled) {
        x = add(*c->scaled, from);
        Node& s = out.nodes.back();
        auto t = infer_type(out, s);
        NAPKIN_CHECK(std::holds_alternative<InferredType>(t), "recognise built an ill-typed temperature");
        s.axes = std::get<InferredType>(t).axes;
        s.dtype = std::get<InferredType>(t).dtype;
      }
      n.op = c->op;
      n.operands = {};
      n.over = c->over;
      n.scalar = 0.0;
      id[i] = add(std::move(n), from);
      out.nodes.back().operands = {x};
      continue;
    }
    id[i] = add(std::move(n), from);
  }
  for (Output o : d.outputs) {
    o.node = id[static_cast<std::size_t>(o.node)];
    out.outputs.push_back(std::move(o));
  }
  if (!changed) return d;

  // Keep what an output reads now, and what was unused before (with what it reads).
  const std::vector<bool> was_live = live_nodes(d);
  std::vector<bool> keep = live_nodes(out);
  for (std::size_t i = 0; i < out.nodes.size(); ++i)
    if (!was_live[static_cast<std::size_t>(origin[i])]) keep[i] = true;
  for (std::size_t i = out.nodes.size(); i-- > 0;)
    if (keep[i])
      for (NodeId o : out.nodes[i].operands) keep[static_cast<std::size_t>(o)] = true;
  Diagram compact;
  compact.axes = out.axes;
  compact.source_name = out.source_name;
  std::vector<NodeId> kept(out.nodes.size(), -1);
  for (std::size_t i = 0; i < out.nodes.size(); ++i) {
    if (!keep[i]) continue;
    Node n = out.nodes[i];
    for (NodeId& o : n.operands) o = kept[static_cast<std::size_t>(o)];
    kept[i] = static_cast<NodeId>(compact.nodes.size());
    compact.nodes.push_back(std::move(n));
  }
  for (Output o : out.outputs) {
    o.node = kept[static_cast<std::size_t>(o.node)];
    compact.outputs.push_back(std::move(o));
  }
  auto verified = verify(compact, nullptr);
  NAPKIN_CHECK(verified.ok(), fmt::format("recognise produced an invalid diagram: {}",
                                          verified.ok() ? "" : verified.error().message));
  return compact;
}

}  // namespace napkin::ir
