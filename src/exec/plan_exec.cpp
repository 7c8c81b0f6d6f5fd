// SPDX-License-Identifier: Apache-2.0
#include "exec/plan_exec.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "exec/executor.h"
#include "ir/builder.h"
#include "plan/moves.h"
#include "plan/subgraph.h"
#include "sched/schedule.h"

namespace napkin::exec {

namespace {

// A tensor with its axes named, so that it passes between diagrams whose axis ids differ.
struct Named {
  std::vector<std::string> axes;
  reference::Tensor tensor;
};

Named to_named(const ir::Diagram& d, const reference::Tensor& t) {
  Named n{{}, t};
  for (ir::AxisId a : t.axes) n.axes.push_back(d.axis(a).name);
  return n;
}

// The tensor over `axes` (ids of `d`, in that order).
reference::Tensor from_named(const ir::Diagram& d, const Named& n, const std::vector<ir::AxisId>& axes) {
  reference::Tensor t = n.tensor;
  for (std::size_t i = 0; i < n.axes.size(); ++i) t.axes[i] = *d.find_axis(n.axes[i]);
  return t.permuted(axes);
}

// `n` with each run of a merge's parts (adjacent, in order) as its one axis: the same data.
void merge_axes(Named& n, const std::vector<plan::AxisMerge>& merges) {
  for (const plan::AxisMerge& m : merges) {
    auto at = std::find(n.axes.begin(), n.axes.end(), m.parts.front());
    if (at == n.axes.end()) continue;
    const auto i = static_cast<std::size_t>(at - n.axes.begin());
    std::int64_t size = 1;
    for (std::size_t j = 0; j < m.parts.size(); ++j) size *= n.tensor.sizes[i + j];
    n.axes[i] = m.name, n.tensor.sizes[i] = size;
    const auto first = static_cast<std::ptrdiff_t>(i + 1), last = static_cast<std::ptrdiff_t>(i + m.parts.size());
    n.axes.erase(n.axes.begin() + first, n.axes.begin() + last);
    n.tensor.sizes.erase(n.tensor.sizes.begin() + first, n.tensor.sizes.begin() + last);
    n.tensor.axes.erase(n.tensor.axes.begin() + first, n.tensor.axes.begin() + last);
  }
}

// `n` with each cut axis as its outer and inner axes (plan::AxisCut): the same data.
void cut_axes(Named& n, const std::vector<plan::AxisCut>& cuts) {
  for (const plan::AxisCut& c : cuts) {
    auto at = std::find(n.axes.begin(), n.axes.end(), c.name);
    if (at == n.axes.end()) continue;
    const auto i = at - n.axes.begin();
    const std::int64_t size = n.tensor.sizes[static_cast<std::size_t>(i)];
    n.axes[static_cast<std::size_t>(i)] = c.outer;
    n.axes.insert(n.axes.begin() + i + 1, c.inner);
    n.tensor.sizes[static_cast<std::size_t>(i)] = size / c.inner_size;
    n.tensor.sizes.insert(n.tensor.sizes.begin() + i + 1, c.inner_size);
    n.tensor.axes.insert(n.tensor.axes.begin() + i + 1, ir::AxisId{-1});
  }
}

// The size of axis `name` of the kernels' diagrams: `d`'s, or a cut axis's part.
std::int64_t kernel_axis_size(const ir::Diagram& d, const std::vector<plan::AxisCut>& cuts, const std::string& name) {
  for (const plan::AxisCut& c : cuts) {
    if (name == c.inner) return c.inner_size;
    if (name == c.outer) return d.axis(*d.find_axis(c.name)).size / c.inner_size;
  }
  return d.axis(*d.find_axis(name)).size;
}

// The inverse of merge_axes: each merged axis as its parts again, sized as in `d` (cut as
// `cuts`).
void split_axes(Named& n, const std::vector<plan::AxisMerge>& merges, const ir::Diagram& d, const std::vector<plan::AxisCut>& cuts) {
  for (auto m = merges.rbegin(); m != merges.rend(); ++m) {
    auto at = std::find(n.axes.begin(), n.axes.end(), m->name);
    if (at == n.axes.end()) continue;
    const auto i = at - n.axes.begin();
    std::vector<std::int64_t> sizes;
    for (const std::string& part : m->parts) sizes.push_back(kernel_axis_size(d, cuts, part));
    n.axes.erase(n.axes.begin() + i);
    n.axes.insert(n.axes.begin() + i, m->parts.begin(), m->parts.end());
    n.tensor.sizes.erase(n.tensor.sizes.begin() + i);
    n.tensor.sizes.insert(n.tensor.sizes.begin() + i, sizes.begin(), sizes.end());
    n.tensor.axes.insert(n.tensor.axes.begin() + i, m->parts.size() - 1, ir::AxisId{-1});
  }
  // Each cut axis's outer and inner parts (adjacent, in order) as the axis again.
  for (auto c = cuts.rbegin(); c != cuts.rend(); ++c) {
    auto at = std::find(n.axes.begin(), n.axes.end(), c->outer);
    if (at == n.axes.end()) continue;
    const auto i = static_cast<std::size_t>(at - n.axes.begin());
    n.axes[i] = c->name;
    n.tensor.sizes[i] *= n.tensor.sizes[i + 1];
    n.axes.erase(n.axes.begin() + static_cast<std::ptrdiff_t>(i + 1));
    n.tensor.sizes.erase(n.tensor.sizes.begin() + static_cast<std::ptrdiff_t>(i + 1));
    n.tensor.axes.erase(n.tensor.axes.begin() + static_cast<std::ptrdiff_t>(i + 1));
  }
}

// A GEMM kernel's diagram with each operand it computes in 16 bits (a prologue: exp(X * 12)
// before the contraction) rounded to that dtype, as the kernel rounds it for the tensor cores.
Result<ir::Diagram> with_rounded_operands(const ir::Diagram& kd) {
  std::set<ir::NodeId> rounded;
  for (const ir::Node& n : kd.nodes)
    if (n.op == ir::OpKind::contract)
      for (ir::NodeId o : n.operands) {
        const ir::Node& x = kd.node(o);
        if (x.op != ir::OpKind::input && (x.dtype == DType::bf16 || x.dtype == DType::f16)) rounded.insert(o);
      }
  if (rounded.empty()) return kd;
  auto r = plan::rebuild(kd, [&](ir::NodeId n, ir::Builder& b, const std::vector<ir::Value>& value) -> ir::Value {
    if (!rounded.count(n)) return {};
    const ir::Node& node = kd.node(n);
    std::vector<ir::Value> ops;
    for (ir::NodeId o : node.operands) ops.push_back(value[static_cast<std::size_t>(o)]);
    const ir::Value v = b.cast(plan::replay_node(b, node, ops, [](ir::AxisId a) { return a; }), node.dtype, node.loc);
    return node.name.empty() ? v : b.named(node.name, v, node.loc);
  });
  if (!r) return plain_error("a GEMM kernel's diagram with its 16-bit operands rounded is not a diagram");
  return std::move(*r);
}

}  // namespace

Result<PlanExecution> execute_plan(const plan::Plan& p, const ir::Diagram& d, const reference::TensorMap& inputs) {
  std::map<std::string, Named> tensors;
  for (const auto& [name, t] : inputs) {
    // In the input's declared order, where a merge's parts are adjacent.
    const auto node = d.find_node(name);
    tensors[name] = to_named(d, node && !p.merged_axes.empty() ? t.permuted(d.node(*node).axes) : t);
    cut_axes(tensors[name], p.cut_axes);
    merge_axes(tensors[name], p.merged_axes);
  }
  PlanExecution out;
  for (const plan::Kernel& k : p.kernels) {
    const ir::Diagram& kd = k.diagram;
    reference::TensorMap in;
    for (ir::NodeId n : kd.inputs()) {
      const std::string& name = kd.node(n).name;
      auto it = tensors.find(name);
      if (it == tensors.end()) return plain_error(fmt::format("kernel '{}': its input '{}' is computed by no earlier kernel", k.name, name));
      in[name] = from_named(kd, it->second, kd.node(n).axes);
    }
    auto nest = plan::kernel_loop_nest(k);
    if (!nest) return nest.error();
    const std::optional<sched::Schedule>& schedule = *nest;
    reference::TensorMap result;
    auto run = k.gemm ? with_rounded_operands(kd) : Result<ir::Diagram>(kd);
    if (!run) return plain_error(fmt::format("kernel '{}': {}", k.name, run.error().message));
    if (schedule) {
      auto r = execute(*run, *schedule, in);
      if (!r) return plain_error(fmt::format("kernel '{}': {}", k.name, r.error().message));
      result = std::move(r->outputs);
      out.nests.push_back(r->nest);
    } else {
      auto r = reference::evaluate(*run, in);
      if (!r) return plain_error(fmt::format("kernel '{}': {}", k.name, r.error().message));
      result = std::move(*r);
      out.nests.push_back("reference");
    }
    for (auto& [name, t] : result) tensors[name] = to_named(kd, t);
  }
  for (const ir::Output& o : d.outputs) {
    const std::string& name = d.node(o.node).name;
    auto it = tensors.find(name);
    if (it == tensors.end()) return plain_error(fmt::format("the plan computes no output '{}'", name));
    Named whole = it->second;
    split_axes(whole, p.merged_axes, d, p.cut_axes);
    out.outputs[name] = from_named(d, whole, o.axes);
  }
  return out;
}

}  // namespace napkin::exec
