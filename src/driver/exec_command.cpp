// SPDX-License-Identifier: Apache-2.0
#include "driver/exec_command.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driver/derive_command.h"
#include "exec/executor.h"
#include "exec/plan_exec.h"
#include "plan/plan.h"
#include "reference/interpreter.h"
#include "sched/schedule.h"

namespace napkin::driver {

using nlohmann::json;

namespace {

constexpr double kTolerance = 1e-9;      // f64 rounding, summation order aside
constexpr double kCastTolerance = 0.1;   // a cast of a partial value rounds at its dtype

// f64 steps of one evaluation: each node's loop space (the executor does about as many).
std::string number(double x) { return fmt::format("{:.3g}", x); }

// Refuses a diagram whose reference evaluation needs more than `max_work` f64 steps.
std::optional<Diagnostic> too_much_work(const DiagramArgs& args, const ir::Diagram& d, double max_work) {
  const double work = reference::work_estimate(d);
  if (work <= max_work) return std::nullopt;
  const ir::Axis* largest = nullptr;  // (the hint names the diagram's own largest axis)
  for (const ir::Axis& a : d.axes)
    if (!largest || a.size > largest->size) largest = &a;
  return plain_error(fmt::format("{}: running needs about {:.3g} f64 steps, more than --max-work {:.3g}; bind "
                                 "smaller sizes with --set{}, or raise --max-work",
                                 args.file, work, max_work,
                                 largest ? fmt::format(" (e.g. --set {}={})", largest->name, std::min<std::int64_t>(64, largest->size)) : ""));
}

// Largest |actual - expected| over one output, and that over the output's largest magnitude.
struct OutputError {
  double abs = 0, scaled = 0;
};
OutputError output_error(const reference::Tensor& got, const reference::Tensor& want) {
  if (got.sizes != want.sizes) return {INFINITY, INFINITY};
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < want.data.size(); ++i) {
    const double a = got.data[i], b = want.data[i];
    if ((std::isnan(a) && std::isnan(b)) || a == b) continue;
    err = std::max(err, std::isnan(a) || std::isnan(b) ? INFINITY : std::abs(a - b));
  }
  for (double x : want.data)
    if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
  return {err, err == 0 ? 0 : err / std::max(scale, 1e-30)};
}

}  // namespace

CommandOutput run_schedule(const DiagramArgs& args, const RunScheduleOptions& options) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), options.json);
  const ir::Diagram& d = parsed->diagram;
  auto schedule = sched::parse_schedule(options.schedule, d);
  if (!schedule) return failure(schedule.error(), options.json);
  if (auto e = too_much_work(args, d, options.max_work)) return failure(*e, options.json);
  const reference::TensorMap inputs = reference::random_inputs(d, options.seed);
  auto expected = reference::evaluate(d, inputs);
  if (!expected) return failure(expected.error(), options.json);
  auto run = exec::execute(d, *schedule, inputs);
  if (!run) return failure(run.error(), options.json);
  const exec::Comparison c = exec::compare(run->outputs, *expected);
  const double tolerance = run->notes.empty() ? kTolerance : kCastTolerance;
  const bool matches = c.max_rel_error <= tolerance;

  CommandOutput r;
  r.exit_code = matches ? 0 : 1;
  std::set<std::string> tensors;
  for (const auto& [level, per] : run->loads)
    for (const auto& [t, n] : per) tensors.insert(t);
  for (const auto& [level, per] : run->stores)
    for (const auto& [t, n] : per) tensors.insert(t);
  if (options.json) {
    json groups = json::object(), loads = json::object(), stores = json::object();
    for (const auto& [level, n] : run->groups) groups[level] = n;
    for (const auto& [level, per] : run->loads)
      for (const auto& [t, n] : per) loads[level][t] = n;
    for (const auto& [level, per] : run->stores)
      for (const auto& [t, n] : per) stores[level][t] = n;
    r.out = json{{"ok", true},
                 {"file", args.file},
                 {"schedule", sched::to_string(*schedule)},
                 {"seed", options.seed},
                 {"nest", run->nest},
                 {"streamed_axis", run->streamed_axis},
                 {"groups", groups},
                 {"chunks", run->chunks},
                 {"max_abs_error", c.max_abs_error},
                 {"max_rel_error", c.max_rel_error},
                 {"tolerance", tolerance},
                 {"matches", matches},
                 {"loads", loads},
                 {"stores", stores},
                 {"notes", run->notes}}
                .dump(2, ' ', false, json::error_handler_t::replace) + "\n";
    return r;
  }
  std::string out = fmt::format("schedule: {}\nnest: {}\n", sched::to_string(*schedule), run->nest);
  std::vector<std::string> groups;
  for (const sched::LevelSchedule& level : schedule->levels)
    groups.push_back(fmt::format("{} {}", level.level, run->groups.at(level.level)));
  if (!groups.empty()) out += fmt::format("groups: {}\n", fmt::join(groups, ", "));
  out += fmt::format("chunks: {}{}\n", run->chunks,
                     run->streamed_axis.empty() ? "" : fmt::format(" (streaming {})", run->streamed_axis));
  out += fmt::format("against the reference (seed {}): max abs error {}, max rel error {}: {}\n", options.seed,
                     number(c.max_abs_error), number(c.max_rel_error),
                     matches ? (run->notes.empty() ? "match" : "match to the precision of the noted casts")
                             : fmt::format("MISMATCH in '{}' (tolerance {})", c.worst_output, number(tolerance)));
  if (!run->loads.empty()) {
    out += "elements transferred (loaded into / stored from each level):\n";
    out += fmt::format("  {:<8} {:<12} {:>14} {:>14}\n", "level", "tensor", "loaded", "stored");
    for (const sched::LevelSchedule& lv : schedule->levels)
      for (const std::string& t : tensors) {
        const std::string& level = lv.level;
        const auto& l = run->loads[level];
        const auto& s = run->stores[level];
        const bool loaded = l.count(t), stored = s.count(t);
        if (!loaded && !stored) continue;
        out += fmt::format("  {:<8} {:<12} {:>14} {:>14}\n", level, t, loaded ? std::to_string(l.at(t)) : "-",
                           stored ? std::to_string(s.at(t)) : "-");
      }
  }
  for (const std::string& note : run->notes) out += "note: " + note + "\n";
  r.out = out;
  return r;
}

CommandOutput run_plan(const DiagramArgs& args, const RunPlanOptions& options) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), options.json);
  const ir::Diagram& d = parsed->diagram;
  auto m = load_machine(options.machine);
  if (!m) return failure(m.error(), options.json);
  if (auto e = too_much_work(args, d, options.max_work)) return failure(*e, options.json);
  auto derivation = derive_as_built(d, *m, {}, args.file);
  if (!derivation) return failure(derivation.error(), options.json);
  const plan::Plan& p = derivation->chosen;
  const reference::TensorMap inputs = reference::random_inputs(d, options.seed);
  auto expected = reference::evaluate(d, inputs);
  if (!expected) return failure(expected.error(), options.json);
  auto run = exec::execute_plan(p, d, inputs);
  if (!run) return failure(run.error(), options.json);
  auto low = reference::evaluate(d, inputs, {reference::Arithmetic::low_precision});
  if (!low) return failure(low.error(), options.json);
  const reference::TensorMap& low_precision = *low;

  bool matches = true;
  struct Checked {
    std::string name;
    OutputError error;
    double tolerance;
    bool overflows;  // the diagram's own arithmetic in its dtypes is not finite here
  };
  std::vector<Checked> errors;
  for (const auto& [name, want] : *expected) {
    const auto it = run->outputs.find(name);
    const OutputError e = it == run->outputs.end() ? OutputError{INFINITY, INFINITY} : output_error(it->second, want);
    // The diagram's own arithmetic in its dtypes drifts from f64 over a deep chain (a bf16
    // rounding in layer 1 grows with every layer): twice that drift is the tolerance where larger.
    const auto own = low_precision.find(name);
    const double drift = own == low_precision.end() ? 0.0 : output_error(own->second, want).scaled;
    const double tolerance = std::isfinite(drift) ? std::max(kPlanTolerance, 2 * drift) : kPlanTolerance;
    matches = matches && e.scaled <= tolerance;
    errors.push_back({name, e, tolerance, !std::isfinite(drift)});
  }
  CommandOutput r;
  r.exit_code = matches ? 0 : 1;
  if (options.json) {
    json kernels = json::array(), outputs = json::array();
    for (std::size_t i = 0; i < p.kernels.size(); ++i)
      kernels.push_back({{"name", p.kernels[i].name}, {"ran", run->nests.at(i)}});
    for (const Checked& c : errors)
      outputs.push_back({{"name", c.name}, {"max_abs_error", c.error.abs}, {"scaled_error", c.error.scaled}, {"tolerance", c.tolerance}});
    r.out = json{{"ok", true},     {"file", args.file},         {"machine", m->name},  {"seed", options.seed},
                 {"moves", p.moves}, {"kernels", kernels},       {"outputs", outputs},  {"tolerance", kPlanTolerance},
                 {"matches", matches}}
                .dump(2, ' ', false, json::error_handler_t::replace) + "\n";
    return r;
  }
  std::string out = fmt::format("plan on {}: {} kernel(s), predicted {:.4g} us at these sizes\n", m->name, p.kernels.size(),
                                p.predicted_s * 1e6);
  for (const std::string& mv : p.moves) out += "  move: " + mv + "\n";
  for (std::size_t i = 0; i < p.kernels.size(); ++i)
    out += fmt::format("  {}. {}\n     ran: {}\n", i + 1, p.kernels[i].name,
                       run->nests[i] == "reference" ? "the reference interpreter over the kernel's diagram (one pass over its rows)"
                                                    : run->nests[i]);
  out += fmt::format("against the reference (seed {}), error over each output's largest magnitude (tolerance {}, or twice the "
                     "diagram's own drift in its dtypes where larger):\n",
                     options.seed, number(kPlanTolerance));
  for (const Checked& c : errors)
    out += fmt::format("  {:<12} max abs error {:<10} scaled {:<10} {}{}\n", c.name, number(c.error.abs), number(c.error.scaled),
                       c.error.scaled <= c.tolerance ? "match" : "MISMATCH",
                       c.tolerance > kPlanTolerance ? fmt::format(" (tolerance {})", number(c.tolerance)) : "");
  for (const Checked& c : errors)
    if (c.overflows)
      out += fmt::format("note: {}: the diagram's arithmetic in its own dtypes (the low-precision reference) is not finite either: a "
                         "value overflows its dtype (a 16-bit value past 65504 in f16), as the kernels will compute it\n", c.name);
  r.out = out;
  return r;
}

}  // namespace napkin::driver
