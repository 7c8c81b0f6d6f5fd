// SPDX-License-Identifier: Apache-2.0
#include "emit/attention_kernel.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "emit/expression.h"
#include "ir/printer.h"
#include "ir/recognise.h"
#include "sched/skip.h"

namespace napkin::emit {
namespace {

using ir::AxisId;
using ir::Diagram;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

bool has_axis(const Node& n, AxisId a) { return std::find(n.axes.begin(), n.axes.end(), a) != n.axes.end(); }

bool is_constant(const Diagram& d, NodeId n, double value) {
  const Node& x = d.node(n);
  return x.op == OpKind::constant && x.scalar == value;
}

// How an auxiliary input is summarised per block (napkin/block_summary.h): 'q' or 'k' for an
// i32 or bool input indexed by the query row or the key (with batch and heads), '2' for one
// indexed by both; 0 for any other.
char summarised_axis(const Node& x, const std::string& roles) {
  if (x.op != OpKind::input || (x.dtype != DType::i32 && x.dtype != DType::boolean)) return 0;
  const bool q = roles.find('q') != std::string::npos, k = roles.find('k') != std::string::npos;
  if ((!q && !k) || roles.find_first_not_of("bhgqk") != std::string::npos) return 0;
  return q && k ? '2' : q ? 'q' : 'k';
}

// Whether an input's roles index it by batch and heads alone: one value for a whole tile.
bool per_tile_roles(const std::string& roles) { return roles.find_first_of("qke") == std::string::npos; }

// Whether an input holds one i32 value per tile (a sequence's length, a per-head window): the
// block bound reads it as it is (a range of one value).
bool per_tile_input(const Node& x, const std::string& roles) {
  return x.op == OpKind::input && x.dtype == DType::i32 && per_tile_roles(roles);
}

// Whether `n` can be bounded over a block by the block bound's interval arithmetic: it depends
// on indices, integral constants, summarised and per-tile inputs (`aux`: input -> roles) alone,
// through integer ops it knows.
bool index_only(const Diagram& d_, NodeId n, const std::map<NodeId, std::string>& aux) {
  const Node& x = d_.node(n);
  switch (x.op) {
    case OpKind::iota: return true;
    case OpKind::input: {
      const auto it = aux.find(n);
      return it != aux.end() && (summarised_axis(x, it->second) != 0 || per_tile_input(x, it->second));
    }
    case OpKind::floor: {
      // floor(x / c) for a positive integral constant c: monotone in x.
      const Node& q = d_.node(x.operands[0]);
      if (q.op != OpKind::div) return index_only(d_, x.operands[0], aux);
      const Node& c = d_.node(q.operands[1]);
      return c.op == OpKind::constant && (!c.name.empty() || (c.scalar > 0 && c.scalar == std::floor(c.scalar))) &&
             index_only(d_, q.operands[0], aux);
    }
    case OpKind::constant:  // a param's value is bounded at run time (range_of_real)
      return !x.name.empty() || (std::isfinite(x.scalar) && x.scalar == std::floor(x.scalar) && std::fabs(x.scalar) < 1e15);
    case OpKind::add: case OpKind::sub: case OpKind::mul: case OpKind::neg: case OpKind::abs: case OpKind::min:
    case OpKind::max: case OpKind::lt: case OpKind::le: case OpKind::gt: case OpKind::ge: case OpKind::eq:
    case OpKind::ne:
      // Integer ranges: a bool operand (a predicate, a bool input) has no IntRange.
      for (NodeId o : x.operands)
        if (d_.node(o).dtype == DType::boolean) return false;
      break;
    case OpKind::logical_and: case OpKind::logical_or: case OpKind::logical_not:
      break;
    case OpKind::cast:
      if (x.dtype == DType::boolean || x.dtype == DType::fp8e4m3 || x.dtype == DType::fp8e5m2) return false;
      if (d_.node(x.operands[0]).dtype == DType::boolean) return false;
      break;
    default: return false;
  }
  for (NodeId o : x.operands)
    if (!index_only(d_, o, aux)) return false;
  return true;
}

// Whether the block bound of predicate `n` can ever say "nothing visible": some conjunct is
// bounded. (An input that is not summarised is unknown over a block: its comparisons may
// hold anywhere.)
bool may_skip(const Diagram& d, NodeId n, const std::map<NodeId, std::string>& aux) {
  const Node& x = d.node(n);
  if (x.op == OpKind::logical_and) return may_skip(d, x.operands[0], aux) || may_skip(d, x.operands[1], aux);
  if (x.op == OpKind::logical_or) return may_skip(d, x.operands[0], aux) && may_skip(d, x.operands[1], aux);
  return index_only(d, n, aux);
}

// Whether `n` takes one value per (batch, head): constants, params, batch and head indices, and
// auxiliary inputs indexed by them alone, through elementwise ops; numeric, free of the scores.
bool per_head(const Diagram& d, const AttentionForm& f, NodeId n) {
  const Node& x = d.node(n);
  if (n == f.qk || x.dtype == DType::boolean) return false;
  switch (x.op) {
    case OpKind::constant: return true;
    case OpKind::iota: return x.axis == f.batch || x.axis == f.head || x.axis == f.group;
    case OpKind::input:
      return std::any_of(f.aux.begin(), f.aux.end(), [&](const AuxInput& a) { return a.node == n && per_tile_roles(a.roles); });
    default:
      if (!ir::is_elementwise(x.op)) return false;
      for (NodeId o : x.operands)
        if (!per_head(d, f, o)) return false;
      return true;
  }
}

// A multiplying node's operand off the score's path (the multiplier).
NodeId off_path(const Diagram& d, const AttentionForm& f, NodeId n) {
  const Node& x = d.node(n);
  return d.depends_on(x.operands[0], f.qk) ? x.operands[1] : x.operands[0];
}

// The factor of the score path's nodes from index `from` on (AttentionForm::factor_nodes among
// them): its literal part, and the multipliers that are not literals, each with whether it
// divides (the factor is constant * product of m, or of 1 / m where it divides).
struct FactorParts {
  double constant = 1.0;
  std::vector<std::pair<NodeId, bool>> values;
};
FactorParts factor_parts(const Diagram& d, const AttentionForm& f, std::size_t from) {
  FactorParts parts;
  for (std::size_t j = from; j < f.score_path.size(); ++j) {
    const NodeId n = f.score_path[j];
    if (std::find(f.factor_nodes.begin(), f.factor_nodes.end(), n) == f.factor_nodes.end()) continue;
    const Node& x = d.node(n);
    if (x.op == OpKind::scale || x.op == OpKind::softcap) {
      parts.constant *= x.scalar;
    } else if (x.op == OpKind::neg) {
      parts.constant = -parts.constant;
    } else if (x.op == OpKind::cast) {
      continue;  // a cast to f32 or wider: a factor of 1
    } else {
      const NodeId m = off_path(d, f, n);
      const Node& c = d.node(m);
      if (c.op == OpKind::constant && c.name.empty())
        parts.constant = x.op == OpKind::mul ? parts.constant * c.scalar : parts.constant / c.scalar;
      else
        parts.values.push_back({m, x.op == OpKind::div});
    }
  }
  return parts;
}

class Recogniser {
 public:
  Recogniser(const Diagram& d, const SourceText& src) : d_(d), src_(src) {}

  Result<AttentionForm> run() {
    AttentionForm f;
    // O, and optionally the row logsumexp as a second output (checked in check_epilogue).
    if (d_.outputs.size() == 2 && d_.node(d_.outputs[0].node).op == OpKind::logsumexp) f.o_index = 1;
    const bool lse_second = d_.outputs.size() == 2 && d_.node(d_.outputs[1 - f.o_index].node).op == OpKind::logsumexp;
    if (d_.outputs.size() != 1 && !lse_second)
      return refuse(d_.outputs.empty() ? SourceLoc{} : d_.outputs[1].loc,
                    fmt::format("the attention kernel writes one output, O (and its row logsumexp); this diagram has {}",
                                d_.outputs.size()));
    std::vector<NodeId> contractions;
    for (NodeId n = 0; n < static_cast<NodeId>(d_.nodes.size()); ++n)
      if (d_.node(n).op == OpKind::contract) contractions.push_back(n);
    if (contractions.size() != 2)
      return refuse(contractions.size() > 2 ? d_.node(contractions[2]).loc : SourceLoc{},
                    fmt::format("the attention family has two contractions (Q K^T, then P V); this diagram has {}",
                                contractions.size()),
                    contractions.size() < 2 ? "a single contraction is a GEMM-family diagram (napkin derive)" : "");
    f.qk = contractions[0];
    f.pv = contractions[1];
    const Node& qk = d_.node(f.qk);
    const Node& pv = d_.node(f.pv);
    if (!d_.depends_on(f.pv, f.qk))
      return refuse(pv.loc, "the second contraction does not read the first: two independent contractions, not attention");
    if (qk.operands.size() != 2 || qk.over.size() != 1 || !is_input(qk.operands[0]) || !is_input(qk.operands[1]))
      return refuse(qk.loc, "the scores must contract two inputs (Q and K) over one axis");
    if (pv.over.size() != 1 || pv.operands.size() != 2)
      return refuse(pv.loc, "the output must contract the probabilities with one input (V) over one axis");
    f.key = pv.over[0];
    f.dim = qk.over[0];
    const int vi = is_input(pv.operands[1]) ? 1 : is_input(pv.operands[0]) ? 0 : -1;
    if (vi < 0) return refuse(pv.loc, "the second contraction must read an input (V) directly");
    f.v = pv.operands[vi];
    const NodeId p = pv.operands[1 - vi];
    if (d_.depends_on(f.v, f.qk) || !d_.depends_on(p, f.qk))
      return refuse(pv.loc, "the second contraction must combine V with probabilities computed from Q K^T");
    // Q is the operand without the key axis.
    const Node& a = d_.node(qk.operands[0]);
    const Node& b = d_.node(qk.operands[1]);
    if (has_axis(a, f.key) == has_axis(b, f.key))
      return refuse(qk.loc, fmt::format("exactly one operand of Q K^T must carry the key axis '{}'", d_.axis(f.key).name));
    f.q = has_axis(a, f.key) ? qk.operands[1] : qk.operands[0];
    f.k = has_axis(a, f.key) ? qk.operands[0] : qk.operands[1];
    for (NodeId in : {f.q, f.k, f.v})
      for (NodeId user : d_.users(in))
        if (user != f.qk && user != f.pv)
          return refuse(d_.node(user).loc, fmt::format("'{}' is read by {} besides the contractions: the kernel reads {} "
                                                       "only as a GEMM operand (a score that depends on V or on Q "
                                                       "elementwise is not in the attention family)",
                                                       d_.node(in).name, d_.label(user), d_.node(in).name));
    if (auto r = assign_roles(f); !r.ok()) return r;
    if (auto r = split_normaliser(f, p); !r.ok()) return r;
    if (auto r = check_epilogue(f); !r.ok()) return r;
    if (auto r = check_dtypes(f); !r.ok()) return r;
    for (auto& [node, roles] : aux_) f.aux.push_back({node, roles});
    find_factor(f);
    f.skips_blocks = std::any_of(f.masks.begin(), f.masks.end(), [&](NodeId m) { return may_skip(d_, m, aux_); });
    return f;
  }

 private:
  bool is_input(NodeId n) const { return d_.node(n).op == OpKind::input; }

  Diagnostic error(SourceLoc loc, std::string message, std::string note = {}) const {
    if (note.empty()) note = "the attention kernel fuses: scores = f(Q K^T, indices, params, inputs), an optional "
                             "mask select(pred, scores, -inf), softmax over the keys (or none), P V, and elementwise "
                             "code after it (docs/kernels.md)";
    if (loc.line == 0) {  // no line to show: the file, the message, the note under it
      Diagnostic d = plain_error(d_.source_name + ": " + message);
      d.note = std::move(note);
      return d;
    }
    return make_error(src_, loc, std::move(message), std::move(note));
  }
  Result<AttentionForm> refuse(SourceLoc loc, std::string message, std::string note = {}) const {
    return error(loc, std::move(message), std::move(note));
  }

  Result<AttentionForm> assign_roles(AttentionForm& f) {
    const Node& q = d_.node(f.q);
    const Node& k = d_.node(f.k);
    const Node& v = d_.node(f.v);
    std::vector<AxisId> shared, q_only;
    for (AxisId x : q.axes) {
      if (x == f.dim) continue;
      (has_axis(k, x) ? shared : q_only).push_back(x);
    }
    for (AxisId x : k.axes)
      if (x != f.dim && x != f.key && !has_axis(q, x))
        return refuse(q.loc, fmt::format("K has axis '{}' that Q lacks: each key row must belong to a query's batch and head",
                                         d_.axis(x).name));
    if (!has_axis(k, f.dim) || !has_axis(q, f.dim)) return refuse(d_.node(f.qk).loc, "Q and K must both carry the contracted axis");
    // The query axis where the fused code says which it is: a Q-only axis added to, subtracted
    // from or compared with the key index (q >= k, k - q, floor(q / c) == floor(k / c)),
    // whatever the storage order ([s b h d] puts the query first).
    const AxisId indexed = query_by_index(f, q_only);
    // A Q-only axis declared before the head that K shares is a batch whose every query reads
    // one K and V (K[h k d] beside Q[b h q d]), unless it is the query (by the code, or as the
    // longest Q-only axis: Q[q b h d] beside K[k b d], multi-query attention in [s b h d]); one
    // after it is the GQA group.
    if (shared.size() == 1 && q_only.size() >= 2) {
      const auto& qa = q.axes;
      const auto head_at = std::find(qa.begin(), qa.end(), shared[0]);
      const AxisId first = q_only.front();
      const bool longest = std::all_of(q_only.begin() + 1, q_only.end(),
                                       [&](AxisId x) { return d_.axis(first).size > d_.axis(x).size; });
      if (std::find(qa.begin(), qa.end(), first) < head_at && first != indexed && (indexed >= 0 || !longest)) {
        f.batch = q_only.front();
        q_only.erase(q_only.begin());
      }
    }
    if (q_only.empty() || q_only.size() > 2)
      return refuse(q.loc, fmt::format("Q must have one query axis (and at most one GQA group axis) besides K's; it has {}",
                                       q_only.size()));
    if (shared.size() > 2)
      return refuse(q.loc, "Q and K may share at most two axes besides the head dim (batch and head)");
    // Of two Q-only axes, the GQA group is the one declared right after the KV head in Q and
    // in the output as written (the two then merge into one head index; a group that follows
    // the head in one but not the other cannot merge in both, and the launch names the tensor),
    // on a tie the smaller; the other is the query axis. Not by size alone: a decoding build
    // (one query row) would make the query the group, and refuse more rows at launch. (Where
    // the fused code reads neither, the launch makes the larger the tile's rows:
    // with_larger_axis_as_rows.)
    f.query = q_only.back();
    if (q_only.size() == 2) {
      f.group = q_only.front();
      const AxisId head = shared.empty() ? -1 : shared.back();
      auto follows_head = [&](const std::vector<AxisId>& axes, AxisId x) {
        const auto at = std::find(axes.begin(), axes.end(), head);
        return head >= 0 && at != axes.end() && at + 1 < axes.end() && *(at + 1) == x;
      };
      const std::vector<AxisId>& out = d_.outputs[f.o_index].axes;
      auto fits = [&](AxisId x) { return follows_head(q.axes, x) + follows_head(out, x); };
      if (indexed >= 0 ? f.group == indexed
                       : fits(f.query) > fits(f.group) ||
                             (fits(f.query) == fits(f.group) && d_.axis(f.group).size > d_.axis(f.query).size))
        std::swap(f.query, f.group);
    }
    if (shared.size() == 2) {
      f.batch = shared[0];
      f.head = shared[1];
    } else if (shared.size() == 1) {
      f.head = shared[0];
    }
    for (AxisId x : v.axes) {
      if (x == f.key || (x == f.batch && has_axis(k, x)) || x == f.head) continue;
      if (f.vdim >= 0 || x == f.query || x == f.group || x == f.batch)
        return refuse(v.loc, fmt::format("V's axes must be K's batch and head axes, the key axis and one head dim; '{}' is not",
                                         d_.axis(x).name));
      f.vdim = x;
    }
    if (f.vdim < 0) return refuse(v.loc, "V needs a head-dim axis of its own");
    for (AxisId x : {f.batch, f.head})
      if (x >= 0 && has_axis(k, x) && !has_axis(v, x))
        return refuse(v.loc, fmt::format("V must carry K's axis '{}'", d_.axis(x).name));
    f.q_roles = roles_of(f, q.axes, false);
    f.k_roles = roles_of(f, k.axes, false);
    f.v_roles = roles_of(f, v.axes, true);
    // TMA moves rows along the head dim: each operand stores it innermost.
    for (const Node* t : {&q, &k, &v}) {
      const AxisId head_dim = t == &v ? f.vdim : f.dim;
      if (t->axes.back() != head_dim)
        return refuse(t->loc, fmt::format("'{}' is stored with '{}' innermost: the kernel reads Q, K and V with their head "
                                          "dim innermost (TMA rows along it); declare it as {}[{}]",
                                          t->name, d_.axis(t->axes.back()).name, t->name, innermost_last(t->axes, head_dim)));
    }
    return f;
  }

  // The one axis of `candidates` whose index the diagram adds to, subtracts from or compares
  // with the key index (each on one side of the op), or -1 (none, or several).
  AxisId query_by_index(const AttentionForm& f, const std::vector<AxisId>& candidates) const {
    std::vector<std::set<AxisId>> indices(d_.nodes.size());  // the iota axes each node reads
    std::set<AxisId> found;
    for (NodeId n = 0; n < static_cast<NodeId>(d_.nodes.size()); ++n) {
      const Node& x = d_.node(n);
      if (x.op == OpKind::iota) indices[static_cast<std::size_t>(n)].insert(x.axis);
      if (ir::op_class(x.op) != ir::OpClass::reduction && x.op != OpKind::contract)
        for (NodeId o : x.operands) indices[static_cast<std::size_t>(n)].insert(indices[static_cast<std::size_t>(o)].begin(),
                                                                                 indices[static_cast<std::size_t>(o)].end());
      const bool relates = x.op == OpKind::add || x.op == OpKind::sub || x.op == OpKind::lt || x.op == OpKind::le ||
                           x.op == OpKind::gt || x.op == OpKind::ge || x.op == OpKind::eq || x.op == OpKind::ne;
      if (!relates || x.operands.size() != 2) continue;
      const auto& a = indices[static_cast<std::size_t>(x.operands[0])];
      const auto& b = indices[static_cast<std::size_t>(x.operands[1])];
      for (AxisId c : candidates)
        if ((a.count(c) && b.count(f.key)) || (b.count(c) && a.count(f.key))) found.insert(c);
    }
    return found.size() == 1 ? *found.begin() : -1;
  }

  // `axes`' names in their order with `last` moved innermost: "b h k d".
  std::string innermost_last(const std::vector<AxisId>& axes, AxisId last) const {
    std::vector<std::string> order;
    for (AxisId a : axes)
      if (a != last) order.push_back(d_.axis(a).name);
    order.push_back(d_.axis(last).name);
    return fmt::format("{}", fmt::join(order, " "));
  }
  std::string roles_of(const AttentionForm& f, const std::vector<AxisId>& axes, bool value_side) const {
    std::string r;
    for (AxisId x : axes) r += role(f, x, value_side);
    return r;
  }
  // The role of axis x; on the value side (V, O and the epilogue) the head dim is V's, which
  // may be the same axis as the contracted one.
  static char role(const AttentionForm& f, AxisId x, bool value_side) {
    if (value_side && x == f.vdim) return 'e';
    if (x == f.batch) return 'b';
    if (x == f.head) return 'h';
    if (x == f.group) return 'g';
    if (x == f.query) return 'q';
    if (x == f.key) return 'k';
    if (x == f.dim) return 'd';
    if (x == f.vdim) return 'e';
    return '?';
  }

  // P = softmax(masked scores over k), or P = masked elementwise code of the scores.
  Result<AttentionForm> split_normaliser(AttentionForm& f, NodeId p) {
    // P rounded before P V (`softmax(...) as bf16`) is what the kernel does anyway: P enters the
    // second GEMM in the operands' dtype.
    const Node& pn = d_.node(p);
    if (pn.op == OpKind::cast && d_.node(pn.operands[0]).op == OpKind::softmax &&
        (pn.dtype == d_.node(f.v).dtype || pn.dtype == DType::f32 || pn.dtype == DType::f64))
      p = pn.operands[0];
    NodeId top = p;
    double fill = 0.0;
    if (d_.node(p).op == OpKind::softmax) {
      const Node& sm = d_.node(p);
      if (sm.over != std::vector<AxisId>{f.key})
        return refuse(sm.loc, fmt::format("softmax over {}: the kernel streams the keys '{}' and normalises over them alone; "
                                          "a softmax over another axis spans the rows of many tiles",
                                          axes_text(sm.over), d_.axis(f.key).name));
      f.normaliser = p;
      top = sm.operands[0];
      fill = -INFINITY;
    }
    // The masks derive counts blocks by (one peel for both: sched/skip.h).
    const std::vector<NodeId> preds = sched::peel_masks(d_, top, fill);
    f.score = top;
    if (auto r = check_elementwise(f, f.score, "scores", "bhgqk", true); !r.ok()) return r;
    for (NodeId pr : preds)
      if (auto r = check_elementwise(f, pr, "mask", "bhgqk", false); !r.ok()) return r;
    f.masks = preds;
    return f;
  }

  // The epilogue: elementwise code from the output down to P V (and the row LSE).
  Result<AttentionForm> check_epilogue(AttentionForm& f) {
    const ir::Output& o_out = d_.outputs[f.o_index];
    f.output = o_out.node;
    f.epilogue = f.output;
    if (d_.node(f.output).op == OpKind::cast && d_.node(f.output).dtype == d_.node(f.q).dtype)
      f.epilogue = d_.node(f.output).operands[0];
    if (!d_.depends_on(f.output, f.pv)) return refuse(o_out.loc, "the output must be computed from P V");
    // The row logsumexp is the kernel's when it is of the same value as the softmax's (a mask
    // written twice, or hoisted once for each, is one value).
    ir::SameValue same(d_);
    if (d_.outputs.size() == 2) {
      const ir::Output& l_out = d_.outputs[1 - f.o_index];
      const Node& x = d_.node(l_out.node);
      if (f.normaliser < 0 || !same(x.operands[0], d_.node(f.normaliser).operands[0]) || x.over != std::vector<AxisId>{f.key})
        return refuse(l_out.loc, "a second output is the row logsumexp of the softmax's own input over the keys (the "
                                 "kernel's row statistics), or nothing");
      if (x.dtype != DType::f32)
        return refuse(l_out.loc, fmt::format("the row logsumexp '{}' is {}: the kernel writes it in f32", x.name, dtype_name(x.dtype)));
      std::string roles;
      for (AxisId a : l_out.axes) roles += role(f, a, true);
      std::string want;
      for (const char r : std::string("bhgq"))
        if (roles.find(r) != std::string::npos) want += r;
      if (roles != want) {
        std::vector<std::string> order;
        for (const char r : want)
          for (AxisId a : l_out.axes)
            if (role(f, a, true) == r) order.push_back(d_.axis(a).name);
        return refuse(l_out.loc, fmt::format("the kernel writes the row logsumexp batch, head, group and query outermost "
                                             "first: write it as out {}[{}]",
                                             x.name, fmt::join(order, " ")));
      }
      f.lse_output = l_out.node;
      f.lse_roles = roles;
    }
    std::set<NodeId> seen;
    std::function<Result<AttentionForm>(NodeId)> walk = [&](NodeId n) -> Result<AttentionForm> {
      if (n == f.pv || !seen.insert(n).second) return f;
      const Node& x = d_.node(n);
      if (x.op == OpKind::logsumexp) {
        if (f.normaliser < 0 || !same(x.operands[0], d_.node(f.normaliser).operands[0]) || x.over != std::vector<AxisId>{f.key})
          return refuse(x.loc, "the epilogue may read logsumexp only of the softmax's own input over the keys (the "
                               "kernel's row statistics)");
        f.lse = n;
        return f;
      }
      if (n == f.qk || (f.normaliser >= 0 && n == f.normaliser))
        return refuse(x.loc, fmt::format("{} is read after the second contraction: only P V, the row logsumexp, "
                                         "indices and inputs are known there", d_.label(n)));
      if (auto r = check_leaf_or_elementwise(f, n, "output", "bhgqe"); !r.ok()) return r;
      for (NodeId o : x.operands)
        if (auto r = walk(o); !r.ok()) return r;
      return f;
    };
    if (auto r = walk(f.output); !r.ok()) return r;
    std::string o_roles;
    for (AxisId x : o_out.axes) {
      const char r = role(f, x, true);
      if (r == 'k' || r == 'd' || r == '?')
        return refuse(o_out.loc, fmt::format("the output carries axis '{}', which is not a batch, head, query or "
                                                     "value-head axis", d_.axis(x).name));
      o_roles += r;
    }
    if (o_roles.empty() || o_roles.back() != 'e')
      return refuse(o_out.loc, fmt::format("the kernel writes O with its head dim innermost (TMA rows along it): write it "
                                           "as out {}[{}]",
                                           d_.node(f.output).name, innermost_last(o_out.axes, f.vdim)));
    f.o_roles = o_roles;
    return f;
  }

  // Every node under `top` (down to the leaves: the scores, inputs, indices, constants) is
  // elementwise; inputs read there are auxiliary, with dims of the roles `allowed`.
  Result<AttentionForm> check_elementwise(AttentionForm& f, NodeId top, const char* where, const char* allowed,
                                          bool may_read_scores) {
    std::set<NodeId> seen;
    std::function<Result<AttentionForm>(NodeId)> walk = [&](NodeId n) -> Result<AttentionForm> {
      if (!seen.insert(n).second) return f;
      if (n == f.qk) {
        if (!may_read_scores) return refuse(d_.node(top).loc, "a mask may not depend on the scores");
        return f;
      }
      if (auto r = check_leaf_or_elementwise(f, n, where, allowed); !r.ok()) return r;
      for (NodeId o : d_.node(n).operands)
        if (auto r = walk(o); !r.ok()) return r;
      return f;
    };
    return walk(top);
  }

  Result<AttentionForm> check_leaf_or_elementwise(AttentionForm& f, NodeId n, const char* where, const char* allowed) {
    const Node& x = d_.node(n);
    if (x.op == OpKind::input) {
      if (n == f.q || n == f.k || n == f.v)
        return refuse(x.loc, fmt::format("the {} code reads '{}' elementwise; the kernel reads it only as a GEMM operand",
                                         where, x.name));
      std::string roles;
      const bool value_side = std::strchr(allowed, 'e') != nullptr;
      for (AxisId a : x.axes) {
        const char r = role(f, a, value_side);
        if (r == '?' || !std::strchr(allowed, r))
          return refuse(x.loc, fmt::format("input '{}' has axis '{}', which the {} code cannot index (it sees {})", x.name,
                                           d_.axis(a).name, where, roles_text(f, allowed)));
        roles += r;
      }
      if (x.dtype == DType::fp8e4m3 || x.dtype == DType::fp8e5m2 || x.dtype == DType::tf32)
        return refuse(x.loc, fmt::format("input '{}' is {}: auxiliary inputs may be f64, f32, bf16, f16, i32 or bool",
                                         x.name, dtype_name(x.dtype)));
      aux_[n] = roles;
      return f;
    }
    if (x.op == OpKind::iota) {
      const char r = role(f, x.axis, std::strchr(allowed, 'e') != nullptr);
      if (r == '?' || !std::strchr(allowed, r))
        return refuse(x.loc, fmt::format("the index of axis '{}' is not known to the {} code (it sees {})",
                                         d_.axis(x.axis).name, where, roles_text(f, allowed)));
      return f;
    }
    if (x.op == OpKind::constant) {
      if (!x.name.empty() && std::find(f.params.begin(), f.params.end(), n) == f.params.end()) f.params.push_back(n);
      return f;
    }
    if (ir::is_elementwise(x.op)) return f;
    // A softmax over the keys inside P V's operand: P changed after its softmax (dropout's mask
    // and scale), not a second normalisation.
    if (x.op == OpKind::softmax && f.normaliser < 0 && f.key >= 0 && x.over == std::vector<AxisId>{f.key})
      return refuse(x.loc, fmt::format("P V reads {} changed after its softmax (a dropout mask or a scale of P): the kernel "
                                       "multiplies V by the softmax itself, so no code runs between them",
                                       d_.label(n)));
    if (x.op == OpKind::softmax || x.op == OpKind::logsumexp)
      return refuse(x.loc, fmt::format("{} inside the {} code: two chained normalisations are not in the attention family "
                                       "(the kernel keeps one online softmax per row)", d_.label(n), where));
    return refuse(x.loc, fmt::format("{} ({}) inside the {} code: only elementwise ops are fused there", d_.label(n),
                                     ir::op_name(x.op), where));
  }

  std::string roles_text(const AttentionForm& f, const char* allowed) const {
    std::string s;
    for (AxisId a : {f.batch, f.head, f.group, f.query, f.key, f.vdim})
      if (a >= 0 && std::strchr(allowed, role(f, a, std::strchr(allowed, 'e') != nullptr)))
        s += (s.empty() ? "" : " ") + d_.axis(a).name;
    return s;
  }
  std::string axes_text(const std::vector<AxisId>& axes) const {
    std::string s;
    for (AxisId a : axes) s += (s.empty() ? "" : " ") + d_.axis(a).name;
    return s;
  }

  Result<AttentionForm> check_dtypes(AttentionForm& f) {
    const Node& q = d_.node(f.q);
    for (NodeId n : {f.k, f.v})
      if (d_.node(n).dtype != q.dtype)
        return refuse(d_.node(n).loc, fmt::format("'{}' is {} and '{}' {}: the kernel needs Q, K and V in one dtype",
                                                  d_.node(n).name, dtype_name(d_.node(n).dtype), q.name, dtype_name(q.dtype)));
    if (q.dtype != DType::bf16 && q.dtype != DType::f16)
      return refuse(q.loc, fmt::format("'{}' is {}: the Hopper attention kernel takes bf16 or f16 operands", q.name,
                                       dtype_name(q.dtype)),
                    "fp8 operands are not in the device library yet");
    f.element = q.dtype;
    const Node& out = d_.node(f.output);
    if (out.dtype != q.dtype && out.dtype != DType::f32)
      return refuse(out.loc, fmt::format("the output is {}: the kernel writes O in the operands' dtype ({}) or f32; end it "
                                         "with `as {}`", dtype_name(out.dtype), dtype_name(q.dtype), dtype_name(q.dtype)));
    f.output_dtype = out.dtype;
    // Q's and K's head dim, then V's (the same axis, or one of its own).
    for (const auto& [axis, what, size] : {std::tuple{f.dim, "head dim", &f.head_dim}, {f.vdim, "V's head dim", &f.head_dim_v}}) {
      *size = d_.axis(axis).size;
      if (*size < 8 || *size > 256 || *size % 8 != 0)
        return refuse(d_.axis(axis).loc,
                      fmt::format("{} '{}' = {}: the kernel takes a multiple of 8 from 8 to 256 (16-byte rows for TMA; "
                                  "WGMMA's widest N is 256)",
                                  what, d_.axis(axis).name, *size));
    }
    return f;
  }

  // The score's factor (AttentionForm::factor_nodes): down the score from its top towards Q K^T,
  // through ops linear in the scores (+, -, *, / by a value free of the scores, scale, neg, a
  // cast to f32 or wider), every multiplier free of the query row and the key is taken out; a
  // softcap on the path gives its cap and ends the path (tanh is not linear). Below a + or - on
  // the path only nonzero finite constants are: the terms beside it are divided by them (a
  // per-head value there could be 0).
  void find_factor(AttentionForm& f) const {
    if (f.normaliser < 0) return;  // P = prob(S) itself: nothing folds into a softmax
    NodeId n = f.score;
    bool collected_all = true, below_a_sum = false;
    const auto divisible = [](double c) { return c != 0 && std::isfinite(c); };
    while (true) {
      f.score_path.push_back(n);
      if (n == f.qk) break;
      const Node& x = d_.node(n);
      const auto path_operand = [&]() -> int {
        const bool a = d_.depends_on(x.operands[0], f.qk), b = x.operands.size() > 1 && d_.depends_on(x.operands[1], f.qk);
        return a == b ? -1 : a ? 0 : 1;
      };
      NodeId next = -1;
      bool collect = false;
      switch (x.op) {
        case OpKind::scale:
          collect = !below_a_sum || divisible(x.scalar);
          next = x.operands[0];
          break;
        case OpKind::neg:
          collect = true;
          next = x.operands[0];
          break;
        case OpKind::softcap: collect = !below_a_sum || divisible(x.scalar); break;
        case OpKind::cast:  // to f32 or wider: the kernel's f32 score as it is (a factor of 1)
          if ((x.dtype == DType::f32 || x.dtype == DType::f64) && is_float(d_.node(x.operands[0]).dtype)) {
            collect = true;
            next = x.operands[0];
          }
          break;
        case OpKind::mul: case OpKind::div: {
          const int pi = path_operand();
          if (pi < 0 || (x.op == OpKind::div && pi != 0)) break;
          const NodeId m = x.operands[static_cast<std::size_t>(1 - pi)];
          const Node& c = d_.node(m);
          collect = below_a_sum ? c.op == OpKind::constant && c.name.empty() && divisible(c.scalar) : per_head(d_, f, m);
          next = x.operands[static_cast<std::size_t>(pi)];
          break;
        }
        case OpKind::add: case OpKind::sub: {
          const int pi = path_operand();
          if (pi >= 0) next = x.operands[static_cast<std::size_t>(pi)];
          below_a_sum = true;
          break;
        }
        default: break;
      }
      if (collect) f.factor_nodes.push_back(n);
      else collected_all = false;
      if (next < 0) break;
      n = next;
    }
    f.score_is_raw = collected_all && f.score_path.back() == f.qk;
    // A constant factor folds at compile time only where positive and finite: the softmax's
    // running max is of the scores over the factor.
    const FactorParts parts = factor_parts(d_, f, 0);
    f.factor_constant = parts.constant;
    f.factor_per_tile = !parts.values.empty() || !(parts.constant > 0 && std::isfinite(parts.constant));
  }

  const Diagram& d_;
  const SourceText& src_;
  std::map<NodeId, std::string> aux_;
};

// ---------------------------------------------------------------- code generation

enum class CType { boolean, integer, real };

CType ctype_of(const Node& n) {
  if (n.dtype == DType::boolean) return CType::boolean;
  if (n.dtype == DType::i32 && n.op != OpKind::div) return CType::integer;
  return CType::real;
}
const char* ctype_name(CType t) { return t == CType::boolean ? "bool" : t == CType::integer ? "int" : "float"; }

// Members of Fusion::Args named after the diagram: a prefix per kind keeps them apart from each
// other, from Args' own `group` and from C++'s keywords (an input `float`, a param `group`).
std::string input_member(const std::string& name) { return "in_" + name; }
std::string param_member(const std::string& name) { return "param_" + name; }
// The param in f32, converted once at launch (per score, F2F from f64 is a slow conversion).
std::string param_float_member(const std::string& name) { return "param_" + name + "_f32"; }
std::string summary_member(const std::string& name) { return "blocks_" + name; }
std::string divisor_member(const std::string& name) { return "divisor_" + name; }
std::string range_member(const std::string& name) { return "range_" + name; }

// The AuxRole bits of a roles string (napkin/attention_kernel.h).
std::string aux_roles_mask(const std::string& roles) {
  std::string m;
  for (char r : roles) {
    const char* bit = r == 'b' ? "napkin::kAuxB" : r == 'h' ? "napkin::kAuxH" : r == 'g' ? "napkin::kAuxG"
                    : r == 'q' ? "napkin::kAuxQ" : "napkin::kAuxK";
    m += (m.empty() ? "" : " | ") + std::string(bit);
  }
  return m.empty() ? "0u" : m;
}

std::string aux_type(DType t) {
  switch (t) {
    case DType::f64: return "double";
    case DType::f32: return "float";
    case DType::bf16: return "__nv_bfloat16";
    case DType::f16: return "__half";
    case DType::i32: return "int32_t";
    case DType::boolean: return "uint8_t";
    default: return "float";
  }
}
const char* abi_dtype(DType t) {
  switch (t) {
    case DType::f64: return "NAPKIN_F64";
    case DType::f32: return "NAPKIN_F32";
    case DType::bf16: return "NAPKIN_BF16";
    case DType::f16: return "NAPKIN_F16";
    case DType::i32: return "NAPKIN_I32";
    case DType::boolean: return "NAPKIN_BOOL";
    default: return "NAPKIN_F32";
  }
}

// The inputs the fused code per score reads through the kernel's reader `rd`
// (napkin/device/staged_inputs.h): score-shaped ones the kernel may stage in shared memory
// (input -> byte offset of a score among them), key-indexed ones it may copy into key rows
// beside K (input -> byte offset of a key among them, ordinal).
struct ReaderInputs {
  std::map<NodeId, int> staged;
  std::map<NodeId, std::pair<int, int>> key_rows;
};

// Writes one device function body: a statement per node of the DAG under `top`, in node order.
// The inputs in `reader` are read through the kernel's reader `rd`; reads_staged() says whether
// any was.
class BodyWriter {
 public:
  BodyWriter(const Diagram& d, const AttentionForm& f, std::map<NodeId, std::string> leaves, ReaderInputs reader = {})
      : d_(d), f_(f), values_(std::move(leaves)), reader_(std::move(reader)) {}
  bool reads_staged() const { return reads_staged_; }
  // The largest |x| of an index expression converted by index_float, as scale * L + offset for
  // L the longest index extent of a call (0, 0: none converted).
  std::pair<long long, long long> index_float_bound() const { return index_float_bound_; }
  // The ranges (napkin::device::IntRange expressions of L) of the index arithmetic computed
  // in 32-bit integers, which the launch checks.
  const std::vector<std::string>& int_ranges() const { return int_ranges_; }

  // Returns the expression of `top` after the statements it needs (appended to `out`).
  std::string value(NodeId top, std::string& out) {
    std::set<NodeId> need;
    collect(top, need);
    for (NodeId n : need) {
      if (values_.count(n)) continue;
      const Node& x = d_.node(n);
      const std::string expr = expression(n);
      if (x.op == OpKind::constant || x.op == OpKind::iota || x.op == OpKind::input) {
        values_[n] = expr;
        continue;
      }
      const std::string name = fmt::format("v{}", n);
      if (ctype_of(x) == CType::integer)
        if (auto r = index_range(n)) int_ranges_.push_back(*r);
      out += fmt::format("    const {} {} = {};{}\n", wide(n) ? "long long" : ctype_name(ctype_of(x)), name, expr,
                         x.name.empty() ? "" : "  // " + x.name);
      values_[n] = name;
    }
    return values_.at(top);
  }

  // The score over its factor (AttentionForm::factor_nodes): the factor's nodes dropped from
  // the path, each term added beside the path times the reciprocal of the factor below it.
  // The sum's reciprocal is written first in the product, so that a per-head value times it
  // is computed once and each score takes one FMA.
  std::string factored_score(std::string& out) { return without_factor(0, out); }

  // The factor itself: the product of the factor nodes' multipliers, constant first.
  std::string factor(std::string& out) {
    const FactorParts parts = factor_parts(d_, f_, 0);
    std::string s = expression::literal(parts.constant);
    for (const auto& [m, divides] : parts.values)
      s += divides ? " * __fdividef(1.0f, " + real(m, out) + ")" : " * " + real(m, out);
    return s;
  }

 private:
  bool collected(NodeId n) const {
    return std::find(f_.factor_nodes.begin(), f_.factor_nodes.end(), n) != f_.factor_nodes.end();
  }
  std::string real(NodeId n, std::string& out) {
    value(n, out);
    return as(n, CType::real);
  }
  // 1 / (the factor of the path's nodes from index i on), or "" where it is 1.
  std::string reciprocal_below(std::size_t i, std::string& out) {
    const FactorParts parts = factor_parts(d_, f_, i);
    std::string runtime;
    for (const auto& [m, divides] : parts.values)
      runtime += divides ? " * " + real(m, out) : " * __fdividef(1.0f, " + real(m, out) + ")";
    const double constant = 1.0 / parts.constant;
    if (constant == 1.0 && runtime.empty()) return "";
    return runtime.empty() ? expression::literal(constant) : "(" + expression::literal(constant) + runtime + ")";
  }
  // `n` times the reciprocal r (a term beside the path): a per-head multiplier of n takes r first.
  std::string beside(NodeId n, const std::string& r, std::string& out) {
    if (r.empty()) return real(n, out);
    const Node& x = d_.node(n);
    if (x.op == OpKind::mul)
      for (int i = 0; i < 2; ++i) {
        const NodeId u = x.operands[static_cast<std::size_t>(i)], w = x.operands[static_cast<std::size_t>(1 - i)];
        if (per_head(d_, f_, u))
          return "(" + real(u, out) + " * " + r + ") * " + real(w, out);
      }
    return real(n, out) + " * " + r;
  }
  std::string without_factor(std::size_t i, std::string& out) {
    const NodeId n = f_.score_path[i];
    bool below = false;
    for (std::size_t j = i; j < f_.score_path.size(); ++j) below = below || collected(f_.score_path[j]);
    if (!below) return real(n, out);
    const Node& x = d_.node(n);
    std::string expr;
    if (collected(n)) {
      if (x.op != OpKind::softcap) return without_factor(i + 1, out);
      // softcap(v, c) = c tanh(v / c): the factor c out, v / c folded into a scale under it.
      NodeId v = x.operands[0];
      double c = 1.0 / x.scalar;
      const Node& y = d_.node(v);
      if (y.op == OpKind::scale) {
        c *= y.scalar;
        v = y.operands[0];
      } else if (y.op == OpKind::mul) {
        for (int j = 0; j < 2; ++j) {
          const Node& m = d_.node(y.operands[static_cast<std::size_t>(j)]);
          if (m.op == OpKind::constant && m.name.empty()) {
            c *= m.scalar;
            v = y.operands[static_cast<std::size_t>(1 - j)];
            break;
          }
        }
      }
      expr = fmt::format("napkin::device::fast_tanh({} * {})", real(v, out), expression::literal(c));
    } else {
      const NodeId next = f_.score_path[i + 1];
      const int pi = x.operands[0] == next ? 0 : 1;
      const NodeId other = x.operands[static_cast<std::size_t>(1 - pi)];
      const std::string inner = without_factor(i + 1, out);
      switch (x.op) {
        case OpKind::mul: expr = real(other, out) + " * " + inner; break;
        case OpKind::div: expr = inner + " * __fdividef(1.0f, " + real(other, out) + ")"; break;
        case OpKind::add: expr = inner + " + " + beside(other, reciprocal_below(i + 1, out), out); break;
        default:  // sub
          expr = pi == 0 ? inner + " - " + beside(other, reciprocal_below(i + 1, out), out)
                         : beside(other, reciprocal_below(i + 1, out), out) + " - " + inner;
      }
    }
    const std::string name = fmt::format("w{}", n);
    out += fmt::format("    const float {} = {};{}\n", name, expr, x.name.empty() ? "" : "  // " + x.name + " over its factor");
    return name;
  }
  void collect(NodeId n, std::set<NodeId>& need) {
    if (values_.count(n) || !need.insert(n).second) return;
    for (NodeId o : d_.node(n).operands) collect(o, need);
  }
  // Whether integer node n is computed in 64 bits: arithmetic on an i32 input tensor, whose
  // values the launch cannot bound (the reference's integers are exact). Index expressions stay
  // 32-bit on the chunk loop's hot path: the launch checks their range (index_int_bound).
  bool wide(NodeId n) const {
    const Node& x = d_.node(n);
    if (ctype_of(x) != CType::integer || !reads_input(n)) return false;
    switch (x.op) {
      case OpKind::add: case OpKind::sub: case OpKind::mul: case OpKind::neg: return true;
      case OpKind::abs: case OpKind::min: case OpKind::max: case OpKind::select: case OpKind::floor:
        return std::any_of(x.operands.begin(), x.operands.end(), [&](NodeId o) { return wide(o); });
      default: return false;
    }
  }
  bool reads_input(NodeId n) const {
    const Node& x = d_.node(n);
    return x.op == OpKind::input || std::any_of(x.operands.begin(), x.operands.end(), [&](NodeId o) { return reads_input(o); });
  }
  std::string as(NodeId operand, CType t) {
    const std::string& v = values_.at(operand);
    const CType from = ctype_of(d_.node(operand));
    if (from == t) return v;
    if (t == CType::integer)
      if (std::string i = expression::int_literal(d_.node(operand)); !i.empty()) return i;
    if (t == CType::boolean) return "(" + v + " != 0)";
    // An index expression (ALiBi's k - q) converted without the SFU's I2F, which the softmax's
    // exponentials saturate at d = 64; exact within the bound the launch checks.
    if (t == CType::real && from == CType::integer)
      if (auto b = index_bound(operand)) {
        index_float_bound_ = {std::max(index_float_bound_.first, b->first), std::max(index_float_bound_.second, b->second)};
        return "napkin::device::index_float(" + v + ")";
      }
    return fmt::format("static_cast<{}>({})", ctype_name(t), v);
  }
  std::string expression(NodeId n) {
    const Node& x = d_.node(n);
    const CType t = ctype_of(x);
    auto op = [&](int i) { return as(x.operands[static_cast<std::size_t>(i)], t); };
    auto opf = [&](int i) { return as(x.operands[static_cast<std::size_t>(i)], CType::real); };
    // An operand of a 64-bit result, converted first (so that the operation is done in 64 bits).
    auto widened = [&](int i) { return wide(n) ? "static_cast<long long>(" + op(i) + ")" : op(i); };
    auto cmp = [&](const char* sym) {
      // Compared in the wider of the operands' types.
      const bool ints = ctype_of(d_.node(x.operands[0])) != CType::real && ctype_of(d_.node(x.operands[1])) != CType::real;
      const CType ct = ints ? CType::integer : CType::real;
      return fmt::format("{} {} {}", as(x.operands[0], ct), sym, as(x.operands[1], ct));
    };
    switch (x.op) {
      case OpKind::constant:
        if (!x.name.empty())
          return t == CType::integer ? "static_cast<int>(a." + param_member(x.name) + ")" : "a." + param_float_member(x.name);
        return t == CType::integer ? fmt::format("{}", static_cast<long long>(x.scalar)) : expression::literal(x.scalar);
      case OpKind::iota: return index_of(x.axis);
      case OpKind::input: return aux_read(n);
      case OpKind::exp: return "napkin::device::fast_exp(" + opf(0) + ")";
      case OpKind::exp2: return "napkin::device::exp2_approx(" + opf(0) + ")";
      case OpKind::log: return "__logf(" + opf(0) + ")";
      case OpKind::tanh: return "napkin::device::fast_tanh(" + opf(0) + ")";
      case OpKind::floor: {
        if (t == CType::integer) return op(0);
        // floor(a / c) corrected to the exact quotient's floor (napkin::device::floor_quotient), as
        // the reference interpreter and the block bound compute it: a fast quotient would move
        // an exact multiple of c below its integer.
        const Node& q = d_.node(x.operands[0]);
        if (q.op == OpKind::div)
          return "napkin::device::floor_quotient(" + as(q.operands[0], CType::real) + ", " + as(q.operands[1], CType::real) + ")";
        return "floorf(" + op(0) + ")";
      }
      case OpKind::neg: return "-" + widened(0);
      case OpKind::abs: return t == CType::integer ? (wide(n) ? "llabs(" : "abs(") + op(0) + ")" : "fabsf(" + op(0) + ")";
      case OpKind::logical_not: return "!" + as(x.operands[0], CType::boolean);
      case OpKind::cast: return cast(x);
      case OpKind::scale: return op(0) + " * " + expression::literal(x.scalar);
      case OpKind::softcap:
        return fmt::format("{} * napkin::device::fast_tanh({} * {})", expression::literal(x.scalar), opf(0),
                           expression::literal(1.0 / x.scalar));
      case OpKind::add: return widened(0) + " + " + op(1);
      case OpKind::sub: return widened(0) + " - " + op(1);
      case OpKind::mul: return widened(0) + " * " + op(1);
      // x times the divisor's reciprocal (MUFU.RCP + FMUL, as __fdividef(x, y)), written apart so
      // that a divisor the same for every score (a per-head temperature) has its reciprocal
      // computed once, not per score on the SFU beside the softmax's exponentials.
      case OpKind::div: return opf(0) + " * __fdividef(1.0f, " + opf(1) + ")";
      case OpKind::max: return t == CType::integer ? "max(" + widened(0) + ", " + widened(1) + ")" : "fmaxf(" + op(0) + ", " + op(1) + ")";
      case OpKind::min: return t == CType::integer ? "min(" + widened(0) + ", " + widened(1) + ")" : "fminf(" + op(0) + ", " + op(1) + ")";
      case OpKind::lt: return cmp("<");
      case OpKind::le: return cmp("<=");
      case OpKind::gt: return cmp(">");
      case OpKind::ge: return cmp(">=");
      case OpKind::eq: return cmp("==");
      case OpKind::ne: return cmp("!=");
      // Bitwise, not short-circuit: both sides are side-effect free (reads are clamped in
      // bounds), and a branch around each read would serialise the loads of a chunk.
      case OpKind::logical_and: return as(x.operands[0], CType::boolean) + " & " + as(x.operands[1], CType::boolean);
      case OpKind::logical_or: return as(x.operands[0], CType::boolean) + " | " + as(x.operands[1], CType::boolean);
      case OpKind::select:
        return fmt::format("{} ? {} : {}", as(x.operands[0], CType::boolean), widened(1), widened(2));
      default: return "/* unsupported */ 0";  // refused by the recogniser
    }
  }
  std::string cast(const Node& x) {
    const std::string v = as(x.operands[0], ctype_of(d_.node(x.operands[0])));
    switch (x.dtype) {
      case DType::bf16: return "napkin::device::round_bf16(" + as(x.operands[0], CType::real) + ")";
      case DType::f16: return "napkin::device::round_f16(" + as(x.operands[0], CType::real) + ")";
      case DType::i32: return "napkin::device::round_i32(" + as(x.operands[0], CType::real) + ")";
      case DType::boolean: return "(" + v + " != 0)";
      default: return as(x.operands[0], CType::real);
    }
  }
  std::string index_of(AxisId a) const {
    if (a == f_.batch) return "b";
    if (a == f_.head) return "(h / a.group)";
    if (a == f_.group) return "(h % a.group)";
    if (a == f_.query) return "q";
    if (a == f_.key) return "k";
    if (a == f_.vdim) return "e";
    return "0";
  }
  std::string aux_read(NodeId n) {
    const Node& x = d_.node(n);
    const char* last = values_.count(f_.pv) ? "e" : "k";
    std::string at = fmt::format("a.{}.at(b, h, q, {})", input_member(x.name), last);
    if (auto it = reader_.key_rows.find(n); it != reader_.key_rows.end()) {
      reads_staged_ = true;
      at = fmt::format("rd.template key<{}, {}>(a.{}, b, h, q, {})", it->second.first, it->second.second,
                       input_member(x.name), last);
    } else if (auto it = reader_.staged.find(n); it != reader_.staged.end()) {
      reads_staged_ = true;
      const bool real = x.dtype == DType::bf16 || x.dtype == DType::f16 || x.dtype == DType::f32 || x.dtype == DType::f64;
      const std::string read = fmt::format("rd.template {}<{}>(a.{}, b, h, q, {})", real ? "real" : "at", it->second,
                                           input_member(x.name), last);
      if (real) return read;  // as f32, converted by the reader
      at = read;
    }
    switch (x.dtype) {
      case DType::bf16: return "__bfloat162float(" + at + ")";
      case DType::f16: return "__half2float(" + at + ")";
      case DType::f64: return "static_cast<float>(" + at + ")";
      case DType::boolean: return "(" + at + " != 0)";
      default: return at;
    }
  }

  const Diagram& d_;
  const AttentionForm& f_;
  std::map<NodeId, std::string> values_;
  ReaderInputs reader_;
  bool reads_staged_ = false;
  std::pair<long long, long long> index_float_bound_{0, 0};
  std::vector<std::string> int_ranges_;

  // The range of an integer expression of indices (each in [0, L), L the longest index extent)
  // and integral literals through + - * abs, min, max, as a napkin::device::IntRange expression
  // of L; none for any other (an i32 input, a param).
  std::optional<std::string> index_range(NodeId n) const {
    const Node& x = d_.node(n);
    auto op = [&](int i) { return index_range(x.operands[static_cast<std::size_t>(i)]); };
    switch (x.op) {
      case OpKind::iota: return std::string("napkin::device::IntRange{0, L - 1}");
      case OpKind::constant:
        if (!x.name.empty() || x.scalar != std::floor(x.scalar) || std::fabs(x.scalar) > 1e6) return std::nullopt;
        return fmt::format("napkin::device::irange({}LL)", static_cast<long long>(x.scalar));
      case OpKind::neg: case OpKind::abs: {
        const auto a = op(0);
        if (!a) return std::nullopt;
        return x.op == OpKind::neg ? "-" + *a : "napkin::device::range_abs(" + *a + ")";
      }
      case OpKind::add: case OpKind::sub: case OpKind::mul: case OpKind::min: case OpKind::max: {
        const auto a = op(0), b = op(1);
        if (!a || !b) return std::nullopt;
        if (x.op == OpKind::add || x.op == OpKind::sub) return fmt::format("({} {} {})", *a, x.op == OpKind::add ? '+' : '-', *b);
        return fmt::format("napkin::device::range_{}({}, {})", x.op == OpKind::mul ? "mul" : ir::op_name(x.op), *a, *b);
      }
      default: return std::nullopt;
    }
  }

  // |x| <= scale * L + offset for an integer expression of indices (each below L, the longest
  // index extent) and integer literals through + - * by a literal, abs, min, max; none for any
  // other (an i32 input, a param).
  std::optional<std::pair<long long, long long>> index_bound(NodeId n) const {
    const Node& x = d_.node(n);
    auto op = [&](int i) { return index_bound(x.operands[static_cast<std::size_t>(i)]); };
    // |c| of an integral literal (not a param) of moderate size.
    auto literal = [&](NodeId m) -> std::optional<long long> {
      const Node& c = d_.node(m);
      if (c.op != OpKind::constant || !c.name.empty() || c.scalar != std::floor(c.scalar) || std::fabs(c.scalar) > 1e6)
        return std::nullopt;
      return static_cast<long long>(std::fabs(c.scalar));
    };
    switch (x.op) {
      case OpKind::iota: return std::make_pair(1LL, 0LL);
      case OpKind::constant:
        if (auto c = literal(n)) return std::make_pair(0LL, *c);
        return std::nullopt;
      case OpKind::neg: case OpKind::abs: return op(0);
      case OpKind::add: case OpKind::sub: case OpKind::min: case OpKind::max: {
        const auto a = op(0), b = op(1);
        if (!a || !b) return std::nullopt;
        if (x.op == OpKind::min || x.op == OpKind::max)
          return std::make_pair(std::max(a->first, b->first), std::max(a->second, b->second));
        return std::make_pair(a->first + b->first, a->second + b->second);
      }
      case OpKind::mul:
        for (int i = 0; i < 2; ++i)
          if (auto c = literal(x.operands[static_cast<std::size_t>(i)]))
            if (auto o = op(1 - i)) return std::make_pair(o->first * *c, o->second * *c);
        return std::nullopt;
      default: return std::nullopt;
    }
  }
};

// The nodes `top` reaches through operands, itself included, entering none of `stops`.
std::set<NodeId> reached_from(const Diagram& d, NodeId top, std::initializer_list<NodeId> stops) {
  std::set<NodeId> seen;
  std::vector<NodeId> todo{top};
  while (!todo.empty()) {
    const NodeId n = todo.back();
    todo.pop_back();
    if (std::find(stops.begin(), stops.end(), n) != stops.end() || !seen.insert(n).second) continue;
    for (NodeId o : d.node(n).operands) todo.push_back(o);
  }
  return seen;
}

// Whether the fused code reads the query row or the GQA group index: an index of either axis,
// or an input that carries either. Where it reads neither, the two axes are interchangeable as
// the tile's rows, and the launch takes the larger (Fusion::kQueryAxesInterchangeable).
bool reads_query_axes(const Diagram& d, const AttentionForm& f) {
  for (NodeId n : reached_from(d, f.output, {f.q, f.k, f.v})) {
    const Node& x = d.node(n);
    if (x.op == OpKind::iota && (x.axis == f.query || x.axis == f.group)) return true;
    if (x.op == OpKind::input && (has_axis(x, f.query) || (f.group >= 0 && has_axis(x, f.group)))) return true;
  }
  return false;
}

// The score-shaped inputs (roles q and k) the score code reads, each with its byte offset among
// them, which the kernel may stage through shared memory a chunk ahead; and every key-indexed
// input (role k without q), which the kernel may copy into key rows (staged_inputs.h).
ReaderInputs reader_inputs(const Diagram& d, const AttentionForm& f) {
  const std::set<NodeId> under_score = reached_from(d, f.score, {f.qk});
  ReaderInputs reader;
  int offset = 0, key_offset = 0, key_ordinal = 0;
  for (const AuxInput& x : f.aux) {
    const bool q = x.roles.find('q') != std::string::npos, k = x.roles.find('k') != std::string::npos;
    if (under_score.count(x.node) && q && k) {
      reader.staged[x.node] = offset;
      offset += dtype_bytes(d.node(x.node).dtype);
    } else if (k && !q) {
      reader.key_rows[x.node] = {key_offset, key_ordinal++};
      key_offset += dtype_bytes(d.node(x.node).dtype);
    }
  }
  return reader;
}

// The block bound of the mask: interval arithmetic over the index ranges.
class BoundWriter {
 public:
  BoundWriter(const Diagram& d, const AttentionForm& f) : d_(d), f_(f) {
    for (const AuxInput& x : f.aux) aux_[x.node] = x.roles;
  }
  // The bound's expression: an IntRange or a BlockVisibility; "" for a number it cannot bound.
  std::string value(NodeId n, std::string& out) {
    if (auto it = values_.find(n); it != values_.end()) return it->second;
    const Node& x = d_.node(n);
    const bool logical = x.op == OpKind::logical_and || x.op == OpKind::logical_or || x.op == OpKind::logical_not;
    if (!logical && !index_only(d_, n, aux_))
      return values_[n] = x.dtype == DType::boolean ? "napkin::device::bv_unknown()" : "";
    if (x.op == OpKind::input && per_tile_input(x, aux_.at(n))) {  // one value for the whole tile
      per_tile_.insert(n);
      costly_ = true;
      const std::string name = fmt::format("r{}", n);
      out += fmt::format("    const napkin::device::IntRange {} = napkin::device::irange(a.{}.at(b, h, 0, 0));\n", name,
                         input_member(x.name));
      return values_[n] = name;
    }
    if (x.op == OpKind::input) {  // a summarised input: its [min, max] over the block's rows or keys
      const char axis = summarised_axis(x, aux_.at(n));
      summarised_[n] = axis;
      costly_ = true;
      const std::string name = fmt::format("r{}", n);
      out += fmt::format("    const {} {} = a.{}.{}(b, h, {});\n",
                         x.dtype == DType::boolean ? "napkin::device::BlockVisibility" : "napkin::device::IntRange", name,
                         summary_member(x.name), x.dtype == DType::boolean ? "visibility" : "range",
                         axis == '2' ? "q0, q1, k0, k1" : axis == 'q' ? "q0, q1" : "k0, k1");
      return values_[n] = name;
    }
    if (x.op == OpKind::floor && d_.node(x.operands[0]).op == OpKind::div) {
      const Node& q = d_.node(x.operands[0]);
      const std::string name = fmt::format("r{}", n);
      const Node& c = d_.node(q.operands[1]);
      costly_ = true;
      if (c.name.empty())
        out += fmt::format("    const napkin::device::IntRange {} = napkin::device::range_floor_div({}, {}LL);\n", name,
                           value(q.operands[0], out), static_cast<long long>(c.scalar));
      else {
        divisors_.insert(c.name);
        out += fmt::format("    const napkin::device::IntRange {} = napkin::device::range_floor_div({}, a.{});\n", name,
                           value(q.operands[0], out), divisor_member(c.name));
      }
      return values_[n] = name;
    }
    std::vector<std::string> ops;
    for (NodeId o : x.operands) ops.push_back(value(o, out));
    std::string expr;
    bool is_bool = x.dtype == DType::boolean;
    switch (x.op) {
      case OpKind::iota:
        expr = x.axis == f_.query ? "qr" : x.axis == f_.key ? "kr"
               : x.axis == f_.batch ? "napkin::device::irange(b)"
               : x.axis == f_.head ? "napkin::device::irange(h / a.group)"
               : x.axis == f_.group ? "napkin::device::irange(h % a.group)" : "napkin::device::irange(0)";
        break;
      case OpKind::constant:
        expr = x.name.empty() ? fmt::format("napkin::device::irange({}LL)", static_cast<long long>(x.scalar))
                              : "a." + range_member(x.name);
        if (!x.name.empty()) ranges_.insert(x.name);
        break;
      case OpKind::add: expr = ops[0] + " + " + ops[1]; break;
      case OpKind::sub: expr = ops[0] + " - " + ops[1]; break;
      case OpKind::neg: expr = "-" + ops[0]; break;
      case OpKind::mul: expr = "napkin::device::range_mul(" + ops[0] + ", " + ops[1] + ")", costly_ = true; break;
      case OpKind::abs: expr = "napkin::device::range_abs(" + ops[0] + ")"; break;
      case OpKind::min: expr = "napkin::device::range_min(" + ops[0] + ", " + ops[1] + ")"; break;
      case OpKind::max: expr = "napkin::device::range_max(" + ops[0] + ", " + ops[1] + ")"; break;
      case OpKind::lt: expr = "napkin::device::bv_lt(" + ops[0] + ", " + ops[1] + ")"; break;
      case OpKind::le: expr = "napkin::device::bv_le(" + ops[0] + ", " + ops[1] + ")"; break;
      case OpKind::gt: expr = "napkin::device::bv_gt(" + ops[0] + ", " + ops[1] + ")"; break;
      case OpKind::ge: expr = "napkin::device::bv_ge(" + ops[0] + ", " + ops[1] + ")"; break;
      case OpKind::eq: expr = "napkin::device::bv_eq(" + ops[0] + ", " + ops[1] + ")"; break;
      case OpKind::ne: expr = "napkin::device::bv_ne(" + ops[0] + ", " + ops[1] + ")"; break;
      case OpKind::logical_and: expr = "napkin::device::bv_and(" + ops[0] + ", " + ops[1] + ")"; break;
      case OpKind::logical_or: expr = "napkin::device::bv_or(" + ops[0] + ", " + ops[1] + ")"; break;
      case OpKind::logical_not: expr = "napkin::device::bv_not(" + ops[0] + ")"; break;
      case OpKind::cast: case OpKind::floor: return values_[n] = ops[0];  // of integers: the same range
      default: expr = "napkin::device::bv_unknown()"; is_bool = true; break;
    }
    if (x.op == OpKind::iota || x.op == OpKind::constant) return values_[n] = expr;
    ++operations_;
    const std::string name = fmt::format("r{}", n);
    out += fmt::format("    const {} {} = {};\n", is_bool ? "napkin::device::BlockVisibility" : "napkin::device::IntRange",
                       name, expr);
    return values_[n] = name;
  }

 public:
  // The inputs the bound read through block summaries, with the axis each is summarised along.
  const std::map<NodeId, char>& summarised() const { return summarised_; }
  // Whether the bound reads tensors (summaries or per-tile inputs): a device function only.
  bool reads_tensors() const { return !summarised_.empty() || !per_tile_.empty(); }
  // The params the bound divides by (floor(x / c)): each a napkin::device::Divisor in Args.
  const std::set<std::string>& divisors() const { return divisors_; }
  const std::set<std::string>& ranges() const { return ranges_; }
  // Fusion::kBlockCostly: the bound takes a division, a product, reads of block summaries, or
  // four operations or more. Measured on the H100 (bench/NOTES.md, 2026-11-26 fourth): bounds of
  // up to three compares (causal, ALiBi, prefix-LM) ran 1-8 % faster in the consumers, the
  // window's five operations 3-9 % faster in the producer, a floor division 4-39 %.
  bool costly() const { return costly_ || operations_ >= 4; }

 private:
  const Diagram& d_;
  const AttentionForm& f_;
  std::map<NodeId, std::string> aux_;
  std::map<NodeId, std::string> values_;
  std::map<NodeId, char> summarised_;
  std::set<NodeId> per_tile_;
  std::set<std::string> divisors_;
  std::set<std::string> ranges_;
  bool costly_ = false;
  int operations_ = 0;  // range and visibility operations written
};

std::string mask_conjunction(const std::vector<std::string>& terms, const char* join) {
  std::string s;
  for (const std::string& t : terms) s += (s.empty() ? "" : join) + t;
  return s;
}

}  // namespace

Result<AttentionForm> recognise_attention(const ir::Diagram& d, const SourceText& src) {
  Recogniser r(d, src);
  return r.run();
}


std::string describe_fusion(const AttentionForm& f) {
  std::string s = f.normaliser >= 0 ? "softmax over the keys" : "no normalisation (P summed plainly)";
  if (!f.score_is_raw) s += "; score modification fused";
  if (f.normaliser >= 0 && (f.factor_per_tile || f.factor_constant != 1.0))
    s += f.factor_per_tile ? "; score factor folded into exp2 per (batch, head)"
                           : fmt::format("; scores scaled by {} (folded into exp2)", ir::format_number(f.factor_constant));
  if (!f.masks.empty()) s += f.skips_blocks ? "; mask bounded per block (skips blocks)" : "; mask (every chunk)";
  if (f.epilogue != f.pv) s += "; epilogue fused";
  if (f.lse >= 0) s += " (reads the row logsumexp)";
  if (f.lse_output >= 0) s += "; writes the row logsumexp";
  if (!f.aux.empty()) s += fmt::format("; {} auxiliary input{}", f.aux.size(), f.aux.size() == 1 ? "" : "s");
  return s;
}

std::string emit_attention_kernel(const ir::Diagram& d, const AttentionForm& f, const KernelProvenance& prov,
                                  const std::string& manifest_json, const std::string& entry_name) {
  const std::string element = f.element == DType::bf16 ? "cutlass::bfloat16_t" : "cutlass::half_t";
  const std::vector<NodeId>& preds = f.masks;
  const bool has_mask = !preds.empty();
  const bool score_mod = f.normaliser >= 0 && !f.score_is_raw;
  const bool factor_per_tile = f.normaliser >= 0 && f.factor_per_tile;
  // The epilogue: the code between P V and the output, less a final cast to the element type
  // (the kernel's store rounds).
  const NodeId epi_top = f.epilogue;
  const bool epilogue = epi_top != f.pv;

  std::string out;
  out += "// SPDX-License-Identifier: Apache-2.0\n";
  out += fmt::format("// Generated by napkin {} from {} ({}). Do not edit: `napkin build` writes it.\n",
                     prov.napkin_version, prov.source_name, prov.diagram_key);
  out += fmt::format("// Fused: {}.\n", describe_fusion(f));
  if (!prov.derived.empty()) out += fmt::format("// Derived: {}\n", prov.derived);
  out += "// Tile schedule: the device library's measured table for this head dim (napkin/attention_schedule.h).\n";
  out += "#include \"napkin/attention_kernel.h\"\n\nnamespace {\n\n";
  out += "struct Fusion : napkin::device::FusionDefaults {\n  struct Args {\n    int group;  // query heads per KV head\n";
  for (NodeId p : f.params)
    out += fmt::format("    double {};  // param {} (default {})\n    float {};\n", param_member(d.node(p).name), d.node(p).name,
                       ir::format_number(d.node(p).scalar), param_float_member(d.node(p).name));
  for (const AuxInput& x : f.aux)
    out += fmt::format("    napkin::AuxView<{}, {}> {};  // {}[{}]\n", aux_type(d.node(x.node).dtype), aux_roles_mask(x.roles),
                       input_member(d.node(x.node).name), d.node(x.node).name, x.roles);
  // The mask's block bound, written first: it names the block summaries Args carries.
  std::string block_fn;
  std::map<NodeId, char> summarised;
  std::set<std::string> divisors, ranges;
  bool block_costly = false, block_reads_tensors = false;
  if (has_mask && f.skips_blocks) {
    std::string bbody;
    std::vector<std::string> bterms;
    BoundWriter bw(d, f);
    for (NodeId p : preds) bterms.push_back(bw.value(p, bbody));
    std::string combined = bterms[0];
    for (std::size_t i = 1; i < bterms.size(); ++i) combined = "napkin::device::bv_and(" + combined + ", " + bterms[i] + ")";
    summarised = bw.summarised();
    divisors = bw.divisors();
    ranges = bw.ranges();
    block_costly = bw.costly();
    block_reads_tensors = bw.reads_tensors();
    // A bound over indices and params alone is also a host function (kBlockOnHost).
    block_fn = fmt::format("  {}static napkin::device::BlockVisibility block(Args const& a, int b, int h, int q0, int q1, "
                           "int k0, int k1) {{\n    const napkin::device::IntRange qr{{q0, q1}}, kr{{k0, k1}};\n",
                           block_reads_tensors ? "__device__ " : "__host__ __device__ ");
    block_fn += bbody + "    return " + combined + ";\n  }\n";
  }
  for (const AuxInput& x : f.aux)
    if (summarised.count(x.node)) {
      std::string rows;  // the roles a summary's rows run over
      for (char r : x.roles)
        if (r != 'q' && r != 'k') rows += r;
      const char axis = summarised.at(x.node);
      out += fmt::format("    napkin::BlockSummary{}<{}> {};  // [min, max] per block of {}\n", axis == '2' ? "2D" : "",
                         aux_roles_mask(rows), summary_member(d.node(x.node).name),
                         axis == '2' ? "query rows and keys" : axis == 'q' ? "query rows" : "keys");
    }
  for (const std::string& p : divisors)
    out += fmt::format("    napkin::device::Divisor {};  // param {} as the bound's divisor\n", divisor_member(p), p);
  for (const std::string& p : ranges)
    out += fmt::format("    napkin::device::IntRange {};  // param {}'s floor and ceiling, for the bound\n", range_member(p), p);
  out += "  };\n";
  out += fmt::format("  static constexpr bool kScoreMod = {}, kMask = {}, kSkipsBlocks = {}, kNormalise = {};\n",
                     score_mod, has_mask, f.skips_blocks, f.normaliser >= 0);
  const bool reads_rows_or_keys = std::any_of(f.aux.begin(), f.aux.end(), [](const AuxInput& x) {
    return x.roles.find_first_of("qk") != std::string::npos;
  });
  out += fmt::format("  static constexpr bool kEpilogue = {}, kEpilogueUsesLse = {}, kReadsRowsOrKeys = {};\n", epilogue,
                     f.lse >= 0, reads_rows_or_keys);
  if (score_mod) {
    // Scores that may be large finite fills (OnlineSoftmax's kFiniteFills): the score code reads a
    // tensor or a param, or a literal past 1e6 (masked_fill's -1e9, -1e20).
    bool large = false;
    for (NodeId n : reached_from(d, f.score, {f.qk})) {
      const Node& x = d.node(n);
      large = large || x.op == OpKind::input ||
              (x.op == OpKind::constant && (!x.name.empty() || (std::isfinite(x.scalar) && std::fabs(x.scalar) >= 1e6)));
    }
    if (large) out += "  static constexpr bool kFiniteFills = true;  // the scores may be large finite fills\n";
  }
  if (factor_per_tile) out += "  static constexpr bool kScoreFactor = true;\n";
  if (f.output_dtype == DType::f32) out += "  static constexpr bool kOutputF32 = true;  // O in f32, written from the accumulators\n";
  if (f.lse_output >= 0) out += "  static constexpr float kEmptyRowLse = -INFINITY;  // the diagram's logsumexp of no key\n";
  if (f.group >= 0 && !reads_query_axes(d, f) && f.lse_output < 0)  // (the LSE's layout keeps g and q apart)
    out += "  static constexpr bool kQueryAxesInterchangeable = true;  // the fused code reads neither q nor g\n";
  const ReaderInputs reader = reader_inputs(d, f);
  if (!reader.staged.empty()) {
    int bytes = 0;
    std::string visits;
    for (const auto& [node, offset] : reader.staged) {
      bytes += dtype_bytes(d.node(node).dtype);
      visits += fmt::format("    s(std::integral_constant<int, {}>{{}}, a.{});\n", offset, input_member(d.node(node).name));
    }
    out += fmt::format("  static constexpr int kStagedBytes = {};  // a score's bytes of the inputs staged in shared memory\n", bytes);
    out += "  template <class Stage>\n  __device__ static void stage(Args const& a, Stage&& s) {\n" + visits + "  }\n";
  }
  if (!reader.key_rows.empty()) {
    int bytes = 0;
    std::vector<std::string> visits(reader.key_rows.size());
    for (const auto& [node, at] : reader.key_rows) {
      bytes += dtype_bytes(d.node(node).dtype);
      visits[static_cast<std::size_t>(at.second)] =
          fmt::format("    s(std::integral_constant<int, {}>{{}}, std::integral_constant<int, {}>{{}}, a.{});\n", at.first,
                      at.second, input_member(d.node(node).name));
    }
    out += fmt::format("  static constexpr int kKeyRowInputs = {}, kKeyRowBytes = {};  // key-indexed inputs, copied beside K\n",
                       reader.key_rows.size(), bytes);
    out += "  template <class Stage>\n  __device__ static void stage_keys(Args const& a, Stage&& s) {\n";
    for (const std::string& v : visits) out += v;
    out += "  }\n";
  }
  // A score-shaped tensor that the batches share: tiles run batch after batch within a head.
  if (std::any_of(f.aux.begin(), f.aux.end(), [](const AuxInput& x) {
        return x.roles.find('q') != std::string::npos && x.roles.find('k') != std::string::npos &&
               x.roles.find('b') == std::string::npos;
      }))
    out += "  static constexpr bool kSharesAcrossBatch = true;\n";
  if (!block_fn.empty())
    out += block_reads_tensors ? "  static constexpr bool kBlockReadsTensors = true;\n" : "  static constexpr bool kBlockOnHost = true;\n";
  if (block_costly) out += "  static constexpr bool kBlockCostly = true;  // the producer warp evaluates block()\n";
  // A summary over query rows (axis 'q', or both: '2') makes the visible blocks follow the
  // tensor's row blocks.
  if (std::any_of(summarised.begin(), summarised.end(), [](const auto& s) { return s.second != 'k'; }))
    out += "  static constexpr bool kBlockRowsFromTensors = true;\n";


  // The functions per score take the kernel's reader of staged inputs (`rd`, named where used).
  auto per_score = [](const BodyWriter& w, const char* result, const char* name, const char* params) {
    return fmt::format("template <class Reads>\n  __device__ static {} {}(Args const& a, Reads const&{}, {})", result, name,
                       w.reads_staged() ? " rd" : "", params);
  };
  std::pair<long long, long long> index_float{0, 0};  // the bound of every index_float written
  std::vector<std::string> int_ranges;                // the range of every integer computed
  auto note = [&](const BodyWriter& w) {
    index_float = {std::max(index_float.first, w.index_float_bound().first),
                   std::max(index_float.second, w.index_float_bound().second)};
    for (const std::string& r : w.int_ranges())
      if (std::find(int_ranges.begin(), int_ranges.end(), r) == int_ranges.end()) int_ranges.push_back(r);
  };
  auto function = [&](const char* name, const char* params, NodeId top, std::map<NodeId, std::string> leaves) {
    std::string body;
    const bool scored = top == f.score;
    BodyWriter w(d, f, std::move(leaves), scored ? reader : ReaderInputs{});
    const std::string v = w.value(top, body);
    out += "  " + (scored ? per_score(w, "float", name, params) : fmt::format("__device__ static float {}(Args const& a, {})", name, params));
    out += fmt::format(" {{\n{}    return static_cast<float>({});\n  }}\n", body, v);
    note(w);
  };
  if (factor_per_tile) {
    std::string body;
    BodyWriter w(d, f, {});
    const std::string v = w.factor(body);
    out += "  __device__ static float score_factor(Args const& a, int b, int h) {\n";
    if ((body + v).find(", q, k)") != std::string::npos) out += "    constexpr int q = 0, k = 0;  // (a factor is per head)\n";
    out += body + "    return " + v + ";\n  }\n";
    note(w);
  }
  if (score_mod) {
    std::string body;
    BodyWriter w(d, f, {{f.qk, "raw"}}, reader);
    const std::string v = w.factored_score(body);
    out += "  " + per_score(w, "float", "score", "float raw, int b, int h, int q, int k");
    out += fmt::format(" {{\n{}    return {};\n  }}\n", body, v);
    note(w);
  }
  if (f.normaliser < 0) function("prob", "float raw, int b, int h, int q, int k", f.score, {{f.qk, "raw"}});
  if (has_mask) {
    std::string body;
    std::vector<std::string> terms;
    BodyWriter w(d, f, {}, reader);
    for (NodeId p : preds) terms.push_back(w.value(p, body));
    out += "  " + per_score(w, "bool", "visible", "int b, int h, int q, int k") + " {\n" + body;
    out += "    return " + mask_conjunction(terms, " & ") + ";\n  }\n";
    out += block_fn;
    note(w);
  }
  if (epilogue) {
    std::map<NodeId, std::string> leaves{{f.pv, "o"}};
    if (f.lse >= 0) leaves[f.lse] = "lse";
    function("epilogue", "float o, float lse, int b, int h, int q, int e", epi_top, leaves);
  }
  if (index_float.first > 0 || index_float.second > 0)
    out += fmt::format("  // index_float's values: |x| <= {} L + {}, L the longest index extent (checked at launch)\n"
                       "  static constexpr long long kIndexFloatScale = {}, kIndexFloatOffset = {};\n",
                       index_float.first, index_float.second, index_float.first, index_float.second);
  if (!int_ranges.empty()) {
    out += "  // The largest |x| of the index arithmetic computed in int, L the longest index extent (checked at launch)\n"
           "  static long long index_int_bound(long long L) {\n"
           "    long long m = 0;\n";
    for (const std::string& r : int_ranges) out += fmt::format("    m = std::max(m, napkin::device::range_magnitude({}));\n", r);
    out += "    return m;\n  }\n";
  }
  out += "};\n\n";
  // The fused code's own inputs and params, bound by name (napkin::launch_generated binds the rest).
  out += fmt::format("void bind_fusion(napkin::TensorBinder& tb, Fusion::Args& a, napkin::BlockSummaries&{}) {{\n",
                     summarised.empty() ? "" : " s");
  if (f.aux.empty() && f.params.empty()) out += "  (void)tb;\n  (void)a;\n";
  for (const AuxInput& x : f.aux) {
    const std::string& name = d.node(x.node).name;
    out += fmt::format("  a.{0} = tb.aux<{1}, {3}>(tb.bind(\"{5}\", {4}, \"{2}\"), \"{2}\");\n", input_member(name),
                       aux_type(d.node(x.node).dtype), x.roles, aux_roles_mask(x.roles), abi_dtype(d.node(x.node).dtype), name);
    if (summarised.count(x.node) && summarised.at(x.node) == '2')
      out += fmt::format("  a.{} = s.of_rows_and_keys(a.{}, tb);\n", summary_member(name), input_member(name));
    else if (summarised.count(x.node))
      out += fmt::format("  a.{} = s.of(a.{}, tb, '{}');\n", summary_member(name), input_member(name), summarised.at(x.node));
  }
  for (NodeId p : f.params)
    out += fmt::format("  a.{0} = tb.param(\"{1}\", {2});\n  a.{3} = static_cast<float>(a.{0});\n", param_member(d.node(p).name),
                       d.node(p).name, ir::format_number(d.node(p).scalar), param_float_member(d.node(p).name));
  for (const std::string& p : divisors)
    out += fmt::format("  a.{} = napkin::device::make_divisor(a.{});\n", divisor_member(p), param_member(p));
  for (const std::string& p : ranges)
    out += fmt::format("  a.{} = napkin::device::range_of_real(a.{});\n", range_member(p), param_member(p));
  out += "}\n\n";
  const std::string o_name = d.node(f.output).name.empty() ? "O" : d.node(f.output).name;
  const std::string lse = f.lse_output >= 0 ? fmt::format(", \"{}\", \"{}\"", d.node(f.lse_output).name, f.lse_roles) : "";
  out += fmt::format("constexpr napkin::AttentionSpec kSpec{{\"{}\", \"{}\", \"{}\", \"{}\", \"{}\", \"{}\", \"{}\", \"{}\", {}, "
                     "napkin::AttentionDType::{}, {}{}}};\n\n",
                     d.node(f.q).name, f.q_roles, d.node(f.k).name, f.k_roles, d.node(f.v).name, f.v_roles, o_name,
                     f.o_roles, f.head_dim, f.element == DType::bf16 ? "kBF16" : "kF16",
                     expression::literal(f.normaliser >= 0 && !f.factor_per_tile ? f.factor_constant : 1.0), lse);
  if (entry_name.empty()) {
    out += "constexpr char kManifest[] = R\"napkin_manifest(" + manifest_json + ")napkin_manifest\";\n";
    out += "const char* const kNames[] = {" + expression::library_names(d) + "nullptr};\n\n";
  }
  out += "}  // namespace\n\n";
  if (entry_name.empty())
    out += fmt::format("NAPKIN_GENERATED_ATTENTION(Fusion, {}, {}, {}, kSpec, bind_fusion, kNames, kManifest)\n", element,
                       f.head_dim, f.head_dim_v);
  else
    out += fmt::format("NAPKIN_ATTENTION_ENTRY({}, Fusion, {}, {}, {}, kSpec, bind_fusion)\n", entry_name, element, f.head_dim,
                       f.head_dim_v);
  return out;
}

}  // namespace napkin::emit
