// SPDX-License-Identifier: Apache-2.0
// Kernel plans (derivation, whole-diagram level): a diagram becomes a sequence of kernels.
//
// Each kernel of a plan is a fused subgraph of the diagram, written as a diagram of its own:
// its inputs are the tensors it reads from global memory (the diagram's inputs, or
// intermediates an earlier kernel materialised), its outputs the tensors it writes (the
// diagram's outputs, or intermediates a later kernel reads). Tensors keep their names across
// kernels, so a plan runs by evaluating its kernels in order over one map from name to tensor.
// The algebraic moves the search applied (a row scale moved past a contraction, a contraction
// chain reassociated, a shared operand read once) are already in the kernels' diagrams, and
// listed in `moves`.
//
// The contract every plan keeps: evaluating its kernels in order with the reference
// interpreter, each intermediate rounded to its dtype, gives the diagram's outputs up to that
// rounding (tests/unit/plan and the CPU plan executor check it on random sizes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arch/machine.h"
#include "ir/ir.h"
#include "search/search.h"
#include "support/diagnostic.h"

namespace napkin::plan {

// What kind of kernel a fused subgraph is, which decides its solver and its code generator.
//   gemm           one contraction of two operands (batched over shared axes), with elementwise
//                  epilogue code over the accumulator, row/column vectors, scalars and
//                  same-shaped tensors (bias, activation, scales, gating, residual, cast)
//   dual_gemm      two contractions sharing their first operand (X Wg, X Wu), combined by
//                  elementwise epilogue code (a gated MLP reads X once)
//   attention      the attention family (contract, score code, softmax or none, contract):
//                  one streamed kernel, the configuration solver's schedule
//   row_reduction  reductions over the innermost axes of rows (norm statistics, row sums),
//                  with elementwise code before and after (a whole layernorm is one)
//   elementwise    elementwise code only
enum class KernelKind : std::uint8_t { gemm, dual_gemm, attention, row_reduction, elementwise };
std::string_view kernel_kind_name(KernelKind k);

// A Hopper GEMM kernel's schedule, as CUTLASS's sm90 collectives take it.
struct GemmSchedule {
  std::int64_t tile_m = 128, tile_n = 128, tile_k = 64;  // CTA tile
  int cluster_m = 1, cluster_n = 1;                       // CTAs per cluster (TMA multicast)
  int stages = 0;                                         // smem pipeline stages; 0: as many as fit
  bool pingpong = false;  // two consumer warpgroups on alternate tiles; else cooperative (both on one tile)
  bool operator==(const GemmSchedule&) const = default;
};
std::string gemm_schedule_text(const GemmSchedule& s);  // "tile 128x256x64 cluster 2x1 stages 4 cooperative"

// A row kernel's schedule: rows per CTA and threads per row.
struct RowSchedule {
  std::int64_t rows_per_cta = 1;
  int threads_per_row = 128;
  bool operator==(const RowSchedule&) const = default;
};

struct Kernel {
  std::string name;                 // "gemm G = X Wg", "rmsnorm statistics of X", ...
  KernelKind kind = KernelKind::elementwise;
  ir::Diagram diagram;              // the fused subgraph as a diagram (see the file comment)
  std::optional<GemmSchedule> gemm;           // gemm, dual_gemm
  std::optional<RowSchedule> rows;            // row_reduction, elementwise
  std::optional<search::Ranked> streamed;     // attention: the configuration solver's schedule
  double predicted_s = 0;
  double flops = 0;                 // useful FLOPs
  double hbm_bytes = 0;             // compulsory global-memory traffic (reads + writes)
  std::string bound;                // "tensor core", "HBM bandwidth", ...
};

struct Plan {
  std::string name;                        // "chosen", "fully fused", "fully unfused"
  std::vector<Kernel> kernels;             // in execution order
  std::vector<std::string> materialised;   // intermediates written to and read back from gmem
  std::vector<std::string> moves;          // algebraic moves applied, one line each
  double predicted_s = 0;                  // sum over the kernels
  // Empty when the plan is feasible; else why not (an infeasible alternative is still shown).
  std::string infeasible;
};

struct Derivation {
  Plan chosen;
  // The fully fused and fully unfused alternatives (when they differ from the chosen one), each
  // with `why_not`: why it lost (slower by how much and where, or infeasible and why).
  struct Alternative {
    Plan plan;
    std::string why_not;
  };
  std::vector<Alternative> alternatives;
};

struct PlanOptions {
  search::SearchOptions search;  // for attention kernels
  int top = 1;                   // schedules kept per kernel (distinct)
};

// Pre: d verified. Errors name the binding constraint and the smallest change that would make a
// plan feasible.
Result<Derivation> derive_plan(const ir::Diagram& d, const arch::Machine& m, const PlanOptions& options = {});

}  // namespace napkin::plan
