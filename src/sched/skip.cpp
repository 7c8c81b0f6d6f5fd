// SPDX-License-Identifier: Apache-2.0
#include "sched/skip.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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
      case OpKind::cast: return x(0);
      case OpKind::neg: { const Range a = x(0); return number(-a.hi, -a.lo); }
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

bool is_minus_infinity(const Node& n) { return n.op == OpKind::constant && n.scalar == -std::numeric_limits<double>::infinity(); }

// Whether `id` reaches a softmax, logsumexp or max over `axis` through elementwise ops only.
bool reaches_reduction(const Diagram& d, NodeId id, AxisId axis) {
  for (NodeId u : d.users(id)) {
    const Node& n = d.node(u);
    const bool over = std::find(n.over.begin(), n.over.end(), axis) != n.over.end();
    if (over && (n.op == OpKind::softmax || n.op == OpKind::logsumexp || n.op == OpKind::reduce_max)) return true;
    if (ir::is_elementwise(n.op) && reaches_reduction(d, u, axis)) return true;
  }
  return false;
}

}  // namespace

BlockSkipping block_skipping(const Diagram& d, AxisId row_axis, std::int64_t row_tile, AxisId stream_axis,
                             std::int64_t chunk) {
  BlockSkipping r;
  std::vector<NodeId> predicates;
  for (NodeId id = 0; id < static_cast<NodeId>(d.nodes.size()); ++id) {
    const Node& n = d.node(id);
    if (n.op == OpKind::select && is_minus_infinity(d.node(n.operands[2])) && reaches_reduction(d, id, stream_axis))
      predicates.push_back(n.operands[0]);
  }
  r.masks = static_cast<int>(predicates.size());
  const std::int64_t rows = d.axis(row_axis).size, keys = d.axis(stream_axis).size;
  const std::int64_t tiles = (rows + row_tile - 1) / row_tile, chunks = (keys + chunk - 1) / chunk;
  r.blocks = tiles * chunks;
  if (predicates.empty()) {
    r.visited = r.blocks;
    return r;
  }
  std::vector<Range> axes(d.axes.size());
  for (std::size_t a = 0; a < d.axes.size(); ++a) axes[a] = number(0, static_cast<double>(d.axes[a].size - 1));
  Evaluator ev(d, axes);
  for (std::int64_t t = 0; t < tiles; ++t)
    for (std::int64_t c = 0; c < chunks; ++c) {
      axes[static_cast<std::size_t>(row_axis)] =
          number(static_cast<double>(t * row_tile), static_cast<double>(std::min(rows, (t + 1) * row_tile) - 1));
      axes[static_cast<std::size_t>(stream_axis)] =
          number(static_cast<double>(c * chunk), static_cast<double>(std::min(keys, (c + 1) * chunk) - 1));
      const bool masked = std::any_of(predicates.begin(), predicates.end(), [&](NodeId p) { return !ev.eval(p).may_true; });
      if (!masked) ++r.visited;
    }
  return r;
}

}  // namespace napkin::sched
