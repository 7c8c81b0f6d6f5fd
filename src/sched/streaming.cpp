// SPDX-License-Identifier: Apache-2.0
// The analysis is an abstract interpretation per axis `a`: each node of the normalised
// diagram gets one State saying how its value relates to a stream over `a` (see
// docs/streaming.md, "States"). The rules are exactly the algebra that makes an accumulator
// exist: sums of chunk-local values add; a factor exp(-F) with F a running fold rescales by
// exp(F_old - F_new); a factor that is a finished fold is applied once at the end. Anything
// else that mixes values along `a` with a fold over `a` needs the whole axis.
#include "sched/streaming.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>


namespace napkin::sched {

using ir::AxisId;
using ir::Diagram;
using ir::Node;
using ir::NodeId;
using ir::OpClass;
using ir::OpKind;

std::string_view accumulator_name(Accumulator a) {
  switch (a) {
    case Accumulator::add: return "add";
    case Accumulator::max: return "max";
    case Accumulator::logsumexp: return "logsumexp";
    case Accumulator::normalised_contraction: return "normalised_contraction";
    case Accumulator::online_softmax: return "online_softmax";
  }
  return "?";
}

std::optional<Accumulator> parse_accumulator(std::string_view name) {
  for (Accumulator a : {Accumulator::add, Accumulator::max, Accumulator::logsumexp,
                        Accumulator::normalised_contraction, Accumulator::online_softmax})
    if (accumulator_name(a) == name) return a;
  return std::nullopt;
}

std::string accumulators_text(const std::vector<Accumulator>& accs) {
  if (accs.empty()) return "none";
  std::string out;
  for (std::size_t i = 0; i < accs.size(); ++i) out += (i ? "+" : "") + std::string(accumulator_name(accs[i]));
  return out;
}

std::string_view axis_kind_name(AxisKind k) {
  switch (k) {
    case AxisKind::woven: return "woven";
    case AxisKind::streamed: return "streamed";
    case AxisKind::none: return "none";
  }
  return "?";
}

namespace {

bool has(const std::vector<AxisId>& v, AxisId a) { return std::find(v.begin(), v.end(), a) != v.end(); }

// How a node's value relates to a stream over axis a.
enum class Kind : std::uint8_t {
  invariant,  // does not depend on a at all (Q when streaming k; constants)
  local,      // has a, and each element depends only on the same index of a (woven over a)
  folded,     // lacks a; a function of folds over a (final once the last chunk is in)
  shifted,    // has a: local +- folded (x - max): only exp of it can be rescaled
  scaled,     // has a: local * exp(-stabilisers) * deferred factors (linear in the chunk)
  whole,      // needs the whole of a before any element is final, in an unrescalable way
};

// What kind of fold a reduction or contraction over a is.
enum class FoldKind : std::uint8_t { sum, max, rescaled_sum, rescaled_contract, deferred };

struct State {
  Kind kind = Kind::invariant;
  std::set<NodeId> stabilisers;  // shifted/scaled: folded nodes inside exp(. - F)
  std::set<NodeId> deferred;     // scaled: folded nodes multiplied or divided in
  std::set<NodeId> depends;      // folds over a this value depends on (for reasons, naming)
  std::string reason;            // whole: why
};

struct Analysis {
  Analysis(const ir::Normalised& n, const Diagram& original, AxisId a)
      : d_(n.diagram), origin_(n.origin), original_(original), a_(a), states_(d_.nodes.size()),
        fold_kind_(d_.nodes.size(), FoldKind::sum), has_deferred_(d_.nodes.size(), false) {}

  void run(const std::vector<bool>& reachable) {
    for (std::size_t i = 0; i < d_.nodes.size(); ++i)
      if (reachable[i]) states_[i] = transfer(static_cast<NodeId>(i));
  }

  // The refusal reason, or empty when every output is invariant, local or folded.
  std::string refusal() const {
    for (const ir::Output& o : d_.outputs) {
      const State& s = states_[static_cast<std::size_t>(o.node)];
      if (s.kind == Kind::whole) return s.reason;
      if (s.kind == Kind::shifted || s.kind == Kind::scaled)
        return fmt::format(
            "output {} spans {}, and every element of it depends on {}, which {} known only after "
            "the last chunk of {}, so no chunk of {} is final before the whole of {} is read",
            describe_value(o.node), axis_name(), fold_list(s.depends),
            s.depends.size() == 1 ? "is" : "are", axis_name(), describe_value(o.node), axis_name());
    }
    return {};
  }

  // The accumulators the outputs need, each with a sentence naming its folds.
  std::pair<std::vector<Accumulator>, std::string> accumulators() const {
    std::set<NodeId> all;
    for (const ir::Output& o : d_.outputs) {
      const auto& dep = states_[static_cast<std::size_t>(o.node)].depends;
      all.insert(dep.begin(), dep.end());
    }
    // A fold that feeds another (the max inside a rescaled sum, the sum that divides a
    // contraction) is part of that fold's accumulator state.
    std::set<NodeId> absorbed;
    for (NodeId f : all)
      for (NodeId g : states_[static_cast<std::size_t>(f)].depends)
        if (g != f) absorbed.insert(g);
    std::set<Accumulator> accs;
    std::vector<std::string> sentences;
    for (NodeId f : all) {
      if (absorbed.count(f)) continue;
      const State& s = states_[static_cast<std::size_t>(f)];
      const Accumulator acc = accumulator_of(f);
      accs.insert(acc);
      const std::string folds = fold_list(s.depends);
      const bool plural = s.depends.size() > 1;
      switch (acc) {
        case Accumulator::add:
          sentences.push_back(fmt::format("{} accumulate{} by addition", folds, plural ? "" : "s"));
          break;
        case Accumulator::max:
          sentences.push_back(fmt::format("{} keep{} a running max", folds, plural ? "" : "s"));
          break;
        case Accumulator::logsumexp:
          sentences.push_back(fmt::format(
              "{} keep a running max and a running sum rescaled by exp(max_old - max_new) "
              "(logsumexp)", folds));
          break;
        case Accumulator::normalised_contraction:
          sentences.push_back(fmt::format(
              "{} accumulate a numerator and its divisor by addition and divide once at the end "
              "(normalised contraction)", folds));
          break;
        case Accumulator::online_softmax:
          sentences.push_back(fmt::format(
              "{} form an online softmax-contraction: a running max, and a running sum and "
              "output rescaled by exp(max_old - max_new)", folds));
          break;
      }
    }
    std::string reason;
    for (std::size_t i = 0; i < sentences.size(); ++i) reason += (i ? "; " : "") + sentences[i];
    return {{accs.begin(), accs.end()}, reason};
  }

  std::string axis_name() const { return d_.axis(a_).name; }

  Accumulator accumulator_of(NodeId f) const {
    const State& s = states_[static_cast<std::size_t>(f)];
    switch (fold_kind_[static_cast<std::size_t>(f)]) {
      case FoldKind::sum: return Accumulator::add;
      case FoldKind::max: return Accumulator::max;
      case FoldKind::rescaled_contract: return Accumulator::online_softmax;
      case FoldKind::rescaled_sum:
        // A rescaled sum that is also divided by a fold is a softmax-contraction summed.
        return has_deferred_[static_cast<std::size_t>(f)] ? Accumulator::online_softmax
                                                          : Accumulator::logsumexp;
      case FoldKind::deferred: {
        // A deferred factor that itself depends on a rescaled fold inherits its rescaling.
        for (NodeId g : s.depends)
          if (g != f && (fold_kind_[static_cast<std::size_t>(g)] == FoldKind::rescaled_sum ||
                         fold_kind_[static_cast<std::size_t>(g)] == FoldKind::rescaled_contract))
            return Accumulator::online_softmax;
        return Accumulator::normalised_contraction;
      }
    }
    return Accumulator::add;
  }

  // "max over k in softmax 'P'", "contract 'O' over k", "exp at 7:5".
  std::string describe(NodeId id) const {
    const Node& n = d_.node(id);
    const NodeId from = origin_[static_cast<std::size_t>(id)];
    const Node& orig = original_.node(from);
    std::string what(ir::op_name(n.op));
    const std::string over = n.over.empty() ? std::string{}
                                            : " over " + names_of(n.over);
    if (ir::op_class(orig.op) == OpClass::composite) {
      const std::string where = !orig.name.empty() ? fmt::format("'{}'", orig.name) : where_of(orig.loc, from);
      return fmt::format("{}{} in {} {}", what, over, ir::op_name(orig.op), where);
    }
    if (!n.name.empty()) return fmt::format("{} '{}'{}", what, n.name, over);
    // An unnamed op is known by the value it is written in: "contract 'O' over k" when only
    // casts lie between them (`O = contract(P, V over k) as bf16`), else "... in 'S'".
    bool only_casts = true;
    for (NodeId at = id, hops = 0; hops < 8; ++hops) {
      const std::vector<NodeId> users = d_.users(at);
      if (users.size() != 1) break;
      at = users[0];
      const Node& u = d_.node(at);
      if (ir::op_class(original_.node(origin_[static_cast<std::size_t>(at)]).op) == OpClass::composite) break;
      only_casts = only_casts && u.op == OpKind::cast;
      if (!u.name.empty())
        return only_casts ? fmt::format("{} '{}'{}", what, u.name, over)
                          : fmt::format("{}{} in '{}'", what, over, u.name);
    }
    return fmt::format("{}{} {}", what, over, where_of(n.loc, id));
  }
  // A value as the user knows it: its name, else the op that makes it.
  std::string describe_value(NodeId id) const {
    const Node& n = d_.node(id);
    if (!n.name.empty()) return fmt::format("'{}'", n.name);
    return describe(id);
  }
  static std::string where_of(SourceLoc loc, NodeId id) {
    if (loc.line > 0) return fmt::format("at {}:{}", loc.line, loc.column);
    return fmt::format("(node #{})", id);
  }
  std::string names_of(const std::vector<AxisId>& axes) const {
    std::string out;
    for (std::size_t i = 0; i < axes.size(); ++i) out += (i ? " " : "") + d_.axis(axes[i]).name;
    return out;
  }
  std::string fold_list(const std::set<NodeId>& folds) const {
    std::vector<std::string> parts;
    for (NodeId f : folds) parts.push_back(describe(f));
    if (parts.empty()) return "nothing";
    std::string out = parts[0];
    for (std::size_t i = 1; i < parts.size(); ++i)
      out += (i + 1 == parts.size() ? " and " : ", ") + parts[i];
    return out;
  }

  const State& st(NodeId id) const { return states_[static_cast<std::size_t>(id)]; }

  State whole(std::string reason) const {
    State s;
    s.kind = Kind::whole;
    s.reason = std::move(reason);
    return s;
  }
  // Merges the bookkeeping of the operands into s.
  State merged(Kind k, const std::vector<NodeId>& ops) const {
    State s;
    s.kind = k;
    for (NodeId o : ops) {
      const State& x = st(o);
      s.stabilisers.insert(x.stabilisers.begin(), x.stabilisers.end());
      s.deferred.insert(x.deferred.begin(), x.deferred.end());
      s.depends.insert(x.depends.begin(), x.depends.end());
    }
    return s;
  }
  // The folds that `ops` depend on.
  std::set<NodeId> depends_of(const std::vector<NodeId>& ops) const {
    std::set<NodeId> out;
    for (NodeId o : ops) out.insert(st(o).depends.begin(), st(o).depends.end());
    return out;
  }
  // The first operand whose kind is in `kinds`, for messages.
  std::optional<NodeId> first_of(const std::vector<NodeId>& ops, std::initializer_list<Kind> kinds) const {
    for (NodeId o : ops)
      if (std::find(kinds.begin(), kinds.end(), st(o).kind) != kinds.end()) return o;
    return std::nullopt;
  }
  // The rescale and deferred factors of s that vary along one of `axes` (a sum over such an
  // axis mixes terms with different factors, which no single rescale can correct).
  std::optional<NodeId> factor_along(const State& s, const std::vector<AxisId>& axes) const {
    for (const auto* set : {&s.stabilisers, &s.deferred})
      for (NodeId f : *set)
        for (AxisId x : d_.node(f).axes)
          if (has(axes, x)) return f;
    return std::nullopt;
  }
  bool is_zero_constant(NodeId id) const {
    const Node& n = d_.node(id);
    return n.op == OpKind::constant && n.scalar == 0.0;
  }

  State transfer(NodeId id) {
    const Node& n = d_.node(id);
    const std::vector<NodeId>& ops = n.operands;
    for (NodeId o : ops)
      if (st(o).kind == Kind::whole) return st(o);  // needing the whole axis is contagious
    std::set<Kind> kinds;
    for (NodeId o : ops) kinds.insert(st(o).kind);
    auto only = [&](std::initializer_list<Kind> allowed) {
      return std::all_of(kinds.begin(), kinds.end(), [&](Kind k) {
        return std::find(allowed.begin(), allowed.end(), k) != allowed.end();
      });
    };
    const std::string A = axis_name();

    switch (ir::op_class(n.op)) {
      case OpClass::leaf: {
        State s;
        s.kind = has(n.axes, a_) ? Kind::local : Kind::invariant;
        return s;
      }
      case OpClass::composite:
        NAPKIN_CHECK(false, "the streaming analysis runs on normalised diagrams");
      case OpClass::unary: case OpClass::binary: case OpClass::ternary:
        return elementwise(id, kinds, only);
      case OpClass::reduction: case OpClass::contraction: {
        const bool over_a = has(n.over, a_);
        if (only({Kind::invariant})) return merged(Kind::invariant, ops);
        if (const auto sh = first_of(ops, {Kind::shifted}))
          return whole(fmt::format(
              "{} reduces {}, a difference of values along {} and {}; only exp of such a "
              "difference can be rescaled", describe(id), describe_value(*sh), A,
              fold_list(st(*sh).depends)));
        if (n.op == OpKind::reduce_max && kinds.count(Kind::scaled))
          return whole(fmt::format("{} takes the max of {}, which is scaled by {}; a max of "
                                   "rescaled values is not in the catalogue",
                                   describe(id), describe_value(ops[0]), fold_list(st(ops[0]).depends)));
        if (!over_a) {
          if (only({Kind::invariant, Kind::local})) return merged(Kind::local, ops);
          if (only({Kind::invariant, Kind::folded})) return merged(Kind::folded, ops);
          // A product of values along a with folds, summed over other axes: fine while the
          // fold factors do not vary along the summed axes.
          State s = merged(Kind::scaled, ops);
          for (NodeId o : ops)
            if (st(o).kind == Kind::folded) s.deferred.insert(o);
          if (const auto f = factor_along(s, n.over)) {
            const auto along = first_of(ops, {Kind::local, Kind::scaled});
            return whole(fmt::format(
                "{} multiplies {}, which runs along {}, by {}, which varies along {} and depends "
                "on {}, so its partial results cannot be rescaled", describe(id),
                along ? describe_value(*along) : std::string("a value"), A, describe_value(*f),
                names_of(n.over), fold_list(st(*f).depends)));
          }
          return s;
        }
        // A fold over a.
        State s = merged(Kind::folded, ops);
        s.stabilisers.clear();
        s.deferred.clear();
        s.depends.insert(id);
        State factors = merged(Kind::scaled, ops);
        for (NodeId o : ops)
          if (st(o).kind == Kind::folded) factors.deferred.insert(o);
        if (const auto f = factor_along(factors, n.over))
          return whole(fmt::format(
              "{} sums terms scaled by {}, which varies along {} and depends on {}, so partial "
              "sums cannot be rescaled", describe(id), describe_value(*f), names_of(n.over),
              fold_list(st(*f).depends)));
        FoldKind kind = FoldKind::sum;
        if (n.op == OpKind::reduce_max) kind = FoldKind::max;
        else if (!factors.stabilisers.empty())
          kind = n.op == OpKind::contract ? FoldKind::rescaled_contract : FoldKind::rescaled_sum;
        else if (!factors.deferred.empty()) kind = FoldKind::deferred;
        fold_kind_[static_cast<std::size_t>(id)] = kind;
        has_deferred_[static_cast<std::size_t>(id)] = !factors.deferred.empty();
        return s;
      }
    }
    return whole("unknown op");
  }

  template <class Only>
  State elementwise(NodeId id, const std::set<Kind>& kinds, Only only) {
    const Node& n = d_.node(id);
    const std::vector<NodeId>& ops = n.operands;
    const std::string A = axis_name();
    if (only({Kind::invariant})) return merged(Kind::invariant, ops);
    if (only({Kind::invariant, Kind::local})) return merged(Kind::local, ops);
    if (only({Kind::invariant, Kind::folded})) return merged(Kind::folded, ops);
    const bool any_scaled = kinds.count(Kind::scaled) > 0;
    const bool any_shifted = kinds.count(Kind::shifted) > 0;
    switch (n.op) {
      case OpKind::exp: case OpKind::exp2:
        if (any_shifted) {  // exp(x - F) = exp(x - F_cur) * exp(F_cur - F): rescalable
          State s = merged(Kind::scaled, ops);
          return s;
        }
        break;
      case OpKind::cast: case OpKind::neg: case OpKind::scale:
        // Linear in the chunk (a cast only rounds): the state passes through.
        return merged(st(ops[0]).kind, ops);
      case OpKind::add: case OpKind::sub:
        // local +- fold: a shifted value, rescalable under exp.
        if (!any_scaled) {
          State s = merged(Kind::shifted, ops);
          for (NodeId o : ops)
            if (st(o).kind == Kind::folded) s.stabilisers.insert(o);
          return s;
        }
        break;
      case OpKind::mul: case OpKind::div: {
        const bool denominator_ok = n.op == OpKind::mul || st(ops[1]).kind != Kind::scaled;
        if (any_shifted) {
          // beta * (x - F): still a shifted value when beta does not depend on a.
          const NodeId other = st(ops[0]).kind == Kind::shifted ? ops[1] : ops[0];
          const bool numerator = n.op == OpKind::mul || st(ops[0]).kind == Kind::shifted;
          if (numerator && st(other).kind == Kind::invariant) return merged(Kind::shifted, ops);
          break;
        }
        if (denominator_ok) {  // local * exp(-F) * G: products stay linear in the chunk
          State s = merged(Kind::scaled, ops);
          for (NodeId o : ops)
            if (st(o).kind == Kind::folded) s.deferred.insert(o);
          return s;
        }
        break;
      }
      case OpKind::select:
        // Masking a scaled value with 0 keeps it linear in the chunk.
        if (any_scaled && !any_shifted &&
            (st(ops[0]).kind == Kind::invariant || st(ops[0]).kind == Kind::local) &&
            ((st(ops[1]).kind == Kind::scaled && is_zero_constant(ops[2])) ||
             (st(ops[2]).kind == Kind::scaled && is_zero_constant(ops[1]))))
          return merged(Kind::scaled, ops);
        break;
      default: break;
    }
    if (const auto sh = first_of(ops, {Kind::shifted}))
      return whole(fmt::format(
          "{} uses {}, a difference of values along {} and {}, other than through exp; only "
          "exp of such a difference can be rescaled", describe(id), describe_value(*sh), A,
          fold_list(st(*sh).depends)));
    const auto along = first_of(ops, {Kind::local, Kind::scaled});
    const auto deps = depends_of(ops);
    return whole(fmt::format(
        "{} combines {} along {} with {}, which {} known only after the last chunk of {}, and "
        "no accumulator in the catalogue rescales {}", describe(id),
        along ? describe_value(*along) : std::string("values"), A, fold_list(deps),
        deps.size() == 1 ? "is" : "are", A, ir::op_name(n.op)));
  }

  const Diagram& d_;
  const std::vector<NodeId>& origin_;
  const Diagram& original_;
  AxisId a_;
  std::vector<State> states_;
  std::vector<FoldKind> fold_kind_;
  std::vector<bool> has_deferred_;
};

std::vector<bool> reachable_from_outputs(const Diagram& d) {
  std::vector<bool> live(d.nodes.size(), false);
  for (const ir::Output& o : d.outputs) live[static_cast<std::size_t>(o.node)] = true;
  for (std::size_t i = d.nodes.size(); i-- > 0;)
    if (live[i])
      for (NodeId o : d.nodes[i].operands) live[static_cast<std::size_t>(o)] = true;
  return live;
}

}  // namespace

StreamingReport analyse_streaming(const Diagram& d) {
  StreamingReport r;
  r.normalised = ir::normalise_with_origin(d);
  const Diagram& nd = r.normalised.diagram;
  const std::vector<bool> live = reachable_from_outputs(nd);
  for (std::size_t ai = 0; ai < nd.axes.size(); ++ai) {
    const AxisId a = static_cast<AxisId>(ai);
    AxisStreaming s;
    s.axis = a;
    for (NodeId in : nd.inputs())
      (has(nd.node(in).axes, a) ? s.woven_inputs : s.broadcast_inputs).push_back(nd.node(in).name);
    for (std::size_t i = 0; i < nd.nodes.size(); ++i)
      if (live[i] && has(nd.nodes[i].over, a)) s.folds.push_back(static_cast<NodeId>(i));
    const std::string& name = nd.axis(a).name;
    Analysis an(r.normalised, d, a);
    for (NodeId f : s.folds) s.fold_labels.push_back(an.describe(f));
    if (s.folds.empty()) {
      s.kind = AxisKind::woven;
      s.reason = fmt::format("no op reduces over {}: every op is woven over it", name);
    } else {
      an.run(live);
      if (std::string refused = an.refusal(); !refused.empty()) {
        s.kind = AxisKind::none;
        s.reason = std::move(refused);
      } else {
        s.kind = AxisKind::streamed;
        auto [accs, reason] = an.accumulators();
        s.accumulators = std::move(accs);
        s.reason = std::move(reason);
        NAPKIN_CHECK(!s.accumulators.empty(), "a streamed axis needs an accumulator");
      }
    }
    r.axes.push_back(std::move(s));
  }
  return r;
}

std::string report_text(const StreamingReport& r) {
  const Diagram& d = r.normalised.diagram;
  std::string out;
  for (const AxisStreaming& s : r.axes) {
    out += fmt::format("{}: {}", d.axis(s.axis).name, axis_kind_name(s.kind));
    if (s.kind == AxisKind::streamed) out += " " + accumulators_text(s.accumulators);
    if (s.kind == AxisKind::none)
      out += fmt::format(": not woven, {} reduce{} over it; not streamable: {}\n",
                         fmt::join(s.fold_labels, ", "), s.fold_labels.size() == 1 ? "s" : "",
                         s.reason);
    else
      out += fmt::format(": {}\n", s.reason);
    out += fmt::format("  woven inputs: {}; re-read once per tile: {}\n",
                       s.woven_inputs.empty() ? "none" : fmt::format("{}", fmt::join(s.woven_inputs, " ")),
                       s.broadcast_inputs.empty() ? "none" : fmt::format("{}", fmt::join(s.broadcast_inputs, " ")));
  }
  return out;
}

}  // namespace napkin::sched
