// SPDX-License-Identifier: Apache-2.0
// Model speed (CPU, one core).
//   estimate_attention: the cost read-out of examples/attention.napkin under one schedule
//                       (target: < 1 ms)
//   derive_attention:   the whole search over 864 configurations (target: < 100 ms)
//   derive_example/N:   `napkin derive` of every example as a user runs it on the H100 (the
//                       plan search, every kernel's solver, the printed report; issue 18's
//                       bar: < 1 s each)
//   derive_wide/N:      a diagram of N independent feature maps, each with a sum and a scaled
//                       copy as outputs (6N nodes): the plan search past its fusion bound, whose
//                       work per candidate kernel must not grow with the diagram (N = 2000: 26 s
//                       before, 2 s after, bench/NOTES.md 2026-11-27)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "arch/load.h"
#include "driver/derive_command.h"
#include "cost/cost.h"
#include "ir/parser.h"
#include "sched/schedule.h"
#include "search/search.h"

namespace {

const char* kSchedule =
    "l2{tile b=1 h=1 q=8192; keep Q K V O} smem{tile b=1 h=1 q=128; stream k=64:online_softmax; "
    "keep Q K V O; stages=2} rmem{tile b=1 h=1 q=64; stream k=64:online_softmax; keep O; groups=2}";

struct Inputs {
  napkin::ir::Diagram diagram;
  napkin::arch::Machine machine;
};

Inputs load() {
  auto p = napkin::ir::load_diagram(std::string(NAPKIN_SOURCE_DIR) + "/examples/attention.napkin");
  auto m = napkin::arch::find_machine("h100-sxm5", std::string(NAPKIN_SOURCE_DIR) + "/machines");
  return {p->diagram, m.value()};
}

void estimate_attention(benchmark::State& state) {
  const Inputs in = load();
  auto s = napkin::sched::parse_schedule(kSchedule, in.diagram);
  if (!s) {
    state.SkipWithError(s.error().format().c_str());
    return;
  }
  for (auto _ : state) {
    auto e = napkin::cost::estimate(in.diagram, s.value(), in.machine);
    benchmark::DoNotOptimize(e);
  }
}
BENCHMARK(estimate_attention)->Unit(benchmark::kMicrosecond);

void derive_attention(benchmark::State& state) {
  const Inputs in = load();
  for (auto _ : state) {
    const auto report = napkin::sched::analyse_streaming(in.diagram);
    auto r = napkin::search::search(in.diagram, report, in.machine);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(derive_attention)->Unit(benchmark::kMillisecond);

// The examples, in name order.
std::vector<std::string> example_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(std::string(NAPKIN_SOURCE_DIR) + "/examples"))
    if (e.path().extension() == ".napkin") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// `napkin derive FILE --machine h100-sxm5`, timed.
void run_derive(benchmark::State& state, const std::string& file) {
  napkin::driver::DeriveOptions options;
  options.machine = "h100-sxm5";
  for (auto _ : state) {
    auto r = napkin::driver::derive({file, {}}, options);
    if (r.exit_code != 0) {
      state.SkipWithError(r.err.c_str());
      return;
    }
    benchmark::DoNotOptimize(r);
  }
}

void derive_example(benchmark::State& state) {
  const std::string file = example_files().at(static_cast<std::size_t>(state.range(0)));
  state.SetLabel(std::filesystem::path(file).stem().string());
  run_derive(state, file);
}
BENCHMARK(derive_example)->DenseRange(0, static_cast<int>(example_files().size()) - 1)->Unit(benchmark::kMillisecond);

void derive_wide(benchmark::State& state) {
  const auto groups = static_cast<int>(state.range(0));
  const std::string file = (std::filesystem::temp_directory_path() / ("napkin_wide_" + std::to_string(groups) + ".napkin")).string();
  {
    std::ofstream out(file);
    out << "axes t=1024 d=64\n";
    for (int i = 0; i < groups; ++i)
      out << "in X" << i << "[t d] bf16\nF" << i << " = exp(X" << i << ")\ns" << i << " = sum(F" << i << " over d)\nY" << i << " = F" << i
          << " * 2.0\nout s" << i << "\nout Y" << i << "\n";
  }
  run_derive(state, file);
}
BENCHMARK(derive_wide)->Arg(300)->Arg(2000)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
