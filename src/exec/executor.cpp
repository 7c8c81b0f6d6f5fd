// SPDX-License-Identifier: Apache-2.0
// The executor reads top to bottom like the algorithm it runs:
//   1. the nest: the schedule as tile loops and stream loops (build_nest);
//   2. the plan: each node of the normalised diagram gets its role for the streamed axis
//      (make_plan), with the deferred factors and rescale exponents it carries;
//   3. the run: per group, initialise the accumulators, step through the chunks (step), and
//      finalise (finalise);
//   4. the transfers: a walk of each level's nest counting slices entering and leaving it.
// Why roles rather than one code path per accumulator: the streamability analysis accepts
// compositions (masks, biases and caps pre-composed, several folds sharing a max), and the
// roles are exactly its algebra, so every accepted diagram runs through the same three rules:
// local values are computed per chunk, a scaled fold is rescaled by exp(scale_new -
// scale_old) before the chunk is added, and deferred factors are applied to the running value.
#include "exec/executor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "exec/block.h"
#include "ir/builder.h"
#include "sched/streaming.h"

namespace napkin::exec {

using ir::AxisId;
using ir::Diagram;
using ir::Node;
using ir::NodeId;
using ir::OpClass;
using ir::OpKind;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }
bool has(const std::vector<AxisId>& v, AxisId a) { return std::find(v.begin(), v.end(), a) != v.end(); }

// ---------------------------------------------------------------------------------------------
// 1. The nest.

struct Loop {
  AxisId axis = -1;
  std::int64_t step = 0;  // tile or chunk size
  int level = 0;          // index into Schedule::levels
  bool stream = false;
};

struct Nest {
  std::vector<std::string> levels;
  std::vector<Loop> tiles;    // level order, then the order written
  std::vector<Loop> streams;  // level order, then the order written
  AxisId streamed = -1;       // the axis with accumulators, if any is streamed
  std::string text;
};

Result<Nest> build_nest(const Diagram& d, const sched::Schedule& s, const sched::StreamingReport& report) {
  if (auto problem = sched::validate_schedule(s, d, report)) return *problem;
  Nest nest;
  std::vector<std::string> parts;
  std::vector<std::string> stream_parts;
  std::set<AxisId> accumulating;
  for (std::size_t li = 0; li < s.levels.size(); ++li) {
    const sched::LevelSchedule& level = s.levels[li];
    nest.levels.push_back(level.level);
    for (const sched::TiledAxis& t : level.tiles) {
      const AxisId a = *d.find_axis(t.axis);
      for (const Loop& outer : nest.streams)
        if (outer.axis == a)
          return plain_error(fmt::format(
              "the executor cannot tile '{}' in level '{}' inside the stream of '{}' of level '{}': "
              "tiles are independent groups and run outside every stream; tile it at '{}' or "
              "stream it at '{}' too",
              t.axis, level.level, t.axis, nest.levels[at(outer.level)], nest.levels[at(outer.level)],
              level.level));
      nest.tiles.push_back({a, t.tile, static_cast<int>(li), false});
      parts.push_back(fmt::format("tile {}={} ({})", t.axis, t.tile, level.level));
    }
    for (const sched::StreamedAxis& st : level.streams) {
      const AxisId a = *d.find_axis(st.axis);
      if (report.of(a).kind == sched::AxisKind::streamed) accumulating.insert(a);
      nest.streams.push_back({a, st.chunk, static_cast<int>(li), true});
      stream_parts.push_back(fmt::format("stream {}={}:{} ({})", st.axis, st.chunk,
                                         sched::accumulators_text(st.accumulators), level.level));
    }
  }
  if (accumulating.size() > 1) {
    std::vector<std::string> names;
    for (AxisId a : accumulating)
      names.push_back(fmt::format("{} ({})", d.axis(a).name, sched::accumulators_text(report.of(a).accumulators)));
    return plain_error(fmt::format(
        "the executor runs one streamed axis with accumulators per schedule; this schedule streams {}",
        fmt::join(names, " and ")));
  }
  if (!accumulating.empty()) nest.streamed = *accumulating.begin();
  parts.insert(parts.end(), stream_parts.begin(), stream_parts.end());
  nest.text = parts.empty() ? "one group, one step" : fmt::format("{}", fmt::join(parts, " > "));
  return nest;
}

// The ranges [lo, hi) that split [lo, hi) into pieces of `step` (the last one ragged).
template <class Body>
void for_each_piece(std::int64_t lo, std::int64_t hi, std::int64_t step, Body&& body) {
  for (std::int64_t p = lo; p < hi; p += step) body(p, std::min(p + step, hi));
}

// ---------------------------------------------------------------------------------------------
// 2. The plan: roles for the streamed axis `a` (docs/exec.md, "Roles").

enum class Role : std::uint8_t {
  invariant,  // does not depend on a: computed on each chunk's box as it is
  local,      // along a, no fold: computed on the chunk's slice
  fold,       // a reduction or contraction over a: an accumulator
  folded,     // lacks a, a function of folds: evaluated from the running values
  shifted,    // along a, local +- folded (x - mu): carries a shift, its "zero part"
  scaled,     // along a, exp(shifted) * local * deferred folded factors: linear in the chunk
};

struct Factor {
  NodeId node = -1;
  int exponent = 1;  // +1 multiplies, -1 divides
};

struct NodePlan {
  Role role = Role::invariant;
  bool live = false;
  bool rescaled_fold = false;     // fold of a scaled value or with deferred factors
  bool exp_of_shifted = false;    // exp/exp2 of a shifted value: the source of a rescale
  std::vector<bool> unit_slot;    // operand replaced by 1 (a deferred factor)
  std::vector<Factor> deferred;   // scaled and fold: factors to apply to the running value
  std::vector<AxisId> zero_axes;  // shifted: axes of its zero part
  std::vector<AxisId> scale_axes;  // scaled and fold: axes of its log scale (sum of zero parts)
  bool has_scale = false;
  bool step = false, final = false;  // needed in a chunk step, needed when finalising
};

struct Plan {
  const Diagram* d = nullptr;
  AxisId a = -1;
  std::vector<NodePlan> nodes;
  std::vector<std::string> notes;
};

std::vector<AxisId> axes_union(std::vector<AxisId> x, const std::vector<AxisId>& y) {
  for (AxisId a : y)
    if (!has(x, a)) x.push_back(a);
  std::sort(x.begin(), x.end());
  return x;
}

bool is_zero_constant(const Diagram& d, NodeId id) {
  const Node& n = d.node(id);
  return n.op == OpKind::constant && n.scalar == 0.0;
}

Result<Plan> make_plan(const Diagram& d, AxisId a) {
  Plan plan;
  plan.d = &d;
  plan.a = a;
  plan.nodes.resize(d.nodes.size());
  auto P = [&](NodeId id) -> NodePlan& { return plan.nodes[at(id)]; };
  for (const ir::Output& o : d.outputs) P(o.node).live = true;
  for (std::size_t i = d.nodes.size(); i-- > 0;)
    if (plan.nodes[i].live)
      for (NodeId o : d.nodes[i].operands) P(o).live = true;

  const std::string axis = a >= 0 ? d.axis(a).name : std::string();
  auto refuse = [&](NodeId id, const std::string& why) {
    return plain_error(fmt::format("the executor cannot stream '{}' through {}: {}", axis, d.label(id), why));
  };
  // Roles seen by users: a fold's value (its running value) is used like a folded value.
  auto seen = [&](NodeId o) { return P(o).role == Role::fold ? Role::folded : P(o).role; };
  // Factors that vary along `over` cannot be pulled out of a sum over it.
  auto check_factors = [&](NodeId id, const NodePlan& np, const std::vector<AxisId>& over) -> std::optional<Diagnostic> {
    for (const Factor& f : np.deferred)
      for (AxisId x : d.node(f.node).axes)
        if (has(over, x))
          return refuse(id, fmt::format("its deferred factor {} varies along the summed axis '{}'",
                                        d.label(f.node), d.axis(x).name));
    for (AxisId x : np.scale_axes)
      if (has(over, x))
        return refuse(id, fmt::format("its rescale factor varies along the summed axis '{}'", d.axis(x).name));
    return std::nullopt;
  };
  // Collects the deferred factors and rescale axes of operands (scaled ones, and folded ones
  // in unit slots), for a product-like node.
  auto gather = [&](NodeId id, bool div) {
    const Node& n = d.node(id);
    NodePlan& np = P(id);
    np.unit_slot.assign(n.operands.size(), false);
    for (std::size_t j = 0; j < n.operands.size(); ++j) {
      const NodeId o = n.operands[j];
      const int sign = div && j == 1 ? -1 : 1;
      if (seen(o) == Role::folded) {
        np.unit_slot[j] = true;
        np.deferred.push_back({o, sign});
      } else if (seen(o) == Role::scaled) {
        for (const Factor& f : P(o).deferred) np.deferred.push_back({f.node, f.exponent * sign});
        if (P(o).has_scale) {
          np.has_scale = true;
          np.scale_axes = axes_union(np.scale_axes, P(o).scale_axes);
        }
      }
    }
  };

  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const NodeId id = static_cast<NodeId>(i);
    NodePlan& np = plan.nodes[i];
    if (!np.live) continue;
    const Node& n = d.nodes[i];
    const OpClass cls = ir::op_class(n.op);
    if (cls == OpClass::composite) return refuse(id, "composites must be normalised first");
    if (cls == OpClass::leaf) {
      np.role = a >= 0 && has(n.axes, a) ? Role::local : Role::invariant;
      continue;
    }
    std::set<Role> kinds;
    for (NodeId o : n.operands) kinds.insert(seen(o));
    auto only = [&](std::initializer_list<Role> allowed) {
      return std::all_of(kinds.begin(), kinds.end(), [&](Role r) {
        return std::find(allowed.begin(), allowed.end(), r) != allowed.end();
      });
    };
    if (a >= 0 && has(n.over, a)) {  // a fold
      np.role = Role::fold;
      if (kinds.count(Role::shifted))
        return refuse(id, "it reduces a difference of values along the axis and a fold over it");
      np.rescaled_fold = kinds.count(Role::scaled) || kinds.count(Role::folded);
      if (np.rescaled_fold && n.op == OpKind::reduce_max)
        return refuse(id, "a max of rescaled values is not in the accumulator catalogue");
      gather(id, false);
      if (auto e = check_factors(id, np, n.over)) return *e;
      for (const Factor& f : np.deferred)
        for (AxisId x : d.node(f.node).axes)
          if (!has(n.axes, x))
            return refuse(id, fmt::format("its deferred factor {} has axis '{}' that the result lacks",
                                          d.label(f.node), d.axis(x).name));
      continue;
    }
    if (only({Role::invariant})) { np.role = Role::invariant; continue; }
    if (only({Role::invariant, Role::local})) { np.role = Role::local; continue; }
    if (only({Role::invariant, Role::folded})) { np.role = Role::folded; continue; }
    const bool any_scaled = kinds.count(Role::scaled) > 0, any_shifted = kinds.count(Role::shifted) > 0;
    auto shifted_zero = [&] {  // the zero part's axes: those of the non-local operands
      np.role = Role::shifted;
      for (NodeId o : n.operands) {
        if (seen(o) == Role::shifted) np.zero_axes = axes_union(np.zero_axes, P(o).zero_axes);
        else if (seen(o) != Role::local) np.zero_axes = axes_union(np.zero_axes, d.node(o).axes);
      }
    };
    auto cast_note = [&] {
      plan.notes.push_back(fmt::format(
          "{} casts a partial value of the stream over '{}' (before its rescale and deferred "
          "factors), so it rounds differently from the reference",
          d.label(id), axis));
    };
    switch (n.op) {
      case OpKind::exp: case OpKind::exp2:
        if (!any_shifted) return refuse(id, "exp of a rescaled value is not linear in the chunk");
        np.role = Role::scaled;
        np.exp_of_shifted = true;
        np.has_scale = true;
        np.scale_axes = P(n.operands[0]).zero_axes;
        np.unit_slot.assign(1, false);
        continue;
      case OpKind::cast: case OpKind::neg: case OpKind::scale: {
        const NodeId o = n.operands[0];
        if (n.op == OpKind::cast) cast_note();
        if (seen(o) == Role::shifted) {
          shifted_zero();
        } else {
          np.role = Role::scaled;
          gather(id, false);
        }
        continue;
      }
      case OpKind::add: case OpKind::sub:
        if (any_scaled) return refuse(id, "a sum of a rescaled value and another value is not rescalable");
        shifted_zero();
        continue;
      case OpKind::mul: case OpKind::div: {
        if (any_shifted) {
          const std::size_t s = seen(n.operands[0]) == Role::shifted ? 0 : 1;
          const NodeId other = n.operands[1 - s];
          if (seen(other) != Role::invariant || (n.op == OpKind::div && s == 1))
            return refuse(id, "a shifted value may only be multiplied or divided by a constant");
          shifted_zero();
          continue;
        }
        if (n.op == OpKind::div && seen(n.operands[1]) == Role::scaled)
          return refuse(id, "a rescaled value cannot be a divisor");
        np.role = Role::scaled;
        gather(id, n.op == OpKind::div);
        continue;
      }
      case OpKind::select: {
        const Role c = seen(n.operands[0]);
        const bool masked = any_scaled && !any_shifted && (c == Role::invariant || c == Role::local) &&
                            ((seen(n.operands[1]) == Role::scaled && is_zero_constant(d, n.operands[2])) ||
                             (seen(n.operands[2]) == Role::scaled && is_zero_constant(d, n.operands[1])));
        if (!masked) return refuse(id, "only select(mask, rescaled value, 0) keeps a value rescalable");
        np.role = Role::scaled;
        gather(id, false);
        continue;
      }
      case OpKind::reduce_sum: case OpKind::contract:
        if (any_shifted) return refuse(id, "it sums a difference of values along the axis and a fold over it");
        np.role = Role::scaled;
        gather(id, false);
        if (auto e = check_factors(id, np, n.over)) return *e;
        continue;
      default:
        return refuse(id, fmt::format("'{}' of values along the axis and folds over it is not in the "
                                      "accumulator catalogue", ir::op_name(n.op)));
    }
  }

  // What each phase needs. A chunk step: every fold, and local and invariant outputs, with
  // everything they read. Finalising: folded outputs, through folds' running values and their
  // deferred factors (a fold's operands are chunk values, not needed then).
  std::vector<NodeId> step_roots, final_roots;
  for (std::size_t i = 0; i < d.nodes.size(); ++i)
    if (plan.nodes[i].live && plan.nodes[i].role == Role::fold) step_roots.push_back(static_cast<NodeId>(i));
  for (const ir::Output& o : d.outputs) {
    const Role r = P(o.node).role;
    (r == Role::local || r == Role::invariant ? step_roots : final_roots).push_back(o.node);
  }
  for (NodeId r : step_roots) P(r).step = true;
  for (NodeId r : final_roots) P(r).final = true;
  for (std::size_t i = d.nodes.size(); i-- > 0;) {
    NodePlan& np = plan.nodes[i];
    if (np.step)
      for (NodeId o : d.nodes[i].operands) P(o).step = true;
    if (np.final) {
      if (np.role == Role::fold) {
        for (const Factor& f : np.deferred) P(f.node).final = true;
      } else {
        for (NodeId o : d.nodes[i].operands) P(o).final = true;
      }
    }
  }
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const NodePlan& np = plan.nodes[i];
    if (np.final && np.role != Role::fold && np.role != Role::folded && np.role != Role::invariant)
      return refuse(static_cast<NodeId>(i), "a final value depends on a value along the axis");
  }
  std::sort(plan.notes.begin(), plan.notes.end());
  plan.notes.erase(std::unique(plan.notes.begin(), plan.notes.end()), plan.notes.end());
  return plan;
}

// ---------------------------------------------------------------------------------------------
// 3. The run.

// Node n on `box`, from its operands' values there; elementwise results are over out_axes.
Block evaluate_node(const Node& n, const std::vector<AxisId>& out_axes, const Box& box,
                    const std::vector<const Block*>& xs, const reference::TensorMap& inputs) {
  switch (ir::op_class(n.op)) {
    case OpClass::leaf:
      if (n.op == OpKind::input) return slice(inputs.at(n.name), box, n.dtype);
      if (n.op == OpKind::constant) return Block::scalar(n.scalar);
      return iota(n.axis, box);
    case OpClass::unary: return map(out_axes, box, xs, [&](const double* v) { return reference::apply_unary(n, v[0]); });
    case OpClass::binary: return map(out_axes, box, xs, [&](const double* v) { return reference::apply_binary(n.op, v[0], v[1]); });
    case OpClass::ternary: return map(out_axes, box, xs, [](const double* v) { return v[0] != 0.0 ? v[1] : v[2]; });
    case OpClass::reduction:
      if (n.op == OpKind::reduce_sum)
        return reduce(n.axes, n.over, box, *xs[0], 0.0, [](double x, double y) { return x + y; });
      return reduce(n.axes, n.over, box, *xs[0], -kInf, [](double x, double y) { return reference::maximum(x, y); });
    case OpClass::contraction: return contract(n.axes, n.over, box, xs);
    case OpClass::composite: break;
  }
  NAPKIN_CHECK(false, "the executor runs normalised diagrams");
}

class Run {
 public:
  Run(const Plan& plan, const Nest& nest, const reference::TensorMap& inputs)
      : plan_(plan), d_(*plan.d), nest_(nest), inputs_(inputs), one_(Block::scalar(1.0)),
        zero_(Block::scalar(0.0)) {
    for (const ir::Output& o : d_.outputs) outputs_.emplace(o.node, reference::Tensor::zeros(d_, d_.node(o.node).axes));
  }

  void run() { tiles(0, Box::whole(d_)); }

  reference::TensorMap outputs() const {
    reference::TensorMap out;
    for (const ir::Output& o : d_.outputs)
      out.emplace(d_.node(o.node).name, outputs_.at(o.node).permuted(o.axes));
    return out;
  }
  std::int64_t chunks() const { return chunks_; }

 private:
  const NodePlan& P(NodeId id) const { return plan_.nodes[at(id)]; }

  void tiles(std::size_t i, Box box) {
    if (i == nest_.tiles.size()) return group(box);
    const Loop& l = nest_.tiles[i];
    const std::int64_t lo = box.lo[at(l.axis)], hi = box.hi[at(l.axis)];
    for_each_piece(lo, hi, l.step, [&](std::int64_t p, std::int64_t q) {
      box.lo[at(l.axis)] = p;
      box.hi[at(l.axis)] = q;
      tiles(i + 1, box);
    });
  }

  // One group: initialise the accumulators, run the chunks, finalise.
  void group(const Box& g) {
    group_ = g;
    acc_.clear();
    scale_.clear();
    for (std::size_t i = 0; i < d_.nodes.size(); ++i) {
      const NodePlan& np = plan_.nodes[i];
      if (!np.live || np.role != Role::fold) continue;
      const Node& n = d_.nodes[i];
      const double init = n.op == OpKind::reduce_max ? -kInf : 0.0;
      acc_.emplace(static_cast<NodeId>(i), Block::filled(n.axes, g, init));
    }
    streams(0, g);
    finalise(g);
  }

  void streams(std::size_t i, Box box) {
    if (i == nest_.streams.size()) return step(box);
    const Loop& l = nest_.streams[i];
    const std::int64_t lo = box.lo[at(l.axis)], hi = box.hi[at(l.axis)];
    for_each_piece(lo, hi, l.step, [&](std::int64_t p, std::int64_t q) {
      box.lo[at(l.axis)] = p;
      box.hi[at(l.axis)] = q;
      streams(i + 1, box);
    });
  }

  std::vector<const Block*> operands(const Node& n, const std::vector<std::optional<Block>>& val,
                                     const std::vector<bool>& unit) const {
    std::vector<const Block*> xs;
    for (std::size_t j = 0; j < n.operands.size(); ++j) {
      if (!unit.empty() && unit[j]) {
        xs.push_back(&one_);
        continue;
      }
      const auto& v = val[at(n.operands[j])];
      NAPKIN_CHECK(v.has_value(), fmt::format("operand {} of {} was not computed", d_.label(n.operands[j]),
                                              d_.label(static_cast<NodeId>(&n - d_.nodes.data()))));
      xs.push_back(&*v);
    }
    return xs;
  }

  // A fold's running value as the diagram means it: the accumulator times its deferred
  // factors (1 / z for the softmax-contraction), from the factors' values on `box`.
  Block running_value(NodeId id, const Block& acc, const Box& box, const std::vector<std::optional<Block>>& val) const {
    const NodePlan& np = P(id);
    if (np.deferred.empty()) return acc;
    std::vector<const Block*> xs{&acc};
    std::vector<int> exps;
    for (const Factor& f : np.deferred) {
      xs.push_back(&*val[at(f.node)]);
      exps.push_back(f.exponent);
    }
    return map(d_.node(id).axes, box, xs, [&](const double* v) {
      double r = v[0];
      for (std::size_t j = 0; j < exps.size(); ++j) r = exps[j] > 0 ? r * v[j + 1] : r / v[j + 1];
      return r;
    });
  }

  // One chunk: the chunk's slice of every local and scaled value, the update of every
  // accumulator, and the running values of the folded ones.
  void step(const Box& b) {
    ++chunks_;
    const AxisId a = plan_.a;
    const bool first_chunk = a < 0 || b.lo[at(a)] == group_.lo[at(a)];
    const std::size_t n_nodes = d_.nodes.size();
    std::vector<std::optional<Block>> val(n_nodes), zero(n_nodes), scale(n_nodes);
    for (std::size_t i = 0; i < n_nodes; ++i) {
      const NodePlan& np = plan_.nodes[i];
      if (!np.step) continue;
      const NodeId id = static_cast<NodeId>(i);
      const Node& n = d_.nodes[i];
      switch (np.role) {
        case Role::invariant: case Role::local: case Role::folded:
          val[i] = evaluate_node(n, n.axes, b, operands(n, val, {}), inputs_);
          break;
        case Role::shifted: {
          val[i] = evaluate_node(n, n.axes, b, operands(n, val, {}), inputs_);
          // The zero part: the same op with every local operand set to 0, so that
          // shift(x) = x-part + zero part, and exp(shift) rescales by exp(zero_new - zero_old).
          std::vector<const Block*> zs;
          for (NodeId o : n.operands) {
            const Role r = P(o).role;
            zs.push_back(r == Role::local ? &zero_ : r == Role::shifted ? &*zero[at(o)] : &*val[at(o)]);
          }
          zero[i] = evaluate_node(n, np.zero_axes, b, zs, inputs_);
          break;
        }
        case Role::scaled: {
          val[i] = evaluate_node(n, n.axes, b, operands(n, val, np.unit_slot), inputs_);
          if (np.exp_of_shifted) {
            // exp(x-part + zero part): the value carries the factor exp(zero part).
            const double unit = n.op == OpKind::exp2 ? std::numbers::ln2 : 1.0;
            scale[i] = map(np.scale_axes, b, {&*zero[at(n.operands[0])]}, [&](const double* v) { return v[0] * unit; });
          } else if (np.has_scale) {
            scale[i] = log_scale(id, scale, b);
          }
          break;
        }
        case Role::fold: {
          Block& state = acc_.at(id);
          Block part = read(state, b);
          if (updates(n, b)) {
            const Block chunk = evaluate_node(n, n.axes, b, operands(n, val, np.unit_slot), inputs_);
            if (!np.rescaled_fold && n.op == OpKind::reduce_max) {
              part = map(n.axes, b, {&part, &chunk}, [](const double* v) { return reference::maximum(v[0], v[1]); });
            } else if (np.has_scale) {
              // Bring what was accumulated under the old stabilisers to the new ones, by
              // exp(scale_new - scale_old) (exp(mu_old - mu_new) for softmax), then add the
              // chunk. An empty accumulator stays 0: its old scale may be a guard value or inf.
              const Block now = log_scale(id, scale, b);
              auto it = scale_.find(id);
              if (it == scale_.end()) it = scale_.emplace(id, Block::filled(n.axes, group_, 0.0)).first;
              const Block before = read(it->second, b);
              part = map(n.axes, b, {&part, &now, &before, &chunk}, [](const double* v) {
                return (v[0] == 0.0 ? 0.0 : v[0] * std::exp(v[1] - v[2])) + v[3];
              });
              write(it->second, map(n.axes, b, {&now}, [](const double* v) { return v[0]; }));
            } else {
              part = map(n.axes, b, {&part, &chunk}, [](const double* v) { return v[0] + v[1]; });
            }
            write(state, part);
          }
          val[i] = running_value(id, part, b, val);
          break;
        }
      }
    }
    for (const ir::Output& o : d_.outputs) {
      const Role r = P(o.node).role;
      if (r == Role::local || (r == Role::invariant && first_chunk)) write(outputs_.at(o.node), *val[at(o.node)]);
    }
  }

  // The log scale of a product-like node: the sum of its scaled operands' (a divisor is never
  // scaled).
  Block log_scale(NodeId id, const std::vector<std::optional<Block>>& scale, const Box& b) const {
    const Node& n = d_.node(id);
    std::vector<const Block*> xs;
    for (std::size_t j = 0; j < n.operands.size(); ++j) {
      if (n.op == OpKind::div && j == 1) continue;
      if (const auto& l = scale[at(n.operands[j])]; l.has_value() && P(n.operands[j]).role == Role::scaled)
        xs.push_back(&*l);
    }
    return map(P(id).scale_axes, b, xs, [&](const double* v) {
      double s = 0.0;
      for (std::size_t j = 0; j < xs.size(); ++j) s += v[j];
      return s;
    });
  }

  // Whether fold n takes in chunk b. A fold lacking a woven axis that the nest chunks (f in
  // rmsnorm_matmul under `stream f=2:none`) takes each chunk of the streamed axis once, with
  // the first chunk of that axis, and keeps its value across the others: its accumulator
  // stays resident as everything lacking an axis does across that axis's chunks.
  bool updates(const Node& n, const Box& b) const {
    for (const Loop& l : nest_.streams)
      if (l.axis != plan_.a && !has(n.axes, l.axis) && b.lo[at(l.axis)] != group_.lo[at(l.axis)]) return false;
    return true;
  }

  // After the last chunk: the folds' final values and every folded output.
  void finalise(const Box& g) {
    std::vector<std::optional<Block>> val(d_.nodes.size());
    for (std::size_t i = 0; i < d_.nodes.size(); ++i) {
      const NodePlan& np = plan_.nodes[i];
      if (!np.final) continue;
      const Node& n = d_.nodes[i];
      const NodeId id = static_cast<NodeId>(i);
      if (np.role == Role::fold) val[i] = running_value(id, acc_.at(id), g, val);
      else val[i] = evaluate_node(n, n.axes, g, operands(n, val, {}), inputs_);
    }
    for (const ir::Output& o : d_.outputs)
      if (P(o.node).final) write(outputs_.at(o.node), *val[at(o.node)]);
  }

  const Plan& plan_;
  const Diagram& d_;
  const Nest& nest_;
  const reference::TensorMap& inputs_;
  const Block one_, zero_;
  std::map<NodeId, reference::Tensor> outputs_;
  Box group_;
  std::map<NodeId, Block> acc_;    // per fold: its accumulator over the group
  std::map<NodeId, Block> scale_;  // per rescaled fold: the log scale its accumulator is under
  std::int64_t chunks_ = 0;
};

// ---------------------------------------------------------------------------------------------
// 4. The transfers.

struct Target {
  std::string name;
  std::vector<AxisId> axes;
  std::size_t depth = 0;  // the nest depth at which a new slice enters (or leaves) the level
  std::int64_t* sink = nullptr;
};

void walk(const std::vector<Loop>& loops, std::size_t depth, std::size_t group_depth, Box& box,
          std::vector<Target>& targets, std::size_t max_depth, std::int64_t& groups) {
  if (depth == group_depth) ++groups;
  for (Target& t : targets)
    if (t.depth == depth) {
      std::int64_t n = 1;
      for (AxisId a : t.axes) n *= box.size(a);
      *t.sink += n;
    }
  if (depth == max_depth) return;
  const Loop& l = loops[depth];
  const std::int64_t lo = box.lo[at(l.axis)], hi = box.hi[at(l.axis)];
  for_each_piece(lo, hi, l.step, [&](std::int64_t p, std::int64_t q) {
    box.lo[at(l.axis)] = p;
    box.hi[at(l.axis)] = q;
    walk(loops, depth + 1, group_depth, box, targets, max_depth, groups);
  });
  box.lo[at(l.axis)] = lo;
  box.hi[at(l.axis)] = hi;
}

TransferReport count(const Diagram& d, const Nest& nest) {
  TransferReport r;
  std::vector<bool> live(d.nodes.size(), false);
  for (const ir::Output& o : d.outputs) live[at(o.node)] = true;
  for (std::size_t i = d.nodes.size(); i-- > 0;)
    if (live[i])
      for (NodeId o : d.nodes[i].operands) live[at(o)] = true;
  for (std::size_t li = 0; li < nest.levels.size(); ++li) {
    const std::string& level = nest.levels[li];
    std::vector<Loop> loops;
    for (const Loop& l : nest.tiles)
      if (at(l.level) <= li) loops.push_back(l);
    const std::size_t group_depth = loops.size();
    for (const Loop& l : nest.streams)
      if (at(l.level) <= li) loops.push_back(l);
    auto depth_of = [&](const std::vector<AxisId>& axes) {
      std::size_t depth = group_depth;
      for (std::size_t j = group_depth; j < loops.size(); ++j)
        if (has(axes, loops[j].axis)) depth = j + 1;
      return depth;
    };
    std::vector<Target> targets;
    for (NodeId in : d.inputs())
      if (live[at(in)]) {
        const Node& n = d.node(in);
        targets.push_back({n.name, n.axes, depth_of(n.axes), &r.loads[level][n.name]});
      }
    // An output's slice leaves once per group: a fold's is final only after the whole
    // stream, and a local output's chunks are disjoint.
    for (const ir::Output& o : d.outputs) {
      const Node& n = d.node(o.node);
      targets.push_back({n.name, n.axes, group_depth, &r.stores[level][n.name]});
    }
    std::size_t max_depth = group_depth;
    for (const Target& t : targets) max_depth = std::max(max_depth, t.depth);
    Box box = Box::whole(d);
    walk(loops, 0, group_depth, box, targets, max_depth, r.groups[level]);
  }
  return r;
}

std::optional<Diagnostic> check_inputs(const Diagram& d, const reference::TensorMap& inputs) {
  for (const auto& [name, t] : inputs) {
    const auto id = d.find_node(name);
    if (!id || d.node(*id).op != OpKind::input)
      return plain_error(fmt::format("'{}' is not an input of the diagram", name));
  }
  for (NodeId id : d.inputs()) {
    const Node& n = d.node(id);
    const auto it = inputs.find(n.name);
    if (it == inputs.end()) return plain_error(fmt::format("no value given for input '{}'", n.name));
    std::vector<std::int64_t> want;
    for (AxisId a : n.axes) want.push_back(d.axis(a).size);
    if (it->second.sizes != want || static_cast<std::int64_t>(it->second.data.size()) != d.elements(n.axes))
      return plain_error(fmt::format("input '{}' must have shape ({}) for {}, found ({})", n.name,
                                     fmt::join(want, ", "), ir::axes_text(d, n.axes),
                                     fmt::join(it->second.sizes, ", ")));
  }
  return std::nullopt;
}

}  // namespace

Result<TransferReport> count_transfers(const Diagram& d, const sched::Schedule& s) {
  const sched::StreamingReport report = sched::analyse_streaming(d);
  auto nest = build_nest(d, s, report);
  if (!nest) return nest.error();
  return count(report.normalised.diagram, *nest);
}

Result<ExecutionResult> execute(const Diagram& d, const sched::Schedule& s, const reference::TensorMap& inputs) {
  const sched::StreamingReport report = sched::analyse_streaming(d);
  auto nest = build_nest(d, s, report);
  if (!nest) return nest.error();
  const Diagram& nd = report.normalised.diagram;
  if (auto problem = check_inputs(nd, inputs)) return *problem;
  auto plan = make_plan(nd, nest->streamed);
  if (!plan) return plan.error();

  reference::TensorMap given = inputs;  // over the declared axes, as the interpreter reads them
  for (auto& [name, t] : given) t.axes = nd.node(*nd.find_node(name)).axes;
  Run run(*plan, *nest, given);
  run.run();
  TransferReport transfers = count(nd, *nest);
  ExecutionResult r;
  r.outputs = run.outputs();
  r.loads = std::move(transfers.loads);
  r.stores = std::move(transfers.stores);
  r.groups = std::move(transfers.groups);
  r.chunks = run.chunks();
  if (nest->streamed >= 0) r.streamed_axis = nd.axis(nest->streamed).name;
  r.nest = nest->text;
  r.notes = plan->notes;
  return r;
}

Comparison compare(const reference::TensorMap& actual, const reference::TensorMap& expected) {
  Comparison c;
  auto worst = [&](const std::string& name, double abs_error, double rel_error) {
    c.max_abs_error = std::max(c.max_abs_error, abs_error);
    if (rel_error > c.max_rel_error || (std::isnan(rel_error) && !std::isinf(c.max_rel_error))) {
      c.max_rel_error = std::isnan(rel_error) ? kInf : rel_error;
      c.worst_output = name;
    }
  };
  for (const auto& [name, want] : expected) {
    const auto it = actual.find(name);
    if (it == actual.end() || it->second.sizes != want.sizes || it->second.data.size() != want.data.size()) {
      worst(name, kInf, kInf);
      continue;
    }
    for (std::size_t i = 0; i < want.data.size(); ++i) {
      const double x = it->second.data[i], y = want.data[i];
      if (x == y || (std::isnan(x) && std::isnan(y))) continue;  // equal, including infinities
      const double abs_error = std::isnan(x) || std::isnan(y) ? kInf : std::fabs(x - y);
      worst(name, std::isnan(abs_error) ? kInf : abs_error,
            std::isnan(abs_error) ? kInf : abs_error / std::max(1.0, std::fabs(y)));
    }
  }
  return c;
}

}  // namespace napkin::exec
