// SPDX-License-Identifier: Apache-2.0
// The IO cost model (derivation step 4; docs/cost_model.md states every formula): for a
// (diagram, schedule, machine), the transfers across each link of the memory hierarchy, the
// peak live memory of one group at each scheduled level, the operations per unit, and the
// predicted time under a stated overlap assumption with the unit that bounds it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arch/machine.h"
#include "ir/ir.h"
#include "sched/schedule.h"
#include "sched/streaming.h"

namespace napkin::cost {

// One tensor crossing a link: elements moved in total, and how often each element moves.
struct TensorTraffic {
  std::string tensor;
  DType dtype = DType::f32;   // the dtype it moves in (its `keep` dtype at the level, if any)
  double elements = 0;        // total elements moved across the link
  double reloads = 1;         // elements / the tensor's size: > 1 when re-read per tile
  double bytes() const { return elements * dtype_bytes(dtype); }
};

// One tensor's footprint in one group of a level.
struct Footprint {
  std::string tensor;
  std::string role;           // "input", "output", "intermediate", "accumulator"
  double bytes = 0;
};

// The link between `name` and its parent (cost_model.md §2, §3).
struct LevelCost {
  std::string name;                 // the lower level of the link: l2, smem, rmem
  std::string parent;               // gmem, l2, smem
  bool scheduled = false;           // the schedule partitions this level (else: pass-through)
  double transfer_elements = 0;
  double transfer_bytes = 0;
  double bytes_per_s = 0;           // the link's aggregate bandwidth (machine file)
  double transfer_time_s = 0;
  std::vector<TensorTraffic> tensors;
  // Scheduled levels only: the memory one group needs, and what it may use.
  double peak_bytes = 0;            // inputs + outputs + accumulator state + live intermediates
  double capacity_bytes = 0;        // per group: the level's per-instance capacity / the groups sharing it
  std::string capacity_source;      // which capacity that is: "the per-block limit", "256.00 KiB per SM / 2 groups"
  std::vector<Footprint> footprint;
  double groups_total = 0;          // groups (tiles) over the whole problem
  double visited_fraction = 1;      // of this level's (row tile, chunk) blocks, where a mask skips some (§12)
};

// Operations on one unit in one dtype, and the time they take at the unit's peak.
struct UnitCost {
  arch::Unit unit = arch::Unit::fma;
  DType dtype = DType::f32;
  double ops = 0;                   // in the unit's ops (cost_model.md §4)
  double flops = 0;                 // ops * flop_per_op
  double time_s = 0;
  std::string what;                 // "contract 'S' over d", "exp (softmax 'P')", ...
};

struct Estimate {
  std::string machine;              // machine name
  std::string schedule;             // canonical schedule text
  std::vector<LevelCost> levels;    // outermost link first: l2 (HBM), smem, rmem, ...
  std::vector<UnitCost> units;      // one per (unit, dtype), summed over ops
  std::vector<UnitCost> ops;        // per operation, for the read-out
  double flops = 0;                 // tensor-core FLOPs (2 per multiply-add): the useful work, in visited blocks
  double visited_fraction = 1;      // of the innermost streaming level's blocks, where a mask skips some (§12)
  double wave_efficiency = 1;       // groups / (waves * concurrent groups)
  // Where one group of a scheduled level needs more than the level's capacity per group (the
  // first such level): "smem: one group needs 240.00 KiB, over its capacity of 227.00 KiB (the
  // per-block limit)". Such a schedule cannot run, so it gets no time: every time below (and
  // each unit's and operation's) stays 0 and `bound` empty; transfers, footprints and operation
  // counts are still given, to show what does not fit (each link's transfer_time_s is 0 too).
  std::string does_not_fit;
  bool fits() const { return does_not_fit.empty(); }
  double predicted_time_s = 0;
  // Without asynchronous copies and warpgroup MMA (sm_80, sm_89), each wave of groups at the
  // level that maps onto SMs loads its tiles before it computes and stores its outputs after:
  // that fill, over the level's link, is not hidden (cost_model.md §5). 0 where it overlaps.
  double exposed_fill_s = 0;
  double sequential_time_s = 0;     // no overlap at all: the sum of every time
  std::string bound;                // "tensor_core bf16", "transfer l2", "sfu f32", ...
  std::string overlap;              // the overlap assumption, in words
  double tflops() const { return predicted_time_s > 0 ? flops / predicted_time_s / 1e12 : 0; }
};

// Pre: the schedule was validated against d (sched::validate_schedule) and names levels the
// machine has. Errors: a level the machine lacks, a dtype the machine has no unit for. A
// schedule over a level's capacity is not an error but an Estimate with `does_not_fit` set and
// no time.
Result<Estimate> estimate(const ir::Diagram& d, const sched::Schedule& s,
                          const arch::Machine& m);

// A schedule to use when none is given (cost_model.md §6): at the machine's smem level, tile
// every woven axis that some input is not woven over (the re-read axes: q for attention, m
// and n for matmul) with the largest power-of-two tile whose footprint fits the per-block
// shared memory (at most 256), other woven axes with tile 1, and stream every streamable axis
// in chunks of 64. `dtype` (optional) quantizes every input at smem.
sched::Schedule default_schedule(const ir::Diagram& d, const sched::StreamingReport& report,
                                 const arch::Machine& m, std::optional<DType> dtype = {});

}  // namespace napkin::cost
