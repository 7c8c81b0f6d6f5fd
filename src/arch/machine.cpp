// SPDX-License-Identifier: Apache-2.0
#include "arch/machine.h"

#include <algorithm>
#include <array>
#include <charconv>

#include <fmt/format.h>

#include "support/diagnostic.h"

namespace napkin::arch {

std::string_view unit_name(Unit u) {
  switch (u) {
    case Unit::tensor_core: return "tensor_core";
    case Unit::fma: return "fma";
    case Unit::sfu: return "sfu";
  }
  return "?";
}

std::optional<Unit> parse_unit(std::string_view name) {
  for (Unit u : kAllUnits)
    if (unit_name(u) == name) return u;
  return std::nullopt;
}

double flop_per_op(Unit u) { return u == Unit::fma ? 2.0 : 1.0; }

const Level* Machine::level(std::string_view name) const {
  for (const Level& l : levels)
    if (l.name == name) return &l;
  return nullptr;
}

std::optional<double> Machine::ops_per_clk_per_sm(Unit unit, DType dtype) const {
  for (const Throughput& t : throughput)
    if (t.unit == unit && t.dtype == dtype) return t.ops_per_clk_per_sm.value;
  return std::nullopt;
}

std::optional<double> Machine::peak_ops_per_s(Unit unit, DType dtype) const {
  const auto per_sm = ops_per_clk_per_sm(unit, dtype);
  if (!per_sm) return std::nullopt;
  return *per_sm * static_cast<double>(sm_count.value) * clock_hz.value;
}

std::optional<double> Machine::peak_flop_per_s(Unit unit, DType dtype) const {
  const auto ops = peak_ops_per_s(unit, dtype);
  if (!ops) return std::nullopt;
  return *ops * flop_per_op(unit);
}

static const Level& must_level(const Machine& m, std::string_view name) {
  const Level* l = m.level(name);
  NAPKIN_CHECK(l != nullptr, fmt::format("machine {} has no level '{}'", m.name, name));
  return *l;
}

double Machine::bytes_per_s(std::string_view level) const {
  return must_level(*this, level).bytes_per_s.value;
}

std::int64_t Machine::capacity_bytes(std::string_view level) const {
  return must_level(*this, level).capacity_bytes.value;
}

std::int64_t Machine::total_capacity_bytes(std::string_view level) const {
  const Level& l = must_level(*this, level);
  return l.capacity_bytes.value * l.instances;
}

bool Machine::operator==(const Machine& o) const {
  // `file` is where the value came from, not part of what it is.
  return name == o.name && display_name == o.display_name &&
         compute_capability == o.compute_capability && sm_count == o.sm_count &&
         clock_hz == o.clock_hz && max_boost_clock_hz == o.max_boost_clock_hz &&
         levels == o.levels && throughput == o.throughput && limits == o.limits &&
         cluster == o.cluster && sources == o.sources;
}

std::string format_number(double x) {
  std::array<char, 64> buf{};
  const auto r = std::to_chars(buf.data(), buf.data() + buf.size(), x);
  NAPKIN_CHECK(r.ec == std::errc{}, "to_chars failed");
  return std::string(buf.data(), r.ptr);
}

std::string machine_key(const Machine& m) {
  std::string s = fmt::format("machine {} cc={} sm_count={} clock_hz={}", m.name,
                              m.compute_capability, m.sm_count.value,
                              format_number(m.clock_hz.value));
  s += " levels[";
  for (std::size_t i = 0; i < m.levels.size(); ++i) {
    const Level& l = m.levels[i];
    if (i) s += ' ';
    s += l.name;
    if (!l.parent.empty())
      s += fmt::format("<{}x{}", l.parent, l.instances_per_parent.value);
    s += fmt::format(":{}B", l.capacity_bytes.value);
    if (!l.parent.empty()) s += fmt::format("@{}B/s", format_number(l.bytes_per_s.value));
  }
  s += "]";
  for (Unit u : kAllUnits) {
    std::string rates;
    for (const Throughput& t : m.throughput) {
      if (t.unit != u) continue;
      if (!rates.empty()) rates += ' ';
      rates += fmt::format("{}={}", dtype_name(t.dtype), format_number(t.ops_per_clk_per_sm.value));
    }
    s += fmt::format(" {}[{}]", unit_name(u), rates);
  }
  const Limits& k = m.limits;
  s += fmt::format(
      " limits[regs/thread={} regs/block={} regs/sm={} smem/block={}B smem/sm={}B "
      "threads/block={} threads/sm={} ctas/sm={} warp={}",
      k.registers_per_thread.value, k.registers_per_block.value, k.registers_per_sm.value,
      k.smem_bytes_per_block.value, k.smem_bytes_per_sm.value, k.threads_per_block.value,
      k.threads_per_sm.value, k.ctas_per_sm.value, k.warp_size_threads.value);
  if (k.warpgroup_size_threads) s += fmt::format(" warpgroup={}", k.warpgroup_size_threads->value);
  s += "]";
  if (m.cluster) {
    const Cluster& c = *m.cluster;
    s += fmt::format(" cluster[portable={}", c.max_ctas_portable.value);
    if (c.max_ctas_nonportable) s += fmt::format(" nonportable={}", c.max_ctas_nonportable->value);
    for (const auto& [ctas, bw] : c.dsmem_bytes_per_s)
      s += fmt::format(" dsmem{}={}B/s", ctas, format_number(bw.value));
    if (c.gmem_smem_bytes_per_s)
      s += fmt::format(" gmem-smem={}B/s", format_number(c.gmem_smem_bytes_per_s->value));
    s += "]";
  }
  return s;
}

}  // namespace napkin::arch
