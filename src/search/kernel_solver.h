// SPDX-License-Identifier: Apache-2.0
// The configuration solver for the kernels of a plan that are not streamed attention: GEMMs on
// Hopper's warp-specialised TMA collectives, and memory-bound row and elementwise kernels.
// Same steps as the attention solver (search/configure.h): divisibility, capacities (shared
// memory, registers), throughput per unit, bandwidth with L2, overlap; every candidate either
// ranked by predicted time or rejected with its reason class.
//
// The GEMM model (docs/configuration.md, "GEMM kernels"):
//   tiles      = ceil(M / tile_m) * ceil(N / tile_n) * L, run by a persistent grid of one CTA per SM
//   compute    = ceil(tiles / SMs) * 2 * tile_m * tile_n * K / (tensor rate per SM * smem-read efficiency)
//                (WGMMA reads A and B from shared memory: a narrow tile_n needs more bytes per FLOP than
//                the smem->register link gives, which caps the tensor cores)
//   L2 -> SMEM = A * ceil(N / tile_n) / cluster_n + B * ceil(M / tile_m) / cluster_m   (TMA multicast
//                shares a tile between the CTAs of a cluster)
//   HBM        = compulsory (A + B + C + epilogue inputs) when one wave's operand panels fit in half of
//                L2, else the L2 -> SMEM traffic
//   epilogue   = the output tile's stores and epilogue reads per tile; hidden behind the other
//                consumer's mainloop under ping-pong, added per tile under cooperative
//   time       = max(compute, L2 -> SMEM, HBM) + epilogue (cooperative) + fixed launch and fill cost
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "arch/machine.h"
#include "support/diagnostic.h"
#include "support/dtype.h"

namespace napkin::search {

// A Hopper GEMM kernel's schedule, as CUTLASS's sm90 collectives take it.
struct GemmSchedule {
  std::int64_t tile_m = 128, tile_n = 128, tile_k = 64;  // CTA tile
  int cluster_m = 1, cluster_n = 1;                       // CTAs per cluster (TMA multicast)
  int stages = 0;                                         // smem pipeline stages; 0: as many as fit
  bool pingpong = false;  // two consumer warpgroups on alternate tiles; else cooperative (both on one tile)
  // The persistent scheduler's raster: tiles walk M first in bands `swizzle` tiles wide along N,
  // so that a wave's tiles share operand panels in L2; or, with raster_along_n (swizzle 1 only),
  // N first.
  int swizzle = 1;
  bool raster_along_n = false;
  // Stream-K (cooperative only): the tiles past the last full wave are split along K over every
  // SM, each part's partial sums reduced through a workspace, so no wave runs part empty.
  bool stream_k = false;
  // The prologue mainloop (napkin/gemm_prologue.h): TMA into shared-memory stages, each stage's
  // operand transformed there, then WGMMA; `warpgroups` consumer warpgroups (1 or 2, taking a
  // unit's K tiles in turn), tile_k 64, no cluster, persistent CTAs, the split along K chosen at
  // launch (napkin/prologue_splits.h).
  bool prologue = false;
  int warpgroups = 1;
  bool operator==(const GemmSchedule&) const = default;
};
// "tile 128x256x64 cluster 2x1 stages 4 cooperative" (" swizzle 8" where swizzle > 1, " along N",
// " stream-K")
std::string gemm_schedule_text(const GemmSchedule& s);

// A row or elementwise kernel's schedule: rows per CTA and threads per row. A column kernel's:
// `columns`, its CTA shape the emitter's (emit/row_kernel.h).
struct RowSchedule {
  std::int64_t rows_per_cta = 1;
  int threads_per_row = 128;
  bool columns = false;
  bool operator==(const RowSchedule&) const = default;
};
std::string row_schedule_text(const RowSchedule& s);  // "rows/CTA 4 threads/row 32", "columns, split along the reduced axis"

// Bytes of registers a thread of a row kernel may give to the rows it keeps, as loaded, at
// `threads` a CTA: 256 (64 registers; the rest of the kernel needs about 40), less where the
// CTA's size caps its registers (65536 / threads) below that (at 1024 threads, 64 registers: a
// row of 128256 bf16 kept in registers spilled 1.2 KB a thread). A longer row is re-read from
// L1/L2 in every pass over it (emit/row_kernel).
int row_register_bytes(int threads);
inline constexpr int kMaxRowThreads = 1024;

// What a GEMM kernel computes, for the solver: C[L, M, N] = sum_K A[L, M, K] B[L, K, N], plus
// epilogue inputs read once per output element (bias, a gate, a residual).
struct GemmProblem {
  std::int64_t m = 1, n = 1, k = 1, l = 1;
  DType operand = DType::bf16;        // A's and B's dtype (the tensor-core rate)
  double out_bytes_per_element = 2;   // C
  double epilogue_bytes_per_element = 0;  // epilogue reads per output element (aux tensors)
  // The epilogue's code per output element (each value evaluates all of it): transcendentals,
  // other arithmetic, and the leaves it loads.
  double epilogue_sfu_per_element = 0, epilogue_fma_per_element = 0;
  int epilogue_leaves = 0;
  int outputs = 1;                    // 2 for a dual GEMM (two accumulators sharing A)
  // A GEMM whose product is folded over N in registers (gemm_reduction, no product stored): the
  // floats of a row's partial state per N tile, which a second launch folds; 0 otherwise.
  int reduction_states = 0;
  int reduction_passes = 0;  // over the tile's registers: 2 where a logsumexp needs its row max first
  // An operand computed from an input as it is loaded (the prologue mainloop): the transcendental
  // and other arithmetic per element of A and of B.
  bool prologue = false;
  double prologue_sfu_a = 0, prologue_fma_a = 0, prologue_sfu_b = 0, prologue_fma_b = 0;
};

struct KernelEstimate {
  double time_s = 0;
  double flops = 0;       // useful FLOPs
  double hbm_bytes = 0;   // modelled HBM traffic
  double compulsory_bytes = 0;
  std::string bound;      // "tensor_core", "HBM bandwidth", "L2->SMEM bandwidth", "launch"
  std::string detail;     // one line: how the time was found
};

struct GemmCandidate {
  GemmSchedule schedule;
  KernelEstimate estimate;
};

struct KernelSearch {
  std::vector<GemmCandidate> ranked;          // feasible, fastest first, distinct schedules
  std::map<std::string, int> rejected;        // reason class -> count
  std::vector<std::pair<std::string, std::string>> rejections;  // (candidate, reason), for -v
  int considered = 0;
};

// Every candidate of the GEMM space on `m`, ranked. Errors: the machine has no tensor-core rate
// for the operand dtype.
Result<KernelSearch> solve_gemm(const GemmProblem& p, const arch::Machine& m);
// The estimate of one schedule; the reason class and reason when it does not fit.
struct GemmVerdict {
  bool fits = false;
  std::string reason_class, reason;
  KernelEstimate estimate;
  int stages = 0;  // the stages that fit (when the schedule says 0)
};
GemmVerdict estimate_gemm(const GemmProblem& p, const GemmSchedule& s, const arch::Machine& m);

// A memory-bound kernel: `rows` rows of `row_elements` each (1 row of everything for an
// elementwise kernel), reading and writing `bytes`, with `sfu_ops` transcendental results and
// `fma_ops` other arithmetic in all. The schedule puts one warp per row for short rows, a CTA
// per row for long ones.
struct RowProblem {
  std::int64_t rows = 1, row_elements = 1;
  double bytes = 0;          // compulsory: each input read and each output written once
  double strided_bytes = 0;  // more traffic: elements read or written across their storage order
  double sfu_ops = 0, fma_ops = 0;
  int reductions = 0;  // block-wide reductions per row
  int row_bytes_per_element = 0;  // of the inputs read along the row (kept in registers where they fit)
  bool writes_rows = false;       // an output along the row (written in a pass of its own)
  bool columns = false;  // a column kernel: `rows` columns reduced over `row_elements`
};
struct RowCandidate {
  RowSchedule schedule;
  KernelEstimate estimate;
};
RowCandidate solve_rows(const RowProblem& p, const arch::Machine& m);

// The fixed cost of one kernel launch in a sequence (launch latency, pipeline fill, drain):
// 3 us, measured order of magnitude on H100 for a CUTLASS GEMM of one tile.
inline constexpr double kKernelFixedS = 3e-6;

}  // namespace napkin::search
