// SPDX-License-Identifier: Apache-2.0
#include "ir/normalise.h"

#include <cmath>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ir/builder.h"
#include "ir/verifier.h"

namespace napkin::ir {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Appends nodes to `out`, typing each with infer_type (the same rule the builder and the
// verifier use), so the expansion is typed exactly as if it had been written by hand.
class Emitter {
 public:
  Emitter(Normalised& out, NodeId origin, SourceLoc loc) : out_(out), origin_(origin), loc_(loc) {}

  NodeId add(Node n) {
    n.loc = loc_;
    auto inferred = infer_type(out_.diagram, n);
    NAPKIN_CHECK(std::holds_alternative<InferredType>(inferred),
                 fmt::format("normalise built an ill-typed {}: {}", op_name(n.op),
                             std::get<std::string>(inferred)));
    auto& t = std::get<InferredType>(inferred);
    n.axes = std::move(t.axes);
    n.dtype = t.dtype;
    out_.diagram.nodes.push_back(std::move(n));
    out_.origin.push_back(origin_);
    return static_cast<NodeId>(out_.diagram.nodes.size() - 1);
  }
  NodeId constant(double v) {
    Node n;
    n.op = OpKind::constant;
    n.scalar = v;
    return add(std::move(n));
  }
  NodeId op(OpKind k, std::vector<NodeId> operands, std::vector<AxisId> over = {},
            double scalar = 0.0) {
    Node n;
    n.op = k;
    n.operands = std::move(operands);
    n.over = std::move(over);
    n.scalar = scalar;
    return add(std::move(n));
  }
  // x / sqrt(v), with sqrt(v) = exp(0.5 * log(v)): the IR has no sqrt.
  NodeId div_sqrt(NodeId x, NodeId v) {
    return op(OpKind::div, {x, op(OpKind::exp, {op(OpKind::scale, {op(OpKind::log, {v})}, {}, 0.5)})});
  }

 private:
  Normalised& out_;
  NodeId origin_;
  SourceLoc loc_;
};

// A softmax's or logsumexp's statistics over a slice: m0 (the safe max), exp(x - m0) and its sum.
struct SoftmaxStatistics {
  NodeId m0 = -1, ex = -1, z = -1;
};
// By operand and axes: a softmax and a logsumexp of one value share them (attention that returns
// its LSE computes one set, as its kernel does).
using StatisticsCache = std::map<std::pair<NodeId, std::vector<AxisId>>, SoftmaxStatistics>;

// Expands composite `n` (operand already mapped to `x`); returns the node holding its value.
NodeId expand(Emitter& e, const Diagram& src, const Node& n, NodeId x, StatisticsCache& cache) {
  const double count = static_cast<double>(src.elements(n.over));
  switch (n.op) {
    case OpKind::softmax:
    case OpKind::logsumexp: {
      SoftmaxStatistics& st = cache[{x, n.over}];
      if (st.z < 0) {
        const NodeId m = e.op(OpKind::reduce_max, {x}, n.over);
        // Safe max: 0 where the slice is all -inf, so that x - m0 is -inf rather than NaN.
        st.m0 = e.op(OpKind::select, {e.op(OpKind::eq, {m, e.constant(-kInf)}), e.constant(0.0), m});
        st.ex = e.op(OpKind::exp, {e.op(OpKind::sub, {x, st.m0})});
        st.z = e.op(OpKind::reduce_sum, {st.ex}, n.over);
      }
      const NodeId m0 = st.m0, ex = st.ex, z = st.z;
      if (n.op == OpKind::logsumexp) return e.op(OpKind::add, {m0, e.op(OpKind::log, {z})});
      // Safe divisor: z is 0 only on an all -inf slice (else z >= 1), where softmax is 0.
      const NodeId z1 = e.op(OpKind::select, {e.op(OpKind::eq, {z, e.constant(0.0)}), e.constant(1.0), z});
      return e.op(OpKind::div, {ex, z1});
    }
    case OpKind::rmsnorm: {
      const NodeId ss = e.op(OpKind::reduce_sum, {e.op(OpKind::mul, {x, x})}, n.over);
      const NodeId ms = e.op(OpKind::div, {ss, e.constant(count)});
      return e.div_sqrt(x, e.op(OpKind::add, {ms, e.constant(n.scalar)}));
    }
    case OpKind::layernorm: {
      const NodeId mean = e.op(OpKind::div, {e.op(OpKind::reduce_sum, {x}, n.over), e.constant(count)});
      const NodeId c = e.op(OpKind::sub, {x, mean});
      const NodeId ss = e.op(OpKind::reduce_sum, {e.op(OpKind::mul, {c, c})}, n.over);
      const NodeId var = e.op(OpKind::div, {ss, e.constant(count)});
      return e.div_sqrt(c, e.op(OpKind::add, {var, e.constant(n.scalar)}));
    }
    default: NAPKIN_CHECK(false, "expand() needs a composite op");
  }
}

}  // namespace

Normalised normalise_with_origin(const Diagram& d) {
  Normalised out;
  out.diagram.axes = d.axes;
  out.diagram.source_name = d.source_name;
  std::vector<NodeId> map(d.nodes.size(), -1);  // input node -> its value in `out`
  StatisticsCache statistics;
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const Node& n = d.nodes[i];
    const NodeId origin = static_cast<NodeId>(i);
    if (op_class(n.op) != OpClass::composite) {
      Node copy = n;
      for (NodeId& o : copy.operands) o = map[static_cast<std::size_t>(o)];
      out.diagram.nodes.push_back(std::move(copy));
      out.origin.push_back(origin);
      map[i] = static_cast<NodeId>(out.diagram.nodes.size() - 1);
      continue;
    }
    Emitter e(out, origin, n.loc);
    NodeId v = expand(e, d, n, map[static_cast<std::size_t>(n.operands[0])], statistics);
    // The expansion's type equals the composite's for every float operand; a cast keeps the
    // post-condition should a future dtype rule make them differ.
    if (out.diagram.node(v).dtype != n.dtype) {
      Node c;
      c.op = OpKind::cast;
      c.operands = {v};
      c.dtype = n.dtype;
      v = e.add(std::move(c));
    }
    Node& last = out.diagram.nodes[static_cast<std::size_t>(v)];
    NAPKIN_CHECK(last.axes == n.axes, "normalise changed a composite's axes");
    last.name = n.name;
    map[i] = v;
  }
  for (const Output& o : d.outputs)
    out.diagram.outputs.push_back({map[static_cast<std::size_t>(o.node)], o.axes, o.loc});
  auto verified = verify(out.diagram, nullptr);
  NAPKIN_CHECK(verified.ok(), fmt::format("normalise produced an invalid diagram: {}",
                                          verified.ok() ? "" : verified.error().message));
  return out;
}

Diagram normalise(const Diagram& d) { return normalise_with_origin(d).diagram; }

}  // namespace napkin::ir
