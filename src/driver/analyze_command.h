// SPDX-License-Identifier: Apache-2.0
// `napkin analyze` (streamability, closed form, thresholds and one schedule's estimate on one
// machine) and `napkin compare` (the estimate across machines and precisions).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "driver/driver.h"

namespace napkin::driver {

struct AnalyzeOptions {
  std::string machine;                // a machine name (machines/NAME.toml)
  std::string machines_dir;           // empty: the default machines directory
  std::optional<std::string> schedule;  // canonical schedule text; default: cost::default_schedule
  bool json = false;
};
CommandOutput analyze(const DiagramArgs& args, const AnalyzeOptions& options);

struct CompareOptions {
  std::vector<std::string> machines;  // names
  std::vector<std::string> dtypes;    // bf16, f16, fp8 (= fp8e4m3), fp8e5m2, tf32, f32
  std::string machines_dir;
  bool json = false;
};
CommandOutput compare(const DiagramArgs& args, const CompareOptions& options);

}  // namespace napkin::driver
