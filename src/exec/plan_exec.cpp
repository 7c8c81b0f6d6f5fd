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
    auto nest = plan::kernel_loop_nest(k);
    if (!nest) return nest.error();
    const std::optional<sched::Schedule>& schedule = *nest;
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
