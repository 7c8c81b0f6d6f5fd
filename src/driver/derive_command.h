// SPDX-License-Identifier: Apache-2.0
// `napkin derive`: the configured algorithm for a diagram on a machine, derived the way the
// paper's sections 5 and 6 did by hand: the search's ranking, and for the best configuration
// the divisibility, variable, capacity, throughput, bandwidth and overlap steps.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "driver/driver.h"
#include "plan/plan.h"
#include "search/search.h"

namespace napkin::driver {

struct DeriveOptions {
  std::string machine;
  int top = 5;
  bool verbose = false;                       // list every rejected candidate with its reason
  bool json = false;
  std::optional<std::string> accumulator;     // dtype of the output accumulators (default f32)
  std::vector<std::int64_t> subloops;         // tensor-core sub-loops (the paper: 32,8)
  double overhead = 0.5;                      // allowance on non-tensor work
  std::string row_layout = "thread";          // "thread" (the paper) or "quad" (WGMMA's layout)
  std::string timeline_svg;                   // if set: write the best configuration's timeline here
  bool pseudocode = false;                    // append the best schedule's pseudocode
};
CommandOutput derive(const DiagramArgs& args, const DeriveOptions& options);

// The plan of `d` as napkin build derives it (only kernels its generators take; `file`'s source
// for their refusals), or, where nothing they take runs the diagram but the planner's own rules
// find one attention kernel (the paper's fp8 forward), that kernel: derive prints it with build's
// reason, run-plan runs it.
Result<plan::Derivation> derive_as_built(const ir::Diagram& d, const arch::Machine& m, plan::PlanOptions po, const std::string& file);

// One iteration of a configuration on one SM as timeline lanes (tensor core, SFU, FMA, TMA).
std::vector<std::pair<std::string, std::vector<std::tuple<std::string, std::string, double, double>>>>
timeline_of(const search::Configuration& c, double clock_hz);

}  // namespace napkin::driver
