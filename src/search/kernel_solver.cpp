// SPDX-License-Identifier: Apache-2.0
#include "search/kernel_solver.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "napkin/prologue_splits.h"  // runtime/include: the launch's split rule

namespace napkin::search {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A stream-K fix-up step's wait: the flag the unit before it sets, seen through L2 (fitted with
// the step's traffic to the H200's measurements below).
constexpr double kFixupLatencyS = 0.5e-6;

// Shared memory one CUTLASS sm90 epilogue takes: its staging tile (tile_m x 32 columns of C, two
// stages) and one aux tile of the same size per epilogue input (the collective's own carveout).
double epilogue_smem_bytes(const GemmProblem& p, const GemmSchedule& s) {
  // The dual GEMM's epilogue stores from registers (napkin/gemm_dual.h), a folded one stores none.
  if (p.outputs > 1 || p.reduction_states > 0) return 0;
  const double tile = static_cast<double>(std::min<std::int64_t>(s.tile_m, 128)) * 32;
  return 2 * tile * (p.out_bytes_per_element + p.epilogue_bytes_per_element) + 1024;
}

// The device memory's bandwidth: the level below L2 is read at the L2 level's rate in the
// machine files (HBM feeds L2), else at shared memory's where a machine lists no L2.
double hbm_bytes_per_s(const arch::Machine& m) {
  return m.level(arch::kL2) != nullptr ? m.bytes_per_s(arch::kL2) : m.bytes_per_s(arch::kSmem);
}

// The raster band width that makes one wave's footprint square in operand elements: a wave of W
// tiles in bands s tiles wide along N spans W/s tiles along M, so A's rows (W/s * tile_m) equal
// B's columns (s * tile_n) at s = sqrt(W * tile_m / tile_n). Powers of two up to 8 (CUTLASS's
// scheduler); 1 (raster_along_n then picks the order) where the problem is narrower than the band
// in either direction, since a wave then covers the whole width anyway (the H100 sweep measured
// swizzle 8 at 0.6x the heuristic on 8 row tiles: bench/NOTES.md, GEMM sweep).
// `tiles` rounded up to a multiple of `step` (CUTLASS's persistent scheduler's tile grid).
double padded_tiles(double tiles, int step) { return std::ceil(tiles / step) * step; }

int wave_swizzle(const GemmProblem& p, const GemmSchedule& s, double sms) {
  const double m_tiles = static_cast<double>(ceil_div(p.m, s.tile_m)), n_tiles = static_cast<double>(ceil_div(p.n, s.tile_n));
  const double wave = std::min(sms, m_tiles * n_tiles * static_cast<double>(p.l));
  const double ideal = std::sqrt(wave * static_cast<double>(s.tile_m) / static_cast<double>(s.tile_n * p.outputs));
  int swizzle = 1;
  while (swizzle < 8 && swizzle * 2 <= ideal * 1.5) swizzle *= 2;
  if (swizzle > 1 && (n_tiles < 2 * swizzle || m_tiles < wave / swizzle)) return 1;
  // CUTLASS's scheduler rounds both tile counts up to a multiple of swizzle x cluster and runs the
  // padding as empty tiles: a swizzle that does not divide them costs (measured 0.68x cuBLAS at
  // swizzle 8 on 8192 x 11008 x 4096, 43 column tiles, against 0.97x at 1; bench/NOTES.md).
  while (swizzle > 1 && (padded_tiles(m_tiles, swizzle * s.cluster_m) != m_tiles ||
                         padded_tiles(n_tiles, swizzle * s.cluster_n) != n_tiles))
    swizzle /= 2;
  return swizzle;
}

// At swizzle 1 a wave's tiles walk one mode first: they touch every tile of it (up to a wave) and
// as many of the other mode's as they wrap onto. The raster whose wave touches fewer operand rows
// (tile_m per M tile, tile_n per N tile and product) keeps more of them in L2; ties walk M.
// CUTLASS's heuristic walks N wherever there are no more N tiles than M tiles: 0.86x cuBLAS on
// 2048 x 4096 x 11008 (16 x 16 tiles of 128 x 256) where M first measured 0.99x (bench/NOTES.md,
// 2026-11-26).
bool raster_along_n(const GemmProblem& p, const GemmSchedule& s, double sms) {
  const double m_tiles = static_cast<double>(ceil_div(p.m, s.tile_m)), n_tiles = static_cast<double>(ceil_div(p.n, s.tile_n));
  const double wave = std::min(sms, m_tiles * n_tiles * static_cast<double>(p.l));
  const double m_rows = static_cast<double>(s.tile_m), n_rows = static_cast<double>(s.tile_n * p.outputs);
  auto touched = [&](double first_tiles, double first_rows, double other_rows) {
    const double along = std::max(1.0, std::min(first_tiles, wave));
    return along * first_rows + std::ceil(wave / along) * other_rows;
  };
  return touched(n_tiles, n_rows, m_rows) < touched(m_tiles, m_rows, n_rows);
}

}  // namespace

std::string gemm_schedule_text(const GemmSchedule& s) {
  if (s.prologue)
    return fmt::format("tile {}x{}x{} stages {} TMA WGMMA (prologue{})", s.tile_m, s.tile_n, s.tile_k, s.stages,
                       s.warpgroups > 1 ? fmt::format(", {} consumer warpgroups", s.warpgroups) : "");
  std::string t = fmt::format("tile {}x{}x{} cluster {}x{}", s.tile_m, s.tile_n, s.tile_k, s.cluster_m, s.cluster_n);
  t += s.stages > 0 ? fmt::format(" stages {}", s.stages) : std::string(" stages auto");
  t += s.pingpong ? " pingpong" : " cooperative";
  if (s.swizzle > 1) t += fmt::format(" swizzle {}", s.swizzle);
  if (s.raster_along_n) t += " along N";
  if (s.stream_k) t += " stream-K";
  return t;
}

std::string row_schedule_text(const RowSchedule& s) {
  if (s.columns) return "columns, split along the reduced axis";
  return fmt::format("rows/CTA {} threads/row {}", s.rows_per_cta, s.threads_per_row);
}

namespace {

// The prologue mainloop (napkin/gemm_prologue.h): a memory-bound GEMM whose operands are
// transformed as they load. Model:
//   CTAs     = min(tiles * splits, resident), persistent; a TMA producer warp and W consumer
//              warpgroups, as many resident per SM as shared memory (the stages and the output
//              tile) and registers allow
//   compute  = FLOPs at the tensor cores' WGMMA rate over the SMs the CTAs occupy
//   prologue = each CTA transforms the operand tiles it loads, in shared memory: A once per N
//              tile, B once per M tile, at the SFU and FMA rates
//   HBM      = compulsory traffic at a fitted fraction of the bandwidth, over the SMs the CTAs
//              occupy; re-reads from L2
//   split    = each split stores tile_m x tile_n f32 sums to L2, read back once
//   pipeline = a consumer warpgroup runs each K tile's transform, named barrier and WGMMAs in
//              turn (serial: the tile's WGMMA time on its share of the tensor cores plus the
//              transform's time on one warpgroup). One warpgroup holds two stages (the one it
//              reads, the one whose WGMMAs may still run), so S stages keep S - 2 loads in
//              flight: a K tile takes max(serial, (TMA latency + serial) / min(S - 1, the unit's
//              K tiles)). Two take the K tiles in turn, each holding one stage (released once
//              its WGMMAs retire; at least 3 stages, one loading): max(WGMMA, serial / 2, (TMA
//              latency + serial) / min(S, K tiles)), plus, a unit, the second's accumulator
//              handed to the first through shared memory. Each unit ends with its epilogue on
//              the first warpgroup (the diagram's code per value, the tile's store), and each
//              CTA starts with its first loads from DRAM
//   time     = max(compute, prologue and epilogue ALU, HBM, L2, pipeline) + fixed launch cost
// A prologue CTA's shared memory: its stages, the output tile (staged for the TMA store), the
// second warpgroup's f32 accumulator where there are two, and the ring's barriers.
double prologue_cta_smem(const GemmProblem& p, const GemmSchedule& s) {
  const double stage_bytes = static_cast<double>(s.tile_k * (s.tile_m + s.tile_n)) * dtype_bytes(p.operand);
  return s.stages * stage_bytes + static_cast<double>(s.tile_m * s.tile_n) * (p.out_bytes_per_element + 4.0 * (s.warpgroups - 1)) + 1024;
}

GemmVerdict estimate_prologue_gemm(const GemmProblem& p, const GemmSchedule& s, const arch::Machine& m) {
  GemmVerdict v;
  auto reject = [&](std::string cls, std::string why) {
    v.reason_class = std::move(cls);
    v.reason = std::move(why);
    return v;
  };
  if (p.outputs > 1) return reject("prologue", "the dual GEMM has no prologue mainloop");
  if (s.warpgroups != 1 && s.warpgroups != 2)
    return reject("divisibility", fmt::format("{} consumer warpgroups: the prologue mainloop runs 1 or 2", s.warpgroups));
  if (s.warpgroups == 2 && s.stages < 3)
    return reject("smem", fmt::format("{} stages for two consumer warpgroups: each holds one, and one more loads", s.stages));
  if (s.tile_m % 64 != 0 || s.tile_n % 64 != 0 || s.tile_k != 64 || s.cluster_m * s.cluster_n != 1)
    return reject("divisibility", fmt::format("tile {}x{}x{}: the prologue mainloop takes multiples of 64 and tile_k 64, no "
                                              "cluster", s.tile_m, s.tile_n, s.tile_k));
  // Registers: each consumer warpgroup holds the tile's f32 accumulators. Measured by ptxas
  // (napkin/gemm_prologue.h, bench/NOTES.md 2026-11-27): 88 registers a thread at 32
  // accumulators, 160 at 64; 128 accumulators fit under the 255 a thread may have.
  const double acc_regs = static_cast<double>(s.tile_m * s.tile_n) / 128;
  if (acc_regs > 128) return reject("registers", fmt::format("{:.0f} accumulator registers per thread, 128 fit", acc_regs));
  const double regs = std::min(255.0, 16 + 2.25 * acc_regs);
  const double wgs = static_cast<double>(s.warpgroups), threads = 32 + 128 * wgs;
  // ptxas caps a thread's registers at the file over the CTA's threads rounded up to whole
  // warpgroups (288 threads: 168, measured with -Xptxas=-v; the 128 x 128 tile then spills).
  const double reg_cap = std::min(255.0, std::floor(65536 / (std::ceil(threads / 128) * 128) / 8) * 8);
  if (regs > reg_cap)
    return reject("registers", fmt::format("{:.0f} registers a thread for {:.0f} accumulators; {} consumer warpgroups and the "
                                           "producer warp leave {:.0f}", regs, acc_regs, s.warpgroups, reg_cap));
  const double in_bytes = dtype_bytes(p.operand);
  const double stage_bytes = static_cast<double>(s.tile_k * (s.tile_m + s.tile_n)) * in_bytes;
  const double smem_limit = static_cast<double>(m.limits.smem_bytes_per_block.value);
  const double cta_smem = prologue_cta_smem(p, s);
  if (s.stages < 2 || cta_smem > smem_limit)
    return reject("smem", fmt::format("{} stages of {:.0f} KiB and the output tile: {:.0f} KiB; {:.0f} KiB per block", s.stages,
                                      stage_bytes / 1024, cta_smem / 1024, smem_limit / 1024));
  v.stages = s.stages;
  const auto rate = m.ops_per_clk_per_sm(arch::Unit::tensor_core, p.operand);
  if (!rate) return reject("dtype", fmt::format("no tensor-core rate for {} on {}", dtype_name(p.operand), m.name));
  const double sms = static_cast<double>(m.sm_count.value), clock = m.clock_hz.value;
  const std::int64_t m_tiles = ceil_div(p.m, s.tile_m), n_tiles = ceil_div(p.n, s.tile_n);
  const std::int64_t tiles = m_tiles * n_tiles * p.l;
  const double regs_per_sm = static_cast<double>(m.limits.registers_per_sm.value);
  const double resident = std::max(1.0, std::min(std::floor(static_cast<double>(m.limits.smem_bytes_per_sm.value) / (cta_smem + 1024)),
                                                 std::floor(regs_per_sm / (threads * regs))));
  const int splits = napkin::gemm::prologue_splits(tiles, ceil_div(p.k, s.tile_k), m.sm_count.value, static_cast<int>(resident));
  const double units = static_cast<double>(tiles * splits);
  const double ctas = std::min(units, sms * resident);
  const double busy_sms = std::min(sms, ctas);
  const double flops = 2.0 * static_cast<double>(p.m * p.n) * static_cast<double>(p.k * p.l);
  const double units_per_cta = std::ceil(units / ctas);
  const double compute_s = units_per_cta * 2.0 * static_cast<double>(s.tile_m * s.tile_n) *
                           static_cast<double>(ceil_div(ceil_div(p.k, s.tile_k), splits) * s.tile_k) /
                           (*rate / std::min(resident, std::ceil(ctas / sms)) * clock);
  const double a_elems = static_cast<double>(p.m * p.k * p.l), b_elems = static_cast<double>(p.n * p.k * p.l);
  const double sfu = m.ops_per_clk_per_sm(arch::Unit::sfu, DType::f32).value_or(16);
  const double fma = m.ops_per_clk_per_sm(arch::Unit::fma, DType::f32).value_or(128);
  const double transformed_a = a_elems * static_cast<double>(n_tiles), transformed_b = b_elems * static_cast<double>(m_tiles);
  const double c_elems = static_cast<double>(p.m * p.n * p.l);
  const double alu_s = (transformed_a * (p.prologue_sfu_a / sfu + p.prologue_fma_a / fma) +
                        transformed_b * (p.prologue_sfu_b / sfu + p.prologue_fma_b / fma) +
                        c_elems * (p.epilogue_sfu_per_element / sfu + p.epilogue_fma_per_element / fma)) /
                       (busy_sms * clock);
  const double compulsory =
      (a_elems + b_elems) * in_bytes + c_elems * (p.out_bytes_per_element + p.epilogue_bytes_per_element);
  // Fitted on the H100 (bench/NOTES.md, 2026-11-27, the TMA/WGMMA mainloop): linear attention's
  // two prologue GEMMs (64 x 64 tiles, 3 stages) move their 67.6 MB each in 31-34 us (ncu),
  // 0.65 of the bandwidth the model takes for HBM. Neither kernel is bound by issue or by the
  // tensor cores there; what holds them below the bandwidth is not yet located.
  constexpr double kSustained = 0.65;
  const double hbm_s = compulsory / (hbm_bytes_per_s(m) * kSustained * busy_sms / sms);
  const double l2 = (transformed_a + transformed_b) * in_bytes + (splits > 1 ? 2.0 * c_elems * 4 * splits : 0);
  const double l2_s = l2 / m.bytes_per_s(arch::kSmem);
  // The pipeline, fitted on the H100 (bench/NOTES.md, 2026-11-27 fifth: scaled_projection's
  // 8192 x 4096 x 4096 prologue GEMM on 128 x 128 tiles, 1.39 / 0.77 / 0.73 / 0.68 us a K tile at
  // 2 / 3 / 4 / 6 stages): a TMA load's latency 0.75 us; a transform costs its warpgroup 200
  // cycles a stage (wait, fence, barrier, issue) and 10 a transformed element per thread, plus
  // its arithmetic at one warp per scheduler.
  // The epilogue and the start, fitted on the H100 (bench/NOTES.md, 2026-11-27 seventh: ncu of
  // gated_softplus, 1.9 K instructions a consumer warp a unit of two K tiles at 5.7 cycles an
  // instruction; one-unit launches of gated_softplus and normalised_projection): 12 cycles a value
  // and 20 a leaf it loads, its arithmetic as the transform's, 800 cycles a unit (two barriers,
  // the tile's TMA store and the wait for the previous one), 1 us for a CTA's first loads.
  constexpr double kTmaLatencyS = 0.75e-6, kStageCycles = 200, kElementCycles = 10;
  constexpr double kValueCycles = 12, kLeafCycles = 20, kUnitCycles = 800, kStartS = 1e-6;
  const double ctas_per_sm = std::min(resident, std::ceil(ctas / sms));
  const double mma_tile_s = 2.0 * static_cast<double>(s.tile_m * s.tile_n * s.tile_k) / (*rate / ctas_per_sm * clock);
  const double per_thread_a = static_cast<double>(s.tile_m * s.tile_k) / 128, per_thread_b = static_cast<double>(s.tile_n * s.tile_k) / 128;
  const double transform_cycles =
      kStageCycles + (p.prologue_sfu_a + p.prologue_fma_a > 0 ? per_thread_a * (kElementCycles + p.prologue_sfu_a * 4 + p.prologue_fma_a) : 0) +
      (p.prologue_sfu_b + p.prologue_fma_b > 0 ? per_thread_b * (kElementCycles + p.prologue_sfu_b * 4 + p.prologue_fma_b) : 0);
  const double serial_s = mma_tile_s + transform_cycles / clock;
  const std::int64_t unit_k_tiles = ceil_div(ceil_div(p.k, s.tile_k), splits);
  const double in_flight = static_cast<double>(std::min<std::int64_t>(s.stages - (s.warpgroups == 1 ? 1 : 0), unit_k_tiles));  // a short unit fills fewer
  const double k_tile_s = std::max({mma_tile_s, serial_s / wgs, (kTmaLatencyS + serial_s) / in_flight});
  // Two warpgroups: the second's accumulator through shared memory a unit (a store and a load a
  // value, two barriers of both warpgroups).
  const double gather_s = s.warpgroups == 1 ? 0.0
                                            : (kStageCycles * 2 + 4.0 * static_cast<double>(s.tile_m * s.tile_n) / 128) / clock;
  const double epilogue_s = (kUnitCycles + static_cast<double>(s.tile_m * s.tile_n) / 128 *
                                                (kValueCycles + kLeafCycles * p.epilogue_leaves + p.epilogue_sfu_per_element * 4 +
                                                 p.epilogue_fma_per_element)) /
                            clock;
  const double pipeline_s = kStartS + units_per_cta * (static_cast<double>(unit_k_tiles) * k_tile_s + gather_s + epilogue_s);
  const double main_s = std::max({compute_s, alu_s, hbm_s, l2_s, pipeline_s});
  v.estimate.time_s = main_s + kKernelFixedS;
  v.estimate.flops = flops;
  v.estimate.hbm_bytes = v.estimate.compulsory_bytes = compulsory;
  v.estimate.bound = main_s == compute_s ? "tensor_core"
                     : main_s == alu_s   ? "ALU"
                     : main_s == hbm_s   ? "HBM bandwidth"
                     : main_s == l2_s    ? "L2->SMEM bandwidth"
                                         : s.warpgroups == 1 ? "pipeline (one warpgroup: transform, WGMMA, epilogue)"
                                                             : "pipeline (two warpgroups: transform, WGMMA; the first, the epilogue)";
  v.estimate.detail = fmt::format(
      "{} tiles x {} splits on {:.0f} SMs; WGMMA {:.4g} us, ALU {:.4g} us, HBM {:.4g} us, L2->SMEM {:.4g} us, "
      "pipeline {:.4g} us ({:.0f} unit{} a CTA: {:.3g} us a K tile, {:.3g} us an epilogue)",
      tiles, splits, busy_sms, compute_s * 1e6, alu_s * 1e6, hbm_s * 1e6, l2_s * 1e6, pipeline_s * 1e6, units_per_cta,
      units_per_cta == 1 ? "" : "s", k_tile_s * 1e6, epilogue_s * 1e6);
  v.fits = true;
  return v;
}

}  // namespace

GemmVerdict estimate_gemm(const GemmProblem& p, const GemmSchedule& s, const arch::Machine& m) {
  if (s.prologue || p.prologue) {
    if (!s.prologue || !p.prologue) {
      GemmVerdict v;
      v.reason_class = "prologue";
      v.reason = p.prologue ? "an operand computed as it loads needs the prologue mainloop" : "no operand to transform";
      return v;
    }
    return estimate_prologue_gemm(p, s, m);
  }
  GemmVerdict v;
  auto reject = [&](std::string cls, std::string why) {
    v.reason_class = std::move(cls);
    v.reason = std::move(why);
    return v;
  };
  const double in_bytes = dtype_bytes(p.operand);
  // 1. Divisibility: WGMMA is M = 64 per warpgroup; cooperative splits the tile's rows over two
  // consumer warpgroups, ping-pong gives each its own tile. N is a multiple of 8 up to 256; a K
  // step of the tile is whole 128-byte swizzle rows.
  if (s.pingpong ? (s.tile_m != 64 && s.tile_m != 128) : s.tile_m % 128 != 0)
    return reject("divisibility", fmt::format("tile_m {} is not a multiple of 64 per consumer warpgroup ({} warpgroups on one tile)",
                                              s.tile_m, s.pingpong ? 1 : 2));
  if (s.tile_n % 8 != 0 || s.tile_n > 256)
    return reject("divisibility", fmt::format("tile_n {}: WGMMA takes N a multiple of 8 up to 256", s.tile_n));
  if (p.outputs > 1) {
    // The dual GEMM (napkin/gemm_dual.h): one WGMMA tile over both products, each half of its B
    // tile whole 128-byte swizzle rows of an N-major operand, no clusters.
    if (s.tile_n * p.outputs > 256 || s.tile_n % 64 != 0)
      return reject("divisibility", fmt::format("tile_n {}: a dual GEMM's WGMMA spans {} x {} columns, at most 256 in multiples of 64 "
                                                "per product", s.tile_n, p.outputs, s.tile_n));
    // (Stream-K on the dual was measured no faster: SwiGLU 2k, 0.996x; bench/NOTES.md 2026-11-27.)
    if (s.cluster_m * s.cluster_n > 1 || s.stream_k)
      return reject("cluster", "the dual GEMM runs without clusters and without stream-K");
  }
  // A folded epilogue (napkin/gemm_reduction.h) reads one WGMMA's row layout along the tile's N
  // (a quad of lanes a row): one WGMMA along N, no stream-K partial tiles.
  if (p.reduction_states > 0 && (s.stream_k || s.cluster_m * s.cluster_n > 1))
    return reject("cluster", "a GEMM folded over N runs without clusters and without stream-K");
  if (std::fmod(static_cast<double>(s.tile_k) * in_bytes, 128.0) != 0)
    return reject("divisibility", fmt::format("tile_k {} x {} B is not whole 128-byte rows", s.tile_k, in_bytes));
  // 2. Capacities. Registers: the f32 accumulators of a consumer thread (a dual GEMM holds two),
  // under the 240 a consumer warpgroup gets from setmaxnreg, with 40 for addresses and epilogue.
  const int consumer_threads = 128 * (s.pingpong ? 1 : 2);
  const double acc_regs = static_cast<double>(s.tile_m * s.tile_n) * p.outputs / consumer_threads;
  // A folded epilogue keeps its row states, indices and summands beside the accumulators: ptxas
  // spilled 336 bytes a thread at 192 accumulators (256 x 192, cooperative) and none at 128.
  const double reg_limit = std::min<double>(240, static_cast<double>(m.limits.registers_per_thread.value)) -
                           (p.reduction_states > 0 ? 80 : 40);
  if (acc_regs > reg_limit)
    return reject("registers", fmt::format("{:.0f} accumulator registers per consumer thread, {} fit", acc_regs, reg_limit));
  const double stage_bytes = static_cast<double>(s.tile_k) * static_cast<double>(s.tile_m + s.tile_n * p.outputs) * in_bytes;
  const double smem_limit = static_cast<double>(m.limits.smem_bytes_per_block.value);
  const double epi = epilogue_smem_bytes(p, s);
  const int stages_fit = static_cast<int>(std::floor((smem_limit - epi) / stage_bytes));
  const int stages = s.stages > 0 ? s.stages : stages_fit;
  if (stages < 2 || stages > stages_fit)
    return reject("smem", fmt::format("{} stages of {:.0f} KiB + {:.0f} KiB epilogue; {:.0f} KiB per block", std::max(stages, 2),
                                      stage_bytes / 1024, epi / 1024, smem_limit / 1024));
  const int cluster = s.cluster_m * s.cluster_n;
  if (cluster > 1 && (!m.cluster || cluster > m.cluster->max_ctas_portable.value))
    return reject("cluster", fmt::format("cluster {}x{}: the machine's portable cluster size is {}", s.cluster_m, s.cluster_n,
                                         m.cluster ? m.cluster->max_ctas_portable.value : 1));
  v.stages = stages;

  // 3. Throughput. The smem->register link feeds WGMMA: per k-step of 16 each consumer warpgroup
  // reads its 64 rows of A and the tile's N columns of B.
  const auto rate = m.ops_per_clk_per_sm(arch::Unit::tensor_core, p.operand);
  if (!rate) return reject("dtype", fmt::format("no tensor-core rate for {} on {}", dtype_name(p.operand), m.name));
  const double sms = static_cast<double>(m.sm_count.value), clock = m.clock_hz.value;
  const double flop_per_step = 2.0 * 64 * static_cast<double>(s.tile_n) * 16 * p.outputs;
  const double bytes_per_step = (64.0 + static_cast<double>(s.tile_n) * p.outputs) * 16 * in_bytes;
  const double smem_port_bytes_per_clk = m.level(arch::kRmem) != nullptr ? m.bytes_per_s(arch::kRmem) / sms / clock : 128.0;
  // The pipeline must cover a TMA load's latency (~1 us) for every consumer it feeds: ping-pong
  // feeds two tiles from one pipeline. Measured on the H100 (bench/NOTES.md, GEMM kernels): 128x128x128
  // ping-pong with 3 stages ran at half of cuBLAS.
  // A folded GEMM's ping-pong consumers spend their turns apart in a long register epilogue, so
  // one of them has the pipeline most of the time (measured on the H200, the fused linear
  // cross-entropy at 8192 x 4096 x 128256: 128 x 128 ping-pong 13.10 ms, 128 x 256 cooperative
  // 14.88 ms; bench/NOTES.md, 2026-11-28 tenth).
  const int stages_per_consumer = s.pingpong && p.reduction_states == 0 ? stages / 2 : stages;
  const double pipelining = stages_per_consumer >= 4 ? 1.0 : stages_per_consumer == 3 ? 0.9 : stages_per_consumer == 2 ? 0.7 : 0.5;
  // The SM's shared-memory port serves WGMMA's operand reads and TMA's writes of every stage: a
  // tile that keeps it busy a fraction d of the time (reads and writes at the tensor cores' rate)
  // runs at 1 / (1 + 0.28 d^2) of that rate. Fitted on the H100 sweep (bench/NOTES.md, GEMM sweep):
  // 128x256 cooperative tiles (d = 1.0) at 0.78 of the datasheet rate, 128x128 tiles (d = 1.25) at
  // 0.88 of those; 64-row ping-pong tiles, which write a B panel per 64 rows, rank below both.
  const double write_bytes_per_flop = static_cast<double>(s.tile_m + s.tile_n * p.outputs) * in_bytes /
                                      (2.0 * static_cast<double>(s.tile_m * s.tile_n) * p.outputs);
  const double smem_demand = (bytes_per_step / flop_per_step + write_bytes_per_flop) * *rate / smem_port_bytes_per_clk;
  const double efficiency = pipelining / (1.0 + 0.28 * smem_demand * smem_demand);
  // The scheduler's grid: tile counts rounded up to swizzle x cluster (the padding runs empty).
  const int swizzle = std::max(1, s.swizzle);
  const double tiles = padded_tiles(static_cast<double>(ceil_div(p.m, s.tile_m)), swizzle * s.cluster_m) *
                       padded_tiles(static_cast<double>(ceil_div(p.n, s.tile_n)), swizzle * s.cluster_n) *
                       static_cast<double>(p.l);
  // Stream-K spreads the tiles past the last full wave over every SM: the waves are the tiles
  // over the SMs, unrounded, at 0.97 of the rate, and each SM of that last wave writes (or reads
  // back) one partial tile of f32 sums at its share of HBM bandwidth. Only where a wave would
  // run part empty, also with no full wave (a weight gradient's few tiles over a long K). The
  // rate: measured on one H200 against the same tiles without it (bench/NOTES.md, 2026-11-25
  // fifth): 3.39 waves -17 %, 5.21 waves -3 %, 7.76 waves +2 %.
  if (s.stream_k && s.pingpong) return reject("stream-K", "stream-K runs with the cooperative schedule only");
  const double full_waves = std::floor(tiles / sms), last_wave = tiles / sms - full_waves;
  const double real_tiles = static_cast<double>(ceil_div(p.m, s.tile_m) * ceil_div(p.n, s.tile_n) * p.l);
  if (s.stream_k && tiles > real_tiles)
    return reject("stream-K", "stream-K where the cluster or swizzle pads the tiles (the padding takes units that add nothing)");
  if (s.stream_k && last_wave == 0)
    return reject("stream-K", "stream-K only where the last wave of tiles is partial");
  const double waves = s.stream_k ? tiles / sms / 0.97 : std::ceil(tiles / sms);
  const double tile_flop = 2.0 * static_cast<double>(s.tile_m * s.tile_n) * static_cast<double>(p.k) * p.outputs;
  const double hbm_bps = hbm_bytes_per_s(m);
  // Fewer tiles than SMs: each tile is split over about sms / tiles units, which finish together
  // and whose partial tiles are then added one after another (CUTLASS's deterministic fix-up: a
  // unit waits for the one before it), each step a partial tile read and written through L2 at
  // an SM's share plus a flag's round trip: a serial tail after the main loop. Fitted on one
  // H200: 1 tile of 128 x 64 over 1M K, 234 us against 64 us of HBM (1.3 us a step); 8 tiles
  // over 131072 K, 110 us against 71 (2.6 us a step).
  const double fixup_bytes = 2.0 * static_cast<double>(s.tile_m * s.tile_n) * 4 * p.outputs;
  const double fixup_s = s.stream_k && tiles >= sms ? fixup_bytes / (hbm_bps / sms) : 0;
  const double chain_s = s.stream_k && tiles < sms
                             ? (std::floor(sms / tiles) - 1) * (fixup_bytes / (m.bytes_per_s(arch::kSmem) / sms) + kFixupLatencyS)
                             : 0;
  const double compute_s = waves * tile_flop / (*rate * efficiency * clock) + fixup_s;

  // 4. Bandwidth with L2.
  const double a_bytes = static_cast<double>(p.m * p.k * p.l) * in_bytes;
  const double b_bytes = static_cast<double>(p.k * p.n * p.l) * in_bytes * p.outputs;
  const double c_elems = static_cast<double>(p.m * p.n * p.l);
  const double c_bytes = c_elems * p.out_bytes_per_element;
  const double epi_bytes = c_elems * p.epilogue_bytes_per_element;
  const double l2_smem = a_bytes * static_cast<double>(ceil_div(p.n, s.tile_n)) / s.cluster_n +
                         b_bytes * static_cast<double>(ceil_div(p.m, s.tile_m)) / s.cluster_m;
  const double compulsory = a_bytes + b_bytes + c_bytes + epi_bytes;
  // The CTAs of one wave run in step along K, and a swizzled raster gives a wave about sqrt(SMs)
  // rows and columns of tiles: HBM delivers each of those operand panels once per wave, L2 the
  // rest (the k-slices in flight, a few MB, fit in L2 with room to spare).
  const double wave_tiles = std::min(sms, tiles);
  const double side = std::sqrt(wave_tiles);
  const double per_wave = side * static_cast<double>(s.tile_m * s.cluster_m + s.tile_n * p.outputs * s.cluster_n) /
                          std::max(1.0, std::sqrt(static_cast<double>(s.cluster_m * s.cluster_n))) *
                          static_cast<double>(p.k) * in_bytes;
  const double hbm = std::max(compulsory, std::min(l2_smem, tiles / wave_tiles * per_wave) + c_bytes + epi_bytes);
  const double l2_bps = m.bytes_per_s(arch::kSmem);
  const double hbm_s = hbm / hbm_bps, l2_s = l2_smem / l2_bps;

  // 5. Overlap. Cooperative: each tile's epilogue (its stores and reads, at the SM's share of HBM)
  // follows its mainloop; ping-pong hides it behind the other warpgroup's mainloop.
  const double epilogue_tile_s = static_cast<double>(s.tile_m * s.tile_n) *
                                 (p.out_bytes_per_element + p.epilogue_bytes_per_element) / (hbm_bps / sms);
  // A folded epilogue: each consumer thread's values pass through the fold once (twice with a
  // logsumexp, its row max first), latency-bound at two warps a scheduler: 30 cycles a value a
  // pass, 10 a transcendental, 3 other arithmetic, fitted on the H200 (the cross-entropy above
  // at 128 x 256 cooperative: 1.2-1.5 ms over a max fold, ncu 15 instructions a value at 14
  // cycles an issue). Ping-pong hides it as it hides a store. Its partial states are written and
  // read back by a second launch (one warp a row) from L2.
  const double values_per_thread = static_cast<double>(s.tile_m * s.tile_n) / consumer_threads;
  const double fold_tile_s = p.reduction_states > 0 ? values_per_thread *
                                                          (30.0 * p.reduction_passes + 10 * p.epilogue_sfu_per_element +
                                                           3 * p.epilogue_fma_per_element) /
                                                          clock
                                                    : 0;
  const double partial_bytes = static_cast<double>(p.m * p.l) * static_cast<double>(ceil_div(p.n, s.tile_n)) * 4.0 *
                               p.reduction_states;
  const double combine_s = p.reduction_states > 0 ? 2.0 * partial_bytes / m.bytes_per_s(arch::kL2) + kKernelFixedS : 0;
  const double epilogue_s = s.pingpong ? 0 : waves * (epilogue_tile_s + fold_tile_s);
  const double main_s = std::max({compute_s, hbm_s, l2_s});
  // A dual GEMM whose N is not whole tiles runs its last columns as a second launch, over a
  // zero-padded copy of both operands' last columns (napkin::gemm::run_dual): its tiles are
  // counted above; the launch and the copy (read and written once) are added here.
  const double tail_s = p.outputs > 1 && p.n % s.tile_n != 0
                            ? kKernelFixedS + 4.0 * static_cast<double>(p.k * s.tile_n * p.l) * in_bytes / hbm_bps
                            : 0;
  v.estimate.time_s = main_s + epilogue_s + kKernelFixedS + tail_s + combine_s + chain_s;
  v.estimate.flops = 2.0 * static_cast<double>(p.m * p.n) * static_cast<double>(p.k * p.l) * p.outputs;
  v.estimate.hbm_bytes = hbm;
  v.estimate.compulsory_bytes = compulsory;
  v.estimate.bound = main_s == compute_s ? "tensor_core" : main_s == hbm_s ? "HBM bandwidth" : "L2->SMEM bandwidth";
  v.estimate.detail = fmt::format(
      "{:.0f} tiles in {:.3g} waves; tensor cores {:.4g} us at {:.0f}% (smem read, pipelining{}), HBM {:.4g} us, L2->SMEM {:.4g} us, "
      "epilogue {:.4g} us{}{}{}",
      tiles, waves, compute_s * 1e6, efficiency * 100, s.stream_k ? ", stream-K fix-up" : "", hbm_s * 1e6, l2_s * 1e6,
      epilogue_s * 1e6,
      s.pingpong ? " (hidden: ping-pong)" : "",
      chain_s > 0 ? fmt::format(", stream-K fix-ups one after another {:.4g} us", chain_s * 1e6) : "",
      p.reduction_states > 0 ? fmt::format(", row partials folded by a second launch {:.4g} us", combine_s * 1e6) : "");
  v.fits = true;
  return v;
}

Result<KernelSearch> solve_gemm(const GemmProblem& p, const arch::Machine& m) {
  if (!m.ops_per_clk_per_sm(arch::Unit::tensor_core, p.operand))
    return plain_error(fmt::format("{} has no tensor-core rate for {} operands", m.name, dtype_name(p.operand)));
  KernelSearch out;
  auto consider = [&](const GemmSchedule& s) {
    ++out.considered;
    GemmVerdict v = estimate_gemm(p, s, m);
    if (!v.fits) {
      ++out.rejected[v.reason_class];
      out.rejections.emplace_back(gemm_schedule_text(s), v.reason);
      return;
    }
    out.ranked.push_back({s, v.estimate});
  };
  if (p.prologue) {
    for (std::int64_t tm : {64, 128})
      for (std::int64_t tn : {64, 128})
        for (int stages : {2, 3, 4, 6})
          for (int warpgroups : {1, 2}) {
            GemmSchedule s{tm, tn, 64, 1, 1, stages, false};
            s.prologue = true;
            s.warpgroups = warpgroups;
            consider(s);
          }
    // Estimates in the same 1 % band rank the smaller shared-memory footprint first: more CTAs a
    // SM, more consumer warpgroups to overlap one another's transforms and epilogues (measured on
    // the H100: linear attention's output GEMM 1.10x faster at 2 stages than at 3, its state GEMM
    // even; bench/NOTES.md, 2026-11-27).
    auto key = [&](const GemmCandidate& c) {
      return std::make_tuple(std::llround(std::log(c.estimate.time_s) / std::log(1.01)), prologue_cta_smem(p, c.schedule),
                             c.schedule.warpgroups);
    };
    std::stable_sort(out.ranked.begin(), out.ranked.end(),
                     [&](const GemmCandidate& a, const GemmCandidate& b) { return key(a) < key(b); });
    return out;
  }
  const std::int64_t tile_ms[] = {64, 128, 256};
  const std::int64_t tile_ns[] = {64, 128, 192, 256};
  const std::int64_t tile_ks[] = {32, 64, 128};
  const std::pair<int, int> clusters[] = {{1, 1}, {2, 1}, {1, 2}};
  enum Kind { kCooperative, kPingpong, kStreamK };
  for (Kind kind : {kCooperative, kPingpong, kStreamK})
    for (auto tm : tile_ms)
      for (auto tn : tile_ns)
        for (auto tk : tile_ks)
          for (auto [cm, cn] : clusters) {
            GemmSchedule s{tm, tn, tk, cm, cn, 0, kind == kPingpong};
            s.stream_k = kind == kStreamK;
            s.swizzle = wave_swizzle(p, s, static_cast<double>(m.sm_count.value));
            s.raster_along_n = s.swizzle == 1 && raster_along_n(p, s, static_cast<double>(m.sm_count.value));
            consider(s);
          }
  // Fastest first; among equal times the smaller K step (more stages), then the smaller cluster (fewer
  // constraints on the launch), so that the order is deterministic.
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [](const GemmCandidate& a, const GemmCandidate& b) {
    if (a.estimate.time_s != b.estimate.time_s) return a.estimate.time_s < b.estimate.time_s;
    if (a.schedule.tile_k != b.schedule.tile_k) return a.schedule.tile_k < b.schedule.tile_k;  // deeper pipelines
    return a.schedule.cluster_m * a.schedule.cluster_n < b.schedule.cluster_m * b.schedule.cluster_n;
  });
  return out;
}

int row_register_bytes(int threads) {
  const int cap = std::min(255, 65536 / std::max(threads, 1));
  return std::min(256, std::max(0, (cap - 40) * 4 / 2));
}

RowCandidate solve_rows(const RowProblem& p, const arch::Machine& m) {
  RowCandidate c;
  // A warp per row up to 1024 elements (32 lanes x 32), else a CTA of up to 256 threads with
  // at most 32 elements per thread in registers, 8 rows per CTA for warp rows.
  if (p.row_elements <= 1024) c.schedule = {8, 32};
  else c.schedule = {1, static_cast<int>(std::clamp<std::int64_t>(ceil_div(p.row_elements, 32 * 8) * 8 * 4, 128, 1024))};
  c.schedule.threads_per_row = std::min(c.schedule.threads_per_row, 1024);
  if (p.columns) c.schedule = {1, 256, true};
  const double hbm_bps = hbm_bytes_per_s(m);
  const double sms = static_cast<double>(m.sm_count.value), clock = m.clock_hz.value;
  // A reduced row is one CTA's (elementwise and column kernels spread over every SM): such rows
  // run in waves of the CTAs resident at once (a 1024-thread CTA fills an SM's 64K registers at
  // 64 a thread; smaller ones as the SM's 2048 threads allow), and the last wave's idle SMs count
  // (long_rows at t = 300, 2.27 waves of 132: measured 71 us, 2.2x the estimate without them).
  const bool row_per_cta = !p.columns && p.reductions > 0 && p.row_elements > 1024;
  double busy = 1.0;
  if (row_per_cta) {
    const int cta = c.schedule.threads_per_row * static_cast<int>(std::max<std::int64_t>(1, c.schedule.rows_per_cta));
    const double slots = sms * std::max(1, cta >= kMaxRowThreads ? 1 : 2048 / cta);
    const double rows = static_cast<double>(std::max<std::int64_t>(p.rows, 1));
    busy = rows / (std::ceil(rows / slots) * slots);
  }
  // A row longer than the registers of a CTA's threads hold is read again in each pass after the
  // first (one per reduction, one more for outputs along it), from L2 where the CTAs' rows fit.
  const bool reread = !p.columns && p.reductions > 0 &&
                      static_cast<double>(p.row_bytes_per_element) * static_cast<double>(p.row_elements) >
                          static_cast<double>(kMaxRowThreads) * row_register_bytes(kMaxRowThreads);
  const double reread_bytes = reread ? static_cast<double>(p.rows) * static_cast<double>(p.row_elements) *
                                           p.row_bytes_per_element * (p.reductions - 1 + (p.writes_rows ? 1 : 0))
                                     : 0;
  const double l2_s = reread_bytes / (m.bytes_per_s(arch::kSmem) * busy);
  const double mem_s = (p.bytes + p.strided_bytes) / (hbm_bps * busy) + l2_s;
  const double sfu = m.ops_per_clk_per_sm(arch::Unit::sfu, DType::f32).value_or(16);
  const double fma = m.ops_per_clk_per_sm(arch::Unit::fma, DType::f32).value_or(128);
  const double alu_s = (p.sfu_ops / sfu + p.fma_ops / fma) / (sms * clock);
  const double main_s = std::max(mem_s, alu_s);
  c.estimate.time_s = main_s + kKernelFixedS;
  c.estimate.flops = p.fma_ops * 2 + p.sfu_ops;
  c.estimate.hbm_bytes = p.bytes + p.strided_bytes;
  c.estimate.compulsory_bytes = p.bytes;
  c.estimate.bound = main_s == mem_s ? "HBM bandwidth" : "ALU";
  c.estimate.detail = fmt::format("{} {} of {}: HBM {:.4g} us for {:.4g} MB{}{}, ALU {:.4g} us", p.rows,
                                  p.columns ? "columns" : "rows", p.row_elements, (mem_s - l2_s) * 1e6, p.bytes / 1e6,
                                  p.strided_bytes > 0 ? fmt::format(" and {:.4g} MB of sectors read or written across "
                                                                    "the storage order", p.strided_bytes / 1e6)
                                                      : std::string(),
                                  reread_bytes > 0 ? fmt::format(", then L2 {:.4g} us for {:.4g} MB re-read (rows too long for "
                                                       "registers)", l2_s * 1e6, reread_bytes / 1e6)
                                         : std::string(),
                                  alu_s * 1e6);
  return c;
}

}  // namespace napkin::search
