// SPDX-License-Identifier: Apache-2.0
#include "ir/recognise.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "ir/builder.h"
#include "ir/verifier.h"

namespace napkin::ir {

SameValue::SameValue(const Diagram& d) : d_(d) {}

bool SameValue::operator()(NodeId a, NodeId b) {
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
  for (std::size_t i = 0; equal && i < x.operands.size(); ++i) equal = (*this)(x.operands[i], y.operands[i]);
  memo_[key] = equal;
  return equal;
}

namespace {

struct Composite {
  OpKind op;
  NodeId x;
  std::vector<AxisId> over;
  // A positive temperature written after the max, exp((x - max) * c): the composite is of
  // x * c, a node to add (its operands the diagram's).
  std::optional<Node> scaled;
  // The written form's own values (the exponentials, their sum, its log): where another value
  // still reads one, the match would compute it twice, so it stays as written.
  std::vector<NodeId> internal = {};
};

// c is a literal (not a param: it may be rebound) greater than 0.
bool positive_literal(const Node& c) {
  return c.op == OpKind::constant && c.name.empty() && c.scalar > 0 && std::isfinite(c.scalar);
}

class Matcher {
 public:
  explicit Matcher(const Diagram& d) : d_(d), same_(d) {}

  // Whether e / z is a softmax written out.
  bool is_softmax(NodeId e, NodeId z) { return softmax(e, z).has_value(); }

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
    if (!x || !same_(*x, at(y).operands[0])) return std::nullopt;
    return at(y).operands[0];
  }

  // The softmax over A whose numerator is e: e = exp(x - max(x over A)), or with a positive
  // literal temperature after the max (* c, c *, / c, scale(., c)): softmax of x times it.
  std::optional<Composite> exponent(NodeId e, const std::vector<AxisId>& over) {
    if (at(e).op == OpKind::exp2) return base_two(at(e).operands[0], over);
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

  // exp2(y) = exp(y ln 2): y = x - max(x over A), or that times a positive literal c (* c, c *,
  // / c, scale(., c)), is the softmax of x * (c ln 2), one scale node (FlashAttention's form,
  // exp2 with the softmax scale times log2(e), is the softmax of the scaled scores).
  std::optional<Composite> base_two(NodeId y, const std::vector<AxisId>& over) {
    constexpr double kLn2 = 0.69314718055994530942;
    double c = 1.0;
    std::optional<NodeId> x = centred(y, over);
    const Node& t = at(y);
    if (!x && t.op == OpKind::scale && t.scalar > 0 && std::isfinite(t.scalar)) {
      x = centred(t.operands[0], over);
      c = t.scalar;
    }
    if (!x && (t.op == OpKind::mul || t.op == OpKind::div))
      for (std::size_t i : {std::size_t{0}, std::size_t{1}}) {
        if (x || (t.op == OpKind::div && i == 1)) break;
        const Node& literal = at(t.operands[1 - i]);
        if (!positive_literal(literal)) continue;
        x = centred(t.operands[i], over);
        c = t.op == OpKind::div ? 1.0 / literal.scalar : literal.scalar;
      }
    if (!x || !is_float(at(*x).dtype) || !(c * kLn2 > 0) || !std::isfinite(c * kLn2)) return std::nullopt;
    Node scaled;
    scaled.op = OpKind::scale;
    scaled.operands = {*x};
    scaled.scalar = c * kLn2;
    scaled.loc = at(y).loc;
    return Composite{OpKind::softmax, *x, over, scaled};
  }

  // e / sum(e over A).
  std::optional<Composite> softmax(NodeId e, NodeId z) {
    if (at(z).op != OpKind::reduce_sum || !same_(e, at(z).operands[0])) return std::nullopt;
    auto c = exponent(e, at(z).over);
    if (c) c->internal = {e, z, at(z).operands[0]};
    return c;
  }

  // max(x over A) + log(sum(exp(x - max(x over A)) over A)).
  std::optional<Composite> logsumexp(NodeId m, NodeId log_z) {
    if (at(log_z).op != OpKind::log || at(m).op != OpKind::reduce_max) return std::nullopt;
    const NodeId z = at(log_z).operands[0];
    if (at(z).op != OpKind::reduce_sum || at(z).over != at(m).over) return std::nullopt;
    const NodeId e = at(z).operands[0];
    if (at(e).op != OpKind::exp || at(at(e).operands[0]).op != OpKind::sub) return std::nullopt;
    const Node& y = at(at(e).operands[0]);
    if (!same_(y.operands[1], m) || !same_(y.operands[0], at(m).operands[0])) return std::nullopt;
    return Composite{OpKind::logsumexp, y.operands[0], at(m).over, std::nullopt, {log_z, z, e}};
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
  SameValue same_;
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


// `out` rebuilt from d (`origin`: out's node -> d's), keeping what an output reads now and what
// was unused in d (with what it reads, so its warnings stand); verified.
Diagram compacted(const Diagram& d, const Diagram& out, const std::vector<NodeId>& origin) {
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
  NAPKIN_CHECK(verified.ok(), fmt::format("a rewrite produced an invalid diagram: {}",
                                          verified.ok() ? "" : verified.error().message));
  return compact;
}

// A rewrite of d node by node in order: each node copied with its operands mapped, or replaced
// by nodes of the rewrite's own; finish() maps the outputs and drops what became unused.
class Rewrite {
 public:
  explicit Rewrite(const Diagram& d) : d_(d), id_(d.nodes.size(), -1) {
    out_.axes = d.axes;
    out_.source_name = d.source_name;
  }
  // d's node n, in the rewrite's ids (-1 before it is written).
  NodeId id(NodeId n) const { return id_[static_cast<std::size_t>(n)]; }
  const Node& node(NodeId n) const { return out_.node(n); }
  // Appends n (operands already the rewrite's ids) with its type inferred, on behalf of d's node
  // `from`; -1 where it does not type.
  NodeId add(Node n, NodeId from) {
    auto t = infer_type(out_, n);
    if (!std::holds_alternative<InferredType>(t)) return -1;
    n.axes = std::get<InferredType>(t).axes;
    n.dtype = std::get<InferredType>(t).dtype;
    return append(std::move(n), from);
  }
  // d's node i stands as `to`, a node added for it.
  void replace(NodeId i, NodeId to) { id_[static_cast<std::size_t>(i)] = to; }
  // d's node i as written, its operands mapped (or `n`, i's node changed, likewise).
  void keep(NodeId i) { keep(i, d_.node(i)); }
  void keep(NodeId i, Node n) {
    for (NodeId& o : n.operands) o = id(o);
    id_[static_cast<std::size_t>(i)] = append(std::move(n), i);
  }
  Diagram finish() {
    for (Output o : d_.outputs) {
      o.node = id(o.node);
      out_.outputs.push_back(std::move(o));
    }
    return compacted(d_, out_, origin_);
  }

 private:
  NodeId append(Node n, NodeId from) {
    out_.nodes.push_back(std::move(n));
    origin_.push_back(from);
    return static_cast<NodeId>(out_.nodes.size() - 1);
  }
  const Diagram& d_;
  Diagram out_;
  std::vector<NodeId> id_;      // d's node -> out's
  std::vector<NodeId> origin_;  // out's node -> d's
};

// A literal -inf (a param may be rebound).
bool is_minus_infinity(const Node& n) { return n.op == OpKind::constant && n.name.empty() && n.scalar == -INFINITY; }
bool is_plus_infinity(const Node& n) { return n.op == OpKind::constant && n.name.empty() && n.scalar == INFINITY; }
bool is_zero_literal(const Node& n) { return n.op == OpKind::constant && n.name.empty() && n.scalar == 0.0; }

// Per node: whether it is computed from inputs, indices, params and literals by elementwise ops
// alone (a mask's predicate, a factor that may leave a contraction). One pass in node order.
std::vector<bool> leaf_computed(const Diagram& d) {
  std::vector<bool> r(d.nodes.size(), false);
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const Node& x = d.nodes[i];
    r[i] = x.op == OpKind::input || x.op == OpKind::iota || x.op == OpKind::constant ||
           (is_elementwise(x.op) &&
            std::all_of(x.operands.begin(), x.operands.end(), [&](NodeId o) { return r[static_cast<std::size_t>(o)]; }));
  }
  return r;
}

// A mask: where `predicate` fails (holds, when negated) a value is -inf.
struct Mask {
  NodeId predicate;
  bool negated;  // masked_fill's form, select(p, -inf, x)
  bool operator==(const Mask& o) const { return predicate == o.predicate && negated == o.negated; }
};

// The masks under which a value is -inf (hoist_masks' rules), and the value where they hold.
class MaskHoister {
 public:
  // One pass in node order (operands first): no recursion, so a chain of any length is fine.
  explicit MaskHoister(const Diagram& d) : d_(d), masks_(d.nodes.size()), index_only_(leaf_computed(d)) {
    for (std::size_t i = 0; i < d.nodes.size(); ++i) {
      const Node& x = d.nodes[i];
      std::vector<Mask>& m = masks_[i];
      auto join = [&](NodeId o) {
        for (const Mask& p : masks_[static_cast<std::size_t>(o)])
          if (std::find(m.begin(), m.end(), p) == m.end()) m.push_back(p);
      };
      switch (x.op) {
        case OpKind::select: {
          const std::size_t value = value_side(x);
          if (value == 0) break;
          if (index_only(x.operands[0])) m.push_back({x.operands[0], value == 2});
          join(x.operands[value]);
          break;
        }
        case OpKind::add: case OpKind::min: join(x.operands[0]); join(x.operands[1]); break;
        case OpKind::sub: {
          join(x.operands[0]);
          // s - select(p, 0, inf): -inf where p fails.
          const Node& y = d.node(x.operands[1]);
          if (const std::size_t v = y.op == OpKind::select ? plus_infinity_side(y) : 0; v != 0 && index_only(y.operands[0])) {
            const Mask mask{y.operands[0], v == 2};
            if (std::find(m.begin(), m.end(), mask) == m.end()) m.push_back(mask);
          }
          break;
        }
        case OpKind::scale:
          if (x.scalar > 0 && std::isfinite(x.scalar)) join(x.operands[0]);
          break;
        case OpKind::mul:
          if (positive_literal(d.node(x.operands[1]))) join(x.operands[0]);
          else if (positive_literal(d.node(x.operands[0]))) join(x.operands[1]);
          break;
        case OpKind::div:
          if (positive_literal(d.node(x.operands[1]))) join(x.operands[0]);
          break;
        case OpKind::cast:
          if (is_float(x.dtype) && is_float(d.node(x.operands[0]).dtype)) join(x.operands[0]);
          break;
        default: break;
      }
    }
  }

  // Of a select with a literal -inf on one side, the other side's operand index (1 or 2); else 0.
  std::size_t value_side(const Node& select) const {
    if (is_minus_infinity(d_.node(select.operands[2]))) return 1;
    if (is_minus_infinity(d_.node(select.operands[1]))) return 2;
    return 0;
  }

  // Of a select with a literal +inf on one side and no -inf on the other (s - select(p, 0, inf)
  // masks s; select(p, inf, -inf) is a -inf select, whose kept side is +inf), the other side's
  // operand index (1 or 2); else 0.
  std::size_t plus_infinity_side(const Node& select) const {
    if (value_side(select) != 0) return 0;
    if (is_plus_infinity(d_.node(select.operands[2]))) return 1;
    if (is_plus_infinity(d_.node(select.operands[1]))) return 2;
    return 0;
  }

  // Whether p is computed from indices, inputs, params and literals by elementwise ops alone.
  bool index_only(NodeId p) const { return index_only_[static_cast<std::size_t>(p)]; }

  // The hoistable masks of n (d's ids, in order of discovery, each once).
  const std::vector<Mask>& masks(NodeId n) const { return masks_[static_cast<std::size_t>(n)]; }

  // Whether x is already hoisted: selects of hoistable predicates on top of a value with none.
  bool hoisted(NodeId x) const {
    while (true) {
      const Node& n = d_.node(x);
      if (n.op != OpKind::select || !is_minus_infinity(d_.node(n.operands[2])) || !index_only(n.operands[0]))
        return masks(x).empty();
      x = n.operands[1];
    }
  }

 private:
  const Diagram& d_;
  std::vector<std::vector<Mask>> masks_;
  std::vector<bool> index_only_;
};

// FlashAttention's deferred normalisation, contract(E, V over A) / sum(E over A) with E a
// softmax's numerator, normalised before the contraction instead: contract(E / sum(E over A), V
// over A), which the matcher then reads as contract(softmax(x over A), V over A). Equal in real
// arithmetic (the sum is constant along A). Only where E, the contraction and the sum have no
// other reader; a diagram with none comes back equal.
Diagram normalise_before_contracting(const Diagram& d) {
  std::vector<int> readers(d.nodes.size(), 0);
  for (const Node& n : d.nodes)
    for (NodeId o : n.operands) ++readers[static_cast<std::size_t>(o)];
  for (const Output& o : d.outputs) ++readers[static_cast<std::size_t>(o.node)];
  Matcher matcher(d);
  // div node -> (the contraction, E's operand index in it)
  std::map<NodeId, std::pair<NodeId, std::size_t>> deferred;
  for (NodeId i = 0; i < static_cast<NodeId>(d.nodes.size()); ++i) {
    const Node& n = d.node(i);
    if (n.op != OpKind::div) continue;
    const Node& c = d.node(n.operands[0]);
    const Node& z = d.node(n.operands[1]);
    if (c.op != OpKind::contract || z.op != OpKind::reduce_sum || c.over != z.over) continue;
    if (readers[static_cast<std::size_t>(n.operands[0])] != 1 || readers[static_cast<std::size_t>(n.operands[1])] != 1)
      continue;
    const NodeId e = z.operands[0];
    const auto at = std::find(c.operands.begin(), c.operands.end(), e);
    if (at == c.operands.end() || readers[static_cast<std::size_t>(e)] != 2 || !matcher.is_softmax(e, n.operands[1]))
      continue;
    deferred.emplace(i, std::make_pair(n.operands[0], static_cast<std::size_t>(at - c.operands.begin())));
  }
  if (deferred.empty()) return d;
  Rewrite r(d);
  for (NodeId i = 0; i < static_cast<NodeId>(d.nodes.size()); ++i) {
    const Node& n = d.node(i);
    if (auto it = deferred.find(i); it != deferred.end()) {
      const auto [contraction, operand] = it->second;
      Node weights;
      weights.op = OpKind::div;
      weights.operands = {r.id(d.node(contraction).operands[operand]), r.id(n.operands[1])};
      weights.loc = n.loc;
      const NodeId w = r.add(std::move(weights), i);
      Node c = d.node(contraction);
      for (NodeId& o : c.operands) o = r.id(o);
      c.operands[operand] = w;
      c.name = n.name;
      c.loc = n.loc;
      const NodeId top = w < 0 ? -1 : r.add(std::move(c), i);
      if (top >= 0 && r.node(top).axes == n.axes && r.node(top).dtype == n.dtype) {
        r.replace(i, top);
        continue;
      }
    }
    r.keep(i);
  }
  return r.finish();
}

// recognise_composites on a diagram whose deferred normalisations are normalised first.
Diagram recognise_written(const Diagram& d) {
  Matcher matcher(d);
  std::map<NodeId, Composite> matches;
  for (NodeId i = 0; i < static_cast<NodeId>(d.nodes.size()); ++i)
    if (auto c = matcher.match(i)) matches.emplace(i, std::move(*c));
  // A match whose own values another value still reads is dropped (it would compute them twice),
  // which may leave another's read: until none is.
  for (bool dropped = true; dropped;) {
    std::vector<bool> live(d.nodes.size(), false);
    for (const Output& o : d.outputs) live[static_cast<std::size_t>(o.node)] = true;
    for (std::size_t i = d.nodes.size(); i-- > 0;) {
      if (!live[i]) continue;
      const auto m = matches.find(static_cast<NodeId>(i));
      if (m == matches.end()) {
        for (NodeId o : d.nodes[i].operands) live[static_cast<std::size_t>(o)] = true;
      } else {
        live[static_cast<std::size_t>(m->second.x)] = true;
        if (m->second.scaled)
          for (NodeId o : m->second.scaled->operands) live[static_cast<std::size_t>(o)] = true;
      }
    }
    dropped = false;
    for (auto it = matches.begin(); it != matches.end();) {
      const auto& internal = it->second.internal;
      if (std::any_of(internal.begin(), internal.end(), [&](NodeId n) { return live[static_cast<std::size_t>(n)]; })) {
        it = matches.erase(it);
        dropped = true;
      } else {
        ++it;
      }
    }
  }
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
    if (auto c = matches.count(from) ? std::optional<Composite>(matches.at(from)) : std::nullopt) {
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
  return compacted(d, out, origin);
}

}  // namespace

Diagram recognise_composites(const Diagram& d) { return recognise_written(normalise_before_contracting(d)); }

Diagram pull_factors_out_of_contractions(const Diagram& d) {
  const std::vector<bool> live = live_nodes(d);
  const std::vector<bool> index_only = leaf_computed(d);
  // A factor of contraction c's operand that may move out: computed from leaves, constant along
  // the contracted axes, and no literal 0 or infinity (0 * inf would come out another way).
  auto factor = [&](const Node& c, NodeId f) {
    const Node& x = d.node(f);
    if (!index_only[static_cast<std::size_t>(f)]) return false;
    if (x.op == OpKind::constant && (x.scalar == 0.0 || !std::isfinite(x.scalar))) return false;
    return std::none_of(x.axes.begin(), x.axes.end(),
                        [&](AxisId a) { return std::find(c.over.begin(), c.over.end(), a) != c.over.end(); });
  };
  Rewrite r(d);
  bool changed = false;
  for (NodeId i = 0; i < static_cast<NodeId>(d.nodes.size()); ++i) {
    const Node& n = d.node(i);
    if (n.op == OpKind::contract && live[static_cast<std::size_t>(i)]) {
      // Each operand's factors, innermost first: (factor, divides).
      std::vector<std::pair<NodeId, bool>> factors;
      std::vector<NodeId> operands;
      for (NodeId o : n.operands) {
        std::vector<std::pair<NodeId, bool>> mine;
        while (true) {
          const Node& x = d.node(o);
          if (x.op == OpKind::mul && factor(n, x.operands[1])) {
            mine.emplace_back(x.operands[1], false);
            o = x.operands[0];
          } else if (x.op == OpKind::mul && factor(n, x.operands[0])) {
            mine.emplace_back(x.operands[0], false);
            o = x.operands[1];
          } else if (x.op == OpKind::div && factor(n, x.operands[1])) {
            mine.emplace_back(x.operands[1], true);
            o = x.operands[0];
          } else {
            break;
          }
        }
        operands.push_back(o);
        factors.insert(factors.end(), mine.rbegin(), mine.rend());
      }
      if (!factors.empty()) {
        Node bare = n;
        bare.name.clear();
        for (std::size_t k = 0; k < operands.size(); ++k) bare.operands[k] = r.id(operands[k]);
        NodeId top = r.add(std::move(bare), i);
        for (std::size_t k = 0; k < factors.size() && top >= 0; ++k) {
          Node m;
          m.op = factors[k].second ? OpKind::div : OpKind::mul;
          m.operands = {top, r.id(factors[k].first)};
          m.loc = n.loc;
          if (k + 1 == factors.size()) m.name = n.name;
          top = r.add(std::move(m), i);
        }
        if (top >= 0 && r.node(top).axes == n.axes && r.node(top).dtype == n.dtype) {
          r.replace(i, top);
          changed = true;
          continue;
        }
      }
    }
    r.keep(i);
  }
  return changed ? r.finish() : d;
}

Diagram hoist_masks(const Diagram& d) {
  MaskHoister hoister(d);
  const std::vector<bool> live = live_nodes(d);
  Rewrite r(d);
  auto copy = [&](NodeId n, std::vector<NodeId> operands, NodeId from) {
    Node x = d.node(n);
    x.name.clear();
    x.operands = std::move(operands);
    return r.add(std::move(x), from);
  };
  // n where its masks hold, in out's ids (-1 where a rebuilt node does not type).
  std::map<NodeId, NodeId> stripped;
  // Whether operand i of masked node x is stripped with it (a select's value, not its predicate
  // or fill; not what a sub subtracts) rather than read as it is.
  // A subtracted select of +inf (s - select(p, 0, inf)) is a mask of the sub itself.
  auto subtracted_mask = [&](const Node& x, std::size_t i) {
    if (x.op != OpKind::sub || i != 1) return false;
    const Node& y = d.node(x.operands[1]);
    return y.op == OpKind::select && hoister.plus_infinity_side(y) != 0 && hoister.index_only(y.operands[0]);
  };
  auto strips = [&](const Node& x, std::size_t i) {
    if (subtracted_mask(x, i)) return true;
    const bool value_side = x.op == OpKind::select ? i == hoister.value_side(x) : !(x.op == OpKind::sub && i == 1);
    return value_side && !hoister.masks(x.operands[i]).empty();
  };
  auto to_strip = [&](NodeId n) {
    const Node& x = d.node(n);
    std::vector<NodeId> r;
    for (std::size_t i = 0; i < x.operands.size(); ++i)
      if (strips(x, i)) r.push_back(x.operands[i]);
    return r;
  };
  // n rebuilt where its masks hold, its stripped operands already rebuilt.
  auto rebuild = [&](NodeId n, NodeId from) -> NodeId {
    const Node& x = d.node(n);
    auto value = [&](std::size_t i) {
      return strips(x, i) ? stripped.at(x.operands[i]) : r.id(x.operands[i]);
    };
    std::vector<NodeId> ops;
    for (std::size_t i = 0; i < x.operands.size(); ++i) ops.push_back(value(i));
    if (std::find(ops.begin(), ops.end(), -1) != ops.end()) return -1;
    if (x.op == OpKind::select && hoister.index_only(x.operands[0]) && hoister.plus_infinity_side(x) != 0)
      return ops[hoister.plus_infinity_side(x)];
    if (x.op == OpKind::select && hoister.index_only(x.operands[0])) return ops[hoister.value_side(x)];
    // s - select(p, 0, inf) is s where p holds.
    if (x.op == OpKind::sub && is_zero_literal(r.node(ops[1])) && subtracted_mask(x, 1) && r.node(ops[0]).axes == x.axes)
      return ops[0];
    // s + select(p, 0, -inf) is s where p holds.
    if (x.op == OpKind::add)
      for (std::size_t i : {std::size_t{0}, std::size_t{1}})
        if (is_zero_literal(r.node(ops[i])) && !hoister.masks(x.operands[i]).empty() && r.node(ops[1 - i]).axes == x.axes)
          return ops[1 - i];
    return copy(n, ops, from);
  };
  // Depth first with a stack of its own (a chain of any length); -1 where a node does not type.
  auto strip = [&](NodeId root, NodeId from) -> NodeId {
    if (hoister.masks(root).empty()) return r.id(root);
    std::vector<std::pair<NodeId, bool>> stack{{root, false}};
    while (!stack.empty()) {
      const auto [n, operands_done] = stack.back();
      stack.pop_back();
      if (stripped.count(n)) continue;
      if (operands_done) {
        stripped[n] = rebuild(n, from);
        continue;
      }
      stack.push_back({n, true});
      for (NodeId o : to_strip(n))
        if (!stripped.count(o)) stack.push_back({o, false});
    }
    return stripped.at(root);
  };

  // Where a mask lets the value through, in out's ids: the predicate, or its negation (one node
  // for every reader).
  std::map<NodeId, NodeId> negations;
  auto predicate = [&](const Mask& m, NodeId from) -> NodeId {
    const NodeId p = r.id(m.predicate);
    if (!m.negated) return p;
    if (auto it = negations.find(p); it != negations.end()) return it->second;
    Node negation;
    negation.op = OpKind::logical_not;
    negation.operands = {p};
    return negations[p] = r.add(std::move(negation), from);
  };

  bool changed = false;
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const NodeId from = static_cast<NodeId>(i);
    Node n = d.nodes[i];
    const bool reduction = n.op == OpKind::softmax || n.op == OpKind::logsumexp || n.op == OpKind::reduce_max;
    NodeId operand = reduction ? n.operands[0] : -1;
    if (reduction && live[i] && !hoister.hoisted(operand)) {
      const Node& x = d.node(operand);
      NodeId top = strip(operand, from);
      // Terms dropped may have widened the type (a select of literals is f64): widen back, exactly.
      if (top >= 0 && r.node(top).dtype != x.dtype && is_float(r.node(top).dtype) && is_float(x.dtype) &&
          promote_float(r.node(top).dtype, x.dtype) == x.dtype) {
        Node widen;
        widen.op = OpKind::cast;
        widen.dtype = x.dtype;
        widen.operands = {top};
        top = r.add(std::move(widen), from);
      }
      for (const Mask& m : hoister.masks(operand)) {
        if (top < 0) break;
        // A literal of its own, as a parse of the printed select would give it.
        Node minus_infinity;
        minus_infinity.op = OpKind::constant;
        minus_infinity.scalar = -INFINITY;
        Node sel;
        sel.op = OpKind::select;
        sel.operands = {predicate(m, from), top, r.add(std::move(minus_infinity), from)};
        top = r.add(std::move(sel), from);
      }
      if (top >= 0 && r.node(top).axes == x.axes && r.node(top).dtype == x.dtype) {
        n.operands = {top};
        changed = true;
        r.replace(from, r.add(std::move(n), from));
        continue;
      }
    }
    r.keep(from);
  }
  return changed ? r.finish() : d;
}

}  // namespace napkin::ir
