// SPDX-License-Identifier: Apache-2.0
// Numbers as the commands print them, in one place so that derive, analyze and report agree.
#pragma once

#include <string>
#include <string_view>

#include <vector>

#include "arch/machine.h"
#include "cost/cost.h"
#include "emit/pseudocode.h"
#include "ir/ir.h"
#include "search/configure.h"
#include "support/dtype.h"

namespace napkin::driver {

// A duration in s, ms or us with four significant digits, trailing zeros kept ("1.480 ms", "80.13 us"), or in whole
// ns below a microsecond ("970 ns"). `micro` is the microsecond unit: "us" in plain text, "µs"
// in HTML.
std::string seconds_text(double s, std::string_view micro = "us");

// Bytes in KiB with two decimals: "32.00 KiB".
std::string kib_text(double bytes);

// The dtype the diagram's contractions run in: its first narrow floating-point input's (bf16,
// f16, fp8), or f32 when every input is f32 or wider.
DType compute_dtype(const ir::Diagram& d);

// The live memory per group at the peak that the pseudocode states under its variable table, one
// count per command: the cost model's (cost::LevelCost::peak_bytes against capacity_bytes, as
// analyze prints them) for a schedule the cost model judged ...
std::vector<emit::LiveMemory> live_memory(const cost::Estimate& e);
// ... and the configuration solver's for the schedule it derived (its smem per CTA against the
// SM's shared memory, its registers per warpgroup against the SM's registers over the
// warpgroups), as derive's step 2 prints them.
std::vector<emit::LiveMemory> live_memory(const search::Configuration& c, const arch::Machine& m);

}  // namespace napkin::driver
