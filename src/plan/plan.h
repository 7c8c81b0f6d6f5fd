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
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "arch/machine.h"
#include "ir/ir.h"
#include "search/kernel_solver.h"
#include "search/search.h"
#include "plan/moves.h"
#include "plan/subgraph.h"
#include "support/diagnostic.h"

namespace napkin::plan {


// The schedules of the GEMM and row kernels (search/kernel_solver.h, their solver).
using search::GemmSchedule;
using search::gemm_schedule_text;
using search::RowSchedule;

struct Kernel {
  std::string name;                 // "gemm Y <- H Wd": its family, what it writes, what it reads
  KernelKind kind = KernelKind::elementwise;
  ir::Diagram diagram;              // the fused subgraph as a diagram (see the file comment)
  std::optional<GemmSchedule> gemm;           // gemm, dual_gemm
  std::vector<search::GemmCandidate> gemm_top;  // the solver's best distinct schedules (--top)
  std::optional<RowSchedule> rows;            // row_reduction, column_reduction, elementwise
  std::optional<search::Ranked> streamed;     // attention: the configuration solver's schedule
  double predicted_s = 0;
  double flops = 0;                 // useful FLOPs
  double hbm_bytes = 0;             // modelled global-memory traffic (reads + writes)
  std::string bound;                // "tensor_core", "HBM bandwidth", ...
  std::string detail;               // how the estimate was found, one line
  int considered = 0;               // candidates the solver weighed
  std::map<std::string, int> rejected;  // and rejected, by reason class
};

struct Plan {
  std::string name;                        // "chosen", "fully fused", "fully unfused"
  std::vector<Kernel> kernels;             // in execution order
  std::vector<std::string> materialised;   // intermediates written to and read back from gmem
  double materialised_bytes = 0;           // their sizes, summed
  std::vector<std::string> moves;          // algebraic moves applied, one line each
  double predicted_s = 0;                  // sum over the kernels
  // Empty when the plan is feasible; else why not (an infeasible alternative is still shown).
  std::string infeasible;
  SourceLoc infeasible_at;  // the op the reason is about, where one is
  std::string note;                        // e.g. why a feasible alternative has no kernel
  // What the generated kernels cannot do at the diagram's sizes though the plan is right for
  // them (a TMA row of other than a multiple of 16 bytes: the library refuses such a call at
  // launch), each with the smallest change that runs.
  std::vector<std::string> warnings;
  bool runs_at_these_sizes = true;        // no kernel with a warning that it cannot run at these sizes
  // Axes the kernels take as one (merge_reduced_axes): their diagrams' inputs and outputs are
  // views of the diagram's, each run of `parts` one axis `name`.
  std::vector<AxisMerge> merged_axes;
  // Axes of the caller's tensors the kernels take as two (cut_long_axes), applied before the
  // merges: a call whose size of a cut axis is not a multiple of its inner size is refused.
  std::vector<AxisCut> cut_axes;
  // Axes whose sizes the kernels hold as numbers (a norm written as its statistics divides by its
  // count of elements): the library refuses a call at other sizes of them.
  std::vector<std::string> sized_axes;
};

// The tensors a call holds at once (inputs, outputs and `materialised_bytes` of intermediates,
// all live together in the worst case) against the GPU's memory: why no call at these sizes can
// be allocated, or "".
std::string memory_warning(const ir::Diagram& d, const arch::Machine& m, double materialised_bytes = 0);

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

// Why napkin build would not generate a kernel of this family for this kernel's diagram, or ""
// where it would: the emitters' own recognisers (emit/generates.h), which the core cannot
// include. With it the planner plans only kernels that build generates.
using Generates = std::function<std::string(KernelKind, const ir::Diagram&)>;

struct PlanOptions {
  search::SearchOptions search;  // for attention kernels
  int top = 1;                   // schedules kept per kernel (distinct)
  Generates generates;           // unset: the planner's own rules alone
};

// Whether the plan is one attention kernel with no move: the diagram as written, which the
// configuration solver configures (napkin derive then prints that derivation, not a plan).
bool one_attention_kernel(const Plan& p);

// The kernel's schedule in one line (its solver's: GEMM tiles, row blocks, the streamed
// configuration); "" where it has none.
std::string kernel_schedule_text(const Kernel& k);

// The kernel's loop nest as a schedule of its own diagram (sched/schedule.h), which the CPU
// executor runs and the pseudocode prints: a streamed kernel's own; a GEMM's output tile over its
// M and N axes with its K axis streamed in chunks of tile_k; none for row and elementwise kernels
// (one pass over their rows).
Result<std::optional<sched::Schedule>> kernel_loop_nest(const Kernel& k);

// Pre: d verified. Errors name the binding constraint and the smallest change that would make a
// plan feasible.
Result<Derivation> derive_plan(const ir::Diagram& d, const arch::Machine& m, const PlanOptions& options = {});

}  // namespace napkin::plan
