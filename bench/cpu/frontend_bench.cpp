// SPDX-License-Identifier: Apache-2.0
// Front-end and reference-interpreter speed.
//   parse_verify/10000: parse + verify a generated 10,000-op diagram (target: < 50 ms)
//   interpret_attention: f64 reference on attention; multiply-adds per second as a counter
#include <string>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "ir/parser.h"
#include "reference/interpreter.h"

namespace {

// A chain of `ops` woven elementwise ops, reductions and contractions over two axes.
std::string generated_diagram(int ops) {
  std::string s = "axes a=64 b=32 c=16\nin X0[a b] f32\nin W[b c] f32\n";
  int made = 0, line = 0;
  std::string prev = "X0";
  while (made < ops) {
    const std::string v = fmt::format("v{}", line++);
    switch (line % 4) {
      case 0: s += fmt::format("{} = exp({}) * 0.5 + {}\n", v, prev, prev); made += 3; break;
      case 1: s += fmt::format("{} = max({}, -{}) - sum({} over b)\n", v, prev, prev, prev); made += 4; break;
      case 2: s += fmt::format("{} = softcap({}, 30) / (1 + {} * {})\n", v, prev, prev, prev); made += 4; break;
      default: s += fmt::format("{} = contract({}, W over b) * 0.01 + sum(W over c) \n", v, prev); made += 4;
               s += fmt::format("{}b = contract({}, W over c)\n", v, v); made += 1;
               prev = v + "b";
               continue;
    }
    prev = v;
  }
  return s + "out " + prev + "\n";
}

void parse_verify(benchmark::State& state) {
  const napkin::SourceText src{"generated.napkin", generated_diagram(static_cast<int>(state.range(0)))};
  std::size_t nodes = 0;
  for (auto _ : state) {
    auto p = napkin::ir::parse_diagram(src);
    if (!p.ok()) {
      state.SkipWithError(p.error().format().c_str());
      return;
    }
    nodes = p->diagram.nodes.size();
    benchmark::DoNotOptimize(nodes);
  }
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["nodes_per_s"] = benchmark::Counter(static_cast<double>(nodes), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(parse_verify)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

void interpret_attention(benchmark::State& state) {
  const std::int64_t s = state.range(0);
  auto p = napkin::ir::load_diagram(std::string(NAPKIN_SOURCE_DIR) + "/examples/attention.napkin",
                                    {{"b", 1, ""}, {"h", 2, ""}, {"q", static_cast<double>(s), ""},
                                     {"k", static_cast<double>(s), ""}, {"d", 64, ""}});
  if (!p.ok()) {
    state.SkipWithError(p.error().format().c_str());
    return;
  }
  const auto inputs = napkin::reference::random_inputs(p->diagram, 1);
  for (auto _ : state) {
    auto out = napkin::reference::evaluate(p->diagram, inputs);
    benchmark::DoNotOptimize(out);
  }
  // Two contractions of b*h*q*k*d multiply-adds each.
  state.counters["mac_per_s"] = benchmark::Counter(2.0 * 2 * static_cast<double>(s * s) * 64,
                                                   benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(interpret_attention)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
