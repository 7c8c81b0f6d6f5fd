// SPDX-License-Identifier: Apache-2.0
// `napkin pseudocode`: the algorithm of one schedule (by default the one of
// docs/cost_model.md §6 for the machine) as pseudocode with its variable table
// (docs/pseudocode.md).
#pragma once

#include <optional>
#include <string>

#include "arch/machine.h"
#include "driver/driver.h"
#include "plan/plan.h"

namespace napkin::driver {

struct PseudocodeOptions {
  std::string machine;                  // a machine name (machines/NAME.toml); required
  std::string machines_dir;             // empty: the default machines directory
  std::optional<std::string> schedule;  // schedule text; default: cost::default_schedule
  bool markdown = false;                // Markdown instead of plain text
};
CommandOutput pseudocode(const DiagramArgs& args, const PseudocodeOptions& options);

// A kernel plan's pseudocode (plan/plan.h: napkin derive's plan): its moves and materialised
// intermediates, then each kernel's schedule, prediction and bound, and its loop nest's
// pseudocode (plan::kernel_loop_nest), or its diagram where it is one pass over rows.
Result<std::string> plan_pseudocode(const ir::Diagram& d, const plan::Plan& p, const arch::Machine& m, bool markdown);

// The plan napkin derive prints for `d`, where it is one (any diagram but a single attention
// kernel that the configuration solver configures: `attention_configured`), feasible.
std::optional<plan::Plan> derived_plan(const ir::Diagram& d, const arch::Machine& m, bool attention_configured,
                                       const std::string& file);

}  // namespace napkin::driver
