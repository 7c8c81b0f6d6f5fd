// SPDX-License-Identifier: Apache-2.0
// The executable schedule: a CPU executor that runs the loop nest a Schedule describes, with
// its tiles, chunks and accumulators, in f64, and so proves on the CPU that a derivation
// computes the diagram's function (docs/exec.md).
//
//   auto r = exec::execute(diagram, schedule, reference::random_inputs(diagram, 7));
//   // r->outputs agree with reference::evaluate(diagram, inputs); r->loads["smem"]["K"] is
//   // how many elements of K were transferred into smem.
//
// The loop nest. Tiles are independent groups, so every level's tile loops come first
// (outermost level first, axes in the order written); inside one group (the innermost tile)
// the stream loops run in order (outermost level first), a deeper level's chunks of an axis
// subdividing the enclosing level's. Per group, for the streamed axis `a` that carries
// accumulators, the executor works on the normalised diagram (ir/normalise.h) and gives each
// node a role (docs/exec.md, "Roles"): invariant (no a), local (along a, chunk by chunk),
// fold (a reduction over a: its accumulator), folded (a function of folds: finalised from
// the running values), shifted (local - folded: x - mu) and scaled (exp of shifted times
// local values times deferred folded factors). On each chunk it evaluates the local and
// scaled nodes on the chunk's slice only, rescales each rescaled fold by exp(shift_new -
// shift_old) (exp(mu_old - mu_new) for softmax), adds the chunk's contribution, and after
// the last chunk multiplies in the deferred factors (1 / z) and evaluates the folded nodes.
// This one mechanism runs every accumulator of the catalogue: add, max, logsumexp,
// normalised_contraction, online_softmax.
//
// Transfers. For each level L the executor walks the nest made of the tile and stream loops
// of the levels down to L and counts, per input, the elements of its slice each time a new
// slice enters L: once per group of L, and again per chunk of the innermost stream loop over
// one of its axes (a tensor stays resident across the chunks of loops inside that one).
// Outputs leave L once per group of L. Tiles of axes a tensor lacks re-read it (the cost
// model's broadcast term): attention's K and V are loaded once per q tile.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "reference/interpreter.h"
#include "sched/schedule.h"
#include "support/diagnostic.h"

namespace napkin::exec {

// Elements per tensor name, per level name.
using TransferCounts = std::map<std::string, std::map<std::string, std::int64_t>>;

struct ExecutionResult {
  reference::TensorMap outputs;  // by output name, in the output's axis order (as evaluate)
  TransferCounts loads;          // level -> input -> elements loaded into the level
  TransferCounts stores;         // level -> output -> elements stored from the level
  std::map<std::string, std::int64_t> groups;  // level -> groups (tiles) of that level
  std::int64_t chunks = 0;       // chunk steps run (innermost stream iterations, all groups)
  std::string streamed_axis;     // the axis carrying accumulators; empty when none is streamed
  std::string nest;              // the loop nest, one line, e.g. "tile q=8 (smem) > stream k=4:online_softmax (smem)"
  // Where the result is expected to differ from the reference beyond f64 rounding: a cast of
  // a partial value of the stream (rmsnorm's output cast before the matmul that streams its
  // axis) rounds the unnormalised partial value, as a real kernel does.
  std::vector<std::string> notes;
};

// Runs `s` on `d` with `inputs` (one tensor per input, over exactly its declared axes and
// sizes, as reference::evaluate takes them; inputs are rounded to their declared dtype).
// Pre: d is verified. Errors (never a wrong answer): the schedule does not validate for d
// (sched::validate_schedule's message); more than one streamed axis carries accumulators;
// a level tiles an axis that an enclosing level streams; a missing or misshapen input.
// Post: outputs equal reference::evaluate(d, inputs) up to f64 rounding (summation order),
// except where `notes` says otherwise; a fully masked row gives what the reference gives
// (0 for softmax), never NaN.
Result<ExecutionResult> execute(const ir::Diagram& d, const sched::Schedule& s,
                                const reference::TensorMap& inputs);

// Only the transfer counts of `s` (the same walk as execute, without computing anything).
// Pre and errors as for execute, minus the inputs.
struct TransferReport {
  TransferCounts loads, stores;
  std::map<std::string, std::int64_t> groups;
};
Result<TransferReport> count_transfers(const ir::Diagram& d, const sched::Schedule& s);

// Largest |actual - expected| and largest |actual - expected| / max(1, |expected|) over every
// element of every output of `expected`. Equal values (infinities included) and NaN against
// NaN agree; NaN against a number, or a missing or misshapen output, is an infinite error.
struct Comparison {
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  std::string worst_output;  // where max_rel_error was found
};
Comparison compare(const reference::TensorMap& actual, const reference::TensorMap& expected);

}  // namespace napkin::exec
