// SPDX-License-Identifier: Apache-2.0
#include "plan/moves.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/builder.h"
#include "ir/printer.h"
#include "plan/subgraph.h"

namespace napkin::plan {

using ir::AxisId;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

namespace {

bool narrow(DType t) { return t == DType::bf16 || t == DType::f16; }

// A reduction of fewer elements is not split for parallelism: one CTA reads 2^16 elements in
// about the time a second launch costs.
constexpr std::int64_t kSplitMinElements = std::int64_t{1} << 16;
// A GEMM tile's values (128 x 128), by which a contraction's result counts its tiles; and the
// fewest indices the inner part of a cut axis keeps (a partial sum over fewer reads too little
// to pay for writing it and reading it back).
constexpr std::int64_t kTileValues = 128 * 128;
constexpr std::int64_t kMinInner = 512;
// A cut reduction aims at kRowWaves times the rows that fill the GPU, where rows of kLongRow
// values or more remain (cut_long_axes).
constexpr std::int64_t kRowWaves = 4;
constexpr std::int64_t kLongRow = 8192;

bool splittable_reduction(OpKind op) {
  return op == OpKind::reduce_sum || op == OpKind::reduce_max || op == OpKind::logsumexp || op == OpKind::softmax ||
         op == OpKind::rmsnorm || op == OpKind::layernorm;
}

// The rows a reduction leaves (a contraction: its GEMM tiles) and how many fill the GPU, where
// it leaves too few (min_rows: rows; min_rows / 2: tiles) and reduces kSplitMinElements or more.
struct Fill {
  std::int64_t now, target;
};
std::optional<Fill> too_few_rows(const ir::Diagram& d, NodeId id, std::int64_t min_rows) {
  const Node& n = d.node(id);
  if (min_rows <= 0 || n.over.empty() || d.elements(n.over) < kSplitMinElements) return std::nullopt;
  Fill f{};
  if (n.op == OpKind::contract && n.operands.size() == 2)
    f = {std::max<std::int64_t>(1, d.elements(n.axes) / kTileValues), min_rows / 2};
  else if (splittable_reduction(n.op))
    f = {d.elements(d.node(n.operands[0]).axes) / d.elements(n.over), min_rows};
  else
    return std::nullopt;
  if (f.now >= f.target) return std::nullopt;
  return f;
}

// A node's name, or t<id> for an unnamed temporary: the stem of the names moves give new values.
std::string plain_name(const ir::Diagram& d, NodeId n) {
  return d.node(n).name.empty() ? fmt::format("t{}", n) : d.node(n).name;
}

std::string fresh_name(const ir::Diagram& d, std::string base) {
  while (d.find_node(base) || d.find_axis(base)) base += "_";
  return base;
}

}  // namespace

std::optional<ir::Diagram> rebuild(const ir::Diagram& d, const Replace& replace) {
  ir::Builder b(d.source_name);
  for (const ir::Axis& a : d.axes) b.axis(a.name, a.size, a.loc);
  std::vector<ir::Value> value(d.nodes.size());
  for (NodeId n = 0; n < static_cast<NodeId>(d.nodes.size()); ++n) {
    const Node& node = d.node(n);
    ir::Value v = replace(n, b, value);
    if (!v.valid()) {
      std::vector<ir::Value> ops;
      for (NodeId o : node.operands) ops.push_back(value[static_cast<std::size_t>(o)]);
      v = replay_node(b, node, ops, [](AxisId a) { return a; });
      if (!node.name.empty() && node.op != OpKind::input && node.op != OpKind::constant) v = b.named(node.name, v, node.loc);
    }
    value[static_cast<std::size_t>(n)] = v;
  }
  for (const ir::Output& o : d.outputs) b.output(value[static_cast<std::size_t>(o.node)], o.axes, o.loc);
  auto r = b.finish();
  if (!r) return std::nullopt;
  return std::move(*r);
}

namespace {

bool single_use(const ir::Diagram& d, NodeId n) {
  if (d.users(n).size() != 1) return false;
  for (const ir::Output& o : d.outputs)
    if (o.node == n) return false;
  return true;
}

// rmsnorm(X over e) [* g] [as T], contracted over e with an input W: the row-scale move.
std::optional<Variant> row_scale(const ir::Diagram& d, NodeId c) {
  const Node& cn = d.node(c);
  if (cn.operands.size() != 2 || cn.over.size() != 1) return std::nullopt;
  const AxisId e = cn.over[0];
  for (int side = 0; side < 2; ++side) {
    NodeId x = cn.operands[static_cast<std::size_t>(side)];
    const NodeId w = cn.operands[static_cast<std::size_t>(1 - side)];
    if (d.node(w).op != OpKind::input || !narrow(d.node(w).dtype)) continue;
    std::vector<NodeId> chain;  // removed nodes, outermost first
    if (d.node(x).op == OpKind::cast && single_use(d, x)) {
      chain.push_back(x);
      x = d.node(x).operands[0];
    }
    std::optional<NodeId> gamma;
    if (d.node(x).op == OpKind::mul && single_use(d, x)) {
      for (int k = 0; k < 2; ++k) {
        const NodeId r = d.node(x).operands[static_cast<std::size_t>(k)], g = d.node(x).operands[static_cast<std::size_t>(1 - k)];
        const auto& ga = d.node(g).axes;
        if (d.node(r).op == OpKind::rmsnorm && (ga.empty() || (ga.size() == 1 && ga[0] == e))) {
          chain.push_back(x);
          gamma = g;
          x = r;
          break;
        }
      }
    }
    const Node& rn = d.node(x);
    if (rn.op != OpKind::rmsnorm || rn.over != std::vector<AxisId>{e} || !single_use(d, x)) continue;
    const NodeId X = rn.operands[0];
    if (d.node(X).op != OpKind::input || !narrow(d.node(X).dtype)) continue;
    chain.push_back(x);
    const std::string rstd = fresh_name(d, d.node(X).name + "_rstd");
    const std::string scaled = fresh_name(d, d.node(w).name + "_scaled");
    const double count = static_cast<double>(d.axis(e).size);
    auto v = rebuild(d, [&](NodeId n, ir::Builder& b, const std::vector<ir::Value>& val) -> ir::Value {
      if (n != c) return {};
      const ir::Value xv = val[static_cast<std::size_t>(X)];
      const ir::Value ss = b.reduce(OpKind::reduce_sum, xv * xv, {e});
      const ir::Value var = b.binary(OpKind::add, b.scale(ss, 1.0 / count), b.constant(rn.scalar));
      const ir::Value r = b.named(rstd, b.unary(OpKind::exp, b.scale(b.unary(OpKind::log, var), -0.5)));
      ir::Value wv = val[static_cast<std::size_t>(w)];
      if (gamma) wv = b.named(scaled, b.cast(wv * val[static_cast<std::size_t>(*gamma)], d.node(w).dtype));
      const ir::Value prod = side == 0 ? b.contract({xv, wv}, cn.over, cn.loc) : b.contract({wv, xv}, cn.over, cn.loc);
      ir::Value out = prod * r;
      if (!cn.name.empty()) out = b.named(cn.name, out, cn.loc);
      return out;
    });
    if (!v) continue;
    std::string text = fmt::format(
        "row scale past the contraction: {}(rmsnorm({}){}) . {} = diag({}) ({} . {}): the normalisation runs in the "
        "GEMM's epilogue after a statistics pass{}",
        d.label(c), d.node(X).name, gamma ? " * " + d.label(*gamma) : "", d.node(w).name, rstd, d.node(X).name,
        gamma ? scaled : d.node(w).name, gamma ? fmt::format(" ({} = {} o {}, rounded to {})", scaled, d.label(*gamma), d.node(w).name, dtype_name(d.node(w).dtype)) : "");
    return Variant{std::move(*v), {text}};
  }
  return std::nullopt;
}

// Per node: whether it is computed by a reduction or contraction (or from one): a map, not an
// input.
std::vector<bool> reduced_nodes(const ir::Diagram& d) {
  std::vector<bool> out(d.nodes.size(), false);
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const OpKind op = d.nodes[i].op;
    out[i] = op == OpKind::contract || ir::op_class(op) == ir::OpClass::reduction;
    for (NodeId o : d.nodes[i].operands) out[i] = out[i] || out[static_cast<std::size_t>(o)];
  }
  return out;
}

// contract(A +- B +- ..., W over x) with at least one term computed by a reduction or
// contraction (softmax maps subtracted: differential attention) as contract(A, W) +- contract(B,
// W) +- ...: each term a kernel of its own family (an attention per map, a GEMM per input), the
// products combined elementwise, no map materialised. A sum of single use inside the sum is
// flattened where all its terms are maps. A factor of a term that lacks x (a param, a per-head
// value) comes out of the contraction: c B . W = c (B . W). A sum of inputs alone is left as it
// is (one GEMM of it is cheaper).
std::optional<Variant> distribute(const ir::Diagram& d, NodeId c) {
  const Node& cn = d.node(c);
  if (cn.operands.size() != 2) return std::nullopt;
  const std::vector<bool> maps = reduced_nodes(d);
  auto reduced = [&](NodeId n) { return maps[static_cast<std::size_t>(n)]; };
  auto lacks_over = [&](NodeId s) {
    for (AxisId a : d.node(s).axes)
      if (std::count(cn.over.begin(), cn.over.end(), a)) return false;
    return true;
  };
  auto is_sum = [&](NodeId n) { return d.node(n).op == OpKind::add || d.node(n).op == OpKind::sub; };
  // A term: a map, times or over a factor without x (lam * P2, P2 / 2), or scaled or negated;
  // `minus` where the sum subtracts it.
  struct Term {
    NodeId map, factor = -1;
    OpKind op = OpKind::mul;  // mul, div (map / factor), scale (by `scalar`), neg
    double scalar = 1;
    bool minus = false;
  };
  auto term_of = [&](NodeId t, bool minus) {
    const Node& tn = d.node(t);
    Term out{t};
    if (single_use(d, t)) {
      if (tn.op == OpKind::mul)
        for (int k = 0; k < 2; ++k) {
          const NodeId f = tn.operands[static_cast<std::size_t>(k)], m = tn.operands[static_cast<std::size_t>(1 - k)];
          if (lacks_over(f) && !reduced(f) && !lacks_over(m)) out = {m, f};
        }
      if (tn.op == OpKind::div && lacks_over(tn.operands[1]) && !reduced(tn.operands[1]) && !lacks_over(tn.operands[0]))
        out = {tn.operands[0], tn.operands[1], OpKind::div};
      if (tn.op == OpKind::scale || tn.op == OpKind::neg)
        out = {tn.operands[0], -1, tn.op, tn.scalar};
    }
    out.minus = minus;
    return out;
  };
  // The terms of sum node s (taken apart where it is of single use and all its terms are maps).
  std::function<std::vector<Term>(NodeId, bool)> terms_of_operand;
  auto terms_of = [&](NodeId s, bool minus) {
    const Node& sn = d.node(s);
    std::vector<Term> out = terms_of_operand(sn.operands[0], minus);
    for (Term& t : terms_of_operand(sn.operands[1], sn.op == OpKind::sub ? !minus : minus)) out.push_back(t);
    return out;
  };
  terms_of_operand = [&](NodeId t, bool minus) -> std::vector<Term> {
    if (is_sum(t) && single_use(d, t)) {
      std::vector<Term> inner = terms_of(t, minus);
      if (std::all_of(inner.begin(), inner.end(), [&](const Term& i) { return reduced(i.map); })) return inner;
    }
    return {term_of(t, minus)};
  };
  for (int side = 0; side < 2; ++side) {
    const NodeId x = cn.operands[static_cast<std::size_t>(side)], w = cn.operands[static_cast<std::size_t>(1 - side)];
    const Node& xn = d.node(x);
    if (!is_sum(x) || !single_use(d, x)) continue;
    const std::vector<Term> terms = terms_of(x, false);
    if (std::none_of(terms.begin(), terms.end(), [&](const Term& t) { return reduced(t.map); })) continue;
    auto v = rebuild(d, [&](NodeId n, ir::Builder& b, const std::vector<ir::Value>& val) -> ir::Value {
      if (n != c) return {};
      auto part = [&](const Term& t) {
        const ir::Value m = val[static_cast<std::size_t>(t.map)], wv = val[static_cast<std::size_t>(w)];
        ir::Value r = side == 0 ? b.contract({m, wv}, cn.over, cn.loc) : b.contract({wv, m}, cn.over, cn.loc);
        switch (t.op) {
          case OpKind::div: return b.binary(OpKind::div, r, val[static_cast<std::size_t>(t.factor)]);
          case OpKind::scale: return b.scale(r, t.scalar);
          case OpKind::neg: return -r;
          default: return t.factor >= 0 ? val[static_cast<std::size_t>(t.factor)] * r : r;
        }
      };
      ir::Value out = terms[0].minus ? -part(terms[0]) : part(terms[0]);
      for (std::size_t i = 1; i < terms.size(); ++i)
        out = b.binary(terms[i].minus ? OpKind::sub : OpKind::add, out, part(terms[i]), xn.loc);
      if (!cn.name.empty()) out = b.named(cn.name, out, cn.loc);
      return out;
    });
    if (!v) continue;
    auto factor_text = [&](NodeId f) {  // (an unnamed constant by its value)
      const Node& fn = d.node(f);
      return fn.op == OpKind::constant && fn.name.empty() ? ir::format_number(fn.scalar) : d.label(f);
    };
    auto term_text = [&](const Term& t) {
      const std::string product = fmt::format("{} . {}", d.label(t.map), d.label(w));
      switch (t.op) {
        case OpKind::div: return fmt::format("({}) / {}", product, factor_text(t.factor));
        case OpKind::scale: return fmt::format("{} * ({})", ir::format_number(t.scalar), product);
        case OpKind::neg: return fmt::format("-({})", product);
        default: return t.factor >= 0 ? fmt::format("{} * ({})", factor_text(t.factor), product) : product;
      }
    };
    auto written_text = [&](const Term& t) {
      switch (t.op) {
        case OpKind::div: return fmt::format("{} / {}", d.label(t.map), factor_text(t.factor));
        case OpKind::scale: return fmt::format("{} * {}", ir::format_number(t.scalar), d.label(t.map));
        case OpKind::neg: return fmt::format("-{}", d.label(t.map));
        default: return t.factor >= 0 ? fmt::format("{} * {}", factor_text(t.factor), d.label(t.map)) : d.label(t.map);
      }
    };
    std::string written, apart;
    for (std::size_t i = 0; i < terms.size(); ++i) {
      const char* sign = terms[i].minus ? (i == 0 ? "-" : " - ") : (i == 0 ? "" : " + ");
      written += sign + written_text(terms[i]);
      apart += sign + term_text(terms[i]);
    }
    return Variant{std::move(*v), {fmt::format("distributed {} = ({}) . {} as {}: each map contracted apart", d.label(c),
                                               written, d.label(w), apart)}};
  }
  return std::nullopt;
}

// The storage order a GEMM needs of input `x`, an operand of two-operand contraction `c`, or
// empty where x's serves: each class of its axes (batch L, its own M or N, contracted K) one run,
// a unit-stride M, N or K innermost, as the kernel flattens each class into one mode
// (subgraph.cpp's gemm_classes). The order given keeps L first, then the other two classes in the
// order x holds them, but the class of x's innermost axis last (so that the copy moves rows).
std::vector<AxisId> gemm_order_needed(const ir::Diagram& d, NodeId c, NodeId x) {
  const Node& cn = d.node(c);
  const NodeId other = cn.operands[0] == x ? cn.operands[1] : cn.operands[0];
  auto cls = [&](AxisId a) { return gemm_axis_class(d, cn, other, a); };  // L, own, K
  const std::vector<AxisId>& order = d.node(x).axes;
  bool serves = cls(order.back()) != 0;
  for (int k = 0; k < 3; ++k) serves = serves && one_run(order, [&](AxisId a) { return cls(a) == k; });
  if (serves) return {};
  std::vector<int> classes{0};
  for (AxisId a : order)
    if (std::find(classes.begin(), classes.end(), cls(a)) == classes.end()) classes.push_back(cls(a));
  // The class of x's innermost axis last, where it is not L: the copy then keeps the unit-stride
  // axis innermost and moves whole rows (W[e k n] read over k as [k e n], not [e n k]).
  if (const int inner = cls(order.back()); inner != 0) {
    classes.erase(std::find(classes.begin(), classes.end(), inner));
    classes.push_back(inner);
  }
  std::vector<AxisId> needed;
  for (int k : classes)
    for (AxisId a : order)
      if (cls(a) == k) needed.push_back(a);
  return needed;
}

// An input whose storage order no GEMM can read as one mode per class (Q[b q h d] under a GEMM
// batched over b and h: the layout attention users pass) copied once by an elementwise kernel,
// stored as the GEMM needs it (the planner lays an intermediate out for the GEMM that reads
// it), and the contractions that could not read it read the copy. The attention kernel reads
// such layouts itself; this is for the plans of GEMMs.
std::optional<Variant> relayout_inputs(const ir::Diagram& d) {
  std::map<NodeId, std::vector<AxisId>> copies;  // input -> an order that would need no copy
  std::set<std::pair<NodeId, NodeId>> reads;      // (contraction, input) read through the copy
  for (NodeId c = 0; c < static_cast<NodeId>(d.nodes.size()); ++c) {
    const Node& cn = d.node(c);
    if (cn.op != OpKind::contract || cn.operands.size() != 2 || cn.operands[0] == cn.operands[1]) continue;
    for (NodeId x : cn.operands) {
      if (d.node(x).op != OpKind::input || !narrow(d.node(x).dtype)) continue;
      std::vector<AxisId> needed = gemm_order_needed(d, c, x);
      if (needed.empty()) continue;
      copies.emplace(x, std::move(needed));
      reads.insert({c, x});
    }
  }
  if (copies.empty()) return std::nullopt;
  std::map<NodeId, ir::Value> copy_of;
  std::vector<std::string> what;
  auto v = rebuild(d, [&](NodeId n, ir::Builder& b, const std::vector<ir::Value>& val) -> ir::Value {
    const Node& node = d.node(n);
    if (auto it = copies.find(n); it != copies.end()) {
      const ir::Value in = replay_node(b, node, {}, [](AxisId a) { return a; });
      const std::string name = fresh_name(d, node.name + "_copy");
      copy_of[n] = b.named(name, b.cast(in, node.dtype, node.loc), node.loc);
      auto names = [&](const std::vector<AxisId>& axes) {
        std::vector<std::string> v;
        for (AxisId a : axes) v.push_back(d.axis(a).name);
        return fmt::format("{}", fmt::join(v, " "));
      };
      what.push_back(fmt::format("{}[{}] as {} (declared {}[{}], it would need none)", node.name, names(node.axes), name,
                                 node.name, names(it->second)));
      return in;
    }
    if (node.op != OpKind::contract || !(reads.count({n, node.operands[0]}) || reads.count({n, node.operands[1]}))) return {};
    std::vector<ir::Value> ops;
    for (NodeId o : node.operands) ops.push_back(reads.count({n, o}) ? copy_of.at(o) : val[static_cast<std::size_t>(o)]);
    ir::Value out = replay_node(b, node, ops, [](AxisId a) { return a; });
    if (!node.name.empty()) out = b.named(node.name, out, node.loc);
    return out;
  });
  if (!v) return std::nullopt;
  return Variant{std::move(*v), {fmt::format("copied {}, stored for the GEMMs that read them (each class of axes, "
                                             "batch, own and contracted, one mode)", fmt::join(what, ", "))}};
}

double volume(const ir::Diagram& d, const std::set<AxisId>& s) {
  double v = 1;
  for (AxisId a : s) v *= static_cast<double>(d.axis(a).size);
  return v;
}
std::set<AxisId> axes_of(const ir::Diagram& d, NodeId n) { return {d.node(n).axes.begin(), d.node(n).axes.end()}; }
std::set<AxisId> set_union(const std::set<AxisId>& a, const std::set<AxisId>& b) {
  std::set<AxisId> r = a;
  r.insert(b.begin(), b.end());
  return r;
}

// An output computed by a contraction, in an order its GEMM cannot write (C[g h m n], h the batch
// and g m the rows): the contraction's value becomes an intermediate, which the GEMM writes in
// its own order (subgraph.cpp's boundaries), and an elementwise copy writes the caller's. (An
// output cast or scaled after the contraction has that kernel already.)
std::optional<Variant> relayout_outputs(const ir::Diagram& d) {
  std::set<NodeId> copied;
  for (const ir::Output& o : d.outputs) {
    const Node& c = d.node(o.node);
    if (c.op != OpKind::contract || c.operands.size() != 2 || c.operands[0] == c.operands[1]) continue;
    if (!gemm_write_order(d, c, o.axes).empty()) copied.insert(o.node);
  }
  if (copied.empty()) return std::nullopt;
  std::vector<std::string> what;
  auto v = rebuild(d, [&](NodeId n, ir::Builder& b, const std::vector<ir::Value>& val) -> ir::Value {
    if (!copied.count(n)) return {};
    const Node& node = d.node(n);
    std::vector<ir::Value> ops;
    for (NodeId o : node.operands) ops.push_back(val[static_cast<std::size_t>(o)]);
    const ir::Value product = replay_node(b, node, ops, [](AxisId a) { return a; });
    what.push_back(node.name);
    return b.named(node.name, b.cast(product, node.dtype, node.loc), node.loc);
  });
  if (!v) return std::nullopt;
  return Variant{std::move(*v), {fmt::format("{} written by a copy of the GEMM's result, which the GEMM stores in its own order "
                                             "(the order asked splits a class of its axes: batch, rows, columns)",
                                             fmt::join(what, ", "))}};
}

// contract(contract(A, B) [as T], C) with fewer FLOPs in another order.
std::optional<Variant> reassociate(const ir::Diagram& d, NodeId c2) {
  const Node& outer = d.node(c2);
  if (outer.operands.size() != 2) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    NodeId t = outer.operands[static_cast<std::size_t>(side)];
    const NodeId cc = outer.operands[static_cast<std::size_t>(1 - side)];
    std::optional<DType> cast;
    const NodeId rounded = t;
    if (d.node(t).op == OpKind::cast && single_use(d, t)) {
      cast = d.node(t).dtype;
      t = d.node(t).operands[0];
    }
    const Node& inner = d.node(t);
    if (inner.op != OpKind::contract || inner.operands.size() != 2 || !single_use(d, t)) continue;
    const NodeId a = inner.operands[0], bb = inner.operands[1];
    const std::set<AxisId> sa = axes_of(d, a), sb = axes_of(d, bb), sc = axes_of(d, cc), so = axes_of(d, c2);
    const double before = 2 * volume(d, set_union(sa, sb)) + 2 * volume(d, set_union(axes_of(d, t), sc));
    // Pair (first, second) contracted first; `third` after.
    struct Order { NodeId first, second, third; };
    double best = before * 0.9;
    std::optional<Order> pick;
    for (Order o : {Order{bb, cc, a}, Order{a, cc, bb}}) {
      const std::set<AxisId> pair = set_union(axes_of(d, o.first), axes_of(d, o.second));
      std::set<AxisId> kept;
      const std::set<AxisId> third = axes_of(d, o.third);
      for (AxisId x : pair)
        if (third.count(x) || so.count(x)) kept.insert(x);
      const double flops = 2 * volume(d, pair) + 2 * volume(d, set_union(third, kept));
      if (flops < best) {
        best = flops;
        pick = o;
      }
    }
    if (!pick) continue;
    const std::string name = fresh_name(d, plain_name(d, pick->first) + plain_name(d, pick->second));
    auto v = rebuild(d, [&](NodeId n, ir::Builder& b, const std::vector<ir::Value>& val) -> ir::Value {
      if (n != c2) return {};
      const std::set<AxisId> pair = set_union(axes_of(d, pick->first), axes_of(d, pick->second));
      const std::set<AxisId> third = axes_of(d, pick->third);
      std::vector<AxisId> summed_first, summed_second;
      for (AxisId x : pair)
        if (!third.count(x) && !so.count(x)) summed_first.push_back(x);
      ir::Value first = b.contract({val[static_cast<std::size_t>(pick->first)], val[static_cast<std::size_t>(pick->second)]}, summed_first);
      if (cast) first = b.cast(first, *cast);
      first = b.named(name, first);
      std::set<AxisId> rest = set_union(third, pair);
      for (AxisId x : rest)
        if (!so.count(x) && std::find(summed_first.begin(), summed_first.end(), x) == summed_first.end()) summed_second.push_back(x);
      ir::Value out = b.contract({val[static_cast<std::size_t>(pick->third)], first}, summed_second, outer.loc);
      if (!outer.name.empty()) out = b.named(outer.name, out, outer.loc);
      return out;
    });
    if (!v) continue;
    std::string text = fmt::format("reassociated {} = ({} . {}) . {} as {} . ({} = {} . {}): {:.3g} GFLOP instead of {:.3g}",
                                   d.label(c2), d.label(a), d.label(bb), d.label(cc), d.label(pick->third), name,
                                   d.label(pick->first), d.label(pick->second), best / 1e9, before / 1e9);
    if (cast)  // the written rounding moves with the product it rounded: say that the numbers change
      text += fmt::format("; the rounding to {} written at {} now rounds {} (the result differs from the diagram's within "
                          "{}'s rounding)",
                          dtype_name(*cast), d.label(rounded), name, dtype_name(*cast));
    return Variant{std::move(*v), {text}};
  }
  return std::nullopt;
}

// sum(A * B over x) in f32, as a contraction of A and B over x computes it (bf16 and f16
// products are exact in f32; the sum is f32 either way), cast to `dtype` where that is narrower.
ir::Value vector_sum(ir::Builder& b, ir::Value a, DType a_dtype, ir::Value bv, DType b_dtype, AxisId x, DType dtype) {
  auto wide = [&](ir::Value v, DType t) { return t == DType::f32 ? v : b.cast(v, DType::f32); };
  ir::Value r = b.reduce(OpKind::reduce_sum, wide(a, a_dtype) * wide(bv, b_dtype), {x});
  return dtype == DType::f32 ? r : b.cast(r, dtype);
}

// A contraction over one axis one of whose operands has no axis of its own (a matrix-vector
// product: no M or N for a GEMM) as the row reduction it is: sum(A * B over x).
std::optional<Variant> vector_contraction(const ir::Diagram& d, NodeId c) {
  const Node& cn = d.node(c);
  if (cn.operands.size() != 2 || cn.over.size() != 1) return std::nullopt;
  const NodeId a = cn.operands[0], bb = cn.operands[1];
  const std::set<AxisId> sa = axes_of(d, a), sb = axes_of(d, bb);
  const bool b_in_a = std::includes(sa.begin(), sa.end(), sb.begin(), sb.end());
  const bool a_in_b = std::includes(sb.begin(), sb.end(), sa.begin(), sa.end());
  if (!b_in_a && !a_in_b) return std::nullopt;
  auto v = rebuild(d, [&](NodeId n, ir::Builder& b, const std::vector<ir::Value>& val) -> ir::Value {
    if (n != c) return {};
    ir::Value out = vector_sum(b, val[static_cast<std::size_t>(a)], d.node(a).dtype, val[static_cast<std::size_t>(bb)],
                               d.node(bb).dtype, cn.over[0], cn.dtype);
    if (!cn.name.empty()) out = b.named(cn.name, out, cn.loc);
    return out;
  });
  if (!v) return std::nullopt;
  return Variant{std::move(*v), {fmt::format("{} = {} . {} has no axis of {}'s own: a row reduction sum({} * {} over {})",
                                             d.label(c), d.label(a), d.label(bb), d.label(b_in_a ? bb : a), d.label(a),
                                             d.label(bb), d.axis(cn.over[0]).name)}};
}

// sum(contract(A, B over x) over K), K axes of B alone, pushed into B: A . sum(B over K), a
// matrix-vector product, run as the row reduction sum(A * KS over x) (normalised linear
// attention's denominator: phi(Q) . sum_k phi(K), not a q x k score matrix). Only where the
// product is such a vector product over one axis; the contraction stays for its other users.
std::optional<Variant> sum_into_operand(const ir::Diagram& d, NodeId r) {
  const Node& rn = d.node(r);
  if (rn.op != OpKind::reduce_sum) return std::nullopt;
  const NodeId c = rn.operands[0];
  const Node& cn = d.node(c);
  if (cn.op != OpKind::contract || cn.operands.size() != 2 || cn.over.size() != 1) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const NodeId a = cn.operands[static_cast<std::size_t>(1 - side)], bb = cn.operands[static_cast<std::size_t>(side)];
    const std::set<AxisId> sa = axes_of(d, a), sb = axes_of(d, bb);
    bool only_b = true;
    for (AxisId k : rn.over) only_b = only_b && sb.count(k) && !sa.count(k);
    if (!only_b) continue;
    std::set<AxisId> rest = sb;  // the axes of sum(B over K)
    for (AxisId k : rn.over) rest.erase(k);
    if (!std::includes(sa.begin(), sa.end(), rest.begin(), rest.end())) continue;  // not a vector product
    const std::string name = fresh_name(d, plain_name(d, bb) + "_sum");
    auto v = rebuild(d, [&](NodeId n, ir::Builder& b, const std::vector<ir::Value>& val) -> ir::Value {
      if (n != r) return {};
      ir::Value bv = val[static_cast<std::size_t>(bb)];
      if (d.node(bb).dtype != DType::f32) bv = b.cast(bv, DType::f32);
      const ir::Value ks = b.named(name, b.reduce(OpKind::reduce_sum, bv, rn.over));
      ir::Value out = vector_sum(b, val[static_cast<std::size_t>(a)], d.node(a).dtype, ks, DType::f32, cn.over[0], rn.dtype);
      if (!rn.name.empty()) out = b.named(rn.name, out, rn.loc);
      return out;
    });
    if (!v) continue;
    std::vector<std::string> over;
    for (AxisId k : rn.over) over.push_back(d.axis(k).name);
    return Variant{std::move(*v), {fmt::format("sum over {} pushed into {}: {} = {} . {} ({} = sum({} over {})), a "
                                               "reduction instead of the contraction's {:.3g} GFLOP",
                                               fmt::join(over, " "), d.label(bb), d.label(r), d.label(a), name, name,
                                               d.label(bb), fmt::join(over, " "),
                                               2 * volume(d, set_union(sa, sb)) / 1e9)}};
  }
  return std::nullopt;
}

// An elementwise value of one input (a feature map phi(Q)) read by several kernels' worth of
// consumers, at least one a contraction or a reduction: each consumer after the first gets its
// own copy of the code, so that each can compute it from the input as it loads (a GEMM's
// prologue, a reduction's body) instead of one kernel materialising it for all. The cost model
// then weighs reading the input again and recomputing against writing and reading the value.
struct Recompute {
  NodeId value = -1;
  NodeId source = -1;             // the one input the code reads (beside computed values 8x smaller)
  std::set<NodeId> code;          // the value's elementwise ancestors down to the input (the value included)
  std::vector<NodeId> consumers;  // its live users, in order; all but the first get a copy
};

std::optional<Recompute> recompute_at(const ir::Diagram& d, NodeId n, const std::vector<bool>& live,
                                      const std::vector<std::vector<NodeId>>& users_of) {
  constexpr std::size_t kMaxCode = 16;  // nodes of code copied per consumer: cheap code only
  if (!ir::is_elementwise(d.node(n).op)) return std::nullopt;
  for (const ir::Output& o : d.outputs)
    if (o.node == n) return std::nullopt;
  Recompute r;
  r.value = n;
  // Live users only: a move leaves the value it replaced behind, read by nothing.
  for (NodeId u : users_of[static_cast<std::size_t>(n)])
    if (live[static_cast<std::size_t>(u)]) r.consumers.push_back(u);
  if (r.consumers.size() < 2) return std::nullopt;
  // A consumer that reduces, or whose elementwise code feeds a reduction (BatchNorm's d * d).
  std::function<bool(NodeId, int)> reduces = [&](NodeId u, int depth) {
    const ir::OpClass c = ir::op_class(d.node(u).op);
    if (c == ir::OpClass::contraction || c == ir::OpClass::reduction) return true;
    if (!ir::is_elementwise(d.node(u).op) || depth == 0) return false;
    for (NodeId w : users_of[static_cast<std::size_t>(u)])
      if (live[static_cast<std::size_t>(w)] && reduces(w, depth - 1)) return true;
    return false;
  };
  if (std::none_of(r.consumers.begin(), r.consumers.end(), [&](NodeId u) { return reduces(u, 4); })) return std::nullopt;
  std::vector<NodeId> stack{n};
  while (!stack.empty()) {
    const NodeId x = stack.back();
    stack.pop_back();
    const Node& node = d.node(x);
    if (node.op == OpKind::input) {
      if (r.source >= 0 && r.source != x) return std::nullopt;
      r.source = x;
      continue;
    }
    if (node.op == OpKind::constant) continue;
    // A computed value much smaller than this one (BatchNorm's mean in X - mean) is read beside
    // the input, broadcast, as each consumer loads it: not part of the code.
    if (x != n && !ir::is_elementwise(node.op) && d.elements(node.axes) * 8 <= d.elements(d.node(n).axes)) continue;
    if (!ir::is_elementwise(node.op) || r.code.size() >= kMaxCode) return std::nullopt;
    if (!r.code.insert(x).second) continue;
    for (NodeId o : node.operands) stack.push_back(o);
  }
  if (r.source < 0) return std::nullopt;
  for (NodeId x : r.code)  // the code's intermediate values are the value's alone
    if (x != n)
      for (NodeId u : users_of[static_cast<std::size_t>(x)])
        if (!r.code.count(u)) return std::nullopt;
  return r;
}

// The diagram with each of `moves` applied, in one rebuild (their codes are disjoint: each code's
// intermediate values have no user outside it).
std::optional<Variant> apply_recomputes(const ir::Diagram& d, const std::vector<Recompute>& moves) {
  std::map<NodeId, std::vector<const Recompute*>> at;  // consumer -> the values it gets a copy of
  for (const Recompute& r : moves)
    for (std::size_t i = 1; i < r.consumers.size(); ++i) at[r.consumers[i]].push_back(&r);
  std::map<NodeId, std::vector<std::string>> copies;  // value -> its copies' names
  std::set<std::string> taken;
  auto v = rebuild(d, [&](NodeId u, ir::Builder& b, const std::vector<ir::Value>& val) -> ir::Value {
    const auto it = at.find(u);
    if (it == at.end()) return {};
    std::map<NodeId, ir::Value> copied;  // value -> its copy for this consumer
    for (const Recompute* r : it->second) {
      std::map<NodeId, ir::Value> copy;
      for (NodeId x : r->code) {  // ids ascend in topological order
        std::vector<ir::Value> ops;
        for (NodeId o : d.node(x).operands) ops.push_back(copy.count(o) ? copy.at(o) : val[static_cast<std::size_t>(o)]);
        copy[x] = replay_node(b, d.node(x), ops, [](AxisId a) { return a; });
      }
      std::vector<std::string>& names = copies[r->value];
      std::string name = plain_name(d, r->value) + "_" + std::to_string(names.size() + 2);
      while (taken.count(name) || d.find_node(name) || d.find_axis(name)) name += "_";
      taken.insert(name);
      names.push_back(name);
      copied[r->value] = b.named(name, copy[r->value], d.node(r->value).loc);
    }
    const Node& un = d.node(u);
    std::vector<ir::Value> ops;
    for (NodeId o : un.operands) ops.push_back(copied.count(o) ? copied.at(o) : val[static_cast<std::size_t>(o)]);
    ir::Value out = replay_node(b, un, ops, [](AxisId a) { return a; });
    if (!un.name.empty()) out = b.named(un.name, out, un.loc);
    return out;
  });
  if (!v) return std::nullopt;
  Variant out{std::move(*v), {}};
  for (const Recompute& r : moves)
    out.moves.push_back(fmt::format("recomputed {} from '{}' in each of its {} consumers ({} for the others): {} node(s) of "
                                    "code instead of a materialised value",
                                    d.label(r.value), d.node(r.source).name, r.consumers.size(),
                                    fmt::join(copies[r.value], ", "), r.code.size()));
  return out;
}

// A contraction of three or more operands, as a pair contracted first (summing the axes no other
// operand and not the result has) and the rest after: GEMMs take two operands. One variant per
// pair, the smallest product first (the chained variant applies it again until every
// contraction is of two); the plan's cost model decides between them (which pair is cheaper
// depends on the sizes and on what fuses).
std::optional<Variant> split_pair(const ir::Diagram& d, NodeId c, std::size_t bi, std::size_t bj,
                                  const std::vector<AxisId>& first_over);
std::vector<Variant> split_contraction(const ir::Diagram& d, NodeId c) {
  const Node& cn = d.node(c);
  if (cn.op != OpKind::contract || cn.operands.size() < 3) return {};
  const std::set<AxisId> so = axes_of(d, c);
  const std::size_t n = cn.operands.size();
  // The axes the pair (i, j) can sum: contracted, and in no other operand.
  auto summable = [&](std::size_t i, std::size_t j) {
    std::vector<AxisId> out;
    for (AxisId x : cn.over) {
      bool elsewhere = so.count(x) > 0;
      for (std::size_t o = 0; o < n; ++o)
        if (o != i && o != j) elsewhere = elsewhere || axes_of(d, cn.operands[o]).count(x);
      if (!elsewhere) out.push_back(x);
    }
    return out;
  };
  std::vector<std::tuple<double, std::size_t, std::size_t>> pairs;  // (the product's volume, i, j)
  // Operands over the same axes, or one over a subset of the other's: an elementwise product.
  auto elementwise = [&](std::size_t i, std::size_t j) {
    const std::set<AxisId> a = axes_of(d, cn.operands[i]), b = axes_of(d, cn.operands[j]);
    return std::includes(a.begin(), a.end(), b.begin(), b.end()) || std::includes(b.begin(), b.end(), a.begin(), a.end());
  };
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      const std::vector<AxisId> over = summable(i, j);
      if (over.empty() && !elementwise(i, j)) continue;  // (an outer product first: never cheaper)
      std::set<AxisId> kept = set_union(axes_of(d, cn.operands[i]), axes_of(d, cn.operands[j]));
      for (AxisId x : over) kept.erase(x);
      pairs.emplace_back(volume(d, kept), i, j);
    }
  std::stable_sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  std::vector<Variant> out;
  for (const auto& [product, bi, bj] : pairs)
    if (auto v = split_pair(d, c, bi, bj, summable(bi, bj))) out.push_back(std::move(*v));
  return out;
}

// The contraction `c` with operands bi and bj contracted first over `first_over`.
std::optional<Variant> split_pair(const ir::Diagram& d, NodeId c, std::size_t bi, std::size_t bj,
                                  const std::vector<AxisId>& first_over) {
  const Node& cn = d.node(c);
  const std::size_t n = cn.operands.size();
  const std::string name = fresh_name(d, plain_name(d, cn.operands[bi]) + plain_name(d, cn.operands[bj]));
  auto v = rebuild(d, [&](NodeId m, ir::Builder& b, const std::vector<ir::Value>& val) -> ir::Value {
    if (m != c) return {};
    auto at = [&](std::size_t i) { return val[static_cast<std::size_t>(cn.operands[i])]; };
    const ir::Value pair = b.named(name, first_over.empty() ? at(bi) * at(bj) : b.contract({at(bi), at(bj)}, first_over));
    std::vector<ir::Value> rest;
    for (std::size_t i = 0; i < n; ++i)
      if (i != bi && i != bj) rest.push_back(at(i));
    rest.push_back(pair);
    std::vector<AxisId> over;
    for (AxisId x : cn.over)
      if (std::find(first_over.begin(), first_over.end(), x) == first_over.end()) over.push_back(x);
    // (Nothing left to sum: the remaining operands times the pair, elementwise.)
    ir::Value out = rest[0];
    if (over.empty()) {
      for (std::size_t i = 1; i < rest.size(); ++i) out = out * rest[i];
    } else {
      out = b.contract(rest, over, cn.loc);
    }
    if (!cn.name.empty()) out = b.named(cn.name, out, cn.loc);
    return out;
  });
  if (!v) return std::nullopt;
  return Variant{std::move(*v), {fmt::format("{} of {} operands split: {} = {} . {} first", d.label(c), n, name,
                                             d.label(cn.operands[bi]), d.label(cn.operands[bj]))}};
}

}  // namespace

bool relayout_applies(const ir::Diagram& d) { return relayout_inputs(d).has_value() || relayout_outputs(d).has_value(); }

std::vector<Variant> applicable_moves(const ir::Diagram& d, bool recompute, bool relayout) {
  std::vector<Variant> out;
  const std::vector<bool> live = live_nodes(d);
  std::vector<std::vector<NodeId>> users_of(d.nodes.size());
  for (NodeId n = 0; n < static_cast<NodeId>(d.nodes.size()); ++n) {
    std::set<NodeId> seen;
    for (NodeId o : d.node(n).operands)
      if (seen.insert(o).second) users_of[static_cast<std::size_t>(o)].push_back(n);
  }
  std::vector<Recompute> recomputes;
  if (relayout) {
    if (auto v = relayout_inputs(d)) out.push_back(std::move(*v));
    if (auto v = relayout_outputs(d)) out.push_back(std::move(*v));
  }
  for (NodeId n = 0; n < static_cast<NodeId>(d.nodes.size()); ++n) {
    if (auto v = sum_into_operand(d, n)) out.push_back(std::move(*v));
    if (recompute)
      if (auto r = recompute_at(d, n, live, users_of)) recomputes.push_back(std::move(*r));
    if (d.node(n).op != OpKind::contract) continue;
    if (auto v = row_scale(d, n)) out.push_back(std::move(*v));
    if (auto v = reassociate(d, n)) out.push_back(std::move(*v));
    if (auto v = distribute(d, n)) out.push_back(std::move(*v));
    if (auto v = vector_contraction(d, n)) out.push_back(std::move(*v));
    for (Variant& v : split_contraction(d, n)) out.push_back(std::move(v));
  }
  // Recomputes: the first few alone, and all of them together (each variant is a fusion search
  // of its own: a diagram of hundreds of feature maps must not make hundreds).
  constexpr std::size_t kAlone = 3;
  for (std::size_t i = 0; i < std::min(kAlone, recomputes.size()); ++i)
    if (auto v = apply_recomputes(d, {recomputes[i]})) out.push_back(std::move(*v));
  if (recomputes.size() > 1)
    if (auto v = apply_recomputes(d, recomputes)) out.push_back(std::move(*v));
  return out;
}

namespace {

// Why `run` (axes in the order a reduction's operand holds them) cannot be one axis of `d`, or
// "" where it can.
std::string why_not_mergeable(const ir::Diagram& d, const std::vector<ir::AxisId>& run) {
  auto names = [&](const std::vector<ir::AxisId>& axes) {
    std::vector<std::string> v;
    for (ir::AxisId a : axes) v.push_back(d.axis(a).name);
    return fmt::format("{}", fmt::join(v, " "));
  };
  // "" where `axes` holds all of the run, adjacent and in its order, or none of it.
  auto layout = [&](const std::vector<ir::AxisId>& axes, const std::string& what) -> std::string {
    std::vector<std::size_t> at;
    std::vector<ir::AxisId> missing;
    for (ir::AxisId a : run)
      if (auto it = std::find(axes.begin(), axes.end(), a); it != axes.end()) at.push_back(static_cast<std::size_t>(it - axes.begin()));
      else missing.push_back(a);
    if (at.empty()) return "";
    if (!missing.empty()) return fmt::format("{} [{}] lacks {}", what, names(axes), names(missing));
    for (std::size_t i = 1; i < at.size(); ++i)
      if (at[i] != at[i - 1] + 1)
        return fmt::format("{} [{}] holds them {}", what, names(axes), at[i] > at[i - 1] ? "apart" : "in another order");
    return "";
  };
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(d.nodes.size()); ++id) {
    const ir::Node& n = d.node(id);
    if (n.op == ir::OpKind::iota && std::find(run.begin(), run.end(), n.axis) != run.end())
      return fmt::format("{} reads the index of {}", d.label(id), d.axis(n.axis).name);
    if (std::string why = layout(n.axes, d.label(id)); !why.empty()) {
      // An input over part of them (GroupNorm's gamma[g c] over c y x) can be given all of them.
      if (n.op == ir::OpKind::input && why.find(" lacks ") != std::string::npos) {
        std::vector<ir::AxisId> all = n.axes;
        for (ir::AxisId a : run)
          if (std::find(all.begin(), all.end(), a) == all.end()) {
            // (after the run's axes it has, in the run's order)
            auto at = all.end();
            for (auto it = all.begin(); it != all.end(); ++it)
              if (std::find(run.begin(), run.end(), *it) != run.end()) at = it + 1;
            all.insert(at, a);
          }
        why += fmt::format(" (declared over all of them, {}[{}] with its values repeated, it would merge)", n.name, names(all));
      }
      return why;
    }
    const auto over = std::count_if(run.begin(), run.end(), [&](ir::AxisId a) { return std::find(n.over.begin(), n.over.end(), a) != n.over.end(); });
    if (over != 0 && over != static_cast<long>(run.size()))
      return fmt::format("{} runs over part of them ({})", d.label(id), names(n.over));
  }
  for (const ir::Output& o : d.outputs)
    if (std::string why = layout(o.axes, "the output " + d.label(o.node)); !why.empty()) return why;
  return "";
}

// `d` with `run` as one axis (at the first one's place), and the merge.
std::pair<ir::Diagram, AxisMerge> merged(const ir::Diagram& d, const std::vector<ir::AxisId>& run) {
  AxisMerge m;
  std::int64_t size = 1;
  for (ir::AxisId a : run) m.parts.push_back(d.axis(a).name), size *= d.axis(a).size;
  m.name = fmt::format("{}", fmt::join(m.parts, "_"));
  while (d.find_axis(m.name) || d.find_node(m.name)) m.name += "_";  // (axes and values share one namespace)
  ir::Diagram out = d;
  std::vector<ir::AxisId> id(d.axes.size(), -1);
  out.axes.clear();
  for (std::size_t a = 0; a < d.axes.size(); ++a) {
    const auto at = std::find(run.begin(), run.end(), static_cast<ir::AxisId>(a));
    if (at != run.begin() && at != run.end()) continue;
    id[a] = static_cast<ir::AxisId>(out.axes.size());
    out.axes.push_back(d.axes[a]);
    if (at == run.begin()) out.axes.back().name = m.name, out.axes.back().size = size;
  }
  auto relabel = [&](std::vector<ir::AxisId>& axes) {
    std::vector<ir::AxisId> kept;
    for (ir::AxisId a : axes)  // (the run is adjacent: its first axis stands for it, the rest go)
      if (id[static_cast<std::size_t>(a)] >= 0) kept.push_back(id[static_cast<std::size_t>(a)]);
    axes = std::move(kept);
  };
  for (ir::Node& n : out.nodes) {
    relabel(n.axes);
    relabel(n.over);
    if (n.axis >= 0) n.axis = id[static_cast<std::size_t>(n.axis)];
  }
  for (ir::Output& o : out.outputs) relabel(o.axes);
  return {std::move(out), std::move(m)};
}

}  // namespace

std::optional<Variant> split_reductions(const ir::Diagram& d, std::int64_t min_rows) {
  auto names = [&](const std::vector<AxisId>& axes) {
    std::vector<std::string> v;
    for (AxisId a : axes) v.push_back(d.axis(a).name);
    return fmt::format("{}", fmt::join(v, " "));
  };
  auto elements = [&](const std::vector<AxisId>& axes) {
    std::int64_t e = 1;
    for (AxisId a : axes) e *= d.axis(a).size;
    return e;
  };
  // A reduction's axes in runs, outermost first (each a reduction of its own, innermost first),
  // and why it is split (one line each).
  struct Split {
    std::vector<std::vector<AxisId>> runs;
    std::vector<std::string> why;
    bool columns = false;  // a softmax or logsumexp in maxes and sums (column kernels take them)
  };
  std::map<NodeId, Split> split;
  for (NodeId id = 0; id < static_cast<NodeId>(d.nodes.size()); ++id) {
    const Node& n = d.node(id);
    const auto fill = too_few_rows(d, id, min_rows);
    // (A contraction is split only to fill the GPU: split-K.)
    const bool contraction = n.op == OpKind::contract && fill;
    if (!(splittable_reduction(n.op) || contraction) || n.over.empty()) continue;
    Split s;
    bool in_run = false;
    for (AxisId a : d.node(n.operands[0]).axes) {
      const bool reduced = std::find(n.over.begin(), n.over.end(), a) != n.over.end();
      if (reduced && !in_run) s.runs.emplace_back();
      if (reduced) s.runs.back().push_back(a);
      in_run = reduced;
    }
    if (contraction && s.runs.size() > 1) continue;
    if (s.runs.size() > 1)
      s.why.push_back(fmt::format("{} holds them apart", d.label(n.operands[0])));
    // Runs that cannot be one axis of the diagram (an index reads one of them, another
    // reduction takes part of them, GroupNorm's gamma[g c] lacks y x of c y x): cut into the
    // longest runs that can, innermost first (c, then y x).
    for (std::size_t r = 0; r < s.runs.size(); ++r) {
      if (s.runs[r].size() < 2) continue;
      const std::string why = why_not_mergeable(d, s.runs[r]);
      if (why.empty()) continue;
      s.why.push_back(fmt::format("{} cannot be one axis: {}", names(s.runs[r]), why));
      std::vector<std::vector<AxisId>> parts;  // innermost first
      std::vector<AxisId> rest = s.runs[r];
      while (!rest.empty()) {
        std::size_t from = 0;  // the longest suffix of `rest` that merges (one axis always does)
        while (from + 1 < rest.size() && !why_not_mergeable(d, {rest.begin() + static_cast<long>(from), rest.end()}).empty()) ++from;
        parts.emplace_back(rest.begin() + static_cast<long>(from), rest.end());
        rest.resize(from);
      }
      std::reverse(parts.begin(), parts.end());
      s.runs.erase(s.runs.begin() + static_cast<long>(r));
      s.runs.insert(s.runs.begin() + static_cast<long>(r), parts.begin(), parts.end());
      r += parts.size() - 1;
    }
    // Too few rows to fill the GPU (a loss summed over every axis is one row on one SM): the
    // innermost run reduced first over its inner axes, with the outer ones' rows beside.
    if (fill && s.runs.back().size() > 1) {
      std::vector<AxisId>& last = s.runs.back();
      std::size_t j = 1;
      std::int64_t rows = fill->now * (elements(n.over) / elements(last)) * d.axis(last[0]).size;
      while (j + 1 < last.size() && rows < fill->target) rows *= d.axis(last[j++]).size;
      std::vector<AxisId> inner(last.begin() + static_cast<long>(j), last.end());
      last.resize(j);
      s.runs.push_back(std::move(inner));
      s.why.push_back(fmt::format("{} {} fill the GPU where {} cannot", rows, contraction ? "GEMM tiles" : "rows",
                                  std::max<std::int64_t>(fill->now, 1)));
    }
    if (contraction && s.runs.size() < 2) continue;
    // A softmax or norm of an input that does not hold the axes innermost: no row kernel reads
    // it (its rows are not contiguous), so in maxes and sums, which column kernels take.
    const Node& operand = d.node(n.operands[0]);
    if (ir::op_class(n.op) == ir::OpClass::composite && operand.op == OpKind::input && !operand.axes.empty() &&
        std::find(n.over.begin(), n.over.end(), operand.axes.back()) == n.over.end()) {
      s.columns = true;
      s.why.push_back(fmt::format("{} [{}] does not hold them innermost", d.label(n.operands[0]), names(operand.axes)));
    }
    if (s.runs.size() > 1 || s.columns) split.emplace(id, std::move(s));
  }
  if (split.empty()) return std::nullopt;
  std::vector<std::string> lines;
  std::set<std::string> sized;
  auto v = rebuild(d, [&](NodeId n, ir::Builder& b, const std::vector<ir::Value>& val) -> ir::Value {
    const auto it = split.find(n);
    if (it == split.end()) return {};
    const Node& x = d.node(n);
    const ir::Value in = val[static_cast<std::size_t>(x.operands[0])];
    if (x.op == OpKind::contract) {  // split-K: contract over the innermost run, sum over the others
      const std::vector<std::vector<AxisId>>& runs = it->second.runs;
      ir::Value r = b.contract({in, val[static_cast<std::size_t>(x.operands[1])]}, runs.back(), x.loc);
      std::string text = fmt::format("contract({}, {} over {})", d.label(x.operands[0]), d.label(x.operands[1]), names(runs.back()));
      for (auto run = runs.rbegin() + 1; run != runs.rend(); ++run) {
        r = b.reduce(OpKind::reduce_sum, r, *run, x.loc);
        text = fmt::format("sum({} over {})", text, names(*run));
      }
      if (!x.name.empty()) r = b.named(x.name, r, x.loc);
      lines.push_back(fmt::format("{} over {} as {}: {}", d.label(n), names(x.over), text, fmt::join(it->second.why, "; ")));
      return r;
    }
    if (x.op == OpKind::rmsnorm || x.op == OpKind::layernorm)
      for (AxisId a : x.over) sized.insert(d.axis(a).name);
    const std::vector<std::vector<AxisId>>& runs = it->second.runs;
    // `op` of `v` over every run, innermost first; `text` says how.
    auto nested = [&](OpKind op, ir::Value v, std::string& text) {
      for (auto run = runs.rbegin(); run != runs.rend(); ++run) {
        v = op == OpKind::logsumexp ? b.composite(op, v, *run, 0.0, x.loc) : b.reduce(op, v, *run, x.loc);
        text = fmt::format("{}({} over {})", ir::op_name(op), text, names(*run));
      }
      return v;
    };
    std::string text = d.label(x.operands[0]);
    ir::Value r;
    // `v`, or `instead` where v == `where` (the guards of ir/normalise.h).
    auto unless = [&](ir::Value v, double where, double instead) {
      return b.select(b.binary(OpKind::eq, v, b.constant(where, x.loc), x.loc), b.constant(instead, x.loc), v, x.loc);
    };
    const double count = static_cast<double>(elements(x.over));
    // x / sqrt(v + eps), sqrt as exp(0.5 log) (ir/normalise.h: the IR has no sqrt).
    auto normalised = [&](ir::Value c, ir::Value sum_of_squares) {
      const ir::Value v = b.binary(OpKind::add, b.binary(OpKind::div, sum_of_squares, b.constant(count, x.loc), x.loc),
                                   b.constant(x.scalar, x.loc), x.loc);
      return b.binary(OpKind::div, c, b.unary(OpKind::exp, b.scale(b.unary(OpKind::log, v, x.loc), 0.5, x.loc), x.loc), x.loc);
    };
    const bool columns = it->second.columns && (x.op == OpKind::softmax || x.op == OpKind::logsumexp);
    switch (columns ? OpKind::constant : x.op) {
      case OpKind::constant: {  // m0 = max (0 where all -inf), e = exp(S - m0), z = sum(e) (ir/normalise.h)
        std::string max_text = text, sum_text = fmt::format("exp({} - m)", text);
        const ir::Value m = nested(OpKind::reduce_max, in, max_text);
        const ir::Value m0 = unless(m, -INFINITY, 0.0);
        const ir::Value e = b.unary(OpKind::exp, b.binary(OpKind::sub, in, m0, x.loc), x.loc);
        const ir::Value z = nested(OpKind::reduce_sum, e, sum_text);
        if (x.op == OpKind::logsumexp) {
          r = b.binary(OpKind::add, m0, b.unary(OpKind::log, z, x.loc), x.loc);
          text = fmt::format("m + log({}), m = {}", sum_text, max_text);
        } else {
          r = b.binary(OpKind::div, e, unless(z, 0.0, 1.0), x.loc);
          text = fmt::format("exp({} - m) / {}, m = {}", d.label(x.operands[0]), sum_text, max_text);
        }
        break;
      }
      case OpKind::softmax: {
        // exp(S - logsumexp(S)) with its logsumexp split (a row that is all -inf gives 0, as
        // softmax does: the logsumexp's -inf is taken as 0 there).
        const ir::Value lse = nested(OpKind::logsumexp, in, text);
        r = b.unary(OpKind::exp, b.binary(OpKind::sub, in, unless(lse, -INFINITY, 0.0), x.loc), x.loc);
        text = fmt::format("exp({} - {})", d.label(x.operands[0]), text);
        break;
      }
      case OpKind::rmsnorm: {  // x / sqrt(sum(x x) / n + eps), the sum split
        std::string squares = fmt::format("{0} * {0}", text);
        r = normalised(in, nested(OpKind::reduce_sum, b.binary(OpKind::mul, in, in, x.loc), squares));
        text = fmt::format("{} / sqrt({} / {} + eps)", text, squares, count);
        break;
      }
      case OpKind::layernorm: {  // c = x - mean, c / sqrt(sum(c c) / n + eps), both sums split
        std::string mean_text = text;
        const ir::Value c = b.binary(OpKind::sub, in, b.binary(OpKind::div, nested(OpKind::reduce_sum, in, mean_text),
                                                                 b.constant(count, x.loc), x.loc), x.loc);
        std::string var_text = "(X - mean)^2";
        r = normalised(c, nested(OpKind::reduce_sum, b.binary(OpKind::mul, c, c, x.loc), var_text));
        text = fmt::format("(X - mean) / sqrt({} / {} + eps), mean = {} / {}", var_text, count, mean_text, count);
        break;
      }
      default: r = nested(x.op, in, text);
    }
    if (!x.name.empty()) r = b.named(x.name, r, x.loc);
    lines.push_back(fmt::format("{} over {} as {}: {}", d.label(n), names(x.over), text, fmt::join(it->second.why, "; ")));
    return r;
  });
  if (!v) return std::nullopt;
  return Variant{std::move(*v), std::move(lines), {sized.begin(), sized.end()}};
}

MergedAxes merge_reduced_axes(const ir::Diagram& d) {
  MergedAxes out{d, {}, {}};
  for (bool more = true; more;) {
    more = false;
    out.refused.clear();  // (the last pass, which merges nothing, says what stays apart)
    const ir::Diagram& cur = out.diagram;
    for (const ir::Node& n : cur.nodes) {
      const ir::OpClass c = ir::op_class(n.op);
      if (n.over.size() < 2 || (c != ir::OpClass::reduction && c != ir::OpClass::composite)) continue;
      std::vector<ir::AxisId> run;
      for (ir::AxisId a : cur.node(n.operands[0]).axes)
        if (std::find(n.over.begin(), n.over.end(), a) != n.over.end()) run.push_back(a);
      if (run.size() != n.over.size()) continue;
      if (std::string why = why_not_mergeable(cur, run); !why.empty()) {
        const std::string line = fmt::format("axes {} not taken as one: {}", fmt::format("{}", fmt::join([&] {
                                                                               std::vector<std::string> v;
                                                                               for (ir::AxisId a : run) v.push_back(cur.axis(a).name);
                                                                               return v;
                                                                             }(), " ")), why);
        if (std::find(out.refused.begin(), out.refused.end(), line) == out.refused.end()) out.refused.push_back(line);
        continue;
      }
      auto [next, m] = merged(cur, run);
      out.diagram = std::move(next);
      out.merges.push_back(std::move(m));
      more = true;
      break;
    }
  }
  return out;
}

namespace {

// `d` with axis `a` as two axes, outer and inner (inner_size indices), adjacent wherever it
// appears; and the cut. The outer axis is the diagram's first: values computed over it (a
// split-K GEMM's partial sums, batched over it) hold it outermost. (No index reads `a`: the
// caller checks.)
std::pair<ir::Diagram, AxisCut> cut_axis(const ir::Diagram& d, AxisId a, std::int64_t inner_size) {
  const ir::Axis axis = d.axis(a);
  AxisCut c{axis.name, fresh_name(d, axis.name + "_outer"), "", inner_size};
  c.inner = fresh_name(d, axis.name + "_inner");
  ir::Diagram out = d;
  out.axes[static_cast<std::size_t>(a)] = {c.inner, inner_size, axis.loc};
  out.axes.insert(out.axes.begin(), ir::Axis{c.outer, axis.size / inner_size, axis.loc});
  auto relabel = [&](std::vector<AxisId>& axes) {
    std::vector<AxisId> next;
    for (AxisId x : axes) {
      if (x == a) next.push_back(0);
      next.push_back(x + 1);
    }
    axes = std::move(next);
  };
  for (ir::Node& n : out.nodes) {
    relabel(n.axes);
    relabel(n.over);
    if (n.axis >= 0) ++n.axis;
  }
  for (ir::Output& o : out.outputs) relabel(o.axes);
  return {std::move(out), std::move(c)};
}

}  // namespace

std::optional<Variant> cut_long_axes(const ir::Diagram& d, std::int64_t min_rows) {
  std::map<std::string, std::int64_t> inner;  // axis cut -> its inner size (the first node asking decides)
  std::vector<std::string> lines;
  for (NodeId id = 0; id < static_cast<NodeId>(d.nodes.size()); ++id) {
    const Node& n = d.node(id);
    const auto fill = too_few_rows(d, id, min_rows);
    if (!fill) continue;
    // The innermost reduced axis as the operand holds it, where it is a run alone (a longer run
    // split_reductions cuts between its axes); a contraction's, where it contracts one axis.
    const std::vector<AxisId>& held = d.node(n.operands[0]).axes;
    auto reduced = [&](AxisId x) { return std::find(n.over.begin(), n.over.end(), x) != n.over.end(); };
    const auto last = std::find_if(held.rbegin(), held.rend(), reduced);
    if (last == held.rend() || (last + 1 != held.rend() && reduced(*(last + 1)))) continue;
    if (n.op == OpKind::contract && n.over.size() != 1) continue;
    const AxisId a = *last;
    const ir::Axis& axis = d.axis(a);
    if (inner.count(axis.name)) continue;
    if (std::any_of(d.nodes.begin(), d.nodes.end(), [&](const Node& m) { return m.op == OpKind::iota && m.axis == a; })) continue;
    // The fewest outer indices that fill the GPU, a divisor of the axis's size. A reduction's
    // rows aim at kRowWaves times that where its rows keep kLongRow values (the row kernel then
    // runs several short CTAs an SM, with a small last wave, not a few long ones); a GEMM's tiles
    // at one wave (each more writes its partial tile).
    const std::int64_t others = d.elements(n.over) / axis.size;
    auto fewest_outer = [&](std::int64_t target, std::int64_t min_inner) -> std::int64_t {
      for (std::int64_t outer = 2; outer <= axis.size / min_inner; ++outer)
        if (axis.size % outer == 0 && fill->now * others * outer >= target) return outer;
      return 0;
    };
    std::int64_t outer = n.op == OpKind::contract ? 0 : fewest_outer(kRowWaves * fill->target, kLongRow);
    if (outer == 0) outer = fewest_outer(fill->target, kMinInner);
    if (outer == 0) continue;
    inner[axis.name] = axis.size / outer;
    lines.push_back(fmt::format("axis {} ({}) taken as {} x {} for {}: {} {} fill the GPU where {} cannot", axis.name, axis.size, outer,
                                axis.size / outer, d.label(id), fill->now * others * outer,
                                n.op == OpKind::contract ? "GEMM tiles" : "rows", fill->now));
  }
  if (inner.empty()) return std::nullopt;
  Variant v{d, std::move(lines)};
  for (const auto& [name, size] : inner) {
    auto [next, cut] = cut_axis(v.diagram, *v.diagram.find_axis(name), size);
    v.diagram = std::move(next);
    v.cut_axes.push_back(std::move(cut));
  }
  return v;
}

}  // namespace napkin::plan
