// SPDX-License-Identifier: Apache-2.0
#include "sched/skip.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "ir/recognise.h"
#include "support/dtype.h"

namespace napkin::sched {
namespace {

using ir::AxisId;
using ir::Diagram;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

// A value's range over a block: numbers as [lo, hi]; booleans as "may be false / may be true".
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool may_false = true, may_true = true;
};
Range number(double lo, double hi) { return {lo, hi, true, true}; }
Range boolean(bool may_false, bool may_true) { return {0, 1, may_false, may_true}; }
const Range kUnknown{};

Range mul(const Range& a, const Range& b) {
  const double c[] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
  for (double x : c)
    if (std::isnan(x)) return kUnknown;  // 0 * inf
  return number(*std::min_element(c, c + 4), *std::max_element(c, c + 4));
}

// a / b: bounded only where b keeps one sign (the corners then bound the quotient).
Range div(const Range& a, const Range& b) {
  if (!(b.lo > 0 || b.hi < 0)) return kUnknown;
  const double c[] = {a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi};
  for (double x : c)
    if (std::isnan(x)) return kUnknown;  // inf / inf
  return number(*std::min_element(c, c + 4), *std::max_element(c, c + 4));
}

// a < b over the block: certainly true when a.hi < b.lo, certainly false when a.lo >= b.hi.
Range less(const Range& a, const Range& b, bool or_equal) {
  const bool always = or_equal ? a.hi <= b.lo : a.hi < b.lo;
  const bool never = or_equal ? a.lo > b.hi : a.lo >= b.hi;
  return boolean(!always, !never);
}

class Evaluator {
 public:
  // `axis_ranges`: the block, one range per axis (read at each eval, so it may change between).
  Evaluator(const Diagram& d, const std::vector<Range>& axis_ranges) : d_(d), axes_(axis_ranges) {}

  Range eval(NodeId id) {
    const Node& n = d_.node(id);
    auto x = [&](int i) { return eval(n.operands[static_cast<std::size_t>(i)]); };
    switch (n.op) {
      case OpKind::iota: return axes_[static_cast<std::size_t>(n.axis)];
      case OpKind::constant: return number(n.scalar, n.scalar);
      case OpKind::cast: {
        // Rounding is monotone, so the rounded ends bound the rounded values (the reference
        // rounds only inputs and casts). A cast to or from bool is left unbounded.
        const Range a = x(0);
        if (n.dtype == DType::boolean || d_.node(n.operands[0]).dtype == DType::boolean) return kUnknown;
        return number(round_to_dtype(a.lo, n.dtype), round_to_dtype(a.hi, n.dtype));
      }
      case OpKind::neg: { const Range a = x(0); return number(-a.hi, -a.lo); }
      case OpKind::floor: { const Range a = x(0); return number(std::floor(a.lo), std::floor(a.hi)); }
      case OpKind::abs: {
        const Range a = x(0);
        if (a.lo >= 0) return a;
        if (a.hi <= 0) return number(-a.hi, -a.lo);
        return number(0, std::max(-a.lo, a.hi));
      }
      case OpKind::scale: return mul(x(0), number(n.scalar, n.scalar));
      case OpKind::add: { const Range a = x(0), b = x(1); return number(a.lo + b.lo, a.hi + b.hi); }
      case OpKind::sub: { const Range a = x(0), b = x(1); return number(a.lo - b.hi, a.hi - b.lo); }
      case OpKind::mul: return mul(x(0), x(1));
      case OpKind::div: {
        // The quotient is rounded to the node's dtype (f64 divides as this does); widened
        // outwards first so that the double's own rounding cannot carry an end past the rounded one.
        const Range r = div(x(0), x(1));
        if (n.dtype == DType::f64 || (r.lo == kUnknown.lo && r.hi == kUnknown.hi)) return r;
        const double inf = std::numeric_limits<double>::infinity();
        return number(round_to_dtype(std::nextafter(r.lo, -inf), n.dtype),
                      round_to_dtype(std::nextafter(r.hi, inf), n.dtype));
      }
      case OpKind::min: { const Range a = x(0), b = x(1); return number(std::min(a.lo, b.lo), std::min(a.hi, b.hi)); }
      case OpKind::max: { const Range a = x(0), b = x(1); return number(std::max(a.lo, b.lo), std::max(a.hi, b.hi)); }
      case OpKind::lt: return less(x(0), x(1), false);
      case OpKind::le: return less(x(0), x(1), true);
      case OpKind::gt: return less(x(1), x(0), false);
      case OpKind::ge: return less(x(1), x(0), true);
      case OpKind::eq: {
        const Range a = x(0), b = x(1);
        const bool never = a.hi < b.lo || b.hi < a.lo;
        const bool always = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
        return boolean(!always, !never);
      }
      case OpKind::ne: {
        const Range a = x(0), b = x(1);
        const bool never_equal = a.hi < b.lo || b.hi < a.lo;
        const bool always_equal = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
        return boolean(/*may_false=*/!never_equal, /*may_true=*/!always_equal);
      }
      case OpKind::logical_not: { const Range a = x(0); return boolean(a.may_true, a.may_false); }
      case OpKind::logical_and: {
        const Range a = x(0), b = x(1);
        return boolean(a.may_false || b.may_false, a.may_true && b.may_true);
      }
      case OpKind::logical_or: {
        const Range a = x(0), b = x(1);
        return boolean(a.may_false && b.may_false, a.may_true || b.may_true);
      }
      default: return kUnknown;  // data-dependent: no bound
    }
  }

 private:
  const Diagram& d_;
  const std::vector<Range>& axes_;
};

bool has_axis(const std::vector<AxisId>& axes, AxisId a) { return std::find(axes.begin(), axes.end(), a) != axes.end(); }

// The masks of one reduction over `axis` (mask_predicates' rules), each once by node.
std::vector<NodeId> reduction_masks(const Diagram& d, NodeId r, AxisId axis) {
  const Node& n = d.node(r);
  std::vector<NodeId> masks;
  auto join = [&](const std::vector<NodeId>& more) {
    for (NodeId p : more)
      if (std::find(masks.begin(), masks.end(), p) == masks.end()) masks.push_back(p);
  };
  if (n.op == OpKind::softmax || n.op == OpKind::logsumexp || n.op == OpKind::reduce_max) {
    NodeId x = n.operands[0];
    join(peel_masks(d, x, -std::numeric_limits<double>::infinity()));
  } else if (n.op == OpKind::reduce_sum || n.op == OpKind::contract) {
    for (NodeId o : n.operands) {
      NodeId x = o;
      join(peel_masks(d, x, 0.0));
      if (d.node(x).op == OpKind::cast && is_float(d.node(x).dtype)) x = d.node(x).operands[0];
      if (d.node(x).op == OpKind::softmax && has_axis(d.node(x).over, axis)) {
        NodeId y = d.node(x).operands[0];
        join(peel_masks(d, y, -std::numeric_limits<double>::infinity()));
      }
    }
  }
  return masks;
}

}  // namespace

std::vector<NodeId> peel_masks(const Diagram& d, NodeId& x, double fill) {
  std::vector<NodeId> predicates;
  while (true) {
    const Node& n = d.node(x);
    if (n.op != OpKind::select) break;
    const Node& f = d.node(n.operands[2]);
    if (f.op != OpKind::constant || !f.name.empty() || f.scalar != fill || !d.reads_leaves_only(n.operands[0])) break;
    predicates.push_back(n.operands[0]);
    x = n.operands[1];
  }
  return predicates;
}

std::vector<NodeId> mask_predicates(const Diagram& d, AxisId stream_axis) {
  std::optional<std::vector<NodeId>> common;
  ir::SameValue same(d);
  for (NodeId id = 0; id < static_cast<NodeId>(d.nodes.size()); ++id) {
    if (!has_axis(d.node(id).over, stream_axis)) continue;
    const std::vector<NodeId> masks = reduction_masks(d, id, stream_axis);
    if (!common) {
      common = masks;
      continue;
    }
    std::vector<NodeId> kept;
    for (NodeId p : *common)
      if (std::any_of(masks.begin(), masks.end(), [&](NodeId m) { return same(p, m); })) kept.push_back(p);
    *common = std::move(kept);
  }
  return common.value_or(std::vector<NodeId>{});
}

std::vector<NodeId> mask_inputs(const Diagram& d, AxisId stream_axis) {
  std::vector<bool> read(d.nodes.size(), false);
  std::vector<NodeId> stack = mask_predicates(d, stream_axis);
  while (!stack.empty()) {
    const NodeId n = stack.back();
    stack.pop_back();
    if (read[static_cast<std::size_t>(n)]) continue;
    read[static_cast<std::size_t>(n)] = true;
    for (NodeId o : d.node(n).operands) stack.push_back(o);
  }
  std::vector<NodeId> inputs;
  for (NodeId id = 0; id < static_cast<NodeId>(d.nodes.size()); ++id)
    if (read[static_cast<std::size_t>(id)] && d.node(id).op == OpKind::input) inputs.push_back(id);
  return inputs;
}

BlockSkipping block_skipping(const Diagram& d, AxisId row_axis, std::int64_t row_tile, AxisId stream_axis,
                             std::int64_t chunk) {
  BlockSkipping r;
  const std::vector<NodeId> predicates = mask_predicates(d, stream_axis);
  r.masks = static_cast<int>(predicates.size());
  const std::int64_t rows = d.axis(row_axis).size, keys = d.axis(stream_axis).size;
  const std::int64_t tiles = (rows + row_tile - 1) / row_tile, chunks = (keys + chunk - 1) / chunk;
  r.blocks = tiles * chunks;
  if (predicates.empty()) {
    r.visited = r.blocks;
    return r;
  }
  // At most kMaxEvaluations predicate evaluations: beyond, adjacent tiles and chunks are
  // judged together (a group is skipped only if the predicate is false on all of it), which
  // over-counts the visited blocks along the mask's boundary only. Causal attention over 1M
  // keys in 256-row tiles and 32-key chunks (2^27 blocks) comes out at 50.20 % visited against
  // 50.01 % exact, in 44 ms for the whole search instead of a minute.
  constexpr std::int64_t kMaxEvaluations = std::int64_t{1} << 16;
  std::int64_t tile_group = 1, chunk_group = 1;
  auto groups = [](std::int64_t n, std::int64_t g) { return (n + g - 1) / g; };
  while (groups(tiles, tile_group) * groups(chunks, chunk_group) > kMaxEvaluations) {
    if (groups(chunks, chunk_group) >= groups(tiles, tile_group)) chunk_group *= 2;
    else tile_group *= 2;
  }
  std::vector<Range> axes(d.axes.size());
  for (std::size_t a = 0; a < d.axes.size(); ++a) axes[a] = number(0, static_cast<double>(d.axes[a].size - 1));
  Evaluator ev(d, axes);
  for (std::int64_t t0 = 0; t0 < tiles; t0 += tile_group) {
    const std::int64_t t1 = std::min(tiles, t0 + tile_group);  // tiles [t0, t1)
    axes[static_cast<std::size_t>(row_axis)] =
        number(static_cast<double>(t0 * row_tile), static_cast<double>(std::min(rows, t1 * row_tile) - 1));
    for (std::int64_t c0 = 0; c0 < chunks; c0 += chunk_group) {
      const std::int64_t c1 = std::min(chunks, c0 + chunk_group);  // chunks [c0, c1)
      axes[static_cast<std::size_t>(stream_axis)] =
          number(static_cast<double>(c0 * chunk), static_cast<double>(std::min(keys, c1 * chunk) - 1));
      const bool masked = std::any_of(predicates.begin(), predicates.end(), [&](NodeId p) { return !ev.eval(p).may_true; });
      if (!masked) r.visited += (t1 - t0) * (c1 - c0);
    }
  }
  return r;
}

}  // namespace napkin::sched
