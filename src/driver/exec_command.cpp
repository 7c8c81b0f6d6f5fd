// SPDX-License-Identifier: Apache-2.0
#include "driver/exec_command.h"

#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "exec/executor.h"
#include "reference/interpreter.h"
#include "sched/schedule.h"

namespace napkin::driver {

using nlohmann::json;

namespace {

constexpr double kTolerance = 1e-9;      // f64 rounding, summation order aside
constexpr double kCastTolerance = 0.1;   // a cast of a partial value rounds at its dtype

// f64 steps of one evaluation: each node's loop space (the executor does about as many).
std::string number(double x) { return fmt::format("{:.3g}", x); }

}  // namespace

CommandOutput run_schedule(const DiagramArgs& args, const RunScheduleOptions& options) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), options.json);
  const ir::Diagram& d = parsed->diagram;
  auto schedule = sched::parse_schedule(options.schedule, d);
  if (!schedule) return failure(schedule.error(), options.json);
  const double work = reference::work_estimate(d);
  if (work > options.max_work)
    return failure(plain_error(fmt::format(
                       "{}: running needs about {:.3g} f64 steps, more than --max-work {:.3g}; bind "
                       "smaller sizes with --set (e.g. --set q=64), or raise --max-work",
                       args.file, work, options.max_work)),
                   options.json);
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

}  // namespace napkin::driver
