// SPDX-License-Identifier: Apache-2.0
#include "driver/draw_command.h"

#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "arch/load.h"
#include "emit/kernel_trace.h"
#include "emit/svg.h"
#include "sched/schedule.h"

namespace napkin::driver {

namespace {

std::optional<Diagnostic> write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) return plain_error(fmt::format("cannot write '{}'", path.string()));
  return std::nullopt;
}

}  // namespace

CommandOutput draw(const DiagramArgs& args, const DrawOptions& options) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), false);
  const ir::Diagram& d = parsed->diagram;
  std::optional<arch::Machine> machine;
  if (!options.machine.empty()) {
    auto m = load_machine(options.machine, options.machines_dir);
    if (!m) return failure(m.error(), false);
    machine = std::move(m.value());
  }
  std::optional<sched::Schedule> schedule;
  if (!options.schedule.empty()) {
    auto s = sched::parse_schedule(options.schedule, d);
    if (!s) return failure(s.error(), false);
    schedule = std::move(s.value());
  }

  const std::filesystem::path dir = options.output_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return failure(plain_error(fmt::format("--output-dir {}: cannot create the directory: {}", dir.string(), ec.message())), false);
  std::vector<std::pair<std::filesystem::path, std::string>> files;
  files.emplace_back(dir / "diagram.svg", emit::draw_diagram_svg(d, schedule ? &*schedule : nullptr,
                                                                  machine ? &*machine : nullptr));
  if (machine) files.emplace_back(dir / "machine.svg", emit::draw_machine_svg(*machine));
  CommandOutput r;
  for (const auto& w : parsed->warnings) r.err += w.format() + "\n";
  for (const auto& [path, text] : files) {
    if (auto e = write_file(path, text)) return failure(*e, false);
    r.out += fmt::format("wrote {} ({} bytes)\n", path.string(), text.size());
  }
  return r;
}

CommandOutput draw_trace(const DrawTraceOptions& options) {
  auto src = read_source_file(options.file);
  if (!src) return failure(src.error(), false);
  if (options.section < 0) return failure(plain_error("--section: expected a number >= 0"), false);
  if (options.clock_mhz < 0) return failure(plain_error("--clock-mhz: expected a clock > 0 in MHz"), false);
  auto trace = emit::parse_kernel_trace(*src, options.section, options.clock_mhz);
  if (!trace) return failure(trace.error(), false);
  const std::string svg = emit::draw_timeline_svg(trace->lanes, 0, trace->title);
  if (auto e = write_file(options.output, svg)) return failure(*e, false);
  CommandOutput r;
  r.out = fmt::format("wrote {} ({} bytes)\n", options.output, svg.size());
  return r;
}

}  // namespace napkin::driver
