// SPDX-License-Identifier: Apache-2.0
// `napkin pseudocode`: the algorithm of one schedule (by default the one of
// docs/cost_model.md §6 for the machine) as pseudocode with its variable table
// (docs/pseudocode.md).
#pragma once

#include <optional>
#include <string>

#include "driver/driver.h"

namespace napkin::driver {

struct PseudocodeOptions {
  std::string machine;                  // a machine name (machines/NAME.toml); required
  std::string machines_dir;             // empty: the default machines directory
  std::optional<std::string> schedule;  // schedule text; default: cost::default_schedule
  bool markdown = false;                // Markdown instead of plain text
};
CommandOutput pseudocode(const DiagramArgs& args, const PseudocodeOptions& options);

}  // namespace napkin::driver
