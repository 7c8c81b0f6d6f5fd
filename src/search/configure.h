// SPDX-License-Identifier: Apache-2.0
// The configuration solver (derivation step 5; the paper's section 5, automated): for a
// diagram whose rows (the re-read axes: q, or q and query heads for GQA) are tiled per
// warpgroup and whose streamed axis is chunked, it derives the divisibility constraints (LCM
// of coalescing and WGMMA shapes), the variable table and the shared-memory and register
// footprints that give the warpgroups per SM, the per-operation throughput table that names
// the bound unit, the bandwidth check, and the time under an overlap schedule.
// docs/configuration.md states every rule.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "arch/machine.h"
#include "ir/ir.h"
#include "sched/schedule.h"
#include "sched/streaming.h"

namespace napkin::search {

// How a warpgroup's tensor-core work overlaps its non-tensor work (softmax):
//   sequential       t_tc + (1 + f) * max(t_sfu, t_fma)              no overlap
//   intra_warpgroup  t_first + max(t_rest, (1 + f) * max(t_sfu, t_fma))  softmax under the next GEMM
//   pingpong         max(t_tc, (1 + f) * max(t_sfu, t_fma))           warpgroups alternate units
// where f is the overhead allowance on non-tensor work (the paper's 50 %, FA3's reading 66 %).
using sched::Overlap;  // sched/schedule.h: the schedule text records it (overlap=)
using sched::overlap_name;

// Where a warpgroup's rows live in its threads:
//   thread  one row per thread, so w_q is a multiple of 128 (the paper's model, §1)
//   quad    WGMMA's accumulator layout: 64 rows per warpgroup instruction, each row spread
//           over a quad of four threads (two rows per thread), so w_q is a multiple of 64;
//           what Hopper attention kernels (FA3, cuDNN, napkin's runtime/) do
enum class RowLayout : std::uint8_t { thread, quad };
std::string_view row_layout_name(RowLayout r);
std::optional<RowLayout> parse_row_layout(std::string_view name);

struct Config {
  std::int64_t rows_per_warpgroup = 128;  // w_q: rows of the tile per consumer warpgroup
  std::int64_t chunk = 64;                // s_x: chunk of the streamed axis
  int warpgroups = 0;                     // consumer warpgroups per SM; 0: as many as fit
  int stages = 2;                         // pipeline buffers of the streamed chunks
  Overlap overlap = Overlap::pingpong;
  double overhead = 0.0;                  // f: allowance on non-tensor work
  std::optional<DType> accumulator_dtype;  // of the output accumulators (default f32)
  std::vector<std::int64_t> subloops;     // tensor-core sub-loops over the output's last axis (d', d'')
  RowLayout row_layout = RowLayout::thread;
};

struct Divisibility {
  std::string what;                  // "w_q", "s_k", "d"
  std::int64_t multiple = 1;         // LCM of the requirements
  std::vector<std::string> reasons;  // "WGMMA M = 64 per warpgroup", ...
  std::int64_t value = 0;            // the configured value
  std::int64_t padded_from = 0;      // a whole axis whose tile pads it: the axis's size (else 0)
  bool ok() const { return value % multiple == 0; }
};

struct Variable {
  std::string name;
  std::string shape;   // "[q:128 d:128]"
  DType dtype = DType::f32;
  std::string level;   // smem, rmem
  std::string scope;   // "per CTA" (shared by the warpgroups) or "per warpgroup"
  double bytes = 0;
};

struct OpRate {
  std::string op;          // "contract 'S' over d"
  arch::Unit unit = arch::Unit::tensor_core;
  DType dtype = DType::f32;
  double ops_per_row = 0;  // per row and chunk ("per thread-iteration" with one row a thread)
  double ops_per_clk = 0;  // per SM
  double clk_per_row = 0;
};

struct Configuration {
  Config config;
  int warpgroups = 0;                   // N used
  std::vector<Divisibility> divisibility;
  std::vector<Variable> variables;
  double smem_per_cta_bytes = 0, smem_per_warpgroup_bytes = 0, registers_per_warpgroup_bytes = 0;
  double max_warpgroups_smem = 0, max_warpgroups_registers = 0;  // N_max by each capacity
  double registers_per_thread = 0;
  std::vector<OpRate> rates;
  bool online_softmax = true;          // a softmax's rescale is in the rates (false: P summed plainly)
  double tensor_clk_per_row = 0, sfu_clk_per_row = 0, fma_clk_per_row = 0;
  std::string bound_unit;               // of the ideal (perfect overlap, no overhead)
  double compute_s_per_iteration = 0;   // one chunk for the N * w_q rows of an SM
  double transfer_s_per_iteration = 0;  // the chunk's bytes for every SM over HBM, no caching (the paper's check)
  // With L2 (docs/configuration.md §4): the CTAs of one batch slice (the same K and V) are
  // handed out together and run in step, so up to `ctas_sharing_chunk` of them read each chunk
  // at about the same time and HBM delivers it once for them; every SM's chunk still crosses
  // the L2 -> SMEM link. The transfer an iteration waits for is the slower of the two links.
  double ctas_sharing_chunk = 1;
  double hbm_s_per_iteration = 0;       // the chunks over HBM, once per sharing group
  double l2_smem_s_per_iteration = 0;   // every SM's chunks over the L2 -> SMEM link
  double transfer_with_l2_s_per_iteration() const { return std::max(hbm_s_per_iteration, l2_smem_s_per_iteration); }
  std::string_view transfer_link() const {  // the link that bounds the transfer with L2
    return hbm_s_per_iteration >= l2_smem_s_per_iteration ? "gmem->l2" : "l2->smem";
  }
  bool compute_bound = true;            // compute >= the transfer with L2
  double flops_per_row = 0;
  double ideal_flops_per_s = 0;         // bound unit at its peak, all else hidden
  double period_clk_per_row = 0;        // under the overlap schedule
  double efficiency = 0;                // ideal / period
  double predicted_flops_per_s = 0;
  double tile_fill_s = 0;               // per tile: loading the resident inputs and first chunks
  double visited_fraction = 1;          // of (tile, chunk) blocks: the others a mask skips
  std::vector<std::string> mask_inputs; // inputs the masks read (their values skip no block here)
  int splits = 1;                       // slices of the stream per tile where the tiles fill under 80 % of the SMs
  double combine_s = 0;                 // splits > 1: the partial rows written and merged (HBM)
  // Every input read once (a streamed one where some tile visits its chunk) and every output
  // written once, at HBM's bandwidth: no schedule runs faster.
  double compulsory_s = 0;
  // The whole diagram: waves x (visited x chunks / splits x period + fill) + combine, at least
  // compulsory_s.
  double predicted_time_s = 0;
  bool bound_by_compulsory() const { return predicted_time_s <= compulsory_s * (1 + 1e-9); }
  std::optional<std::string> rejection;  // why this configuration is infeasible, if it is
  sched::Schedule schedule;             // the configuration as a schedule (smem and rmem levels)
};

// How many CTAs share each chunk in L2, in words: "32 CTAs of a slice read each chunk
// together", or "one CTA per slice: no chunk is shared".
std::string sharing_text(const Configuration& c);
// The check's verdict with L2: "compute-bound", or "memory-bound (gmem->l2)" naming the link.
std::string bandwidth_verdict(const Configuration& c);

// Whether the solver keeps streamed axis `a` whole rather than chunking it: the contracted axis
// of a first contraction (its operands computed from inputs alone, as Q K^T over d) whose result
// another streamed axis reduces (the softmax and P V over k). Where V has a head dim of its own,
// d is streamable by addition; where V shares d, d is not streamable at all.
bool kept_whole(const sched::StreamingReport& r, const sched::AxisStreaming& a);

// Pre: d verified. Errors: the diagram is not of the row-tile/stream-chunk shape (names what
// it has), the machine lacks a rate or a warpgroup size. An infeasible configuration is a
// normal result with `rejection` set.
Result<Configuration> configure(const ir::Diagram& d, const sched::StreamingReport& report,
                                const arch::Machine& m, const Config& c);

}  // namespace napkin::search
