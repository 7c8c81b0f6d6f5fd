// SPDX-License-Identifier: Apache-2.0
#include "exec/plan_exec.h"

#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "exec/executor.h"
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

// A GEMM kernel's tiled loop nest: its last M and N axes tiled, its one K axis streamed.
std::string gemm_nest(const ir::Diagram& kd, const plan::GemmSchedule& s) {
  ir::NodeId c = -1;
  for (ir::NodeId n = 0; n < static_cast<ir::NodeId>(kd.nodes.size()); ++n)
    if (kd.node(n).op == ir::OpKind::contract) c = n;
  if (c < 0 || kd.node(c).over.size() != 1) return "";
  const ir::Node& cn = kd.node(c);
  const auto& a = kd.node(cn.operands[0]).axes;
  const auto& b = kd.node(cn.operands[1]).axes;
  auto has = [](const std::vector<ir::AxisId>& v, ir::AxisId x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  std::string m, n;
  for (ir::AxisId x : cn.axes) {
    if (has(a, x) && !has(b, x)) m = kd.axis(x).name;
    if (has(b, x) && !has(a, x)) n = kd.axis(x).name;
  }
  std::string tiles;
  if (!m.empty()) tiles += fmt::format(" {}={}", m, s.tile_m);
  if (!n.empty()) tiles += fmt::format(" {}={}", n, s.tile_n);
  return fmt::format("smem{{tile{}; stream {}={}:add}}", tiles.empty() ? "" : tiles, kd.axis(cn.over[0]).name, s.tile_k);
}

}  // namespace

Result<PlanExecution> execute_plan(const plan::Plan& p, const ir::Diagram& d, const reference::TensorMap& inputs) {
  std::map<std::string, Named> tensors;
  for (const auto& [name, t] : inputs) tensors[name] = to_named(d, t);
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
    std::optional<sched::Schedule> schedule;
    if (k.streamed) {
      schedule = k.streamed->schedule;
    } else if (k.gemm) {
      const std::string nest = gemm_nest(kd, *k.gemm);
      auto s = sched::parse_schedule(nest, kd);
      if (!s) return plain_error(fmt::format("kernel '{}': schedule {}: {}", k.name, nest, s.error().message));
      schedule = *s;
    }
    reference::TensorMap result;
    if (schedule) {
      auto r = execute(kd, *schedule, in);
      if (!r) return plain_error(fmt::format("kernel '{}': {}", k.name, r.error().message));
      result = std::move(r->outputs);
      out.nests.push_back(r->nest);
    } else {
      auto r = reference::evaluate(kd, in);
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
    out.outputs[name] = from_named(d, it->second, o.axes);
  }
  return out;
}

}  // namespace napkin::exec
