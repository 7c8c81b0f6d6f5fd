// SPDX-License-Identifier: Apache-2.0
// Pseudocode from a diagram and a schedule. The nodes of the normalised diagram are placed
// relative to the streamed axis `a` by the same structure the streaming analysis checks
// (docs/streaming.md, "How recognition works"): invariant nodes before the loop, local nodes
// and folds over `a` in the body, nodes that only need finished folds in finalize. The
// recurrences are read off the folded operand: exp(x - F) of a running F makes a rescaled
// fold, a folded factor multiplied or divided in is applied once at the end.
#include "emit/pseudocode.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "emit/svg_canvas.h"
#include "ir/printer.h"
#include "sched/skip.h"
#include "sched/streaming.h"

namespace napkin::emit {

using ir::AxisId;
using ir::Node;
using ir::NodeId;
using ir::OpClass;
using ir::OpKind;

namespace {

// Where a node of the normalised diagram is computed, relative to the streamed axis.
enum class Place : std::uint8_t {
  leaf,       // input, constant, iota: referenced, never computed
  pre,        // does not depend on the streamed axis: before the loop
  chunk,      // has the axis: computed per chunk (local, or scaled by running folds)
  fold,       // reduces over the axis: an accumulator updated per chunk
  folded,     // lacks the axis, needs finished folds: finalize (or running, see below)
};

// How a fold over the streamed axis is updated.
enum class FoldUpdate : std::uint8_t { add, max, rescaled };

// Expression precedence, loosest first.
enum Prec : int { kPrecLoose = 0, kPrecSelect, kPrecOr, kPrecAnd, kPrecCmp, kPrecAdd, kPrecMul, kPrecUnary, kPrecAtom };

struct Expr {
  std::string text;
  int prec = kPrecAtom;
};

std::string wrap(const Expr& e, int min_prec) { return e.prec < min_prec ? "(" + e.text + ")" : e.text; }

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

struct Line {
  int indent = 0;
  std::string text;
  std::string comment;
};

struct Row {
  std::string name, shape, dtype, level;
  double bytes = 0;  // per group of the level
  std::string role;
};

class Writer {
 public:
  Writer(const ir::Diagram& d, const sched::Schedule& s, const arch::Machine* m)
      : original_(d), s_(s), m_(m), report_(sched::analyse_streaming(d)), d_(report_.normalised.diagram) {
    compute_extents();
    find_stream();
    classify();
    name_variables();
    build();
  }

  std::vector<std::string> provenance() const {
    const std::string& p = original_.source_name;
    const auto slash = p.find_last_of('/');
    const std::string file = slash == std::string::npos ? p : p.substr(slash + 1);
    return {fmt::format("napkin {}: pseudocode", napkin_version()),
            fmt::format("diagram {}: {}", file, ir::diagram_key(original_)),
            fmt::format("schedule: {}", s_.levels.empty() ? "(none)" : sched::to_string(s_)),
            fmt::format("machine: {}", m_ ? m_->name : "(none)")};
  }
  const std::vector<Line>& lines() const { return lines_; }
  const std::vector<Row>& rows() const { return rows_; }

 private:
  // --- geometry ------------------------------------------------------------------------------
  std::size_t levels() const { return s_.levels.size(); }
  // The computing level: the innermost scheduled one (gmem when the schedule is empty).
  std::string compute_level() const { return levels() ? s_.levels.back().level : std::string(arch::kGmem); }
  std::size_t compute_index() const { return levels() ? levels() - 1 : 0; }

  // ext_[i][a]: the extent of axis a inside one group of level i: the innermost tile or chunk of
  // a at or above i, else the whole axis (docs/cost_model.md §3). ext_[levels()] = whole axes.
  void compute_extents() {
    std::vector<std::int64_t> whole;
    for (const ir::Axis& a : d_.axes) whole.push_back(a.size);
    ext_.assign(levels() + 1, whole);
    std::vector<std::int64_t> cur = whole;
    for (std::size_t i = 0; i < levels(); ++i) {
      for (const auto& t : s_.levels[i].tiles) cur[axis_id(t.axis)] = std::min(cur[axis_id(t.axis)], t.tile);
      for (const auto& c : s_.levels[i].streams) cur[axis_id(c.axis)] = std::min(cur[axis_id(c.axis)], c.chunk);
      ext_[i] = cur;
    }
    ext_[levels()] = whole;
  }
  std::size_t axis_id(const std::string& name) const { return static_cast<std::size_t>(*d_.find_axis(name)); }
  std::int64_t extent(std::size_t level, AxisId a) const {
    if (!levels()) return d_.axis(a).size;
    return ext_[level][static_cast<std::size_t>(a)];
  }
  // The extent of a one level up (the whole axis above the first level).
  std::int64_t parent_extent(std::size_t level, AxisId a) const {
    return level == 0 ? d_.axis(a).size : ext_[level - 1][static_cast<std::size_t>(a)];
  }
  // "[q:128 d:128]": the axes of a tensor at a level, leaving out extents of 1 (a tile of 1 is
  // an index of the group, not a dimension of what it holds).
  std::string shape(const std::vector<AxisId>& axes, std::size_t level) const {
    std::vector<std::string> parts, ones;
    for (AxisId a : axes)
      (extent(level, a) != 1 ? parts : ones).push_back(fmt::format("{}:{}", d_.axis(a).name, extent(level, a)));
    return "[" + fmt::format("{}", fmt::join(parts.empty() ? ones : parts, " ")) + "]";
  }
  double elements(const std::vector<AxisId>& axes, std::size_t level) const {
    double x = 1;
    for (AxisId a : axes) x *= static_cast<double>(extent(level, a));
    return x;
  }
  bool has_axis(const Node& n, AxisId a) const { return std::find(n.axes.begin(), n.axes.end(), a) != n.axes.end(); }
  bool is_output(NodeId id) const {
    return std::any_of(d_.outputs.begin(), d_.outputs.end(), [&](const ir::Output& o) { return o.node == id; });
  }
  // Tensors crossing into a level (as the cost model counts them): its keep list, else every
  // input and output.
  std::vector<std::pair<NodeId, DType>> crossing(std::size_t level) const {
    std::vector<std::pair<NodeId, DType>> out;
    const sched::LevelSchedule& l = s_.levels[level];
    if (!l.keep.empty()) {
      for (const auto& r : l.keep)
        if (auto id = d_.find_node(r.tensor)) out.push_back({*id, dtype_at(level, *id)});
      return out;
    }
    for (NodeId id : d_.inputs()) out.push_back({id, dtype_at(level, id)});
    for (const ir::Output& o : d_.outputs) out.push_back({o.node, dtype_at(level, o.node)});
    return out;
  }
  bool crosses(std::size_t level, NodeId id) const {
    for (const auto& [n, dt] : crossing(level))
      if (n == id) return true;
    return false;
  }
  // The dtype of a tensor at a level: the nearest `keep T:dtype` at or above it.
  DType dtype_at(std::size_t level, NodeId id) const {
    const Node& n = d_.node(id);
    if (n.name.empty()) return n.dtype;
    for (std::size_t j = std::min(level + 1, levels()); j-- > 0;)
      for (const auto& r : s_.levels[j].keep)
        if (r.tensor == n.name && r.dtype) return *r.dtype;
    return n.dtype;
  }

  // --- the streamed axis -------------------------------------------------------------------------
  // The first axis the schedule streams with accumulators (a reduction); its loop is derived
  // with recurrences. Chunks of woven axes (accumulator none) are plain sequential loops.
  void find_stream() {
    for (const auto& l : s_.levels)
      for (const auto& st : l.streams) {
        if (st.accumulators.empty()) continue;
        const AxisId a = static_cast<AxisId>(axis_id(st.axis));
        if (!stream_) stream_ = a;
        else if (*stream_ != a && std::find(extra_streams_.begin(), extra_streams_.end(), st.axis) == extra_streams_.end())
          extra_streams_.push_back(st.axis);
      }
  }

  // --- placement -----------------------------------------------------------------------------------
  void classify() {
    const std::size_t n = d_.nodes.size();
    live_.assign(n, false);
    for (const ir::Output& o : d_.outputs) live_[static_cast<std::size_t>(o.node)] = true;
    for (std::size_t i = n; i-- > 0;)
      if (live_[i])
        for (NodeId o : d_.nodes[i].operands) live_[static_cast<std::size_t>(o)] = true;
    uses_.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i)
      if (live_[i])
        for (NodeId o : d_.nodes[i].operands) ++uses_[static_cast<std::size_t>(o)];
    place_.assign(n, Place::pre);
    std::vector<bool> fold_dep(n, false);
    for (std::size_t i = 0; i < n; ++i) {
      const Node& x = d_.nodes[i];
      if (ir::op_class(x.op) == OpClass::leaf) {
        place_[i] = Place::leaf;
        continue;
      }
      if (!stream_) continue;
      const AxisId a = *stream_;
      for (NodeId o : x.operands)
        if (fold_dep[static_cast<std::size_t>(o)] || place_[static_cast<std::size_t>(o)] == Place::fold)
          fold_dep[i] = true;
      if (std::find(x.over.begin(), x.over.end(), a) != x.over.end()) place_[i] = Place::fold;
      else if (has_axis(x, a) || std::any_of(x.operands.begin(), x.operands.end(), [&](NodeId o) {
                 return place_[static_cast<std::size_t>(o)] == Place::chunk ||
                        (place_[static_cast<std::size_t>(o)] == Place::leaf && has_axis(d_.node(o), a));
               }))
        place_[i] = Place::chunk;
      else if (fold_dep[i]) place_[i] = Place::folded;
    }
    deferred_.assign(n, {});
    exps_.assign(n, {});
    running_.assign(n, false);
    if (!stream_) return;
    // Deferred factors and stabilisers of every chunk node and fold, in node order.
    for (std::size_t i = 0; i < n; ++i) {
      if (!live_[i] || (place_[i] != Place::chunk && place_[i] != Place::fold)) continue;
      const Node& x = d_.nodes[i];
      if (place_[i] == Place::chunk && (x.op == OpKind::exp || x.op == OpKind::exp2) && shifted(x.operands[0])) {
        exps_[i] = {static_cast<NodeId>(i)};
        continue;
      }
      for (NodeId o : x.operands) {
        const auto oi = static_cast<std::size_t>(o);
        if (is_folded(o)) {
          if (place_[i] == Place::chunk && (x.op == OpKind::mul || x.op == OpKind::div)) deferred_[i].push_back({x.op, o});
          continue;
        }
        if (place_[oi] != Place::chunk) continue;
        deferred_[i].insert(deferred_[i].end(), deferred_[oi].begin(), deferred_[oi].end());
        for (NodeId e : exps_[oi])
          if (std::find(exps_[i].begin(), exps_[i].end(), e) == exps_[i].end()) exps_[i].push_back(e);
      }
    }
    // Running nodes: folded values the body needs as they grow (the stabilisers inside the
    // rescaled exps, and the folded values they are made of), and the folds behind them.
    for (std::size_t i = 0; i < n; ++i)
      for (NodeId e : exps_[i]) {
        mark_running(d_.node(e).operands[0]);
        if (const auto form = delta(d_.node(e).operands[0]))
          for (const auto& [f, c] : *form) stabiliser_.insert(f);
      }
  }
  bool is_folded(NodeId id) const {
    const Place p = place_[static_cast<std::size_t>(id)];
    return p == Place::folded || p == Place::fold;
  }
  // A chunk value that adds or subtracts a folded value (x - F): the argument of a rescaled exp.
  bool shifted(NodeId id) const {
    const Node& x = d_.node(id);
    if (place_[static_cast<std::size_t>(id)] != Place::chunk) return false;
    for (NodeId o : x.operands)
      if (is_folded(o) || shifted(o)) return true;
    return false;
  }
  void mark_running(NodeId id) {
    const auto i = static_cast<std::size_t>(id);
    const Place p = place_[i];
    if (p == Place::folded || p == Place::fold) {
      if (running_[i]) return;
      running_[i] = true;
      if (p == Place::fold) return;  // its own operands are chunk values
    } else if (p != Place::chunk) {
      return;
    }
    for (NodeId o : d_.node(id).operands) mark_running(o);
  }
  // The deferred factors of a fold (folded values multiplied or divided into its operand).
  const std::vector<std::pair<OpKind, NodeId>>& deferred_of(NodeId f) const {
    return deferred_[static_cast<std::size_t>(f)];
  }
  FoldUpdate update_of(NodeId f) const {
    const Node& x = d_.node(f);
    if (x.op == OpKind::reduce_max) return FoldUpdate::max;
    return exps_[static_cast<std::size_t>(f)].empty() ? FoldUpdate::add : FoldUpdate::rescaled;
  }

  // --- names ------------------------------------------------------------------------------------------
  // Which nodes become variables, and their names. User names are kept; folds, running values,
  // values used more than once, and deferred factors get a name from their role.
  void name_variables() {
    const std::size_t n = d_.nodes.size();
    var_.assign(n, "");
    alias_.assign(n, -1);
    for (const ir::Axis& a : d_.axes) taken_.insert(a.name);
    for (const Node& x : d_.nodes)
      if (!x.name.empty()) taken_.insert(x.name);
    std::set<NodeId> deferred_factor;
    for (std::size_t i = 0; i < n; ++i)
      for (const auto& [op, f] : deferred_[i].empty() ? std::vector<std::pair<OpKind, NodeId>>{} : deferred_[i])
        if (place_[static_cast<std::size_t>(f)] == Place::folded) deferred_factor.insert(f);
    for (std::size_t i = 0; i < n; ++i) {
      if (!live_[i] || place_[i] == Place::leaf) continue;
      const Node& x = d_.nodes[i];
      const auto id = static_cast<NodeId>(i);
      if (!x.name.empty()) {
        // A named chunk value whose stripped form (deferred factors dropped) is another
        // variable is that variable: `P = e / l_safe` is e in the body.
        if (place_[i] == Place::chunk && !deferred_[i].empty()) {
          const NodeId under = strip(id);
          if (under != id && !d_.node(under).name.empty()) {
            alias_[i] = under;
            continue;
          }
          if (under != id) {
            alias_[i] = under;
            deferred_name_[under] = x.name;
            continue;
          }
        }
        var_[i] = x.name;
        continue;
      }
      const bool fold = place_[i] == Place::fold;
      // Running values are variables when the rescale compares their old and new values
      // (the stabilisers); what they are computed from is inlined.
      if (fold || stabiliser_.count(id) || uses_[i] > 1 || deferred_factor.count(id)) var_[i] = "?";  // named below
    }
    // Names for the unnamed variables, in node order.
    for (std::size_t i = 0; i < n; ++i) {
      if (var_[i] != "?") continue;
      const auto id = static_cast<NodeId>(i);
      if (auto it = deferred_name_.find(id); it != deferred_name_.end()) {
        var_[i] = it->second;  // the user's name for the value before its deferred factors
        continue;
      }
      var_[i] = fresh(role_name(id));
    }
    for (std::size_t i = 0; i < n; ++i)
      if (alias_[i] >= 0 && var_[static_cast<std::size_t>(alias_[i])].empty())
        var_[static_cast<std::size_t>(alias_[i])] = d_.nodes[i].name;
  }
  // The node a scaled chunk value is once its deferred factors are dropped.
  NodeId strip(NodeId id) const {
    const Node& x = d_.node(id);
    if (place_[static_cast<std::size_t>(id)] != Place::chunk) return id;
    if (x.op == OpKind::mul || x.op == OpKind::div) {
      std::vector<NodeId> rest;
      for (std::size_t k = 0; k < x.operands.size(); ++k) {
        const NodeId o = x.operands[k];
        if (is_folded(o) && (x.op == OpKind::mul || k == 1)) continue;
        rest.push_back(o);
      }
      if (rest.size() == 1 && rest[0] != id) {
        const NodeId r = rest[0];
        if (d_.node(r).name.empty() && uses_[static_cast<std::size_t>(r)] == 1) return strip(r);
        return r;
      }
    }
    return id;
  }
  std::string role_name(NodeId id) const {
    const Node& x = d_.node(id);
    const auto i = static_cast<std::size_t>(id);
    // The named value a contraction is written into through casts: `O = contract(..) as bf16`.
    auto named_user = [&]() -> std::string {
      NodeId at = id;
      for (int hops = 0; hops < 8; ++hops) {
        const auto users = d_.users(at);
        if (users.size() != 1) return {};
        at = users[0];
        const Node& u = d_.node(at);
        if (u.op != OpKind::cast) return {};
        if (!u.name.empty()) return u.name;
      }
      return {};
    };
    switch (x.op) {
      case OpKind::reduce_max: return "m";
      case OpKind::reduce_sum:
        if (place_[i] == Place::fold && !exps_[i].empty()) return "l";
        return "s";
      case OpKind::contract: {
        const std::string u = named_user();
        return u.empty() ? "acc" : u + "_acc";
      }
      case OpKind::select:
        for (std::size_t k = 1; k < 3; ++k) {
          const NodeId o = x.operands[k];
          const NodeId other = x.operands[3 - k];
          if (!var_[static_cast<std::size_t>(o)].empty() && var_[static_cast<std::size_t>(o)] != "?" &&
              d_.node(other).op == OpKind::constant) {
            // A guard tests the value itself (m == -inf ? 0 : m); a mask tests something else.
            const auto& cond = d_.node(x.operands[0]).operands;
            const bool guard = std::find(cond.begin(), cond.end(), o) != cond.end();
            return var_[static_cast<std::size_t>(o)] + (guard ? "_safe" : "_masked");
          }
        }
        return "t";
      case OpKind::exp: case OpKind::exp2: {
        // sqrt, written exp(0.5 * log(.)) by normalisation: the root of the mean square, or
        // the standard deviation.
        const OpKind from = original_.node(report_.normalised.origin[i]).op;
        if (from == OpKind::rmsnorm) return "rms";
        if (from == OpKind::layernorm) return "std";
        return "E";
      }
      case OpKind::sub: {
        const NodeId from = report_.normalised.origin[i];
        if (original_.node(from).op == OpKind::layernorm) return "xc";
        return "t";
      }
      default: return "t";
    }
  }
  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int k = 2; taken_.count(name) || taken_.count(name + "_new"); ++k) name = fmt::format("{}{}", base, k);
    taken_.insert(name);
    return name;
  }

  // --- expressions ------------------------------------------------------------------------------------
  enum class Ctx : std::uint8_t { pre, body, post, init };

  // A reference to node `id` from context `ctx`: its variable, or the inlined expression.
  Expr ref(NodeId id, Ctx ctx) const {
    const auto i = static_cast<std::size_t>(id);
    const Node& x = d_.node(id);
    if (alias_[i] >= 0 && ctx == Ctx::body) return ref(alias_[i], ctx);
    if (x.op == OpKind::input) return {x.name, kPrecAtom};
    if (x.op == OpKind::constant) return {number(x.scalar), x.scalar < 0 ? kPrecUnary : kPrecAtom};
    if (x.op == OpKind::iota) return {d_.axis(x.axis).name, kPrecAtom};
    if (ctx == Ctx::post && place_[i] == Place::fold && !deferred_of(id).empty()) return finished(id);
    if (!var_[i].empty()) {
      if (ctx == Ctx::body && running_[i]) return {var_[i] + "_new", kPrecAtom};
      return {var_[i], kPrecAtom};
    }
    return definition(id, ctx);
  }
  // A fold's value once finished: its accumulator with the deferred factors applied.
  Expr finished(NodeId f) const {
    std::string t = var_[static_cast<std::size_t>(f)];
    for (const auto& [op, g] : deferred_of(f)) t += (op == OpKind::div ? " / " : " * ") + wrap(ref(g, Ctx::post), kPrecUnary);
    return {t, kPrecMul};
  }
  static std::string number(double v) { return ir::format_number(v); }
  std::string over_text(const Node& x) const {
    std::vector<std::string> names;
    for (AxisId a : x.over) names.push_back(d_.axis(a).name);
    return fmt::format("{}", fmt::join(names, " "));
  }
  std::string reduce_name(const Node& x) const {
    const std::string op = x.op == OpKind::reduce_max ? "max" : "sum";
    if (x.over.size() == 1) return op + "_" + d_.axis(x.over[0]).name;
    std::vector<std::string> names;
    for (AxisId a : x.over) names.push_back(d_.axis(a).name);
    return fmt::format("{}_({})", op, fmt::join(names, ","));
  }
  // The operand list of a contraction, deferred factors dropped in the body.
  Expr contraction(const Node& x, Ctx ctx) const {
    std::vector<std::string> parts;
    for (NodeId o : x.operands) parts.push_back(wrap(ref(body_strip(o, ctx), ctx), kPrecMul));
    if (x.over.empty()) return {fmt::format("{}", fmt::join(parts, " * ")), kPrecMul};
    return {fmt::format("{} over {}", fmt::join(parts, " @ "), over_text(x)), kPrecLoose};
  }
  NodeId body_strip(NodeId id, Ctx ctx) const { return ctx == Ctx::body ? strip(id) : id; }

  // The expression that defines node `id` (its op applied to references to its operands).
  Expr definition(NodeId id, Ctx ctx) const {
    const Node& x = d_.node(id);
    const auto i = static_cast<std::size_t>(id);
    if (ctx == Ctx::body && place_[i] == Place::chunk && strip(id) != id) return ref(strip(id), ctx);
    auto op = [&](std::size_t k) { return ref(x.operands[k], ctx); };
    auto binary = [&](std::string_view sym, int prec, bool assoc) -> Expr {
      return {wrap(op(0), prec) + " " + std::string(sym) + " " + wrap(op(1), assoc ? prec : prec + 1), prec};
    };
    auto call = [&](std::string_view f) -> Expr {
      std::vector<std::string> args;
      for (std::size_t k = 0; k < x.operands.size(); ++k) args.push_back(op(k).text);
      return {fmt::format("{}({})", f, fmt::join(args, ", ")), kPrecAtom};
    };
    // sqrt(v), which normalisation writes exp(0.5 * log(v)).
    if (x.op == OpKind::exp) {
      const Node& half = d_.node(x.operands[0]);
      if (half.op == OpKind::scale && half.scalar == 0.5 && var_[static_cast<std::size_t>(x.operands[0])].empty()) {
        const Node& lg = d_.node(half.operands[0]);
        if (lg.op == OpKind::log && var_[static_cast<std::size_t>(half.operands[0])].empty())
          return {fmt::format("sqrt({})", ref(lg.operands[0], ctx).text), kPrecAtom};
      }
    }
    switch (x.op) {
      case OpKind::input: case OpKind::constant: case OpKind::iota: return ref(id, ctx);
      case OpKind::exp: return call("exp");
      case OpKind::exp2: return call("exp2");
      case OpKind::log: return call("log");
      case OpKind::tanh: return call("tanh");
      case OpKind::floor: return call("floor");
      case OpKind::abs: return {"|" + op(0).text + "|", kPrecAtom};
      case OpKind::neg: return {"-" + wrap(op(0), kPrecUnary), kPrecUnary};
      case OpKind::logical_not: return {"!" + wrap(op(0), kPrecUnary), kPrecUnary};
      case OpKind::cast: return {wrap(op(0), kPrecAtom) + " as " + std::string(dtype_name(x.dtype)), kPrecLoose};
      case OpKind::scale: return {wrap(op(0), kPrecMul) + " * " + number(x.scalar), kPrecMul};
      case OpKind::softcap: return {fmt::format("softcap({}, {})", op(0).text, number(x.scalar)), kPrecAtom};
      case OpKind::add: return binary("+", kPrecAdd, true);
      case OpKind::sub: return binary("-", kPrecAdd, false);
      case OpKind::mul: return binary("*", kPrecMul, true);
      case OpKind::div: return binary("/", kPrecMul, false);
      case OpKind::max: return call("max");
      case OpKind::min: return call("min");
      case OpKind::lt: return binary("<", kPrecCmp, false);
      case OpKind::le: return binary("<=", kPrecCmp, false);
      case OpKind::gt: return binary(">", kPrecCmp, false);
      case OpKind::ge: return binary(">=", kPrecCmp, false);
      case OpKind::eq: return binary("==", kPrecCmp, false);
      case OpKind::ne: return binary("!=", kPrecCmp, false);
      case OpKind::logical_and: return binary("&&", kPrecAnd, true);
      case OpKind::logical_or: return binary("||", kPrecOr, true);
      case OpKind::select:
        return {fmt::format("{} ? {} : {}", wrap(op(0), kPrecUnary), wrap(op(1), kPrecOr), wrap(op(2), kPrecSelect)),
                kPrecSelect};
      case OpKind::reduce_sum: case OpKind::reduce_max:
        return {fmt::format("{}({})", reduce_name(x), op(0).text), kPrecAtom};
      case OpKind::contract: return contraction(x, ctx);
      default: break;  // composites do not survive normalisation
    }
    return {std::string(ir::op_name(x.op)), kPrecAtom};
  }

  // --- rescaling --------------------------------------------------------------------------------------
  // arg_new - arg_old of an exp's argument, as a linear form over the running values it
  // shifts by (the chunk terms cancel): exp(arg_new) = exp(arg_old) * exp(arg_new - arg_old).
  std::optional<std::map<NodeId, double>> delta(NodeId id) const {
    const Node& x = d_.node(id);
    const auto i = static_cast<std::size_t>(id);
    using Form = std::map<NodeId, double>;
    if (is_folded(id)) return Form{{id, 1.0}};
    if (place_[i] != Place::chunk) return Form{};  // invariant or a leaf: cancels
    auto combine = [](Form a, const Form& b, double sign) {
      for (const auto& [k, v] : b) a[k] += sign * v;
      return a;
    };
    auto constant = [&](NodeId o) -> std::optional<double> {
      if (d_.node(o).op == OpKind::constant) return d_.node(o).scalar;
      return std::nullopt;
    };
    switch (x.op) {
      case OpKind::add: case OpKind::sub: {
        auto a = delta(x.operands[0]), b = delta(x.operands[1]);
        if (!a || !b) return std::nullopt;
        return combine(*a, *b, x.op == OpKind::add ? 1.0 : -1.0);
      }
      case OpKind::neg: {
        auto a = delta(x.operands[0]);
        if (!a) return std::nullopt;
        return combine(Form{}, *a, -1.0);
      }
      case OpKind::cast: return delta(x.operands[0]);
      case OpKind::scale: {
        auto a = delta(x.operands[0]);
        if (!a) return std::nullopt;
        return combine(Form{}, *a, x.scalar);
      }
      case OpKind::mul: case OpKind::div:
        for (std::size_t k = 0; k < 2; ++k)
          if (auto c = constant(x.operands[1 - k]); c && (x.op == OpKind::mul || k == 0)) {
            auto a = delta(x.operands[k]);
            if (!a) return std::nullopt;
            return combine(Form{}, *a, x.op == OpKind::mul ? *c : 1.0 / *c);
          }
        return std::nullopt;
      default: break;
    }
    // A chunk value that does not shift by a running value cancels.
    if (std::none_of(x.operands.begin(), x.operands.end(), [&](NodeId o) { return is_folded(o) || shifted(o); }))
      return Form{};
    return std::nullopt;
  }
  // The rescale factor of one exp node: exp(F_old - F_new) for exp(x - F).
  std::string rescale_factor(NodeId e) const {
    const Node& x = d_.node(e);
    const std::string f = x.op == OpKind::exp2 ? "exp2" : "exp";
    const auto form = delta(x.operands[0]);
    if (!form) {
      return fmt::format("{}({} - {})", f, definition(x.operands[0], Ctx::body).text,
                         definition(x.operands[0], Ctx::init).text);
    }
    std::vector<std::string> terms;
    for (const auto& [node, coefficient] : *form) {
      if (coefficient == 0) continue;
      const std::string old = var_[static_cast<std::size_t>(node)], now = old + "_new";
      // coefficient * (F_new - F_old)
      if (coefficient == 1) terms.push_back(now + " - " + old);
      else if (coefficient == -1) terms.push_back(old + " - " + now);
      else if (coefficient < 0) terms.push_back(fmt::format("{} * ({} - {})", number(-coefficient), old, now));
      else terms.push_back(fmt::format("{} * ({} - {})", number(coefficient), now, old));
    }
    if (terms.empty()) return "1";
    return fmt::format("{}({})", f, fmt::join(terms, " + "));
  }
  // The rescale of a fold: the product of the factors of the exps in its operand.
  std::string rescale_of(NodeId f) const {
    std::vector<std::string> parts;
    for (NodeId e : exps_[static_cast<std::size_t>(f)]) {
      const std::string r = rescale_factor(e);
      if (std::find(parts.begin(), parts.end(), r) == parts.end()) parts.push_back(r);
    }
    return fmt::format("{}", fmt::join(parts, " * "));
  }

  // --- constants at init ------------------------------------------------------------------------------
  // The value of a running folded node when every fold holds its initial value, if it is a
  // constant (m_safe = 0 when m = -inf).
  std::optional<double> init_value(NodeId id) const {
    const Node& x = d_.node(id);
    const auto i = static_cast<std::size_t>(id);
    if (x.op == OpKind::constant) return x.scalar;
    if (place_[i] == Place::fold) {
      if (update_of(id) == FoldUpdate::max) return -std::numeric_limits<double>::infinity();
      return 0.0;
    }
    if (place_[i] != Place::folded) return std::nullopt;
    std::vector<double> v;
    for (NodeId o : x.operands) {
      auto r = init_value(o);
      if (!r) return std::nullopt;
      v.push_back(*r);
    }
    switch (x.op) {
      case OpKind::select: return v[0] != 0 ? v[1] : v[2];
      case OpKind::eq: return v[0] == v[1] ? 1.0 : 0.0;
      case OpKind::ne: return v[0] != v[1] ? 1.0 : 0.0;
      case OpKind::lt: return v[0] < v[1] ? 1.0 : 0.0;
      case OpKind::le: return v[0] <= v[1] ? 1.0 : 0.0;
      case OpKind::gt: return v[0] > v[1] ? 1.0 : 0.0;
      case OpKind::ge: return v[0] >= v[1] ? 1.0 : 0.0;
      case OpKind::add: return v[0] + v[1];
      case OpKind::sub: return v[0] - v[1];
      case OpKind::mul: return v[0] * v[1];
      case OpKind::div: return v[0] / v[1];
      case OpKind::neg: return -v[0];
      case OpKind::scale: return v[0] * x.scalar;
      case OpKind::max: return std::max(v[0], v[1]);
      case OpKind::min: return std::min(v[0], v[1]);
      case OpKind::cast: return v[0];
      case OpKind::exp: return std::exp(v[0]);
      case OpKind::log: return std::log(v[0]);
      default: return std::nullopt;
    }
  }

  // --- the loop nest ----------------------------------------------------------------------------------
  void emit(int indent, std::string text, std::string comment = {}) {
    lines_.push_back({indent, std::move(text), std::move(comment)});
  }
  std::string group_axes(std::size_t level, std::int64_t* count) const {
    std::vector<std::string> parts;
    *count = 1;
    for (const auto& t : s_.levels[level].tiles) {
      const AxisId a = static_cast<AxisId>(axis_id(t.axis));
      const std::int64_t pe = parent_extent(level, a), te = extent(level, a);
      if (te >= pe) continue;
      *count *= ceil_div(pe, te);
      std::string p = te == 1 ? t.axis : fmt::format("{}-tile of {}", t.axis, te);
      if (te > 1 && pe % te != 0) p += fmt::format(", the last {}", pe % te);
      parts.push_back(p);
    }
    return fmt::format("{}", fmt::join(parts, ", "));
  }
  // Tensors loaded into `level` once per group (they lack the streamed chunk there).
  bool chunked_at(std::size_t level, NodeId id) const {
    if (!stream_) return false;
    return has_axis(d_.node(id), *stream_) && extent(level, *stream_) < d_.axis(*stream_).size;
  }
  std::string source_of(std::size_t level, NodeId id) const {
    for (std::size_t j = level; j-- > 0;)
      if (crosses(j, id)) return s_.levels[j].level;
    return std::string(arch::kGmem);
  }
  std::string dtype_change(std::size_t level, NodeId id, DType dt) const {
    const std::string src = source_of(level, id);
    DType from = d_.node(id).dtype;
    for (std::size_t j = level; j-- > 0;)
      if (crosses(j, id)) {
        from = dtype_at(j, id);
        break;
      }
    return from == dt ? std::string(dtype_name(dt)) : fmt::format("{} (from {})", dtype_name(dt), dtype_name(from));
  }
  void emit_loads(int indent, std::size_t level, bool chunked) {
    const std::string name = s_.levels[level].level;
    const bool innermost = level + 1 == levels();
    for (const auto& [id, dt] : crossing(level)) {
      const Node& t = d_.node(id);
      if (t.op != OpKind::input || chunked_at(level, id) != chunked) continue;
      const std::string what = fmt::format("{}{} {}", t.name, shape(t.axes, level), dtype_change(level, id, dt));
      if (name == arch::kL2) {
        emit(indent, fmt::format("hold {} in l2", what), fmt::format("read from {} once per l2 group", source_of(level, id)));
        continue;
      }
      std::string comment;
      if (chunked && s_.levels[level].stages > 1)
        comment = fmt::format("{} stages in flight", s_.levels[level].stages);
      if (!innermost) {
        const std::string inner = s_.levels[level + 1].level;
        comment += (comment.empty() ? "" : "; ") + fmt::format("shared by its {} groups", inner);
      }
      emit(indent, fmt::format("load {}: {} -> {}", what, source_of(level, id), name), comment);
    }
  }

  void build() {
    int indent = 0;
    for (const std::string& axis : extra_streams_)
      emit(0, "", fmt::format("note: only the stream of {} is derived with its recurrences; {} is reduced whole "
                              "inside each chunk shown", d_.axis(*stream_).name, axis));
    // One loop per scheduled level over its groups; woven chunks as sequential loops.
    std::int64_t total = 1;
    for (std::size_t i = 0; i < levels(); ++i) {
      const sched::LevelSchedule& l = s_.levels[i];
      std::int64_t count = 1;
      const std::string axes = group_axes(i, &count);
      total *= count;
      const std::string in_all = total != count ? fmt::format(", {} in all", total) : "";
      if (count <= 1) {
        emit(indent, fmt::format("{}: one group per {}", l.level, i == 0 ? "problem" : s_.levels[i - 1].level + " group"));
      } else if (l.level == arch::kL2) {
        emit(indent, fmt::format("for each of {} l2 groups ({}){}:", count, axes, in_all),
             "its smem groups share what it holds in L2");
        ++indent;
      } else if (l.level == arch::kSmem) {
        emit(indent, fmt::format("parallel for each of {} smem groups ({}) on the SMs, {} per SM{}:", count, axes,
                                 l.groups, in_all));
        ++indent;
      } else {
        const std::string parent = i == 0 ? "GPU" : s_.levels[i - 1].level + " group";
        emit(indent, fmt::format("parallel for each of {} {} groups ({}) in the {}{}{}:", count, l.level, axes, parent,
                                 l.groups < count ? fmt::format(", {} at a time", l.groups) : "", in_all));
        ++indent;
      }
      emit_loads(indent, i, false);
      for (const auto& st : l.streams) {
        if (!st.accumulators.empty()) continue;
        const AxisId a = static_cast<AxisId>(axis_id(st.axis));
        const std::int64_t pe = parent_extent(i, a);
        emit(indent, fmt::format("for each of {} chunks of {} ({} each), in turn:", ceil_div(pe, st.chunk), st.axis,
                                 st.chunk));
        ++indent;
      }
    }
    if (!levels()) emit(0, "", "no scheduled levels: the whole problem at gmem");
    const std::string at = compute_level();

    // Before the loop: what does not depend on the streamed axis.
    std::vector<NodeId> pre, body, post;
    for (std::size_t i = 0; i < d_.nodes.size(); ++i) {
      if (!live_[i]) continue;
      const auto id = static_cast<NodeId>(i);
      switch (place_[i]) {
        case Place::leaf: break;
        case Place::pre: pre.push_back(id); break;
        case Place::chunk: case Place::fold: body.push_back(id); break;
        case Place::folded: (running_[i] ? body : post).push_back(id); break;
      }
    }
    if (!stream_) {
      if (!pre.empty()) emit(indent, "compute:", fmt::format("at {}", at));
      emit_statements(indent + 1, pre, Ctx::pre);
      emit_stores(indent + 1, pre);
      return;
    }
    if (!pre.empty() && std::any_of(pre.begin(), pre.end(), [&](NodeId n) { return !var_[static_cast<std::size_t>(n)].empty(); })) {
      emit(indent, "before the loop:", fmt::format("does not depend on {}", d_.axis(*stream_).name));
      emit_statements(indent + 1, pre, Ctx::pre);
    }
    emit_init(indent, body);
    emit_loop(indent, body);
    emit(indent, "finalize:");
    emit_statements(indent + 1, post, Ctx::post);
    std::vector<NodeId> outs;
    for (const ir::Output& o : d_.outputs) outs.push_back(o.node);
    emit_stores(indent + 1, outs);
  }

  bool is_statement(NodeId id) const {
    const auto i = static_cast<std::size_t>(id);
    return !var_[i].empty() && alias_[i] < 0 && place_[i] != Place::leaf;
  }
  void emit_statements(int indent, const std::vector<NodeId>& nodes, Ctx ctx) {
    for (NodeId id : nodes) {
      if (!is_statement(id)) continue;
      emit(indent, fmt::format("{} <- {}", var_[static_cast<std::size_t>(id)], definition(id, ctx).text));
      add_row(id, "");
    }
  }
  void emit_stores(int indent, const std::vector<NodeId>& nodes) {
    for (NodeId id : nodes) {
      if (!is_output(id)) continue;
      const Node& x = d_.node(id);
      std::vector<std::string> path;
      for (std::size_t j = levels(); j-- > 0;)
        if (crosses(j, id) || j + 1 == levels()) path.push_back(s_.levels[j].level);
      path.push_back(std::string(arch::kGmem));
      emit(indent, fmt::format("store {}{} {}: {}", x.name, shape(x.axes, compute_index()),
                               dtype_name(dtype_at(compute_index(), id)), fmt::join(path, " -> ")));
    }
  }

  void emit_init(int indent, const std::vector<NodeId>& body) {
    emit(indent, "init:");
    for (NodeId id : body) {
      const auto i = static_cast<std::size_t>(id);
      if (place_[i] == Place::fold) {
        const FoldUpdate u = update_of(id);
        emit(indent + 1, fmt::format("{} <- {}", var_[i], u == FoldUpdate::max ? "-inf" : "0"));
        add_row(id, u == FoldUpdate::max ? "running max" : u == FoldUpdate::add ? "accumulator (+=)" : "accumulator (rescaled)");
      } else if (running_[i] && !var_[i].empty()) {
        const auto v = init_value(id);
        emit(indent + 1, fmt::format("{} <- {}", var_[i], v ? number(*v) : definition(id, Ctx::init).text));
        add_row(id, "running value");
      }
    }
  }

  void emit_loop(int indent, const std::vector<NodeId>& body) {
    const AxisId a = *stream_;
    const std::string axis = d_.axis(a).name;
    // The levels that stream the axis, outermost first; equal chunks continue one loop.
    std::int64_t chunk = d_.axis(a).size;
    bool first = true;
    for (std::size_t i = 0; i < levels(); ++i) {
      const bool streams = std::any_of(s_.levels[i].streams.begin(), s_.levels[i].streams.end(),
                                       [&](const sched::StreamedAxis& st) { return st.axis == axis; });
      const std::int64_t c = extent(i, a);
      if (streams && c < chunk) {
        const std::int64_t pieces = ceil_div(chunk, c);
        std::string ragged = chunk % c ? fmt::format(", the last {}", chunk % c) : "";
        emit(indent, first ? fmt::format("for each of {} chunks of {} ({} each{}):", pieces, axis, c, ragged)
                           : fmt::format("for each of {} sub-chunks of {} ({} each{}) in the chunk:", pieces, axis, c, ragged),
             first ? fmt::format("{} streams {}", s_.levels[i].level, axis) : "");
        ++indent;
        // A mask that is false on a whole (tile, chunk) block makes every score there -inf:
        // the chunk adds nothing, so it is neither loaded nor computed (sched/skip.h).
        if (first)
          for (NodeId p : normalised_of(sched::mask_predicates(original_, a)))
            emit(indent, fmt::format("skip the chunk if ({}) holds nowhere in the (tile, chunk) block", definition(p, Ctx::body).text),
                 "all -inf: nothing to add");
        chunk = c;
        first = false;
      }
      if (!first) emit_loads(indent, i, true);
    }
    if (first) {  // the schedule streams the axis in one chunk of its whole extent
      emit(indent, fmt::format("for the single chunk of {} ({}):", axis, chunk));
      ++indent;
    }
    // The body in node order; the rescale factors as soon as the running values they compare
    // are known.
    std::map<std::string, std::string> alpha_names;  // factor text -> variable
    std::set<NodeId> done;
    std::vector<NodeId> carried;
    auto ready = [&](NodeId f) {
      for (NodeId e : exps_[static_cast<std::size_t>(f)]) {
        auto form = delta(d_.node(e).operands[0]);
        if (!form) continue;
        for (const auto& [n, c] : *form)
          if (!done.count(n)) return false;
      }
      return true;
    };
    std::vector<NodeId> rescaled;
    for (NodeId id : body)
      if (place_[static_cast<std::size_t>(id)] == Place::fold && update_of(id) == FoldUpdate::rescaled) rescaled.push_back(id);
    auto emit_alphas = [&]() {
      for (NodeId f : rescaled) {
        const std::string factor = rescale_of(f);
        if (alpha_names.count(factor) || !ready(f)) continue;
        const std::string name = fresh("alpha");
        alpha_names[factor] = name;
        std::vector<std::string> targets, by;
        for (NodeId g : rescaled)
          if (rescale_of(g) == factor) targets.push_back(var_[static_cast<std::size_t>(g)]);
        for (NodeId e : exps_[static_cast<std::size_t>(f)])
          if (auto form = delta(d_.node(e).operands[0]))
            for (const auto& [n, c] : *form) by.push_back(var_[static_cast<std::size_t>(n)]);
        emit(indent, fmt::format("{} <- {}", name, factor),
             fmt::format("rescales {} to the new {}", fmt::join(targets, " and "), fmt::join(by, ", ")));
        // Its shape: the running values it compares.
        NodeId shape_of = f;
        for (NodeId e : exps_[static_cast<std::size_t>(f)])
          if (auto form = delta(d_.node(e).operands[0]); form && !form->empty()) shape_of = form->begin()->first;
        rows_.push_back({name, shape(d_.node(shape_of).axes, compute_index()), "f32", compute_level(),
                         elements(d_.node(shape_of).axes, compute_index()) * 4, "rescale factor"});
      }
    };
    for (NodeId id : body) {
      const auto i = static_cast<std::size_t>(id);
      const Node& x = d_.node(id);
      if (place_[i] == Place::fold) {
        const std::string v = var_[i];
        const std::string lhs = running_[i] ? v + "_new" : v;
        Expr chunk_value = x.op == OpKind::contract ? contraction(x, Ctx::body)
                                                    : Expr{fmt::format("{}({})", reduce_name(x), ref(strip(x.operands[0]), Ctx::body).text), kPrecAtom};
        switch (update_of(id)) {
          case FoldUpdate::max:
            emit(indent, fmt::format("{} <- max({}, {})", lhs, v, chunk_value.text));
            break;
          case FoldUpdate::add:
            if (running_[i]) emit(indent, fmt::format("{} <- {} + {}", lhs, v, wrap(chunk_value, kPrecAdd)));
            else emit(indent, fmt::format("{} += {}", v, chunk_value.text));
            break;
          case FoldUpdate::rescaled: {
            emit_alphas();
            const std::string factor = rescale_of(id);
            const auto it = alpha_names.find(factor);
            const std::string alpha = it != alpha_names.end() ? it->second : factor;
            emit(indent, fmt::format("{} <- {} * {} + {}", lhs, alpha, v, wrap(chunk_value, kPrecAdd + 1)));
            break;
          }
        }
        if (running_[i]) {
          carried.push_back(id);
          add_row(id, "new value", true);
        }
        done.insert(id);
        emit_alphas();
        continue;
      }
      if (place_[i] == Place::folded) {  // a running value
        if (var_[i].empty()) continue;  // inlined where it is used
        emit(indent, fmt::format("{}_new <- {}", var_[i], definition(id, Ctx::body).text));
        carried.push_back(id);
        add_row(id, "new value", true);
        done.insert(id);
        emit_alphas();
        continue;
      }
      if (!is_statement(id)) continue;
      std::string comment;
      // A value whose folded factors are deferred: say which, under the user's name for it.
      std::optional<std::size_t> deferred_from;
      if (auto it = std::find(alias_.begin(), alias_.end(), id); it != alias_.end())
        deferred_from = static_cast<std::size_t>(it - alias_.begin());
      else if (!x.name.empty() && !deferred_[i].empty())
        deferred_from = i;
      if (deferred_from) {
        const std::size_t from = *deferred_from;
        std::vector<std::string> factors;
        for (const auto& [op, g] : deferred_[from])
          factors.push_back(fmt::format("{} {}", op == OpKind::div ? "/" : "*", ref(g, Ctx::post).text));
        if (!factors.empty())
          comment = fmt::format("{} without {}: applied once in finalize", d_.nodes[from].name, fmt::join(factors, " "));
      }
      emit(indent, fmt::format("{} <- {}", var_[i], definition(id, Ctx::body).text), comment);
      if (is_output(id)) emit_stores(indent, {id});
      add_row(id, "");
    }
    if (!carried.empty()) {
      std::vector<std::string> parts;
      for (NodeId id : carried) parts.push_back(fmt::format("{0} <- {0}_new", var_[static_cast<std::size_t>(id)]));
      emit(indent, fmt::format("{}", fmt::join(parts, "; ")));
    }
  }

  // --- the variable table -------------------------------------------------------------------------------
  void add_row(NodeId id, std::string role, bool renamed = false) {
    const auto i = static_cast<std::size_t>(id);
    const Node& x = d_.node(id);
    const std::string name = var_[i] + (renamed ? "_new" : "");
    for (const Row& r : rows_)
      if (r.name == name && r.level == compute_level()) return;
    const std::size_t ci = compute_index();
    if (levels() && crosses(ci, id) && !renamed) return;  // listed with the level's tensors
    if (role.empty()) {
      if (is_output(id)) role = "output";
      else if (place_[i] == Place::chunk) role = fmt::format("per chunk of {}", d_.axis(*stream_).name);
      else role = place_[i] == Place::folded ? "finalize value" : "intermediate";
    }
    const DType dt = dtype_at(ci, id);
    rows_.push_back({name, shape(x.axes, ci), std::string(dtype_name(dt)), compute_level(),
                     elements(x.axes, ci) * dtype_bytes(dt), role});
  }

 public:
  // Rows for what each level holds, outermost first, then the computing level's variables.
  std::vector<Row> table() const {
    std::vector<Row> out;
    for (std::size_t i = 0; i < levels(); ++i)
      for (const auto& [id, dt] : crossing(i)) {
        const Node& t = d_.node(id);
        const bool chunked = t.op == OpKind::input && chunked_at(i, id);
        const int stages = chunked ? std::max(1, s_.levels[i].stages) : 1;
        std::string role = t.op == OpKind::input ? "input" : is_output(id) ? "output" : "kept value";
        if (chunked) role += fmt::format(", chunk of {}", d_.axis(*stream_).name);
        if (stages > 1) role += fmt::format(", x{} stages", stages);
        out.push_back({t.name, shape(t.axes, i), std::string(dtype_name(dt)), s_.levels[i].level,
                       elements(t.axes, i) * dtype_bytes(dt) * stages, role});
      }
    out.insert(out.end(), rows_.begin(), rows_.end());
    return out;
  }
  // Per level: the live memory at the peak as `live` counts it, with its model, capacity and
  // verdict, and the sum of the variables listed (not all live at once), e.g.
  // "rmem: 97.5 KiB live per group at the peak (the configuration solver's count, as derive's step 2 prints it);
  //  capacity per group on h100-sxm5: 128 KiB; every variable listed, as if all were live at once: 131.5 KiB".
  std::vector<std::string> level_totals(const std::vector<LiveMemory>& live) const {
    std::vector<std::string> out;
    const std::vector<Row> t = table();
    for (std::size_t i = 0; i < levels(); ++i) {
      const std::string& name = s_.levels[i].level;
      double sum = 0;
      for (std::size_t k = 0; k < t.size(); ++k)
        if (t[k].level == name) sum += t[k].bytes;
      const auto counted = std::find_if(live.begin(), live.end(), [&](const LiveMemory& l) { return l.level == name; });
      std::string line = name + ": ";
      if (counted != live.end()) {
        line += fmt::format("{} live per group at the peak ({}); capacity per group{}: {}{}",
                            bytes_text(counted->peak_bytes), counted->model, m_ ? " on " + m_->name : "",
                            bytes_text(counted->capacity_bytes),
                            counted->peak_bytes > counted->capacity_bytes ? ": does not fit" : "");
        if (sum > counted->peak_bytes * (1 + 1e-9))
          line += fmt::format("; every variable listed, as if all were live at once: {}", bytes_text(sum));
      } else {
        line += fmt::format("at most {} per group (every variable listed, as if all were live at once)", bytes_text(sum));
      }
      if (counted == live.end() && m_ && m_->level(name)) {
        double sharing = 1;
        for (std::size_t j = 0; j <= i; ++j)
          if (s_.levels[j].level != arch::kL2) sharing *= std::max(1, s_.levels[j].groups);
        double cap = static_cast<double>(m_->capacity_bytes(name)) / sharing;
        if (name == arch::kSmem) cap = std::min(cap, static_cast<double>(m_->limits.smem_bytes_per_block.value));
        line += fmt::format("; capacity per group on {}: {}", m_->name, bytes_text(cap));
      }
      out.push_back(line);
    }
    return out;
  }

 private:
  // The normalised diagram's copies of nodes of the original (predicates: copied one to one).
  std::vector<NodeId> normalised_of(const std::vector<NodeId>& nodes) const {
    std::vector<NodeId> out;
    for (NodeId n : nodes) {
      const auto& origin = report_.normalised.origin;
      const auto it = std::find(origin.begin(), origin.end(), n);
      if (it != origin.end()) out.push_back(static_cast<NodeId>(it - origin.begin()));
    }
    return out;
  }

  const ir::Diagram& original_;
  const sched::Schedule& s_;
  const arch::Machine* m_;
  const sched::StreamingReport report_;
  const ir::Diagram& d_;  // the normalised diagram
  std::vector<std::vector<std::int64_t>> ext_;
  std::optional<AxisId> stream_;
  std::vector<std::string> extra_streams_;
  std::vector<bool> live_;
  std::vector<int> uses_;
  std::vector<Place> place_;
  std::vector<std::vector<std::pair<OpKind, NodeId>>> deferred_;
  std::vector<std::vector<NodeId>> exps_;  // the rescaled exps inside a chunk value or fold
  std::vector<bool> running_;
  std::set<NodeId> stabiliser_;  // running values an exp is shifted by
  std::vector<std::string> var_;
  std::vector<NodeId> alias_;
  std::map<NodeId, std::string> deferred_name_;
  std::set<std::string> taken_;
  std::vector<Line> lines_;
  std::vector<Row> rows_;
};

std::string code_text(const Writer& w) {
  std::string out;
  for (const std::string& p : w.provenance()) out += "# " + p + "\n";
  out += "\n";
  for (const Line& l : w.lines()) {
    std::string line(static_cast<std::size_t>(l.indent) * 2, ' ');
    line += l.text;
    if (!l.comment.empty()) line += (l.text.empty() ? "# " : "   # ") + l.comment;
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string pseudocode_text(const ir::Diagram& d, const sched::Schedule& s, const arch::Machine* machine,
                            const std::vector<LiveMemory>& live) {
  const Writer w(d, s, machine);
  std::string out = code_text(w);
  const std::vector<Row> rows = w.table();
  const std::vector<std::string> head = {"name", "shape", "dtype", "level", "bytes/group", "role"};
  std::vector<std::size_t> width(head.size());
  for (std::size_t k = 0; k < head.size(); ++k) width[k] = head[k].size();
  for (const Row& r : rows) {
    const std::string cells[] = {r.name, r.shape, r.dtype, r.level, bytes_text(r.bytes), r.role};
    for (std::size_t k = 0; k < head.size(); ++k) width[k] = std::max(width[k], cells[k].size());
  }
  auto row_text = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t k = 0; k < cells.size(); ++k) {
      const bool right = k == 4;
      const std::string pad(width[k] - cells[k].size(), ' ');
      line += (k ? "  " : "") + (right ? pad + cells[k] : k + 1 == cells.size() ? cells[k] : cells[k] + pad);
    }
    return line + "\n";
  };
  out += "\nvariables (bytes per group of the level):\n";
  out += row_text(head);
  for (const Row& r : rows) out += row_text({r.name, r.shape, r.dtype, r.level, bytes_text(r.bytes), r.role});
  for (const std::string& t : w.level_totals(live)) out += "  " + t + "\n";
  return out;
}

std::string pseudocode_markdown(const ir::Diagram& d, const sched::Schedule& s, const arch::Machine* machine,
                                const std::vector<LiveMemory>& live) {
  const Writer w(d, s, machine);
  std::string out = "```text\n" + code_text(w) + "```\n\n";
  out += "| name | shape | dtype | level | bytes per group | role |\n";
  out += "|---|---|---|---|--:|---|\n";
  for (const Row& r : w.table())
    out += fmt::format("| `{}` | `{}` | {} | {} | {} | {} |\n", r.name, r.shape, r.dtype, r.level, bytes_text(r.bytes), r.role);
  out += "\n";
  for (const std::string& t : w.level_totals(live)) out += "- " + t + "\n";
  return out;
}

}  // namespace napkin::emit
