// SPDX-License-Identifier: Apache-2.0
// SVG drawings: a diagram as a neural circuit diagram, a machine's memory hierarchy, and a
// per-unit timeline of a pipelined schedule. docs/drawings.md shows each one.
//
// Every function returns the whole SVG document as text and prints nothing. Output is
// deterministic (node, level and lane order; coordinates with one decimal) and opens with a
// provenance comment: the napkin version, the input's key and hash, the schedule text.
// Drawings use only elements librsvg and browsers render alike (no CSS, no filters), and the
// font stack "DejaVu Sans, Helvetica, Arial, sans-serif"; text widths are estimated for DejaVu
// Sans, the widest of these, so labels never overlap in any of them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "arch/machine.h"
#include "ir/ir.h"
#include "sched/schedule.h"

namespace napkin::emit {

// The colour of a memory level, as in the paper: gmem black, l2 grey, smem orange, rmem
// green, tensor core (tc) blue; any other level purple. A "#rrggbb" string.
std::string_view level_colour(std::string_view level);

// Where a tensor of `d` lives under `schedule`, the level its wires are coloured with: the
// innermost level that keeps it; else gmem for inputs and outputs; else (an intermediate the
// schedule does not name) the innermost level of the schedule, since a fused algorithm never
// writes it back; with no schedule, or an empty one, gmem.
std::string tensor_level(const ir::Diagram& d, const sched::Schedule* schedule, ir::NodeId n);

// The diagram as a neural circuit diagram, data flowing left to right.
//  - Inputs on the left (name and dtype), outputs on the right; columns of op boxes between
//    them, one per topological depth. A tensor is a bundle of horizontal wires, one per axis,
//    labelled with the axis (with its size at inputs and outputs); a scalar is a dotted wire.
//  - A box is an op: its header names it (with constants and index expressions such as
//    `q >= k` folded into the label), its footer lists its `over` axes. Inside the box each
//    woven axis passes through from the operands that carry it to the result; an axis
//    contracted away ends in a dot. Tensors that skip a column pass straight through it; a
//    tensor used twice forks at a dot.
//  - With a schedule: wires take the colour of the level their tensor lives at
//    (tensor_level); a colour change is a transfer (a tick marks it); an axis tiled at that
//    level (or an enclosing one) is labelled g_a=N, a streamed one s_a=N, and boxes that fold
//    a streamed axis name its accumulator.
//  - `machine` (optional) adds its name and per-level capacities to the legend.
// Pre: d verified; schedule, when given, valid for d (sched::validate_schedule).
std::string draw_diagram_svg(const ir::Diagram& d, const sched::Schedule* schedule,
                             const arch::Machine* machine);

// Pairs of boxes or text labels of draw_diagram_svg's layout whose bounding boxes (estimated
// text extents) intersect, as "A | B" lines; empty for a clean drawing. For tests.
std::vector<std::string> diagram_overlaps(const ir::Diagram& d, const sched::Schedule* schedule,
                                          const arch::Machine* machine);

// The machine's memory hierarchy as a tree from gmem (top) down to the tensor core: each
// level with its capacity per instance and in all, and its instance count (drawn stacked
// when there are several); each pipe with its aggregate bandwidth and the share of one
// instance. Beside it, the headline figures and the per-SM throughput table.
std::string draw_machine_svg(const arch::Machine& m);

// --- timeline: lanes of labelled spans over time -------------------------------------------
// A generic drawing for the pipelined schedule of one unit of work (e.g. one iteration of the
// attention loop per SM): one lane per hardware unit (TMA, tensor core, SFU, ...), spans with
// start and end times. Spans of the same `kind` share a colour (in order of first appearance)
// and the legend names each kind.
struct TimelineSpan {
  std::string label;  // drawn inside the span when it fits (always in its tooltip)
  std::string kind;   // colour key, e.g. "load", "gemm", "softmax"; empty: the label
  double start_s = 0.0;
  double end_s = 0.0;  // >= start_s
};
struct TimelineLane {
  std::string unit;  // the lane's name, e.g. "tensor core"
  std::vector<TimelineSpan> spans;
};
// Lanes top to bottom in the given order, over a time axis from 0 to the last span's end
// (ticks at 1-2-5 steps, in s, ms, µs or ns); with period_s > 0, dashed lines mark every
// period (the steady-state iteration). Pre: times finite and >= 0, end_s >= start_s.
std::string draw_timeline_svg(const std::vector<TimelineLane>& lanes, double period_s,
                              std::string title);

}  // namespace napkin::emit
