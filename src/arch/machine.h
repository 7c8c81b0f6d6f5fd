// SPDX-License-Identifier: Apache-2.0
// A GPU described as data: its memory levels (a tree rooted at gmem), its per-SM throughput
// per unit and dtype, its resource limits and its thread-block-cluster figures. Every number
// carries the citation it was read with. The file format and every number's source are in
// docs/machines.md; loading and verifying a file is arch/load.h.
//
// Conventions (all quantities carry their unit in their name):
//   - A level's capacity_bytes is per instance; instances_per_parent says how many instances
//     each instance of the parent holds (smem: one per SM, so sm_count per l2).
//   - A level's bytes_per_s is the aggregate bandwidth of the link between this level and its
//     parent, summed over every instance on the GPU (the paper's H-dot, in bytes).
//   - Throughput is ops per clock per SM. What one op is depends on the unit (flop_per_op):
//     tensor_core counts FLOP (a multiply-add is 2), fma counts fused multiply-adds per lane,
//     sfu counts results (one exp2 is one op). Tensor-core rates are dense, with f32
//     accumulation.
//   - GPU-wide peaks use clock_hz, the clock behind the vendor's dense tensor peak.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/dtype.h"

namespace napkin::arch {

// A number from a machine file and its citation: "<key of [sources] | derived | estimate> ...".
template <class T>
struct Sourced {
  T value{};
  std::string source;
  bool operator==(const Sourced&) const = default;
};

// The level names every machine defines (others may be added, e.g. a future tmem).
inline constexpr std::string_view kGmem = "gmem";
inline constexpr std::string_view kL2 = "l2";
inline constexpr std::string_view kSmem = "smem";
inline constexpr std::string_view kRmem = "rmem";
inline constexpr std::string_view kTensorCore = "tc";

struct Level {
  std::string name;
  std::string parent;                     // empty for the root (gmem)
  Sourced<std::int64_t> capacity_bytes;   // per instance
  Sourced<std::int64_t> instances_per_parent;  // 1 (no source) for the root
  Sourced<double> bytes_per_s;            // aggregate, to and from the parent; 0 for the root
  std::int64_t instances = 1;             // on the whole GPU: product of instances_per_parent
                                          // along the path from the root
  bool operator==(const Level&) const = default;
};

enum class Unit : std::uint8_t { tensor_core, fma, sfu };
inline constexpr Unit kAllUnits[] = {Unit::tensor_core, Unit::fma, Unit::sfu};
std::string_view unit_name(Unit u);  // "tensor_core", "fma", "sfu"
std::optional<Unit> parse_unit(std::string_view name);
// FLOP counted per op of the unit: 1 for tensor_core (rates are already in FLOP), 2 for fma
// (a fused multiply-add), 1 for sfu (one transcendental result, counted as FA3 counts exp).
double flop_per_op(Unit u);

struct Throughput {
  Unit unit = Unit::tensor_core;
  DType dtype = DType::bf16;
  Sourced<double> ops_per_clk_per_sm;
  bool operator==(const Throughput&) const = default;
};

struct Limits {
  Sourced<std::int64_t> registers_per_thread;
  Sourced<std::int64_t> registers_per_block;
  Sourced<std::int64_t> registers_per_sm;
  Sourced<std::int64_t> smem_bytes_per_block;  // the opt-in maximum for one CTA
  Sourced<std::int64_t> smem_bytes_per_sm;
  Sourced<std::int64_t> threads_per_block;
  Sourced<std::int64_t> threads_per_sm;
  Sourced<std::int64_t> ctas_per_sm;
  Sourced<std::int64_t> warp_size_threads;
  std::optional<Sourced<std::int64_t>> warpgroup_size_threads;  // sm_90 and later
  bool operator==(const Limits&) const = default;
};

// Thread-block clusters (sm_90 and later): sizes, and where measured, the distributed shared
// memory bandwidth by cluster size with the plain gmem<->smem bandwidth measured alongside it
// (the inputs of the paper's cross-transfer level, docs/cost_model.md).
struct Cluster {
  Sourced<std::int64_t> max_ctas_portable;
  std::optional<Sourced<std::int64_t>> max_ctas_nonportable;
  std::map<std::int64_t, Sourced<double>> dsmem_bytes_per_s;  // by CTAs per cluster
  std::optional<Sourced<double>> gmem_smem_bytes_per_s;
  bool operator==(const Cluster&) const = default;
};

struct Machine {
  std::string name;          // the file's stem, e.g. "h100-sxm5"
  std::string display_name;  // e.g. "NVIDIA H100 SXM5 80GB"
  std::string compute_capability;  // e.g. "9.0"
  std::string file;          // the path it was loaded from (not part of equality)
  Sourced<std::int64_t> sm_count;
  Sourced<double> clock_hz;
  std::optional<Sourced<double>> max_boost_clock_hz;  // informative; peaks use clock_hz
  std::vector<Level> levels;            // root first, parents before children, then by name
  std::vector<Throughput> throughput;   // sorted by (unit, dtype)
  Limits limits;
  std::optional<Cluster> cluster;
  std::map<std::string, std::string> sources;  // citation key -> full reference

  // The level called `name`, or nullptr.
  const Level* level(std::string_view name) const;
  // Per-SM rate of `unit` on `dtype`, or nullopt when the machine lacks it (e.g. fp8 on A100).
  std::optional<double> ops_per_clk_per_sm(Unit unit, DType dtype) const;
  // Whole-GPU peaks: ops_per_clk_per_sm * sm_count * clock_hz, and that times flop_per_op.
  std::optional<double> peak_ops_per_s(Unit unit, DType dtype) const;
  std::optional<double> peak_flop_per_s(Unit unit, DType dtype) const;
  // Aggregate bandwidth between `level` and its parent; pre: level(name) exists.
  double bytes_per_s(std::string_view level) const;
  // Capacity of one instance of `level`, and of all its instances; pre: level(name) exists.
  std::int64_t capacity_bytes(std::string_view level) const;
  std::int64_t total_capacity_bytes(std::string_view level) const;

  bool operator==(const Machine& o) const;
};

// The one-line canonical text form: every number, no sources, fixed order and formatting;
// equal machines give equal text. Used in errors, golden files and benchmark keys, e.g.
//   machine h100-sxm5 sm_count=132 clock_hz=1.83e+09 levels[gmem:85899345920B ...] ...
std::string machine_key(const Machine& m);

// Shortest text that reads back as the same double (std::to_chars), e.g. "1.83e+09", "16".
std::string format_number(double x);

}  // namespace napkin::arch
