// SPDX-License-Identifier: Apache-2.0
#include "driver/analyze_command.h"

#include <chrono>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "arch/load.h"
#include "cost/closed_form.h"
#include "cost/cost.h"
#include "driver/units.h"
#include "ir/printer.h"
#include "sched/schedule.h"
#include "sched/streaming.h"
#include "search/search.h"

namespace napkin::driver {

using nlohmann::json;

namespace {

std::string si(double v, const char* unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int i = 0;
  while (std::fabs(v) >= 1000 && i < 6) {
    v /= 1000;
    ++i;
  }
  const std::string suffix = fmt::format("{}{}", prefixes[i], unit);
  return suffix.empty() ? fmt::format("{:.3g}", v) : fmt::format("{:.3g} {}", v, suffix);
}

std::optional<DType> parse_precision(const std::string& s) {
  if (s == "fp8") return DType::fp8e4m3;
  if (s == "fp16") return DType::f16;
  return parse_dtype(s);
}

json streamable_json(const ir::Diagram& d, const sched::StreamingReport& r) {
  json out = json::array();
  for (const sched::AxisStreaming& a : r.axes) {
    json j{{"axis", d.axis(a.axis).name}, {"kind", sched::axis_kind_name(a.kind)}, {"reason", a.reason}};
    if (a.kind == sched::AxisKind::none) j["refused"] = a.reason;
    else j["accumulator"] = sched::accumulators_text(a.accumulators);
    out.push_back(j);
  }
  return out;
}

json estimate_json(const cost::Estimate& e) {
  json levels = json::array();
  for (const cost::LevelCost& l : e.levels) {
    json tensors = json::array();
    for (const auto& t : l.tensors)
      tensors.push_back({{"tensor", t.tensor}, {"dtype", dtype_name(t.dtype)}, {"elements", t.elements},
                         {"bytes", t.bytes()}, {"reloads", t.reloads}});
    json j{{"name", l.name}, {"parent", l.parent}, {"scheduled", l.scheduled},
           {"transfer_elements", l.transfer_elements}, {"transfer_bytes", l.transfer_bytes},
           {"bytes_per_s", l.bytes_per_s}, {"transfer_time_s", l.transfer_time_s},
           {"peak_bytes", l.peak_bytes}, {"tensors", tensors}};
    if (l.scheduled) {
      j["visited_fraction"] = l.visited_fraction;
      j["capacity_bytes"] = l.capacity_bytes;
      j["groups_total"] = l.groups_total;
      json fp = json::array();
      for (const auto& f : l.footprint) fp.push_back({{"tensor", f.tensor}, {"role", f.role}, {"bytes", f.bytes}});
      j["footprint"] = fp;
    }
    levels.push_back(j);
  }
  json units = json::array();
  for (const cost::UnitCost& u : e.units)
    units.push_back({{"unit", arch::unit_name(u.unit)}, {"dtype", dtype_name(u.dtype)}, {"ops", u.ops},
                     {"flops", u.flops}, {"time_s", u.time_s}});
  return {{"machine", e.machine}, {"schedule", e.schedule}, {"predicted_time_s", e.predicted_time_s},
          {"sequential_time_s", e.sequential_time_s}, {"exposed_fill_s", e.exposed_fill_s}, {"tflops", e.tflops()}, {"bound", e.bound},
          {"overlap", e.overlap}, {"wave_efficiency", e.wave_efficiency}, {"flops", e.flops}, {"visited_fraction", e.visited_fraction},
          {"levels", levels}, {"units", units}};
}

std::string estimate_text(const cost::Estimate& e) {
  std::string s = fmt::format("schedule: {}\n", e.schedule);
  s += fmt::format("  {:<6} {:<12} {:>12} {:>12} {:>10} {:>13} {:>13}\n", "level", "link", "transfers",
                   "bytes", "time", "peak/group", "capacity");
  for (const cost::LevelCost& l : e.levels)
    s += fmt::format("  {:<6} {:<12} {:>12} {:>12} {:>10} {:>13} {:>13}\n", l.name, l.parent + "->" + l.name,
                     si(l.transfer_elements, ""), si(l.transfer_bytes, "B"), e.fits() ? seconds_text(l.transfer_time_s) : "-",
                     l.scheduled ? kib_text(l.peak_bytes) : "-", l.scheduled ? kib_text(l.capacity_bytes) : "-");
  for (const cost::LevelCost& l : e.levels) {
    if (!l.scheduled) continue;
    if (l.peak_bytes > l.capacity_bytes)
      s += fmt::format("  ! {}: one group needs {}, over its capacity of {} ({}): this schedule does not fit\n", l.name,
                       kib_text(l.peak_bytes), kib_text(l.capacity_bytes), l.capacity_source);
    s += fmt::format("  {} per group ({} groups):", l.name, si(l.groups_total, ""));
    for (const auto& f : l.footprint) s += fmt::format(" {} {};", f.tensor, kib_text(f.bytes));
    s.back() = '\n';
  }
  // A schedule that does not fit gets no time (cost.h): the caller reports the error.
  if (!e.fits()) return s;
  s += fmt::format("  {:<20} {:>14} {:>10}\n", "unit", "ops", "time");
  for (const cost::UnitCost& u : e.units)
    s += fmt::format("  {:<20} {:>14} {:>10}\n", u.what, si(u.ops, ""), seconds_text(u.time_s));
  for (const cost::LevelCost& l : e.levels)
    if (l.scheduled && l.visited_fraction < 1)
      s += fmt::format("  {}: a mask leaves {:.1f}% of the (tile, chunk) blocks visible; the others are neither "
                       "loaded nor computed\n", l.name, l.visited_fraction * 100);
  s += fmt::format("predicted: {}, {:.1f} TFLOP/s, bound by {}{}\n", seconds_text(e.predicted_time_s), e.tflops(), e.bound,
                   e.exposed_fill_s > 0 ? fmt::format(", then {} of exposed fill", seconds_text(e.exposed_fill_s)) : "");
  s += fmt::format("  ({}; wave efficiency {:.3f}; with no overlap at all: {})\n", e.overlap,
                   e.wave_efficiency, seconds_text(e.sequential_time_s));
  return s;
}

}  // namespace

CommandOutput analyze(const DiagramArgs& args, const AnalyzeOptions& options) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), options.json);
  const ir::Diagram& d = parsed->diagram;
  auto machine = load_machine(options.machine, options.machines_dir);
  if (!machine) return failure(machine.error(), options.json);
  const auto start = std::chrono::steady_clock::now();
  const sched::StreamingReport report = sched::analyse_streaming(d);
  sched::Schedule schedule;
  if (options.schedule) {
    auto s = sched::parse_schedule(*options.schedule, d);
    if (!s) return failure(s.error(), options.json);
    schedule = s.value();
  } else {
    schedule = cost::default_schedule(d, report, *machine);
  }
  auto est = cost::estimate(d, schedule, *machine);
  if (!est) return failure(est.error(), options.json);
  // No estimate for a schedule that does not fit: the error names the capacity exceeded.
  std::optional<Diagnostic> does_not_fit;
  if (!est->fits())
    does_not_fit = plain_error(fmt::format(
        "{}{} does not fit on {}: {}; no estimate{}", options.schedule ? "--schedule: the schedule" : "the default schedule",
        options.schedule ? "" : fmt::format(" ({})", sched::to_string(schedule)), machine->name, est->does_not_fit,
        options.schedule ? "" : " (give one that fits with --schedule)"));
  if (does_not_fit && options.json) return failure(*does_not_fit, true);
  const cost::ClosedForm form = cost::derive_closed_form(d, report);
  const DType dt = compute_dtype(d);
  const auto peak = machine->peak_flop_per_s(arch::Unit::tensor_core, dt);
  const double hbm_values = machine->bytes_per_s(arch::kL2) / dtype_bytes(dt);
  std::vector<cost::Threshold> thresholds;
  if (peak) thresholds = cost::compute_bound_thresholds(form, d, *peak, hbm_values);
  // Where derive configures the diagram with the Hopper solver, its best schedule's prediction
  // (the overlap model) is the answer; the estimate above is the roofline of the default
  // schedule, a bound. Both are printed so that analyze and derive never disagree silently.
  std::optional<search::Ranked> configured;
  if (!options.schedule) {
    auto found = search::search(d, report, *machine);
    if (found && found->method == "configuration solver" && !found->ranked.empty()) configured = found->ranked.front();
  }
  const double analysis_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  CommandOutput r;
  if (options.json) {
    json terms = json::array(), relations = json::array(), th = json::array();
    for (const cost::Term& t : form.terms)
      terms.push_back({{"tensor", t.tensor}, {"alpha", t.alpha}, {"beta", t.beta}, {"reread_axes", t.reread_axes}});
    for (const cost::TileRelation& t : form.relations)
      relations.push_back({{"axis", t.axis}, {"coefficient", t.coefficient}, {"exponent", t.exponent}, {"text", t.text}});
    for (const cost::Threshold& t : thresholds) th.push_back({{"kind", t.kind}, {"value", t.value}, {"text", t.text}});
    json j = estimate_json(*est);
    j["file"] = args.file;
    j["diagram"] = ir::diagram_key(d);
    j["streamable"] = streamable_json(d, report);
    j["closed_form"] = {{"text", form.text()}, {"terms", terms}, {"tile_relations", relations},
                        {"flops", form.flops}, {"thresholds", th}, {"threshold_dtype", dtype_name(dt)}};
    if (configured)
      j["configured"] = {{"method", "configuration solver"},
                         {"predicted_time_s", configured->predicted_time_s},
                         {"tflops", configured->tflops},
                         {"bound", configured->bound},
                         {"summary", configured->summary},
                         {"schedule", sched::to_string(configured->schedule)}};
    j["analysis_s"] = analysis_s;
    r.out = json_text(j);
    return r;
  }
  std::string s = fmt::format("napkin analyze {} on {} ({})\ndiagram: {}\n\n", args.file, machine->name,
                              machine->display_name, ir::diagram_key(d));
  s += "streamability (per axis):\n";
  std::string rep = sched::report_text(report);
  for (std::size_t pos = 0; pos < rep.size();) {
    const auto nl = rep.find('\n', pos);
    s += "  " + rep.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos) + "\n";
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  s += fmt::format("\nclosed form across one level of M values (docs/cost_model.md §7):\n  {}\n", form.text());
  for (const cost::Term& t : form.terms)
    s += fmt::format("    {:<8} alpha {:<12.6g} beta {:<4g}{}\n", t.tensor, t.alpha, t.beta,
                     t.reread_axes.empty() ? "" : fmt::format("  (re-read once per tile of {})", fmt::join(t.reread_axes, ", ")));
  for (const cost::TileRelation& t : form.relations) s += fmt::format("  optimal tile: {}\n", t.text);
  if (peak) {
    s += fmt::format("  compute-bound on {} ({} tensor core {}, HBM {}/s, no caching) when:\n",
                     machine->name, dtype_name(dt), si(*peak, "FLOP/s"), si(machine->bytes_per_s(arch::kL2), "B"));
    for (const cost::Threshold& t : thresholds) {
      s += "    " + t.text;
      if (t.kind == "memory") s += fmt::format(" = {} at {} B/value", kib_text(t.value * dtype_bytes(dt)), dtype_bytes(dt));
      s += "\n";
    }
  }
  s += "\n" + estimate_text(*est);
  if (configured)
    s += fmt::format(
        "configured (derive's solver, the overlap model): {}, {:.1f} TFLOP/s, bound by {}\n  {}: {}\n"
        "  (the prediction; the roofline above, of the default schedule, is a bound)\n",
        seconds_text(configured->predicted_time_s), configured->tflops, configured->bound, configured->summary,
        sched::to_string(configured->schedule));
  r.out = s;
  if (does_not_fit) {
    r.exit_code = 1;
    r.err = does_not_fit->format() + "\n";
  }
  return r;
}

CommandOutput compare(const DiagramArgs& args, const CompareOptions& options) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), options.json);
  const ir::Diagram& d = parsed->diagram;
  if (options.machines.empty()) return failure(plain_error("--machines: expected a comma-separated list of machine names"), options.json);
  if (options.dtypes.empty()) return failure(plain_error("--dtypes: expected a comma-separated list such as bf16,fp8"), options.json);
  std::vector<arch::Machine> machines;
  for (const std::string& name : options.machines) {
    auto m = load_machine(name, options.machines_dir);
    if (!m) return failure(m.error(), options.json);
    machines.push_back(m.value());
  }
  std::vector<DType> dtypes;
  for (const std::string& t : options.dtypes) {
    auto dt = parse_precision(t);
    if (!dt || !is_float(*dt) || *dt == DType::f64)
      return failure(plain_error(fmt::format("--dtypes: '{}' is not an input precision; expected bf16, f16, fp8 "
                                             "(= fp8e4m3), fp8e5m2, tf32 or f32", t)), options.json);
    dtypes.push_back(*dt);
  }
  const sched::StreamingReport report = sched::analyse_streaming(d);
  const cost::ClosedForm form = cost::derive_closed_form(d, report);
  json rows = json::array();
  std::string s = fmt::format("napkin compare {}: {}\n{}\n", args.file, ir::diagram_key(d), form.text());
  s += "Each row: the default schedule (cost_model.md §6) with every input in the row's dtype.\n";
  s += fmt::format("{:<14} {:<8} {:>9} {:>8} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}  {}\n", "machine", "dtype",
                   "peak TF/s", "HBM TB/s", "g_min", "HBM bytes", "t_HBM", "t_tensor", "t_sfu", "predicted",
                   "TFLOP/s", "bound");
  for (const arch::Machine& m : machines)
    for (DType dt : dtypes) {
      json row{{"machine", m.name}, {"dtype", dtype_name(dt)}};
      const auto peak = m.peak_flop_per_s(arch::Unit::tensor_core, dt);
      if (!peak) {
        const std::string why = fmt::format("{} has no tensor-core rate for {}", m.name, dtype_name(dt));
        row["error"] = why;
        rows.push_back(row);
        s += fmt::format("{:<14} {:<8} n/a: {}\n", m.name, dtype_name(dt), why);
        continue;
      }
      const sched::Schedule sch = cost::default_schedule(d, report, m, dt);
      auto est = cost::estimate(d, sch, m);
      if (!est) {
        row["error"] = est.error().message;
        rows.push_back(row);
        s += fmt::format("{:<14} {:<8} n/a: {}\n", m.name, dtype_name(dt), est.error().message);
        continue;
      }
      if (!est->fits()) {  // no estimate for a schedule that cannot run
        const std::string why = "the default schedule does not fit: " + est->does_not_fit;
        row["schedule"] = est->schedule;
        row["error"] = why;
        rows.push_back(row);
        s += fmt::format("{:<14} {:<8} n/a: {}\n", m.name, dtype_name(dt), why);
        continue;
      }
      const double hbm_bw = m.bytes_per_s(arch::kL2);
      double g_min = 0;
      for (const auto& t : cost::compute_bound_thresholds(form, d, *peak, hbm_bw / dtype_bytes(dt)))
        if (t.kind == "tile") g_min = t.value;
      double t_hbm = 0, hbm_bytes = 0, t_tensor = 0, t_sfu = 0;
      for (const auto& l : est->levels)
        if (l.name == arch::kL2) {
          t_hbm = l.transfer_time_s;
          hbm_bytes = l.transfer_bytes;
        }
      for (const auto& u : est->units) {
        if (u.unit == arch::Unit::tensor_core) t_tensor += u.time_s;
        if (u.unit == arch::Unit::sfu) t_sfu += u.time_s;
      }
      row.update({{"peak_tflops", *peak / 1e12}, {"hbm_bytes_per_s", hbm_bw}, {"tile_threshold", g_min},
                  {"schedule", est->schedule}, {"hbm_bytes", hbm_bytes}, {"t_hbm_s", t_hbm},
                  {"t_tensor_s", t_tensor}, {"t_sfu_s", t_sfu}, {"predicted_time_s", est->predicted_time_s},
                  {"tflops", est->tflops()}, {"bound", est->bound}});
      rows.push_back(row);
      s += fmt::format("{:<14} {:<8} {:>9.0f} {:>8.2f} {:>7.1f} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9.0f}  {}\n", m.name,
                       dtype_name(dt), *peak / 1e12, hbm_bw / 1e12, g_min, si(hbm_bytes, "B"), seconds_text(t_hbm),
                       seconds_text(t_tensor), seconds_text(t_sfu), seconds_text(est->predicted_time_s), est->tflops(), est->bound);
    }
  s += "g_min: the smallest re-read tile that keeps HBM traffic under compute (no caching, §11).\n";
  CommandOutput r;
  if (options.json) r.out = json_text(json{{"file", args.file}, {"closed_form", form.text()}, {"rows", rows}});
  else r.out = s;
  return r;
}

}  // namespace napkin::driver
