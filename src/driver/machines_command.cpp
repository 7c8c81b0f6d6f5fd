// SPDX-License-Identifier: Apache-2.0
#include "driver/machines_command.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "arch/load.h"

namespace napkin::driver {

namespace {

using nlohmann::json;

// Dense tensor-core peak in FLOP/s; fp8 is e4m3 (e5m2 runs at the same rate on every machine
// napkin ships).
std::optional<double> dense_peak(const arch::Machine& m, DType dtype) {
  return m.peak_flop_per_s(arch::Unit::tensor_core, dtype);
}

std::string tflops_text(std::optional<double> flop_per_s) {
  return flop_per_s ? fmt::format("{:.1f}", *flop_per_s / 1e12) : "-";
}

// Bytes as a whole number of KiB / MiB / GiB when exact, else with one decimal.
std::string bytes_text(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double x = static_cast<double>(bytes);
  int u = 0;
  while (u < 3 && x >= 1024) x /= 1024, ++u;
  return x == static_cast<double>(static_cast<std::int64_t>(x))
             ? fmt::format("{} {}", static_cast<std::int64_t>(x), units[u])
             : fmt::format("{:.1f} {}", x, units[u]);
}

json machine_json(const arch::Machine& m) {
  auto peak = [&](DType t) { return dense_peak(m, t) ? json(*dense_peak(m, t)) : json(nullptr); };
  return {{"name", m.name},
          {"display_name", m.display_name},
          {"compute_capability", m.compute_capability},
          {"sm_count", m.sm_count.value},
          {"clock_hz", m.clock_hz.value},
          {"bf16_dense_flop_per_s", peak(DType::bf16)},
          {"fp8_dense_flop_per_s", peak(DType::fp8e4m3)},
          {"gmem_bytes_per_s", m.bytes_per_s(arch::kL2)},
          {"smem_bytes_per_sm", m.limits.smem_bytes_per_sm.value},
          {"l2_bytes", m.capacity_bytes(arch::kL2)},
          {"key", arch::machine_key(m)}};
}

}  // namespace

CommandOutput machines(const MachinesOptions& options) {
  const std::string dir = options.dir.empty() ? arch::default_machines_dir() : options.dir;
  auto loaded = arch::load_machines(dir);
  if (!loaded) return failure(loaded.error(), options.json);
  if (loaded->empty())
    return failure(plain_error(fmt::format("{}: no machine files (NAME.toml) in the directory", dir)), options.json);
  CommandOutput r;
  if (options.json) {
    json list = json::array();
    for (const arch::Machine& m : *loaded) list.push_back(machine_json(m));
    r.out = json_text(json{{"machines", list}});
    return r;
  }
  // gmem bandwidth is the l2 level's link to its parent (HBM or GDDR).
  r.out = fmt::format("{:<14} {:>4} {:>9} {:>12} {:>11} {:>9} {:>8} {:>8}  {}\n", "machine", "SMs",
                      "clock MHz", "bf16 TFLOP/s", "fp8 TFLOP/s", "gmem TB/s", "smem/SM", "L2",
                      "name");
  for (const arch::Machine& m : *loaded)
    r.out += fmt::format("{:<14} {:>4} {:>9.0f} {:>12} {:>11} {:>9.2f} {:>8} {:>8}  {}\n", m.name,
                         m.sm_count.value, m.clock_hz.value / 1e6,
                         tflops_text(dense_peak(m, DType::bf16)),
                         tflops_text(dense_peak(m, DType::fp8e4m3)),
                         m.bytes_per_s(arch::kL2) / 1e12,
                         bytes_text(m.limits.smem_bytes_per_sm.value),
                         bytes_text(m.capacity_bytes(arch::kL2)), m.display_name);
  r.out += "Dense tensor-core peaks at each machine's clock; every number's source is in its "
           "file (docs/machines.md).\n";
  return r;
}

}  // namespace napkin::driver
