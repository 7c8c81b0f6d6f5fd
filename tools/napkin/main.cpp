// SPDX-License-Identifier: Apache-2.0
// The napkin command line: parses arguments with CLI11, calls the driver, prints its text.
// Every failure exits 1 (an input error) or 2 (a usage error): cli.h.
#include <climits>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli.h"

#include "driver/analyze_command.h"
#include "driver/derive_command.h"
#include "driver/driver.h"
#include "driver/draw_command.h"
#include "driver/exec_command.h"
#include "driver/machines_command.h"
#include "driver/pseudocode_command.h"
#include "driver/report_command.h"
#include "launch/build.h"

namespace napkin::cli {
namespace {

using driver::CommandOutput;
using driver::DiagramArgs;

// Adds the FILE argument and repeatable --set to a subcommand.
void add_diagram_args(CLI::App* cmd, DiagramArgs& args) {
  cmd->add_option("file", args.file, "the .napkin diagram")->required();
  cmd->add_option("--set", args.sets, "bind an axis size or param: --set q=8192 (repeatable)")
      ->type_name("NAME=VALUE")
      ->check(binding("--set"));
}

// Adds the required --machine option of the commands that estimate on a machine.
void add_machine_arg(CLI::App* cmd, std::string& machine) {
  cmd->add_option("--machine", machine, "machine name (see `napkin machines`)")
      ->required()
      ->check(non_empty("--machine", "a machine name (see `napkin machines`)"));
}

// Adds --seed, --max-work and --json to a command that runs a diagram on the CPU against the
// reference (run-schedule, run-plan).
void add_cpu_run_args(CLI::App* cmd, std::uint64_t& seed, double& max_work, bool& json) {
  cmd->add_option("--seed", seed, "seed of the random inputs (default 0)")->check(non_negative_integer("--seed"));
  cmd->add_option("--max-work", max_work, "refuse diagrams needing more f64 steps than this (default 1e8)")
      ->check(positive_number("--max-work", "1e7"));
  cmd->add_flag("--json", json, "print the result as JSON");
}

}  // namespace

CommandOutput execute(const std::vector<std::string>& args) {
  CLI::App app{"napkin: turns a diagram of a deep-learning computation into an IO-aware GPU "
               "algorithm.\nSee docs/language.md for the .napkin language."};
  app.require_subcommand(1);
  std::function<CommandOutput()> run;

  DiagramArgs check_args;
  bool check_json = false;
  auto* check = app.add_subcommand("check", "parse and verify a diagram; print a summary");
  add_diagram_args(check, check_args);
  check->add_flag("--json", check_json, "print the summary as JSON");
  check->callback([&] { run = [&] { return napkin::driver::check(check_args, check_json); }; });

  DiagramArgs print_args;
  bool print_json = false;
  auto* print = app.add_subcommand("print", "print a diagram in canonical form");
  add_diagram_args(print, print_args);
  print->add_flag("--json", print_json, "print the IR (axes, nodes, outputs) as JSON");
  print->callback([&] { run = [&] { return napkin::driver::print(print_args, print_json); }; });

  DiagramArgs eval_args;
  napkin::driver::EvalOptions eval_options;
  auto* eval = app.add_subcommand(
      "eval", "run the f64 reference interpreter; write DIR/NAME.npy for every output");
  add_diagram_args(eval, eval_args);
  eval->add_option("--seed", eval_options.seed, "seed of the random inputs (default 0)")
      ->check(non_negative_integer("--seed"));
  eval->add_option("--input", eval_options.inputs, "read an input from .npy (repeatable)")
      ->type_name("NAME=PATH.npy")
      ->check(named_path("--input", "Q=q.npy"));
  eval->add_option("--output-dir,-o", eval_options.output_dir, "directory for the outputs")
      ->required()
      ->check(output_path("--output-dir", "a directory"));
  eval->add_option("--max-work", eval_options.max_work,
                   "refuse diagrams needing more f64 steps than this (default 1e10)")
      ->check(positive_number("--max-work", "1e9"));
  eval->add_flag("--low-precision", eval_options.low_precision,
                 "FlashAttention's baseline instead of the f64 specification: every node rounded to its dtype, "
                 "sums in f32, a contraction's operands in the narrowest of their dtypes");
  eval->add_flag("--json", eval_options.json, "print what was written as JSON");
  eval->callback([&] { run = [&] { return napkin::driver::eval(eval_args, eval_options); }; });

  napkin::driver::MachinesOptions machines_options;
  auto* machines = app.add_subcommand("machines", "list the machine files with their headline figures");
  machines->add_option("--dir", machines_options.dir,
                       "directory of machine files (default: the source tree's machines/)")
      ->check(non_empty("--dir", "a directory of machine files"));
  machines->add_flag("--json", machines_options.json, "print the list as JSON");
  machines->callback([&] { run = [&] { return napkin::driver::machines(machines_options); }; });

  DiagramArgs analyze_args;
  napkin::driver::AnalyzeOptions analyze_options;
  std::string analyze_schedule;
  auto* analyze = app.add_subcommand(
      "analyze", "streamable axes, the closed-form transfer bound, thresholds, and one schedule's estimate");
  add_diagram_args(analyze, analyze_args);
  add_machine_arg(analyze, analyze_options.machine);
  analyze->add_option("--schedule", analyze_schedule,
                      "schedule text (docs/streaming.md); default: the one of docs/cost_model.md §6")
      ->check(non_empty("--schedule", "a schedule text (docs/streaming.md)"));
  analyze->add_flag("--json", analyze_options.json, "print the analysis as JSON");
  analyze->callback([&] {
    if (!analyze_schedule.empty()) analyze_options.schedule = analyze_schedule;
    run = [&] { return napkin::driver::analyze(analyze_args, analyze_options); };
  });

  DiagramArgs compare_args;
  napkin::driver::CompareOptions compare_options;
  auto* compare = app.add_subcommand("compare", "one table of the estimate across machines and precisions");
  add_diagram_args(compare, compare_args);
  compare->add_option("--machines", compare_options.machines, "machine names, comma-separated")
      ->delimiter(',')->required()
      ->check(non_empty("--machines", "a machine name in every place of the list"));
  compare->add_option("--dtypes", compare_options.dtypes, "input precisions, comma-separated (bf16,fp8,...)")
      ->delimiter(',')->required()
      ->check(one_of("--dtypes", {"bf16", "f16", "fp8", "fp8e4m3", "fp8e5m2", "tf32", "f32"}));
  compare->add_flag("--json", compare_options.json, "print the rows as JSON");
  compare->callback([&] { run = [&] { return napkin::driver::compare(compare_args, compare_options); }; });

  DiagramArgs derive_args;
  napkin::driver::DeriveOptions derive_options;
  std::string derive_accumulator;
  auto* derive = app.add_subcommand(
      "derive", "derive the configured algorithm: search, divisibility, footprints, throughput, overlap");
  add_diagram_args(derive, derive_args);
  add_machine_arg(derive, derive_options.machine);
  derive->add_option("--top", derive_options.top, "how many ranked schedules to print (default 5)")
      ->check(positive_integer("--top", "5"));
  derive->add_flag("-v,--verbose", derive_options.verbose, "list every rejected candidate with its reason");
  derive->add_flag("--json", derive_options.json, "print the derivation as JSON");
  derive->add_option("--accumulator", derive_accumulator, "dtype of the output accumulators (default f32)")
      ->check(float_dtype("--accumulator"));
  derive->add_option("--subloops", derive_options.subloops, "tensor-core sub-loop sizes, e.g. 32,8")
      ->delimiter(',')
      ->check(positive_integer("--subloops", "32,8"));
  derive->add_option("--overhead", derive_options.overhead, "allowance on non-tensor work (default 0.5)")
      ->check(non_negative_number("--overhead", "0.5"));
  derive->add_option("--row-layout", derive_options.row_layout,
                     "rows in a warpgroup: thread (one per thread, the paper; default) or quad (WGMMA's layout, "
                     "a row over four threads, 64 rows per warpgroup)")
      ->check(one_of("--row-layout", {"thread", "quad"}));
  derive->add_option("--timeline", derive_options.timeline_svg, "write the timeline SVG here: one SM's iteration of the best configuration, or a plan's kernels in order")
      ->check(non_empty("--timeline", "a path for the SVG"));
  derive->add_flag("--pseudocode", derive_options.pseudocode, "print the best schedule's pseudocode after the derivation");
  derive->callback([&] {
    if (!derive_accumulator.empty()) derive_options.accumulator = derive_accumulator;
    run = [&] { return napkin::driver::derive(derive_args, derive_options); };
  });

  DiagramArgs pseudocode_args;
  napkin::driver::PseudocodeOptions pseudocode_options;
  std::string pseudocode_schedule;
  auto* pseudocode = app.add_subcommand(
      "pseudocode", "the algorithm of one schedule as pseudocode (init / loop / finalize) with its variable table");
  add_diagram_args(pseudocode, pseudocode_args);
  add_machine_arg(pseudocode, pseudocode_options.machine);
  pseudocode->add_option("--schedule", pseudocode_schedule,
                         "schedule text (docs/streaming.md); default: the one of docs/cost_model.md §6")
      ->check(non_empty("--schedule", "a schedule text (docs/streaming.md)"));
  pseudocode->add_flag("--markdown", pseudocode_options.markdown, "print Markdown (fenced code and a table)");
  pseudocode->callback([&] {
    if (!pseudocode_schedule.empty()) pseudocode_options.schedule = pseudocode_schedule;
    run = [&] { return napkin::driver::pseudocode(pseudocode_args, pseudocode_options); };
  });

  DiagramArgs run_schedule_args;
  napkin::driver::RunScheduleOptions run_schedule_options;
  auto* run_schedule = app.add_subcommand(
      "run-schedule", "run a schedule's loop nest on the CPU against the reference; print errors and transfers");
  add_diagram_args(run_schedule, run_schedule_args);
  run_schedule->add_option("--schedule", run_schedule_options.schedule, "schedule text (docs/streaming.md)")
      ->required()
      ->check(non_empty("--schedule", "a schedule text (docs/streaming.md)"));
  add_cpu_run_args(run_schedule, run_schedule_options.seed, run_schedule_options.max_work, run_schedule_options.json);
  run_schedule->callback([&] {
    run = [&] { return napkin::driver::run_schedule(run_schedule_args, run_schedule_options); };
  });

  DiagramArgs run_plan_args;
  napkin::driver::RunPlanOptions run_plan_options;
  auto* run_plan = app.add_subcommand(
      "run-plan", "derive the kernel plan and run its kernels on the CPU against the reference; print each output's error");
  add_diagram_args(run_plan, run_plan_args);
  add_machine_arg(run_plan, run_plan_options.machine);
  add_cpu_run_args(run_plan, run_plan_options.seed, run_plan_options.max_work, run_plan_options.json);
  run_plan->callback([&] { run = [&] { return napkin::driver::run_plan(run_plan_args, run_plan_options); }; });

  DiagramArgs draw_args;
  napkin::driver::DrawOptions draw_options;
  auto* draw = app.add_subcommand(
      "draw", "draw the diagram (and the machine) as SVG: DIR/diagram.svg, DIR/machine.svg");
  add_diagram_args(draw, draw_args);
  draw->add_option("--machine", draw_options.machine, "machine name: colours its levels, adds machine.svg")
      ->check(non_empty("--machine", "a machine name (see `napkin machines`)"));
  draw->add_option("--schedule", draw_options.schedule,
                   "schedule text (docs/streaming.md): colours wires by level, labels tiles and chunks")
      ->check(non_empty("--schedule", "a schedule text (docs/streaming.md)"));
  draw->add_option("--output-dir,-o", draw_options.output_dir, "directory for the drawings")
      ->required()
      ->check(output_path("--output-dir", "a directory"));
  draw->callback([&] { run = [&] { return napkin::driver::draw(draw_args, draw_options); }; });

  napkin::driver::DrawTraceOptions draw_trace_options;
  auto* draw_trace = app.add_subcommand(
      "draw-trace", "draw an attention kernel's measured timeline (bench/attention/trace_tiles.cu's output) as SVG");
  draw_trace->add_option("file", draw_trace_options.file, "the text trace_tiles printed")->required();
  draw_trace->add_option("--section", draw_trace_options.section,
                         "which of the text's timelines to draw, from 0 (default 0)")
      ->check(non_negative_integer("--section", INT_MAX));
  draw_trace->add_option("--clock-mhz", draw_trace_options.clock_mhz,
                         "the SM clock in MHz (default: the text's 'SM clock' line)")
      ->check(positive_number("--clock-mhz", "1755"));
  draw_trace->add_option("--output,-o", draw_trace_options.output, "the SVG file to write")
      ->required()
      ->check(output_path("--output", "a path for the SVG"));
  draw_trace->callback([&] { run = [&] { return napkin::driver::draw_trace(draw_trace_options); }; });

  DiagramArgs report_args;
  napkin::driver::ReportOptions report_options;
  auto* report = app.add_subcommand(
      "report", "one self-contained HTML page: drawings, derivation, ranked schedules, pseudocode, plots");
  add_diagram_args(report, report_args);
  add_machine_arg(report, report_options.machine);
  report->add_option("--output-dir,-o", report_options.output_dir, "directory for report.html")
      ->required()
      ->check(output_path("--output-dir", "a directory"));
  report->add_option("--top", report_options.top, "how many ranked schedules to list (default 10)")
      ->check(positive_integer("--top", "10"));
  report->callback([&] { run = [&] { return napkin::driver::report(report_args, report_options); }; });

  DiagramArgs build_args;
  napkin::launch::BuildOptions build_options;
  auto* build = app.add_subcommand(
      "build", "generate the diagram's fused kernel: DIR/kernel.cu, DIR/libkernel.so (nvcc, sm_90a), DIR/manifest.json");
  add_diagram_args(build, build_args);
  add_machine_arg(build, build_options.machine);
  build->add_option("--output-dir,-o", build_options.out_dir, "directory for the kernel")
      ->required()
      ->check(output_path("--output-dir", "a directory"));
  build->add_flag("!--no-compile", build_options.compile, "write kernel.cu and manifest.json only");
  build->add_flag("--json", build_options.json, "print the result and the manifest as JSON");
  build->callback([&] { run = [&] { return napkin::launch::build(build_args, build_options); }; });

  DiagramArgs run_args;
  napkin::launch::RunOptions run_options;
  auto* run_cmd = app.add_subcommand(
      "run", "on a GPU: build the kernel, validate it against the reference interpreter, time it beside the estimate");
  add_diagram_args(run_cmd, run_args);
  add_machine_arg(run_cmd, run_options.machine);
  run_cmd->add_option("--output-dir,-o", run_options.out_dir, "directory for the kernel (default out/kernels/NAME)")
      ->check(output_path("--output-dir", "a directory"));
  run_cmd->add_option("--check-set", run_options.check_sets,
                      "sizes of the validation against the reference (default: batch and heads 2, q 197, k 263)")
      ->type_name("NAME=VALUE")
      ->check(binding("--check-set"));
  run_cmd->add_option("--seed", run_options.seed, "seed of the random inputs (default 0)")
      ->check(non_negative_integer("--seed"));
  run_cmd->add_option("--iters", run_options.iters, "timed launches at full size (default 30; 0: validate only)")
      ->check(CLI::Range(0, 100000));
  run_cmd->add_option("--library", run_options.library, "run this library built before (napkin build) instead of building");
  run_cmd->add_flag("--json", run_options.json, "print the result as JSON");
  run_cmd->callback([&] { run = [&] { return napkin::launch::run(run_args, run_options); }; });

  if (auto bad = check_command(app, args)) return *bad;
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
    app.parse(reversed);
    check_repeats(app);
  } catch (const CLI::ParseError& e) {
    return parse_failure(app, e);
  }
  return run();
}

}  // namespace napkin::cli

#ifndef NAPKIN_CLI_NO_MAIN  // defined where execute() is called in-process (tests/fuzz/fuzz_cli.cpp)
int main(int argc, char** argv) {
  const napkin::driver::CommandOutput r = napkin::cli::execute({argv + 1, argv + argc});
  std::fputs(r.out.c_str(), stdout);
  std::fputs(r.err.c_str(), stderr);
  return r.exit_code;
}
#endif
