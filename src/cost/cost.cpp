// SPDX-License-Identifier: Apache-2.0
// The cost model's arithmetic. Section numbers refer to docs/cost_model.md.
#include "cost/cost.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/builder.h"
#include "sched/skip.h"

namespace napkin::cost {

using ir::AxisId;
using ir::Diagram;
using ir::Node;
using ir::NodeId;
using ir::OpKind;
using sched::LevelSchedule;
using sched::Schedule;

namespace {

// The partition of one axis at one scheduled level: a tile (group partition) or a chunk
// (stream partition) of `size` elements.
struct Split {
  std::int64_t size = 0;
  bool streamed = false;
};

std::optional<Split> split_at(const LevelSchedule& l, const std::string& axis) {
  for (const auto& t : l.tiles)
    if (t.axis == axis) return Split{t.tile, false};
  for (const auto& s : l.streams)
    if (s.axis == axis) return Split{s.chunk, true};
  return std::nullopt;
}

// Splitting an axis of `extent` elements level by level, exactly (the last piece of each
// split may be ragged): how many pieces there are, and the largest piece (§2).
struct Pieces {
  double count = 1;
  std::int64_t largest = 0;
};

// A level that streams an axis carries its accumulator across every enclosing chunk of that
// axis, so when `streams_at_level` is false, no stream split of an axis the level itself
// streams is counted (the same loop continues); tile splits always are.
Pieces pieces(const Schedule& s, const std::string& axis, std::int64_t extent, std::size_t level,
              bool streams_at_level) {
  // The pieces as a multiset {size: count}: splitting n pieces of `size` in `sp` gives
  // n * (size / sp) pieces of sp and n pieces of the remainder, so the work is bounded by the
  // number of levels (each split adds at most one distinct size), never by the extent.
  std::map<std::int64_t, double> counts{{extent, 1.0}};
  const auto own = level < s.levels.size() ? split_at(s.levels[level], axis) : std::nullopt;
  const bool own_stream = own && own->streamed;
  for (std::size_t j = 0; j <= level && j < s.levels.size(); ++j) {
    const auto sp = split_at(s.levels[j], axis);
    if (!sp || (sp->streamed && !streams_at_level && own_stream) ||
        (sp->streamed && j == level && !streams_at_level))
      continue;
    std::map<std::int64_t, double> next;
    for (const auto& [size, n] : counts) {
      const std::int64_t full = size / sp->size, rest = size % sp->size;
      if (full) next[sp->size] += n * static_cast<double>(full);
      if (rest) next[rest] += n;
    }
    counts = std::move(next);
  }
  Pieces p;
  p.count = 0;
  for (const auto& [size, n] : counts) p.count += n;
  p.largest = counts.rbegin()->first;
  return p;
}

// The dtype `tensor` has at scheduled level `level`: the nearest `keep T:dtype` at or above it.
DType dtype_at(const Schedule& s, std::size_t level, const std::string& tensor, DType own) {
  for (std::size_t j = std::min(level + 1, s.levels.size()); j-- > 0;)
    for (const auto& r : s.levels[j].keep)
      if (r.tensor == tensor && r.dtype) return *r.dtype;
  return own;
}

// Tensors crossing into a scheduled level: its `keep` list, or else every input and output.
std::vector<NodeId> crossing(const Diagram& d, const LevelSchedule& l) {
  std::vector<NodeId> out;
  if (!l.keep.empty()) {
    for (const auto& r : l.keep)
      if (auto id = d.find_node(r.tensor)) out.push_back(*id);
    return out;
  }
  for (NodeId id : d.inputs()) out.push_back(id);
  for (const ir::Output& o : d.outputs) out.push_back(o.node);
  return out;
}

bool is_output(const Diagram& d, NodeId id) {
  return std::any_of(d.outputs.begin(), d.outputs.end(), [&](const ir::Output& o) { return o.node == id; });
}

bool has_axis(const Node& n, AxisId a) { return std::find(n.axes.begin(), n.axes.end(), a) != n.axes.end(); }

// The narrow input format of a contraction (its tensor-core dtype), after quantization.
std::optional<DType> contraction_format(const Diagram& d, const Schedule& s, const Node& n) {
  std::optional<DType> narrow;
  bool all_f64 = true;
  for (NodeId o : n.operands) {
    const Node& x = d.node(o);
    const DType t = x.name.empty() ? x.dtype : dtype_at(s, s.levels.size() - 1, x.name, x.dtype);
    all_f64 = all_f64 && t == DType::f64;
    if (t != DType::f32 && t != DType::f64) narrow = t;
  }
  if (narrow) return narrow;
  return all_f64 ? DType::f64 : DType::f32;
}

std::string node_label(const Diagram& d, NodeId id) {
  const Node& n = d.node(id);
  std::string s(ir::op_name(n.op));
  if (!n.over.empty()) s += " over" ;
  for (AxisId a : n.over) s += " " + d.axis(a).name;
  return n.name.empty() ? s : s + " '" + n.name + "'";
}

// §12 Masks: at scheduled level `level`, the fraction of (row tile, chunk) blocks of an axis the
// level streams that a mask leaves visible (sched/skip.h): a block all -inf is neither loaded
// nor computed. The row axis is the predicate's other axis, tiled as the level tiles it (its
// whole extent where the level does not; any axis in one tile where the predicate has no
// other). 1 where the level streams nothing with a mask.
struct LevelSkipping {
  std::optional<AxisId> stream;  // the masked streamed axis, if any
  double visited = 1;
};
LevelSkipping skipping_at(const Diagram& d, const Schedule& s, std::size_t level) {
  for (const auto& st : s.levels[level].streams) {
    const auto a = d.find_axis(st.axis);
    if (!a) continue;
    const std::vector<NodeId> predicates = sched::mask_predicates(d, *a);
    if (predicates.empty()) continue;
    std::optional<AxisId> row;
    for (NodeId p : predicates)
      for (AxisId x : d.node(p).axes)
        if (x != *a && !row) row = x;
    // A predicate of the streamed axis alone masks whole chunks for every row: any other axis,
    // in one tile, serves as the row axis.
    const bool row_in_predicate = row.has_value();
    for (std::size_t x = 0; x < d.axes.size() && !row; ++x)
      if (static_cast<AxisId>(x) != *a) row = static_cast<AxisId>(x);
    if (!row) continue;  // a one-axis diagram
    const std::int64_t tile = row_in_predicate ? pieces(s, d.axis(*row).name, d.axis(*row).size, level, true).largest
                                               : d.axis(*row).size;
    const std::int64_t chunk = pieces(s, st.axis, d.axis(*a).size, level, true).largest;
    return {a, sched::block_skipping(d, *row, tile, *a, chunk).visited_fraction()};
  }
  return {};
}

}  // namespace

Result<Estimate> estimate(const Diagram& input, const Schedule& s, const arch::Machine& m) {
  const sched::StreamingReport report = sched::analyse_streaming(input);
  const Diagram& d = report.normalised.diagram;
  Estimate e;
  e.machine = m.name;
  e.schedule = sched::to_string(s);
  e.overlap = "every unit and every link overlap perfectly (roofline), after wave quantization";
  if (s.levels.empty()) return plain_error("the schedule has no levels; expected e.g. smem{tile q=128}");
  for (const LevelSchedule& l : s.levels)
    if (!m.level(l.level)) {
      std::string names;
      for (const auto& lv : m.levels) names += " " + lv.name;
      return plain_error(fmt::format("schedule level '{}' is not a level of machine {} (levels:{})",
                                     l.level, m.name, names));
    }

  // §2 Transfers: per scheduled level, each crossing tensor moves |t| x (pieces of every axis
  // partitioned at or above the level that t lacks); streamed axes at the level itself do not
  // re-read what lacks them (that is what streaming buys).
  // §12: per scheduled level, the blocks a mask leaves visible.
  std::vector<LevelSkipping> skips;
  // (On the diagram as written: masks are read where hoist_masks put them, as the kernels read them.)
  for (std::size_t i = 0; i < s.levels.size(); ++i) skips.push_back(skipping_at(input, s, i));
  std::string above = std::string(arch::kGmem);
  for (std::size_t i = 0; i < s.levels.size(); ++i) {
    const LevelSchedule& l = s.levels[i];
    LevelCost lc;
    lc.name = l.level;
    lc.scheduled = true;
    // §12: tensors along a masked streamed axis move only in the visited blocks.
    const LevelSkipping& skip = skips[i];
    if (skip.stream) {
      lc.visited_fraction = skip.visited;
      e.visited_fraction = skip.visited;  // the innermost level's, where computation happens
    }
    for (NodeId id : crossing(d, l)) {
      const Node& t = d.node(id);
      TensorTraffic tt;
      tt.tensor = t.name;
      tt.dtype = dtype_at(s, i, t.name, t.dtype);
      const double size = static_cast<double>(d.elements(t.axes));
      double reloads = 1;
      for (std::size_t a = 0; a < d.axes.size(); ++a)
        if (!has_axis(t, static_cast<AxisId>(a)))
          reloads *= pieces(s, d.axes[a].name, d.axes[a].size, i, false).count;
      if (skip.stream && has_axis(t, *skip.stream)) reloads *= skip.visited;
      tt.elements = size * reloads;
      tt.reloads = reloads;
      lc.transfer_elements += tt.elements;
      lc.transfer_bytes += tt.bytes();
      lc.tensors.push_back(tt);
    }
    // §3 Peak memory of one group: resident inputs and outputs at their extents (streamed
    // chunks times the pipeline stages), running statistics, and live intermediates.
    std::vector<std::int64_t> extent(d.axes.size());
    for (std::size_t a = 0; a < d.axes.size(); ++a)
      extent[a] = pieces(s, d.axes[a].name, d.axes[a].size, i, true).largest;
    auto footprint_elems = [&](const Node& n) {
      double x = 1;
      for (AxisId a : n.axes) x *= static_cast<double>(extent[static_cast<std::size_t>(a)]);
      return x;
    };
    auto streamed_here = [&](const Node& n) {
      for (const auto& st : l.streams)
        if (auto a = d.find_axis(st.axis); a && has_axis(n, *a)) return true;
      return false;
    };
    std::set<NodeId> counted;
    for (NodeId id : crossing(d, l)) {
      const Node& t = d.node(id);
      counted.insert(id);
      const bool out = is_output(d, id);
      // An output that lacks a streamed axis accumulates over it; its f32 accumulator, when
      // the output is cast down, is the contraction before the cast (a live intermediate).
      const bool accumulates = out && !l.streams.empty() && !streamed_here(t);
      const DType dt = dtype_at(s, i, t.name, t.dtype);
      const double stages = (!out && streamed_here(t)) ? std::max(1, l.stages) : 1;
      lc.footprint.push_back({t.name, accumulates ? "accumulator" : out ? "output" : "input",
                              footprint_elems(t) * dtype_bytes(dt) * stages});
    }
    // Computation happens at the innermost scheduled level: its running statistics and live
    // intermediates are counted there only.
    const bool innermost = i + 1 == s.levels.size();
    // Running statistics of the streamed accumulators (max and sum per output row, in f32).
    for (const auto& st : l.streams)
      for (sched::Accumulator acc : st.accumulators) {
        int stats = acc == sched::Accumulator::online_softmax || acc == sched::Accumulator::logsumexp ? 2
                    : acc == sched::Accumulator::normalised_contraction || acc == sched::Accumulator::max ? 1 : 0;
        if (!stats || !innermost) continue;
        const auto a = d.find_axis(st.axis);
        const sched::AxisStreaming& as = report.of(*a);
        if (as.folds.empty()) continue;
        const Node& fold = d.node(as.folds.front());
        lc.footprint.push_back({fmt::format("{} statistics over {}", sched::accumulator_name(acc), st.axis),
                                "accumulator", stats * footprint_elems(fold) * 4.0});
      }
    // Live intermediates: each from its definition to its last use, in node order.
    std::vector<std::size_t> last_use(d.nodes.size(), 0);
    for (std::size_t n = 0; n < d.nodes.size(); ++n)
      for (NodeId o : d.nodes[n].operands) last_use[static_cast<std::size_t>(o)] = n;
    double live = 0, peak_live = 0;
    std::vector<std::pair<std::size_t, double>> ending;
    std::string peak_at;
    for (std::size_t n = 0; n < d.nodes.size(); ++n) {
      const Node& x = d.nodes[n];
      const bool leaf = ir::op_class(x.op) == ir::OpClass::leaf;
      if (innermost && !leaf && !counted.count(static_cast<NodeId>(n)) && !is_output(d, static_cast<NodeId>(n))) {
        const double bytes = footprint_elems(x) * dtype_bytes(x.dtype);
        live += bytes;
        ending.emplace_back(last_use[n], bytes);
      }
      if (live > peak_live) {
        peak_live = live;
        peak_at = d.label(static_cast<NodeId>(n));
      }
      std::erase_if(ending, [&](const auto& p) {
        if (p.first > n) return false;
        live -= p.second;
        return true;
      });
    }
    if (peak_live > 0) lc.footprint.push_back({"live intermediates (peak at " + peak_at + ")", "intermediate", peak_live});
    for (const Footprint& f : lc.footprint) lc.peak_bytes += f.bytes;
    // Capacity of one group: the level's per-instance capacity shared by the groups running
    // together, and for smem also the per-block limit.
    // Groups of this level and of the scheduled levels above it (below l2) share one
    // instance: e.g. 3 warpgroups per CTA and 2 CTAs per SM share the SM's registers.
    double sharing = 1;
    for (std::size_t j = 0; j <= i; ++j)
      if (s.levels[j].level != arch::kL2) sharing *= std::max(1, s.levels[j].groups);
    lc.capacity_bytes = static_cast<double>(m.capacity_bytes(l.level)) / sharing;
    lc.capacity_source = sharing > 1 ? fmt::format("{:.2f} KiB per {} / {:g} groups",
                                                   static_cast<double>(m.capacity_bytes(l.level)) / 1024,
                                                   l.level == arch::kL2 ? "GPU" : "SM", sharing)
                                     : fmt::format("{:.2f} KiB per {}", static_cast<double>(m.capacity_bytes(l.level)) / 1024,
                                                   l.level == arch::kL2 ? "GPU" : "SM");
    if (l.level == arch::kSmem && static_cast<double>(m.limits.smem_bytes_per_block.value) < lc.capacity_bytes) {
      lc.capacity_bytes = static_cast<double>(m.limits.smem_bytes_per_block.value);
      lc.capacity_source = "the per-block limit";
    }
    if (lc.peak_bytes > lc.capacity_bytes && e.does_not_fit.empty())
      e.does_not_fit = fmt::format("{}: one group needs {:.2f} KiB, over its capacity of {:.2f} KiB ({})", l.level,
                                   lc.peak_bytes / 1024, lc.capacity_bytes / 1024, lc.capacity_source);
    lc.groups_total = 1;
    for (std::size_t a = 0; a < d.axes.size(); ++a) {
      bool tiled = false;
      for (std::size_t j = 0; j <= i; ++j)
        if (auto sp = split_at(s.levels[j], d.axes[a].name); sp && !sp->streamed) tiled = true;
      if (tiled) lc.groups_total *= pieces(s, d.axes[a].name, d.axes[a].size, i, false).count;
    }

    // Machine levels between this one and the previous scheduled level carry the same traffic
    // (no caching is assumed in them: §2).
    std::vector<LevelCost> chain;
    for (const arch::Level* lv = m.level(l.level); lv && lv->name != above; lv = m.level(lv->parent)) {
      LevelCost c = lv->name == l.level ? lc : LevelCost{};
      if (lv->name != l.level) {
        c.name = lv->name;
        c.transfer_elements = lc.transfer_elements;
        c.transfer_bytes = lc.transfer_bytes;
        c.tensors = lc.tensors;
      }
      c.parent = lv->parent;
      c.bytes_per_s = lv->bytes_per_s.value;
      c.transfer_time_s = c.bytes_per_s > 0 ? c.transfer_bytes / c.bytes_per_s : 0;
      chain.push_back(std::move(c));
      if (lv->parent.empty()) break;
    }
    std::reverse(chain.begin(), chain.end());
    for (auto& c : chain) e.levels.push_back(std::move(c));
    above = l.level;
  }

  // §4 Operations per unit, on the normalised diagram.
  std::map<std::pair<arch::Unit, DType>, UnitCost> by_unit;
  auto add_ops = [&](arch::Unit u, DType t, double ops, std::string what) -> std::optional<Diagnostic> {
    if (!m.peak_ops_per_s(u, t))
      return plain_error(fmt::format("machine {} has no {} rate for {} (needed by {})", m.name,
                                     arch::unit_name(u), dtype_name(t), what));
    UnitCost c{u, t, ops, ops * arch::flop_per_op(u), 0, std::move(what)};
    e.ops.push_back(c);
    auto& agg = by_unit[{u, t}];
    agg.unit = u;
    agg.dtype = t;
    agg.ops += ops;
    agg.flops += c.flops;
    return std::nullopt;
  };
  // §12: work along a masked streamed axis is done only in the visited blocks.
  std::optional<AxisId> masked_axis;
  for (std::size_t i = s.levels.size(); i-- > 0 && !masked_axis;) masked_axis = skips[i].stream;
  auto along_mask = [&](const Node& x) {
    return masked_axis && (has_axis(x, *masked_axis) ||
                           std::find(x.over.begin(), x.over.end(), *masked_axis) != x.over.end());
  };
  for (std::size_t n = 0; n < d.nodes.size(); ++n) {
    const Node& x = d.nodes[n];
    const double visited = along_mask(x) ? e.visited_fraction : 1.0;
    const double elems = static_cast<double>(d.elements(x.axes)) * visited;
    std::optional<Diagnostic> err;
    const std::string what = node_label(d, static_cast<NodeId>(n));
    switch (ir::op_class(x.op)) {
      case ir::OpClass::leaf: break;
      case ir::OpClass::contraction: {
        double loop = elems;
        for (AxisId a : x.over) loop *= static_cast<double>(d.axis(a).size);
        const DType fmt_t = *contraction_format(d, s, x);
        const bool tensor = fmt_t != DType::f32 && fmt_t != DType::f64;
        if (tensor) err = add_ops(arch::Unit::tensor_core, fmt_t, 2 * loop, what);
        else err = add_ops(arch::Unit::fma, fmt_t, loop, what);
        e.flops += 2 * loop;
        break;
      }
      case ir::OpClass::reduction: {
        const Node& operand = d.node(x.operands[0]);
        err = add_ops(arch::Unit::fma, DType::f32,
                      static_cast<double>(d.elements(operand.axes)) * (along_mask(operand) ? e.visited_fraction : 1.0),
                      what);
        break;
      }
      default: {
        if (x.op == OpKind::exp || x.op == OpKind::exp2 || x.op == OpKind::log || x.op == OpKind::tanh)
          err = add_ops(arch::Unit::sfu, DType::f32, elems, what);
        else if (x.op == OpKind::softcap) {
          err = add_ops(arch::Unit::sfu, DType::f32, elems, what);
          if (!err) err = add_ops(arch::Unit::fma, DType::f32, 2 * elems, what);
        } else if (x.dtype != DType::f64) {
          err = add_ops(arch::Unit::fma, DType::f32, elems, what);
        } else {
          err = add_ops(arch::Unit::fma, DType::f64, elems, what);
        }
        break;
      }
    }
    if (err) return *err;
  }
  // The online softmax's rescale: per chunk, exp(mu_old - mu_new) per row and the output
  // accumulator multiplied by it (§4). Counted at the innermost level that streams the axis.
  for (std::size_t i = 0; i < s.levels.size(); ++i)
    for (const auto& st : s.levels[i].streams) {
      const bool online = std::find(st.accumulators.begin(), st.accumulators.end(),
                                    sched::Accumulator::online_softmax) != st.accumulators.end();
      bool deeper = false;
      for (std::size_t j = i + 1; j < s.levels.size(); ++j) deeper = deeper || split_at(s.levels[j], st.axis).has_value();
      if (!online || deeper) continue;
      const auto a = d.find_axis(st.axis);
      const double chunks = pieces(s, st.axis, d.axis(*a).size, i, true).count /
                            pieces(s, st.axis, d.axis(*a).size, i, false).count *
                            (masked_axis == a ? e.visited_fraction : 1.0);
      const Node& fold = d.node(report.of(*a).folds.front());
      double out_elems = 0;
      for (const ir::Output& o : d.outputs)
        if (!has_axis(d.node(o.node), *a)) out_elems += static_cast<double>(d.elements(d.node(o.node).axes));
      const double rows = static_cast<double>(d.elements(fold.axes));
      if (auto err = add_ops(arch::Unit::sfu, DType::f32, rows * chunks, "online-softmax rescale exp(mu_old - mu_new) over " + st.axis)) return *err;
      if (auto err = add_ops(arch::Unit::fma, DType::f32, (out_elems + rows) * chunks, "online-softmax rescale of the accumulators over " + st.axis)) return *err;
    }

  // A schedule that does not fit cannot run: no time (cost.h).
  if (!e.fits()) {
    for (LevelCost& lc : e.levels) lc.transfer_time_s = 0;
    for (auto& [key, c] : by_unit) {
      c.what = fmt::format("{} {}", arch::unit_name(c.unit), dtype_name(c.dtype));
      e.units.push_back(c);
    }
    return e;
  }
  // §5 Time: wave quantization of the groups that map onto SMs (the smem level's, or else
  // the first scheduled level below l2) over the SMs, then the roofline.
  const LevelSchedule* per_sm = nullptr;
  for (const LevelSchedule& l : s.levels)
    if (!per_sm && l.level != arch::kL2) per_sm = &l;
  if (!per_sm) per_sm = &s.levels.front();
  const LevelCost* per_sm_cost = nullptr;  // its link and groups
  for (const auto& lc : e.levels)
    if (lc.scheduled && lc.name == per_sm->level) per_sm_cost = &lc;
  const double groups_total = per_sm_cost ? per_sm_cost->groups_total : 1;
  const double slots = static_cast<double>(m.sm_count.value) * std::max(1, per_sm->groups);
  const double waves = std::ceil(groups_total / slots);
  e.wave_efficiency = groups_total / (waves * slots);
  double worst = 0;
  // Without an asynchronous warpgroup MMA (sm_80, sm_89: mma.sync), the warps that issue the
  // tensor-core work also do the exp and the FP32 arithmetic between the contractions, so the
  // compute units serialise: their times add (FlashAttention-2 on the A100 reaches 50-73 % of
  // the tensor-core peak; digest §FA2). With wgmma (sm_90) they overlap, as the paper assumes.
  const bool async_mma = m.limits.warpgroup_size_threads.has_value();
  if (!async_mma)
    e.overlap = "the compute units serialise (synchronous MMA: the same warps issue every unit's work) and overlap the "
                "links (roofline over the links), after wave quantization";
  double compute_s = 0;
  std::vector<std::string> compute_units;
  for (auto& [key, c] : by_unit) {
    c.time_s = c.ops / *m.peak_ops_per_s(c.unit, c.dtype) / e.wave_efficiency;
    c.what = fmt::format("{} {}", arch::unit_name(c.unit), dtype_name(c.dtype));
    e.sequential_time_s += c.time_s;
    if (c.time_s > worst) {
      worst = c.time_s;
      e.bound = c.what;
    }
    e.units.push_back(c);
    compute_s += c.time_s;
    compute_units.push_back(c.what);
  }
  if (!async_mma && compute_units.size() > 1 && compute_s > worst) {
    e.bound = fmt::format("{} in series", fmt::join(compute_units, " + "));
    worst = compute_s;
  }
  for (UnitCost& op : e.ops) op.time_s = op.ops / *m.peak_ops_per_s(op.unit, op.dtype) / e.wave_efficiency;
  // Without asynchronous copies either, each wave's groups fill their footprint over the per-SM
  // level's link before they compute: the compute waits for it. The bytes are part of that
  // link's transfers, so a transfer-bound schedule already pays for them (no fill then).
  double fill_s = 0;
  if (!async_mma && per_sm_cost && per_sm_cost->bytes_per_s > 0)
    fill_s = std::min(waves * std::min(groups_total, slots) * per_sm_cost->peak_bytes / per_sm_cost->bytes_per_s,
                      per_sm_cost->transfer_time_s);
  worst += fill_s;
  for (const LevelCost& lc : e.levels) {
    e.sequential_time_s += lc.transfer_time_s;
    if (lc.transfer_time_s > worst) {
      worst = lc.transfer_time_s;
      e.bound = "transfer " + lc.parent + "->" + lc.name;
      fill_s = 0;
    }
  }
  e.exposed_fill_s = fill_s;
  if (fill_s > 0) e.overlap += "; each wave's fill of its tiles exposed before it computes (no asynchronous copies)";
  e.predicted_time_s = worst;
  return e;
}

sched::Schedule default_schedule(const Diagram& d, const sched::StreamingReport& report,
                                 const arch::Machine& m, std::optional<DType> dtype) {
  // §6: three levels, as FlashAttention-style kernels run. l2 holds the broadcast inputs of a
  // whole tile of the re-read axes (the CTAs in flight share them), smem the tiles and chunks
  // one CTA streams, rmem the accumulators and intermediates of one warpgroup (64 rows).
  std::vector<std::string> inputs, outputs;
  for (NodeId id : d.inputs()) inputs.push_back(d.node(id).name);
  for (const ir::Output& o : d.outputs) outputs.push_back(d.node(o.node).name);
  auto keep_list = [&](const std::vector<std::string>& names, bool quantize) {
    std::vector<sched::Residency> keep;
    for (const std::string& n : names) {
      const Node& x = d.node(*d.find_node(n));
      keep.push_back({n, quantize && dtype && is_float(x.dtype) ? dtype : std::nullopt});
    }
    return keep;
  };
  // An axis is worth a tile > 1 when tiling it saves re-reads that matter: the inputs broadcast
  // over it (re-read once per tile) are at least an eighth of the largest such set. A key-padding
  // mask [b k] is broadcast over h, but tiling h to share it would multiply the K and V a group
  // holds for a few kilobytes saved.
  std::map<ir::AxisId, double> reread_bytes;
  double most = 0;
  for (const sched::AxisStreaming& as : report.axes) {
    double bytes = 0;
    for (const std::string& name : as.broadcast_inputs) {
      const Node& x = d.node(*d.find_node(name));
      bytes += static_cast<double>(d.elements(x.axes)) * static_cast<double>(dtype_bytes(x.dtype));
    }
    reread_bytes[as.axis] = bytes;
    most = std::max(most, bytes);
  }
  auto worth_tiling = [&](ir::AxisId a) { return reread_bytes[a] > 0 && reread_bytes[a] >= most / 8; };
  auto level = [&](std::string_view name, std::int64_t reread_tile, bool stream, std::int64_t chunk) {
    LevelSchedule l;
    l.level = std::string(name);
    for (const sched::AxisStreaming& as : report.axes) {
      const ir::Axis& ax = d.axis(as.axis);
      if (as.kind == sched::AxisKind::woven)
        l.tiles.push_back({ax.name, worth_tiling(as.axis) ? std::min(reread_tile, ax.size) : 1});
      else if (stream && as.kind == sched::AxisKind::streamed)
        l.streams.push_back({ax.name, std::min(chunk, ax.size), as.accumulators});
    }
    return l;
  };
  auto fits = [&](const Schedule& s, std::string_view name, double fraction) {
    auto est = estimate(d, s, m);
    if (!est) return false;
    for (const auto& lc : est->levels)
      if (lc.scheduled && lc.name == name) return lc.peak_bytes <= fraction * lc.capacity_bytes;
    return false;
  };
  Schedule s;
  // l2: the largest power-of-two tile whose inputs fit in a quarter of L2 (several tiles are
  // in flight at once).
  std::vector<std::string> both = inputs;
  both.insert(both.end(), outputs.begin(), outputs.end());
  LevelSchedule l2 = level(arch::kL2, 1, false, 0);
  l2.keep = keep_list(both, true);
  for (std::int64_t tile = 2; tile <= (std::int64_t{1} << 40); tile *= 2) {
    // A minimal smem level below keeps l2 from being the innermost (computing) level.
    Schedule trial{{level(arch::kL2, tile, false, 0), level(arch::kSmem, 1, true, 1)}};
    trial.levels[0].keep = l2.keep;
    if (!fits(trial, arch::kL2, 0.25)) break;
    l2 = trial.levels[0];
    if (std::all_of(l2.tiles.begin(), l2.tiles.end(), [&](const sched::TiledAxis& t) {
          return t.tile == d.axis(*d.find_axis(t.axis)).size || t.tile == 1;
        }))
      break;
  }
  // smem and rmem: the largest power-of-two tile up to 256 whose smem and rmem both fit.
  const std::int64_t chunk = 64;
  Schedule best;
  for (std::int64_t tile = 1; tile <= 256; tile *= 2) {
    Schedule trial;
    trial.levels.push_back(l2);
    LevelSchedule smem = level(arch::kSmem, tile, true, chunk);
    smem.keep = keep_list(both, true);
    smem.stages = 2;
    LevelSchedule rmem = level(arch::kRmem, std::min<std::int64_t>(tile, 64), true, chunk);
    rmem.keep = keep_list(outputs, false);
    rmem.groups = static_cast<int>(std::max<std::int64_t>(1, tile / 64));
    trial.levels.push_back(smem);
    trial.levels.push_back(rmem);
    if (tile > 1 && !(fits(trial, arch::kSmem, 1.0) && fits(trial, arch::kRmem, 1.0))) break;
    best = std::move(trial);
  }
  return best;
}

}  // namespace napkin::cost
