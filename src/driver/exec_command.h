// SPDX-License-Identifier: Apache-2.0
// `napkin run-schedule`: runs a schedule's loop nest on the CPU (src/exec) and the reference
// interpreter on the same seeded inputs, and prints how far apart they are and the elements
// each level loaded and stored (docs/exec.md).
#pragma once

#include <cstdint>
#include <string>

#include "driver/driver.h"

namespace napkin::driver {

struct RunScheduleOptions {
  std::string schedule;     // schedule text (docs/streaming.md), validated against the diagram
  std::uint64_t seed = 0;   // seed of the random inputs (reference::random_inputs)
  double max_work = 1e8;    // refuse diagrams needing more f64 steps than this
  bool json = false;
};

// Exit code 0 when every output agrees with the reference to 1e-9 relative (max(1, |x|)), or,
// where the executor notes a cast of a partial value, to 0.1; 1 on a mismatch or an error (a
// bad file, schedule or size, or a schedule the executor does not run, with its reason).
// Output is deterministic except for nothing: no timings are printed.
CommandOutput run_schedule(const DiagramArgs& args, const RunScheduleOptions& options);

// `napkin run-plan`: derives the diagram's kernel plan on a machine (as `derive` does, at the
// sizes bound) and runs its kernels in order on the CPU (exec::execute_plan: streamed and GEMM
// kernels through their tiled loop nests, intermediates stored in their dtypes), against the
// reference interpreter on the same seeded inputs.
struct RunPlanOptions {
  std::string machine;      // machine name (load_machine)
  std::uint64_t seed = 0;
  double max_work = 1e8;
  bool json = false;
};

// Exit code 0 when every output agrees with the reference to kPlanTolerance of its largest
// magnitude (the plan rounds intermediates as the GPU stores them: bf16's 2^-8 a few times
// over), or to twice the reference's own drift in the diagram's dtypes where larger (a deep
// bf16 chain); 1 on a mismatch or an error (a bad file, machine or size, no feasible plan).
inline constexpr double kPlanTolerance = 3e-2;
CommandOutput run_plan(const DiagramArgs& args, const RunPlanOptions& options);

}  // namespace napkin::driver
