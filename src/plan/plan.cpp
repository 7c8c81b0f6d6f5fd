// SPDX-License-Identifier: Apache-2.0
// derive_plan reads top to bottom:
//   1. variants of the diagram: as written, and after each algebraic move that applies
//      (moves.cpp: a row scale past a contraction, a reassociated contraction chain);
//   2. per variant, fusion by greedy merging: start from one kernel per op, merge a producer into
//      its consumer (or a chain of three) while the merged subgraph is a kernel of some family and
//      the plan's predicted time falls (materialising an intermediate costs its write and read);
//   3. the fastest variant is chosen; the fully unfused and fully fused alternatives are kept with
//      the reason they lost.
#include "plan/plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ir/printer.h"
#include "plan/moves.h"
#include "sched/schedule.h"
#include "sched/streaming.h"

namespace napkin::plan {

using ir::NodeId;
using ir::OpKind;

std::string_view kernel_kind_name(KernelKind k) {
  switch (k) {
    case KernelKind::gemm: return "gemm";
    case KernelKind::dual_gemm: return "dual_gemm";
    case KernelKind::gemm_reduction: return "gemm_reduction";
    case KernelKind::attention: return "attention";
    case KernelKind::row_reduction: return "row_reduction";
    case KernelKind::column_reduction: return "column_reduction";
    case KernelKind::elementwise: return "elementwise";
  }
  return "?";
}

namespace {

// Where a kernel's refusal points: the first op of the kernel that `why` names, else its last op.
SourceLoc first_named_in(const ir::Diagram& kd, const std::string& why) {
  SourceLoc last;
  for (NodeId id = 0; id < static_cast<NodeId>(kd.nodes.size()); ++id) {
    const ir::Node& n = kd.node(id);
    if (n.op == OpKind::input || n.op == OpKind::constant || n.loc.line == 0) continue;
    if (why.find(kd.label(id)) != std::string::npos) return n.loc;
    last = n.loc;
  }
  return last;
}

// A kernel's text with its values named by position: kernels that differ in names alone (a
// model's layers) have one text, and one family up to those names.
std::string anonymous_text(const ir::Diagram& kd) {
  ir::Diagram a = kd;
  for (std::size_t i = 0; i < a.nodes.size(); ++i)
    if (!a.nodes[i].name.empty()) a.nodes[i].name = "v" + std::to_string(i);
  return ir::print_diagram(a);
}

constexpr std::size_t kMaxFused = 128;
// Past kMaxFused, fusion runs in windows of this many kernels (fuse_in_windows).
constexpr std::size_t kWindow = 48;

// A partition of a diagram's non-leaf, non-input nodes into kernels, with each kernel's family.
class Partition {
 public:
  Partition(const ir::Diagram& d, const arch::Machine& m, const PlanOptions& o)
      : d_(d), m_(m), o_(o), index_(std::make_shared<const DiagramIndex>(d)) {
    // Nodes no output depends on (left behind by a move) belong to no kernel.
    const std::vector<bool> live = live_nodes(d);
    const std::vector<bool>& index_expr = index_->index_expr;
    owner_.assign(d.nodes.size(), -1);
    for (NodeId n = 0; n < static_cast<NodeId>(d.nodes.size()); ++n)
      if (live[static_cast<std::size_t>(n)] && !index_expr[static_cast<std::size_t>(n)] && d.node(n).op != OpKind::input)
        owner_[static_cast<std::size_t>(n)] = n;
    // An output computed from indices and constants alone is inlined where it is read, but as an
    // output it is written by a kernel of its own (no kernel would write it otherwise).
    for (const ir::Output& o : d.outputs)
      if (index_expr[static_cast<std::size_t>(o.node)]) owner_[static_cast<std::size_t>(o.node)] = o.node;
    for (NodeId n = 0; n < static_cast<NodeId>(d.nodes.size()); ++n)
      if (owner_[static_cast<std::size_t>(n)] >= 0) members_[owner_[static_cast<std::size_t>(n)]].push_back(n);
  }

  // All non-leaf nodes in one kernel.
  void fuse_all() {
    std::vector<NodeId> all;
    for (std::size_t n = 0; n < owner_.size(); ++n)
      if (owner_[n] >= 0) owner_[n] = 0, all.push_back(static_cast<NodeId>(n));
    members_ = {{0, all}};
  }

  const arch::Machine& machine() const { return m_; }

  std::vector<int> kernels() const {
    std::vector<int> ks;
    for (const auto& [k, nodes] : members_) ks.push_back(k);
    return ks;
  }
  // A kernel's nodes, ascending.
  const std::vector<NodeId>& members(int kernel) const { return members_.at(kernel); }

  // The family of the kernel made of the kernels in `ids`, cached by its members and how the
  // values it reads and writes are stored (the cache is shared by copies of the partition).
  // With `time_only`, only its validity and time are needed (the greedy search's gains): a
  // kernel that differs from one already classified by its values' names alone (the same layer
  // of a model, again) takes that one's time instead of a solver run of its own.
  const Family& family(const std::vector<int>& ids, bool time_only = false) {
    const int target = ids.front();
    std::vector<NodeId> members;
    for (int k : ids) {
      const auto& m = members_.at(k);
      members.insert(members.end(), m.begin(), m.end());
    }
    std::sort(members.begin(), members.end());
    const Owner owner = [&](NodeId n) {
      const int k = owner_[static_cast<std::size_t>(n)];
      return std::find(ids.begin(), ids.end(), k) != ids.end() ? target : k;
    };
    std::vector<NodeId> touched_values;  // what the kernel computes and what it reads
    for (NodeId n : members) {
      touched_values.push_back(n);
      for (NodeId o : d_.node(n).operands) touched_values.push_back(o);
    }
    const auto bounds = boundaries(d_, owner, *index_, &touched_values);
    std::string key;
    for (NodeId n : members) {
      key += std::to_string(n) + ',';
      auto add_boundary = [&](NodeId t) {
        const auto it = bounds.find(t);
        if (it == bounds.end()) return;
        key += std::to_string(t) + ':' + std::to_string(static_cast<int>(it->second.dtype)) + ':';
        for (const std::string& a : it->second.order) key += a + ' ';
        key += ';';
      };
      add_boundary(n);
      for (NodeId o : d_.node(n).operands) add_boundary(o);
    }
    auto it = cache_->find(key);
    if (it != cache_->end()) return it->second;
    if (auto t = timings_->find(key); time_only && t != timings_->end()) return t->second;
    Family f;
    auto kd = kernel_diagram(d_, owner, members, bounds, *index_);
    std::string shape;
    if (kd) {
      shape = anonymous_text(*kd);
      if (auto s = shapes_->find(shape); time_only && s != shapes_->end()) {
        Family timing;
        timing.valid = s->second.valid;
        timing.why = s->second.why;
        timing.estimate.time_s = s->second.estimate.time_s;
        return timings_->emplace(key, std::move(timing)).first->second;
      }
    }
    if (!kd) f.why = kd.error().message;
    else f = classify(*kd, m_, o_.search, o_.top);
    if (f.valid && o_.generates)
      if (std::string why = o_.generates(f.kind, *kd); !why.empty()) {
        f = Family{};
        f.why = "napkin build generates no such kernel: " + why;
      }
    if (kd) shapes_->emplace(shape, f);
    return cache_->emplace(key, std::move(f)).first->second;
  }

  double total_time() {
    double t = 0;
    for (int k : kernels()) t += time({k});
    return t;
  }

  double time(const std::vector<int>& ids) {
    const Family& f = family(ids, /*time_only=*/true);
    return f.valid ? f.estimate.time_s : kInvalid;
  }

  // Kernel edges: producer -> consumers (within the window, where one is set).
  std::map<int, std::set<int>> edges() const {
    std::map<int, std::set<int>> e;
    const auto [lo, hi] = node_range();
    for (NodeId n = lo; n < hi; ++n) {
      const int k = owner_[static_cast<std::size_t>(n)];
      if (k < 0 || !in_window(k)) continue;
      e[k];
      for (NodeId o : d_.node(n).operands) {
        const int p = owner_[static_cast<std::size_t>(o)];
        if (p >= 0 && p != k && in_window(p)) e[p].insert(k);
      }
    }
    return e;
  }

  // Greedy fusion in windows of consecutive nodes holding up to kWindow kernels each, for a
  // diagram past kMaxFused (the search's work grows with the cube of the kernel count): no
  // kernel spans two windows. A window's kernels are made of its own nodes, and an edge leaving
  // it goes to later nodes and never comes back (operands precede their users), so merges and
  // their acyclicity are decided within it.
  // A window ends where fewest computed values cross into the next (a model's residual stream
  // between layers), among the ends that hold kWindow / 2 to kWindow kernels.
  void fuse_in_windows() {
    const NodeId end = static_cast<NodeId>(d_.nodes.size());
    // crossing[p]: the values computed before node p that a node from p on reads.
    std::vector<int> crossing(static_cast<std::size_t>(end) + 2, 0);
    for (NodeId n = 0; n < end; ++n) {
      if (owner_[static_cast<std::size_t>(n)] < 0) continue;
      NodeId last = n;
      for (NodeId u : index_->users[static_cast<std::size_t>(n)]) last = std::max(last, u);
      ++crossing[static_cast<std::size_t>(n) + 1];
      --crossing[static_cast<std::size_t>(last) + 1];
    }
    for (std::size_t p = 1; p < crossing.size(); ++p) crossing[p] += crossing[p - 1];
    for (NodeId lo = 0; lo < end;) {
      NodeId hi = lo, best = -1;
      std::size_t kernels = 0;
      while (hi < end && kernels < kWindow) {
        if (owner_[static_cast<std::size_t>(hi)] >= 0) ++kernels;
        ++hi;
        if (kernels >= kWindow / 2 && (best < 0 || crossing[static_cast<std::size_t>(hi)] <= crossing[static_cast<std::size_t>(best)]))
          best = hi;
      }
      if (hi < end && best > lo) hi = best;
      window_ = {lo, hi};
      fuse_greedily(4);
      lo = hi;
    }
    window_.reset();
  }

  // Merging `ids` keeps the kernel graph acyclic: no kernel outside them is both reachable from
  // them and reaches them.
  bool acyclic_merge(const std::vector<int>& ids, const std::map<int, std::set<int>>& e) const {
    std::set<int> inside(ids.begin(), ids.end());
    std::set<int> down;
    std::vector<int> stack;
    for (int k : ids)
      for (int c : e.at(k))
        if (!inside.count(c)) stack.push_back(c);
    while (!stack.empty()) {
      const int k = stack.back();
      stack.pop_back();
      if (!down.insert(k).second) continue;
      for (int c : e.at(k)) {
        if (inside.count(c)) return false;
        stack.push_back(c);
      }
    }
    return true;
  }

  // Every user of a node of `producer` outside it is in `consumers`: merging then removes the
  // intermediate instead of duplicating work. (An output of the diagram the producer writes, the
  // merged kernel writes: the family decides whether it can.)
  bool only_feeds(int producer, const std::set<int>& consumers) const {
    for (NodeId n : members_.at(producer)) {
      for (NodeId u : index_->users[static_cast<std::size_t>(n)]) {
        const int k = owner_[static_cast<std::size_t>(u)];
        if (k < 0) continue;  // a node no kernel computes: dead after a move (a reassociated chain's product)
        if (k != producer && !consumers.count(k)) return false;
      }
    }
    return true;
  }

  // What merging `ids` saves (<= 0: nothing, or no family runs the merged kernel), memoised by
  // the kernels' ids until one of them changes (merge).
  double merge_gain(const std::vector<int>& ids) {
    std::vector<int> key = ids;
    std::sort(key.begin(), key.end());
    if (auto it = gains_->find(key); it != gains_->end()) return it->second;
    double before = 0;
    for (int k : ids) before += time({k});
    const double after = time(ids);
    const double gain = after >= kInvalid ? 0.0 : before - after;
    gains_->emplace(std::move(key), gain);
    return gain;
  }

  void merge(const std::vector<int>& ids) {
    // Gains of sets that hold a kernel that changes are stale (a copy of the partition, the
    // lookahead's trial, takes a memo of its own from here).
    auto gains = std::make_shared<std::map<std::vector<int>, double>>();
    for (const auto& [key, gain] : *gains_)
      if (std::none_of(key.begin(), key.end(), [&](int k) { return std::find(ids.begin(), ids.end(), k) != ids.end(); }))
        gains->emplace(key, gain);
    gains_ = std::move(gains);
    std::vector<NodeId>& into = members_.at(ids.front());
    for (std::size_t i = 1; i < ids.size(); ++i) {
      auto it = members_.find(ids[i]);
      if (it == members_.end() || ids[i] == ids.front()) continue;
      for (NodeId n : it->second) owner_[static_cast<std::size_t>(n)] = ids.front();
      into.insert(into.end(), it->second.begin(), it->second.end());
      members_.erase(it);
    }
    std::sort(into.begin(), into.end());
  }

  // Every merge that lowers the predicted time, with its gain, the largest first: for each
  // producer p and kernel c it reaches, the hull of p, c and every kernel on a path between them,
  // when nothing in it but c feeds a kernel outside it (a pair, a GEMM -> softmax -> GEMM chain);
  // and each producer with all of its consumers, where they are more than one (siblings sharing a
  // value: a GEMM and a row sum of its operand).
  std::vector<std::pair<double, std::vector<int>>> merges() {
    std::vector<std::pair<double, std::vector<int>>> out;
    const auto e = edges();
    auto consider = [&](std::vector<int> hull) {
      const double gain = merge_gain(hull);
      if (gain <= 0 || !acyclic_merge(hull, e)) return;
      out.emplace_back(gain, std::move(hull));
    };
    std::map<int, std::set<int>> reach;
    for (const auto& [k, cs] : e) {
      std::vector<int> stack(cs.begin(), cs.end());
      std::set<int>& r = reach[k];
      while (!stack.empty()) {
        const int x = stack.back();
        stack.pop_back();
        if (!r.insert(x).second) continue;
        for (int y : e.at(x)) stack.push_back(y);
      }
    }
    for (const auto& [p, below] : reach)
      for (int c : below) {
        std::vector<int> hull{c, p};
        std::set<int> inside{c, p};
        for (int x : below)
          if (x != c && reach[x].count(c)) hull.push_back(x), inside.insert(x);
        bool closed = true;
        for (int x : hull)
          if (x != c && !only_feeds(x, inside)) closed = false;
        if (closed) consider(std::move(hull));
      }
    for (const auto& [p, cs] : e) {
      if (cs.size() < 2) continue;
      std::vector<int> hull{p};
      hull.insert(hull.end(), cs.begin(), cs.end());
      consider(std::move(hull));
    }
    // Siblings alone: two kernels that read one value (a kernel's or an input), which one kernel
    // then reads once (a softmax and a logsumexp of the same logits; a statistic beside the GEMM
    // that reads its operand). Pairs among the first kMaxSiblings readers of each value.
    constexpr std::size_t kMaxSiblings = 8;
    std::map<NodeId, std::vector<int>> readers;  // value -> the kernels that read it
    const auto [lo, hi] = node_range();
    for (NodeId n = lo; n < hi; ++n) {
      const int k = owner_[static_cast<std::size_t>(n)];
      if (k < 0 || !in_window(k)) continue;
      for (NodeId o : d_.node(n).operands) {
        if (owner_[static_cast<std::size_t>(o)] == k) continue;
        if (owner_[static_cast<std::size_t>(o)] < 0 && d_.node(o).op != OpKind::input) continue;  // inlined index code
        std::vector<int>& r = readers[o];
        if (std::find(r.begin(), r.end(), k) == r.end() && r.size() < kMaxSiblings) r.push_back(k);
      }
    }
    std::set<std::pair<int, int>> pairs;
    for (const auto& [value, ks] : readers)
      for (std::size_t i = 0; i < ks.size(); ++i)
        for (std::size_t j = i + 1; j < ks.size(); ++j) pairs.insert(std::minmax(ks[i], ks[j]));
    for (const auto& [a, b] : pairs) consider({a, b});
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    return out;
  }

  // Greedy fusion with lookahead: at each step, of the `lookahead` merges of largest gain, the
  // one whose greedy completion gives the fastest plan (a cast that the next kernel's greedy
  // merge would take as a prologue belongs to its producer's epilogue, for example).
  void fuse_greedily(int lookahead = 4) {
    for (;;) {
      auto ms = merges();
      if (ms.empty()) return;
      std::size_t pick = 0;
      if (lookahead > 0 && ms.size() > 1) {
        double best = kInvalid;
        for (std::size_t i = 0; i < ms.size() && i < static_cast<std::size_t>(lookahead); ++i) {
          Partition trial = *this;
          trial.merge(ms[i].second);
          trial.fuse_greedily(0);
          const double t = trial.total_time();
          if (t < best * 0.9999) best = t, pick = i;
        }
      }
      merge(ms[pick].second);
    }
  }

  const std::vector<int>& owner() const { return owner_; }
  const DiagramIndex& index() const { return *index_; }
  static constexpr double kInvalid = 1e300;

 private:
  // The nodes merges are looked for among: the window's, else all.
  std::pair<NodeId, NodeId> node_range() const {
    return window_ ? *window_ : std::pair<NodeId, NodeId>{0, static_cast<NodeId>(d_.nodes.size())};
  }
  // A kernel's id is one of its nodes; in a window, every node of its kernels is too.
  bool in_window(int kernel) const { return !window_ || (kernel >= window_->first && kernel < window_->second); }

  const ir::Diagram& d_;
  const arch::Machine& m_;
  const PlanOptions& o_;
  std::vector<int> owner_;
  std::map<int, std::vector<NodeId>> members_;  // each kernel's nodes, ascending (owner_ inverted)
  std::shared_ptr<std::map<std::string, Family>> cache_ = std::make_shared<std::map<std::string, Family>>();
  std::shared_ptr<const DiagramIndex> index_;  // the diagram's index expressions and users, shared by copies
  std::optional<std::pair<NodeId, NodeId>> window_;  // fuse_in_windows' current nodes [first, second)
  std::shared_ptr<std::map<std::vector<int>, double>> gains_ = std::make_shared<std::map<std::vector<int>, double>>();
  // Families by their kernel's text without names (anonymous_text), and the timings taken from
  // them by key (family's time_only); shared by copies, as cache_.
  std::shared_ptr<std::map<std::string, Family>> shapes_ = std::make_shared<std::map<std::string, Family>>();
  std::shared_ptr<std::map<std::string, Family>> timings_ = std::make_shared<std::map<std::string, Family>>();
};

std::string kernel_name(const Kernel& k) {
  std::vector<std::string> outs;
  for (const ir::Output& o : k.diagram.outputs) outs.push_back(k.diagram.node(o.node).name);
  std::vector<std::string> ins;
  for (NodeId n : k.diagram.inputs()) ins.push_back(k.diagram.node(n).name);
  if (ins.empty()) return fmt::format("{} {} <- indices and constants", kernel_kind_name(k.kind), fmt::join(outs, " "));
  return fmt::format("{} {} <- {}", kernel_kind_name(k.kind), fmt::join(outs, " "), fmt::join(ins, " "));
}

// The first node of `d` that reduces over `axis` by other than a contraction (zeros in a padded
// operand leave a contraction's sum as it is), or -1.
NodeId reduces_over(const ir::Diagram& d, ir::AxisId axis) {
  for (NodeId n = 0; n < static_cast<NodeId>(d.nodes.size()); ++n) {
    const ir::Node& x = d.node(n);
    if (x.op != OpKind::contract && std::find(x.over.begin(), x.over.end(), axis) != x.over.end()) return n;
  }
  return -1;
}

// "the softmax at 4:5": a node by its op and place (a plan names unnamed values t<id>), else its label.
std::string op_at(const ir::Diagram& d, NodeId n) {
  const ir::Node& x = d.node(n);
  return x.loc.line > 0 ? fmt::format("the {} at {}:{}", ir::op_name(x.op), x.loc.line, x.loc.column) : d.label(n);
}

// The TMA rows problem with the padding that fixes it, where padding keeps the result; else what
// else padding needs: the padded elements would enter a softmax, a max, a sum or a norm over it.
std::string padding_hint(const ir::Diagram& d, const TmaRows& rows) {
  const auto axis = d.find_axis(rows.axis);
  const NodeId r = axis ? reduces_over(d, *axis) : -1;
  if (r < 0) return rows.text();
  const ir::Node& x = d.node(r);
  const bool norm = x.op == OpKind::rmsnorm || x.op == OpKind::layernorm;
  const bool sum = x.op == OpKind::reduce_sum;
  return fmt::format("{}. Padding {} to {} alone would change the result: the padded elements enter {} over {}{}", rows.problem,
                     rows.axis, rows.padded, op_at(d, r), rows.axis,
                     norm ? fmt::format(" (its mean counts them); no padding of the inputs runs {}={} as written", rows.axis, rows.size)
                          : fmt::format("; pad it and mask them out there (--set {}={} and select({} < {}, ..., {}) before it)",
                                        rows.axis, rows.padded, rows.axis, rows.size, sum ? "0" : "-inf"));
}

// The kernels of a partition in execution order, with what they materialise.
Plan assemble(const ir::Diagram& d, Partition& part, std::string name, std::vector<std::string> moves) {
  Plan p;
  p.name = std::move(name);
  p.moves = std::move(moves);
  const Owner owner = [&](NodeId n) { return part.owner()[static_cast<std::size_t>(n)]; };
  const auto bounds = boundaries(d, owner, part.index());
  // Execution order: each kernel after the kernels whose values it reads (the partition is
  // acyclic); among those ready, the one with the earliest last node. A kernel's last node alone
  // is no order: a kernel writing P and a statistic defined after P V ends after P V's kernel.
  std::map<int, std::set<int>> reads;  // kernel -> the kernels it reads from
  std::map<int, int> waiting;          // kernel -> how many of those have not run
  std::map<int, std::vector<int>> readers;
  for (int k : part.kernels()) {
    for (NodeId n : part.members(k))
      for (NodeId o : d.node(n).operands)
        if (const int from = owner(o); from >= 0 && from != k) reads[k].insert(from);
    waiting[k] = static_cast<int>(reads[k].size());
    for (int from : reads[k]) readers[from].push_back(k);
  }
  std::set<std::pair<NodeId, int>> ready;
  for (int k : part.kernels())
    if (waiting[k] == 0) ready.emplace(part.members(k).back(), k);
  std::vector<int> order;
  while (!ready.empty()) {
    const int k = ready.begin()->second;
    ready.erase(ready.begin());
    order.push_back(k);
    for (int r : readers[k])
      if (--waiting[r] == 0) ready.emplace(part.members(r).back(), r);
  }
  NAPKIN_CHECK(order.size() == part.kernels().size(), "a plan's kernels read each other in a cycle");
  for (int k : order) {
    Kernel kernel;
    auto kd = kernel_diagram(d, owner, part.members(k), bounds, part.index());
    if (!kd) {
      p.infeasible = "a kernel's subgraph is not a diagram: " + kd.error().message;
      continue;
    }
    kernel.diagram = std::move(*kd);
    const Family& f = part.family({k});
    if (!f.valid) {
      if (p.infeasible.empty()) p.infeasible_at = first_named_in(kernel.diagram, f.why);
      if (p.infeasible.empty())
        p.infeasible = fmt::format("no kernel family runs {{{}}}: {}", fmt::join([&] {
                                     std::vector<std::string> v;
                                     for (NodeId id = 0; id < static_cast<NodeId>(kernel.diagram.nodes.size()); ++id) {
                                       const ir::Node& n = kernel.diagram.node(id);
                                       const std::string label = kernel.diagram.label(id);
                                       if (!n.name.empty() && n.op != OpKind::input && n.op != OpKind::constant &&
                                           std::find(v.begin(), v.end(), label) == v.end())
                                         v.push_back(label);
                                     }
                                     return v;
                                   }(), ", "), f.why);
      kernel.bound = "infeasible";
      p.kernels.push_back(std::move(kernel));
      continue;
    }
    kernel.kind = f.kind;
    kernel.gemm = f.gemm;
    kernel.gemm_top = f.gemm_top;
    kernel.rows = f.rows;
    kernel.streamed = f.streamed;
    kernel.predicted_s = f.estimate.time_s;
    kernel.flops = f.estimate.flops;
    kernel.hbm_bytes = f.estimate.hbm_bytes;
    kernel.bound = f.estimate.bound;
    kernel.detail = f.estimate.detail;
    kernel.considered = f.considered;
    kernel.rejected = f.rejected;
    kernel.name = kernel_name(kernel);
    if (TmaRows rows = tma_layout_error(kernel.diagram, part.machine(), f.kind); !rows.empty()) {
      p.warnings.push_back(fmt::format("at these sizes the kernel {} cannot run: {}", kernel.name, padding_hint(d, rows)));
      p.runs_at_these_sizes = false;
    }
    p.predicted_s += kernel.predicted_s;
    p.kernels.push_back(std::move(kernel));
  }
  for (const auto& [n, b] : bounds) {
    bool is_output = false;
    for (const ir::Output& o : d.outputs) is_output |= o.node == n;
    if (is_output) continue;
    const double bytes = static_cast<double>(d.elements(d.node(n).axes)) * dtype_bytes(b.dtype);
    p.materialised_bytes += bytes;
    // An unnamed intermediate's plan name (t9) says where it was written.
    const ir::Node& node = d.node(n);
    const std::string written = node.name.empty() && node.loc.line > 0 ? ", " + op_at(d, n) : "";
    p.materialised.push_back(fmt::format("{}[{}] {} ({:.4g} MB{}){}", b.name, fmt::join(b.order, " "), dtype_name(b.dtype),
                                         bytes / 1e6, written, b.note.empty() ? "" : "; " + b.note));
  }
  if (!p.infeasible.empty()) p.predicted_s = 0;
  return p;
}

std::string time_text(double s) {
  if (s >= 1) return fmt::format("{:.4g} s", s);
  if (s >= 1e-3) return fmt::format("{:.4g} ms", s * 1e3);
  return fmt::format("{:.4g} us", s * 1e6);
}

// Why `loser` lost to `winner`, one line.
std::string why_not(const Plan& loser, const Plan& winner) {
  if (!loser.infeasible.empty()) return "infeasible: " + loser.infeasible;
  const double ratio = loser.predicted_s / winner.predicted_s;
  std::string s = fmt::format("{} predicted, {:.2f}x the chosen plan's {}", time_text(loser.predicted_s), ratio,
                              time_text(winner.predicted_s));
  if (loser.kernels.size() > winner.kernels.size())
    s += fmt::format(": {} kernels where the chosen plan runs {}, materialising {} intermediate(s)", loser.kernels.size(),
                     winner.kernels.size(), loser.materialised.size());
  else if (loser.kernels.size() < winner.kernels.size() && !loser.kernels.empty()) {
    // Fewer kernels yet slower: what binds its slowest kernel (a fused operand recomputed or
    // re-read per tile, a mainloop that cannot overlap its prologue).
    const Kernel& slowest = *std::max_element(loser.kernels.begin(), loser.kernels.end(),
                                              [](const Kernel& a, const Kernel& b) { return a.predicted_s < b.predicted_s; });
    s += fmt::format(": {} kernel(s) where the chosen plan runs {}, the slowest ({}) {}, bound by {}", loser.kernels.size(),
                     winner.kernels.size(), slowest.name.empty() ? kernel_name(slowest) : slowest.name,
                     time_text(slowest.predicted_s), slowest.bound);
  }
  return s;
}

// Whether `p` replaces `best`: a plan whose kernels all run at these sizes before one with a kernel
// that cannot (TMA's rows), else `faster` (the caller's rule on predicted times).
bool runs_first(const Plan& p, const Plan& best, bool faster) {
  if (p.runs_at_these_sizes != best.runs_at_these_sizes) return p.runs_at_these_sizes;
  return faster;
}
}  // namespace

std::string memory_warning(const ir::Diagram& d, const arch::Machine& m, double materialised_bytes) {
  double bytes = materialised_bytes;
  for (const ir::Node& n : d.nodes)
    if (n.op == OpKind::input) bytes += static_cast<double>(d.elements(n.axes)) * dtype_bytes(n.dtype);
  for (const ir::Output& o : d.outputs)
    if (d.node(o.node).op != OpKind::input)
      bytes += static_cast<double>(d.elements(d.node(o.node).axes)) * dtype_bytes(d.node(o.node).dtype);
  const double hbm = static_cast<double>(m.total_capacity_bytes(arch::kGmem));
  if (hbm <= 0 || bytes <= hbm) return "";
  return fmt::format("the {} take {:.4g} GB, more than {}'s {:.4g} GB of memory: no call at these sizes can be allocated",
                     materialised_bytes > 0 ? "inputs, outputs and materialised intermediates" : "inputs and outputs", bytes / 1e9,
                     m.name, hbm / 1e9);
}

namespace {

// derive_plan of `written` with its reductions split as `split` (split_reductions' result) says.
Result<Derivation> derive_split(const ir::Diagram& written, const arch::Machine& m, const PlanOptions& options,
                                const std::optional<Variant>& split) {
  // Reductions split into runs; then axes reduced together, as one: every kernel below sees
  // the merged diagram.
  const MergedAxes merging = merge_reduced_axes(split ? split->diagram : written);
  const ir::Diagram& d = merging.diagram;
  std::vector<std::string> merge_moves = split ? split->moves : std::vector<std::string>{};
  for (const AxisMerge& mg : merging.merges)
    merge_moves.push_back(fmt::format("axes {} taken as one axis {} (reduced together, adjacent in every tensor)",
                                      fmt::join(mg.parts, " "), mg.name));
  // An input named as an output: no kernel computes it, and a caller's output buffer would be
  // left as it was allocated. Refused rather than copied (the caller holds the input already).
  for (const ir::Output& o : d.outputs)
    if (d.node(o.node).op == OpKind::input)
      return plain_error(fmt::format("{}:{}:{}: output '{}' is an input of the diagram: a plan writes computed values only "
                                     "(use the input itself, or output a value computed from it)",
                                     d.source_name, o.loc.line, o.loc.column, d.node(o.node).name));
  // 1. Variants: as written, then with each move that applies, and with all of them, one after
  // another (a move may open another: a sum pushed into an operand leaves a contraction of
  // single use, which then reassociates). Inputs copied for the GEMMs that cannot read them as
  // stored (relayout) are tried only where nothing else is feasible, in a second pass.
  // Recomputes pay only where kernels fuse: not past the bound on fused kernels.
  Partition unfused(d, m, options);
  const bool recompute = unfused.kernels().size() <= kMaxFused;
  Derivation out;
  std::optional<Plan> best;
  std::vector<Plan> moved;  // the variants with moves, as plans, to say why they lost
  for (bool relayout : {false, true}) {
    if (relayout && (best || !relayout_applies(d))) break;
    moved.clear();
    std::vector<Variant> variants{{d, {}}};
    for (Variant& v : applicable_moves(d, recompute, relayout)) variants.push_back(std::move(v));
    // Each single move followed by the moves it opens (a three-operand contraction split one way
    // leaves a matrix-vector product that becomes a row reduction; split the other way, a GEMM).
    // `v` followed by the first move that applies, again and again (at most 8).
    auto followed = [&](Variant v, bool with_recomputes) {
      for (int round = 0; round < 8; ++round) {
        auto more = applicable_moves(v.diagram, with_recomputes, relayout);
        if (more.empty()) break;
        for (auto& mv : more[0].moves) v.moves.push_back(mv);
        v.diagram = std::move(more[0].diagram);
      }
      return v;
    };
    auto is_new = [&](const Variant& x) {
      return !std::any_of(variants.begin(), variants.end(), [&](const Variant& v) { return v.diagram == x.diagram; });
    };
    const std::size_t singles = variants.size();
    for (std::size_t i = 1; i < singles; ++i) {
      Variant chain = followed(variants[i], false);
      if (chain.moves.size() > variants[i].moves.size() && is_new(chain)) variants.push_back(std::move(chain));
    }
    if (variants.size() > 1) {
      // The chain with recomputes and the chain of algebraic moves alone (a value two kernels would
      // each recompute may instead feed one kernel that fuses both consumers).
      for (bool with_recomputes : {recompute, false}) {
        Variant all = followed({d, {}}, with_recomputes);
        if (all.moves.size() > 1 && is_new(all)) variants.push_back(std::move(all));
        if (!recompute) break;
      }
    }
    // 2. Fusion per variant; the fastest feasible plan wins.
    for (const Variant& v : variants) {
      Partition part(v.diagram, m, options);
      // The search's work grows with the cube of the kernel count: bounded, so that a
      // 10,000-op diagram answers at once (unfused past kMaxFused kernels, no lookahead past 32).
      const std::size_t n = part.kernels().size();
      if (n <= kMaxFused) part.fuse_greedily(n <= 32 ? 4 : 0);
      else part.fuse_in_windows();
      Plan p = assemble(v.diagram, part, v.moves.empty() ? "chosen" : "with " + std::to_string(v.moves.size()) + " move(s)", v.moves);
      if (!v.moves.empty()) moved.push_back(p);
      if (!p.infeasible.empty()) continue;
      if (!best || runs_first(p, *best, p.predicted_s < best->predicted_s * 0.999)) best = std::move(p);
    }
  }
  // 3. The alternatives of the diagram as written.
  Plan unfused_plan = assemble(d, unfused, "fully unfused", {});
  Partition fused(d, m, options);
  fused.fuse_all();
  Plan fused_plan = assemble(d, fused, "fully fused", {});
  if (!fused_plan.infeasible.empty()) {
    // One streamed kernel of the whole diagram, as the cost model over schedules sees it.
    auto r = search::search(d, sched::analyse_streaming(d), m, options.search);
    if (r && !r->ranked.empty()) {
      const std::string refused = fused_plan.infeasible;  // why no kernel family runs it
      fused_plan.infeasible.clear();
      fused_plan.kernels.resize(1);
      Kernel& k = fused_plan.kernels[0];
      k.name = "one streamed kernel of the whole diagram";
      k.kind = KernelKind::attention;
      k.diagram = d;
      k.streamed = r->ranked.front();
      // The cost model over schedules (the paper's) counts no launch; the plan's kernels each
      // pay one (the configuration solver's estimate has it already).
      k.predicted_s = r->ranked.front().predicted_time_s + (r->method == "configuration solver" ? 0.0 : search::kKernelFixedS);
      k.bound = r->ranked.front().bound;
      k.detail = fmt::format("{}: {}", r->method, sched::to_string(r->ranked.front().schedule));
      fused_plan.predicted_s = k.predicted_s;
      fused_plan.materialised.clear();
      fused_plan.infeasible = "";
      fused_plan.note = "no code generator runs it: " + refused;
    }
  }
  // The greedy search may miss either end (a merge it never tried): both compete too. A plan of
  // fewer kernels within 5 % wins (one launch, no intermediate in memory: a decoding attention
  // step is one kernel, as napkin build emits it, not three that read K and V alike). 5 %: the
  // model's spread between row layouts (derive's default, the paper's, against build's WGMMA
  // layout: 2 % on a decoding step at d = 96) and its error on memory-bound kernels.
  for (const Plan* p : {&fused_plan, &unfused_plan}) {
    if (!p->infeasible.empty() || !p->note.empty()) continue;
    const bool fewer = best && p->kernels.size() < best->kernels.size() && p->predicted_s <= best->predicted_s * 1.05;
    if (!best || runs_first(*p, *best, p->predicted_s < best->predicted_s * 0.999 || fewer)) best = *p;
  }
  if (!best) {
    std::string why = unfused_plan.infeasible.empty() ? "no feasible plan" : unfused_plan.infeasible;
    // Where the diagram is one kernel's (attention at a head dim TMA cannot move), that kernel's
    // binding constraint comes first: it is the one a user would change.
    if (!fused_plan.infeasible.empty() && fused_plan.infeasible != unfused_plan.infeasible)
      why = fmt::format("as one kernel: {}; as one kernel per op: {}", fused_plan.infeasible, why);
    for (const std::string& r : merging.refused) why += "; " + r;
    Diagnostic e = plain_error(fmt::format("no feasible plan on {}: {}", m.name, why));
    if (unfused_plan.infeasible_at.line > 0) e.file = d.source_name, e.loc = unfused_plan.infeasible_at;
    return e;
  }
  out.chosen = std::move(*best);
  // (Not where the whole diagram fused into one kernel won: no window bounds it.)
  if (unfused.kernels().size() > kMaxFused && out.chosen.kernels.size() > 1)
    out.chosen.warnings.push_back(fmt::format("the diagram has {} ops, more than the {} the fusion search takes at once (its work "
                                              "grows with the cube of their count): it fused windows of {} consecutive ops, and no "
                                              "kernel spans two; derive a part of the diagram at a time (a layer) to fuse across them",
                                              unfused.kernels().size(), kMaxFused, kWindow));
  if (std::string w = memory_warning(d, m, out.chosen.materialised_bytes); !w.empty()) out.chosen.warnings.push_back(w);
  out.chosen.name = "chosen";
  auto same = [](const Plan& a, const Plan& b) {
    if (a.kernels.size() != b.kernels.size()) return false;
    for (std::size_t i = 0; i < a.kernels.size(); ++i)
      if (!(a.kernels[i].diagram == b.kernels[i].diagram)) return false;
    return true;
  };
  for (Plan& p : moved) {
    if (same(p, out.chosen)) continue;
    out.alternatives.push_back({p, fmt::format("{} ({})", why_not(p, out.chosen), fmt::join(p.moves, "; "))});
  }
  for (Plan* p : {&fused_plan, &unfused_plan}) {
    if (same(*p, out.chosen)) continue;
    std::string w = why_not(*p, out.chosen);
    if (!p->note.empty()) w += "; " + p->note;
    if (p->infeasible.empty() && p->predicted_s < out.chosen.predicted_s)
      w = fmt::format("{} predicted, faster than the chosen plan, but {}", time_text(p->predicted_s), p->note);
    out.alternatives.push_back({std::move(*p), std::move(w)});
  }
  const std::vector<std::string> sized = split ? split->sized_axes : std::vector<std::string>{};
  const std::vector<AxisCut> cuts = split ? split->cut_axes : std::vector<AxisCut>{};
  for (Plan* p : {&out.chosen}) p->merged_axes = merging.merges, p->sized_axes = sized, p->cut_axes = cuts;
  for (auto& a : out.alternatives) a.plan.merged_axes = merging.merges, a.plan.sized_axes = sized, a.plan.cut_axes = cuts;
  if (!merge_moves.empty()) {
    out.chosen.moves.insert(out.chosen.moves.begin(), merge_moves.begin(), merge_moves.end());
    for (auto& a : out.alternatives) a.plan.moves.insert(a.plan.moves.begin(), merge_moves.begin(), merge_moves.end());
  }
  return out;
}

}  // namespace

Result<Derivation> derive_plan(const ir::Diagram& written, const arch::Machine& m, const PlanOptions& options) {
  if (written.outputs.empty()) return plain_error("the diagram has no outputs");
  // Reductions that leave too few rows to fill the GPU, split for parallelism where that is
  // predicted faster (two launches and a small intermediate against one SM's bandwidth).
  const std::int64_t min_rows = 2 * m.sm_count.value;
  // (An axis reduced alone is first cut in two where that lets the reduction fill the GPU.)
  const auto cut = cut_long_axes(written, min_rows), plain = split_reductions(written);
  auto parallel = split_reductions(cut ? cut->diagram : written, min_rows);
  if (cut && !parallel) parallel = cut;
  else if (cut) {
    parallel->moves.insert(parallel->moves.begin(), cut->moves.begin(), cut->moves.end());
    parallel->cut_axes = cut->cut_axes;
    // A norm's count held as a number fixes the caller's axis, not its parts.
    std::set<std::string> sized;
    for (const std::string& a : parallel->sized_axes) {
      const auto c = std::find_if(cut->cut_axes.begin(), cut->cut_axes.end(), [&](const AxisCut& x) { return a == x.outer || a == x.inner; });
      sized.insert(c == cut->cut_axes.end() ? a : c->name);
    }
    parallel->sized_axes.assign(sized.begin(), sized.end());
  }
  if (!parallel || (plain && parallel->diagram == plain->diagram)) return derive_split(written, m, options, plain);
  auto with = derive_split(written, m, options, parallel);
  auto without = derive_split(written, m, options, plain);
  if (!with) return without;
  if (!without) return with;
  const bool split_wins = with->chosen.predicted_s < without->chosen.predicted_s * 0.999;
  Derivation& win = split_wins ? *with : *without;
  Plan& lost = (split_wins ? *without : *with).chosen;
  lost.name = split_wins ? "reductions not split for parallelism" : "reductions split for parallelism";
  win.alternatives.insert(win.alternatives.begin(), {lost, why_not(lost, win.chosen)});
  return std::move(win);
}

bool one_attention_kernel(const Plan& p) {
  return p.kernels.size() == 1 && p.kernels[0].kind == KernelKind::attention && p.moves.empty();
}

std::string kernel_schedule_text(const Kernel& k) {
  if (k.gemm) return gemm_schedule_text(*k.gemm);
  if (k.rows) return search::row_schedule_text(*k.rows);
  if (k.streamed) return k.streamed->summary;
  return "";
}

namespace {

// A GEMM folded over N: its M tile, and its N axis streamed in tiles of tile_n with the folds'
// accumulators (the product's K axis whole within a chunk); none where N is several axes (the
// executor streams one axis) or M's innermost is not the tile's.
Result<std::optional<sched::Schedule>> folded_loop_nest(const Kernel& k) {
  const ir::Diagram& kd = k.diagram;
  const GemmReduction gr = gemm_reduction(kd);
  if (!gr.why.empty() || gr.n.size() != 1) return std::optional<sched::Schedule>();
  const ir::AxisId n = *gr.n.begin();
  const sched::StreamingReport streaming = sched::analyse_streaming(kd);
  const sched::AxisStreaming& along = streaming.axes[static_cast<std::size_t>(n)];
  if (along.kind != sched::AxisKind::streamed) return std::optional<sched::Schedule>();
  const auto& a = kd.node(kd.node(gr.contraction).operands[0]).axes;
  std::string tiled;  // M's innermost axis (as A stores it) takes the tile, the others one index a tile
  std::vector<ir::AxisId> m_in_a;
  for (ir::AxisId x : a)
    if (gr.m.count(x)) m_in_a.push_back(x);
  for (ir::AxisId x : kd.node(gr.contraction).axes)
    if (gr.m.count(x) || gr.l.count(x))
      tiled += fmt::format(" {}={}", kd.axis(x).name, x == m_in_a.back() ? k.gemm->tile_m : 1);
  const std::string nest = fmt::format("smem{{tile{}; stream {}={}:{}}}", tiled, kd.axis(n).name, k.gemm->tile_n,
                                       sched::accumulators_text(along.accumulators));
  auto s = sched::parse_schedule(nest, kd);
  if (!s) return plain_error(fmt::format("kernel '{}': schedule {}: {}", k.name, nest, s.error().message));
  return std::optional<sched::Schedule>(*s);
}

}  // namespace

Result<std::optional<sched::Schedule>> kernel_loop_nest(const Kernel& k) {
  if (k.streamed) return std::optional<sched::Schedule>(k.streamed->schedule);
  if (!k.gemm) return std::optional<sched::Schedule>();
  const ir::Diagram& kd = k.diagram;
  if (k.kind == KernelKind::gemm_reduction) return folded_loop_nest(k);
  NodeId c = -1;
  for (NodeId n = 0; n < static_cast<NodeId>(kd.nodes.size()); ++n)
    if (kd.node(n).op == OpKind::contract) c = n;
  if (c < 0 || kd.node(c).over.size() != 1) return std::optional<sched::Schedule>();
  const ir::Node& cn = kd.node(c);
  const auto& a = kd.node(cn.operands[0]).axes;
  const auto& b = kd.node(cn.operands[1]).axes;
  auto has = [](const std::vector<ir::AxisId>& v, ir::AxisId x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  // M's and N's innermost axes take the tile (the modes are flattened, innermost fastest); their
  // outer axes and the batch axes one index per tile.
  std::vector<ir::AxisId> m_axes, n_axes;
  for (ir::AxisId x : cn.axes) {
    if (has(a, x) && !has(b, x)) m_axes.push_back(x);
    if (has(b, x) && !has(a, x)) n_axes.push_back(x);
  }
  std::string tiles;
  for (ir::AxisId x : cn.axes) {
    const std::int64_t tile = !m_axes.empty() && x == m_axes.back()   ? k.gemm->tile_m
                              : !n_axes.empty() && x == n_axes.back() ? k.gemm->tile_n
                                                                      : 1;
    tiles += fmt::format(" {}={}", kd.axis(x).name, tile);
  }
  const std::string stages = k.gemm->stages > 0 ? fmt::format("; stages={}", k.gemm->stages) : "";  // 0: CUTLASS's auto
  // Registers: the consumer warpgroups' rows of the tile (cooperative: two share it; ping-pong:
  // each has a tile of its own), holding the accumulators and the epilogue's outputs.
  std::string outputs;
  for (const ir::Output& o : kd.outputs) outputs += " " + kd.node(o.node).name;
  const std::string registers =
      m_axes.empty() ? "" : fmt::format(" rmem{{tile {}={}; keep{}{}}}", kd.axis(m_axes.back()).name,
                                        k.gemm->pingpong ? k.gemm->tile_m : k.gemm->tile_m / 2, outputs,
                                        k.gemm->pingpong ? "" : "; groups=2");
  const std::string nest = fmt::format("smem{{tile{}; stream {}={}:add{}}}{}", tiles, kd.axis(cn.over[0]).name, k.gemm->tile_k,
                                       stages, registers);
  auto s = sched::parse_schedule(nest, kd);
  if (!s) return plain_error(fmt::format("kernel '{}': schedule {}: {}", k.name, nest, s.error().message));
  return std::optional<sched::Schedule>(*s);
}

}  // namespace napkin::plan
