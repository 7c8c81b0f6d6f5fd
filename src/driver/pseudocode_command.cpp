// SPDX-License-Identifier: Apache-2.0
#include "driver/pseudocode_command.h"

#include <fmt/format.h>

#include "arch/load.h"
#include "cost/cost.h"
#include "driver/units.h"
#include "emit/generates.h"
#include "emit/pseudocode.h"
#include "emit/svg_canvas.h"
#include "ir/printer.h"
#include "plan/plan.h"
#include "sched/schedule.h"
#include "sched/streaming.h"

namespace napkin::driver {
namespace {

// The pseudocode of one schedule of `d`, with the live memory under its table: the configuration
// solver's count where it configured the schedule (`configured`), else the cost model's where
// `judged` (the schedule's fit is the cost model's to judge).
std::string schedule_pseudocode(const ir::Diagram& d, const sched::Schedule& s, const arch::Machine& m, bool markdown,
                                bool judged = true, const search::Configuration* configured = nullptr) {
  std::vector<emit::LiveMemory> live;
  if (configured) live = live_memory(*configured, m);
  else if (judged)
    if (auto est = cost::estimate(d, s, m)) live = live_memory(*est);
  return markdown ? emit::pseudocode_markdown(d, s, &m, live) : emit::pseudocode_text(d, s, &m, live);
}

}  // namespace

Result<std::string> plan_pseudocode(const ir::Diagram& d, const plan::Plan& p, const arch::Machine& m, bool markdown) {
  const std::string c = markdown ? "- " : "# ";  // Markdown: list items
  std::string s = markdown ? fmt::format("# Pseudocode of {}\n\n", d.source_name)
                           : fmt::format("# napkin {}: pseudocode\n", emit::napkin_version());
  s += fmt::format("{}diagram {}: {}\n", c, d.source_name, ir::diagram_key(d));
  s += fmt::format("{}plan: {} kernel{} in order, predicted {} on {} (napkin derive says why this plan)\n", c,
                   p.kernels.size(), p.kernels.size() == 1 ? "" : "s", seconds_text(p.predicted_s), m.name);
  for (const std::string& mv : p.moves) s += fmt::format("{}move: {}\n", c, mv);
  s += fmt::format("{}materialised in global memory: {}\n", c, p.materialised.empty() ? "nothing" : fmt::format("{}", fmt::join(p.materialised, "; ")));
  for (std::size_t i = 0; i < p.kernels.size(); ++i) {
    const plan::Kernel& k = p.kernels[i];
    const std::string schedule = plan::kernel_schedule_text(k);
    s += fmt::format("\n## kernel {} of {}: {}\n", i + 1, p.kernels.size(), k.name);
    s += fmt::format("{}schedule: {}; predicted {}, bound by {}\n", c, schedule.empty() ? "-" : schedule,
                     seconds_text(k.predicted_s), k.bound);
    auto nest = plan::kernel_loop_nest(k);
    if (!nest) return nest.error();
    if (*nest) {
      // A GEMM's fit (tiles, stages, accumulators) is its solver's to judge, which counts the
      // epilogue as the kernel runs it, fragment by fragment.
      if (k.gemm) s += fmt::format("{}fit: judged by the GEMM solver (napkin derive)\n", c);
      // An attention kernel's fit is the configuration solver's, as derive prints it.
      const search::Configuration* configured =
          k.streamed && k.streamed->configuration ? &*k.streamed->configuration : nullptr;
      std::string body = schedule_pseudocode(k.diagram, **nest, m, markdown, !k.gemm, configured);
      if (!markdown) body.erase(0, body.find('\n') + 1);  // (the command's own first line above)
      s += body;
    } else {
      const char* how = k.kind == plan::KernelKind::column_reduction
                            ? "down its columns: the reduced axis split across CTAs, the partial sums combined in a fixed order"
                        : k.kind == plan::KernelKind::elementwise ? "one pass over its elements"
                                                                  : "one pass over its rows, in registers";
      s += fmt::format("{}{}:\n", c, how);
      s += markdown ? "```\n" + ir::print_diagram(k.diagram) + "```\n" : ir::print_diagram(k.diagram);
    }
  }
  return s;
}

std::optional<plan::Plan> derived_plan(const ir::Diagram& d, const arch::Machine& m, bool attention_configured,
                                       const std::string& file) {
  plan::PlanOptions po;
  if (auto src = read_source_file(file)) po.generates = emit::generates(std::move(*src));
  auto derivation = plan::derive_plan(d, m, po);
  if (!derivation || !derivation->chosen.infeasible.empty()) return std::nullopt;
  const plan::Plan& p = derivation->chosen;
  if (plan::one_attention_kernel(p) && attention_configured) return std::nullopt;
  return p;
}

CommandOutput pseudocode(const DiagramArgs& args, const PseudocodeOptions& options) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), false);
  const ir::Diagram& d = parsed->diagram;
  auto machine = load_machine(options.machine, options.machines_dir);
  if (!machine) return failure(machine.error(), false);
  sched::Schedule schedule;
  if (options.schedule) {
    auto s = sched::parse_schedule(*options.schedule, d);
    if (!s) return failure(s.error(), false);
    schedule = s.value();
  } else {
    // A diagram that derives a plan of kernels (any but one attention kernel) prints the plan.
    if (auto p = derived_plan(d, *machine, true, args.file)) {
      auto text = plan_pseudocode(d, *p, *machine, options.markdown);
      if (!text) return failure(text.error(), false);
      CommandOutput r;
      r.out = *text;
      return r;
    }
    schedule = cost::default_schedule(d, sched::analyse_streaming(d), *machine);
  }
  for (const sched::LevelSchedule& l : schedule.levels)
    if (!machine->level(l.level))
      return failure(plain_error("--schedule: level '" + l.level + "' is not a level of machine " + machine->name),
                     false);
  CommandOutput r;
  r.out = schedule_pseudocode(d, schedule, *machine, options.markdown);
  return r;
}

}  // namespace napkin::driver
