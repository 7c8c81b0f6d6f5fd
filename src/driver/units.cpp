// SPDX-License-Identifier: Apache-2.0
#include "driver/units.h"

#include <fmt/format.h>

namespace napkin::driver {

std::string seconds_text(double s, std::string_view micro) {
  if (s >= 1) return fmt::format("{:#.4g} s", s);
  if (s >= 1e-3) return fmt::format("{:#.4g} ms", s * 1e3);
  if (s >= 1e-6) return fmt::format("{:#.4g} {}", s * 1e6, micro);
  return fmt::format("{:.0f} ns", s * 1e9);  // a model's nanoseconds carry no decimals
}

std::string kib_text(double bytes) { return fmt::format("{:.2f} KiB", bytes / 1024); }

DType compute_dtype(const ir::Diagram& d) {
  for (ir::NodeId id : d.inputs())
    if (is_float(d.node(id).dtype) && d.node(id).dtype != DType::f32 && d.node(id).dtype != DType::f64)
      return d.node(id).dtype;
  return DType::f32;
}

std::vector<emit::LiveMemory> live_memory(const cost::Estimate& e) {
  std::vector<emit::LiveMemory> out;
  for (const cost::LevelCost& l : e.levels)
    if (l.scheduled)
      out.push_back({l.name, l.peak_bytes, l.capacity_bytes, "the cost model's count, as analyze prints it"});
  return out;
}

std::vector<emit::LiveMemory> live_memory(const search::Configuration& c, const arch::Machine& m) {
  const std::string model = "the configuration solver's count, as derive's step 2 prints it";
  const double warpgroups = std::max(1, c.warpgroups);
  return {{std::string(arch::kSmem), c.smem_per_cta_bytes + warpgroups * c.smem_per_warpgroup_bytes,
           static_cast<double>(m.limits.smem_bytes_per_sm.value), model},
          {std::string(arch::kRmem), c.registers_per_warpgroup_bytes,
           static_cast<double>(m.limits.registers_per_sm.value) * 4 / warpgroups, model}};
}

}  // namespace napkin::driver
