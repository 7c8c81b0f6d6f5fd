// SPDX-License-Identifier: Apache-2.0
// `napkin machines`: the machine files of a directory with their headline figures.
#pragma once

#include <string>

#include "driver/driver.h"

namespace napkin::driver {

struct MachinesOptions {
  std::string dir;    // the machines directory; empty means arch::default_machines_dir()
  bool json = false;  // one JSON object {"dir", "machines": [...]} instead of a table
};

// Loads every machine in the directory (the first bad file fails the command, exit code 1)
// and lists, per machine sorted by name: SMs, clock, dense bf16 and fp8 tensor-core peaks,
// gmem bandwidth, shared memory per SM and L2 capacity. Output is deterministic.
CommandOutput machines(const MachinesOptions& options);

}  // namespace napkin::driver
