// SPDX-License-Identifier: Apache-2.0
// Row and elementwise kernels: a kernel of a plan with no contraction, recognised in its diagram
// and written as a thin CUDA translation unit over the device library's row header
// (runtime/include/napkin/row_kernel.h). CUDA-free: it writes text. docs/kernels.md, "Row and
// elementwise kernels", describes the family and what is emitted.
//
// The family (after ir::normalise has expanded softmax, logsumexp, rmsnorm and layernorm):
//   outputs = after( reductions( before(inputs, indices, params) over r ), inputs, indices, params )
// where every reduction is a sum or a max over the same axis r, the *row axis*, innermost and
// unit-stride in every input that has it; the other axes (the *row axes*) number the rows. Each
// output is over the row axes and r (written along the row) or over the row axes alone (one value
// per row: statistics). A diagram with no reduction is an elementwise kernel; its row axis is the
// first output's innermost axis and every output has the same axes.
//
// A *column kernel* is the same family with r not innermost: every input that has r stores the
// same axes after it (the *inner* axes, e.g. K[b h k d] reduced over k: inner [d]), and those
// inputs are read as [outer, r, inner] with vectors along the innermost axis; the columns are
// every axis but r, numbered in that input's order; every output is over exactly the columns; no
// reduction reads another (one pass over r, split across CTAs and combined in a fixed order).
// An input over r alone (a weight per element of r) is read once per step of r.
//
// Row kernels fix the row length at compile time (the diagram's size of r, checked at launch);
// the number of rows, every size of a column kernel and of an elementwise kernel are the caller's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "emit/attention_kernel.h"
#include "ir/ir.h"
#include "plan/plan.h"
#include "support/diagnostic.h"

namespace napkin::emit {

// How the kernel reads an input.
enum class RowRead {
  rows,     // has r (innermost) and row axes: a vector per thread and row, e.g. X[t e]
            // (column kernels: r and the inner axes, a vector of columns per step of r)
  along,    // has r alone: the same in every row, e.g. gamma[e]
  per_row,  // row axes only: one value per row, e.g. bias[t] (column kernels: per column)
  scalar,   // no axes: one value
  gather,   // elementwise kernels only: has r, but not innermost: element by element
};
// How the kernel writes an output.
enum class RowWrite {
  vectors,  // r innermost in the written order: vectors, unit stride
  strided,  // r elsewhere (e.g. P[b h q k] of a softmax over q): element by element
  per_row,  // the row axes alone: one value per row, by the row's first thread (column kernels:
            // one value per column)
};

struct RowInput {
  ir::NodeId node = -1;  // in RowForm::normalised
  RowRead read = RowRead::rows;
};
struct RowOutput {
  std::size_t index = 0;  // into RowForm::normalised.outputs
  RowWrite write = RowWrite::vectors;
};

struct RowForm {
  ir::Diagram normalised;              // the kernel's diagram, composites expanded; ids below are its
  std::vector<ir::NodeId> origin;      // per node of `normalised`: the node of the given diagram it comes from
  ir::AxisId row_axis = -1;            // r: reduced (row kernel) or the first output's innermost (elementwise)
  std::vector<ir::AxisId> row_axes;    // the axes that number the rows, outermost first
  bool reduces = false;                // false: an elementwise kernel
  std::vector<ir::NodeId> reductions;  // in node order
  std::vector<int> pass;               // per reduction: the pass over the row that accumulates it (0-based)
  int passes = 0;                      // reduction passes (the outputs along the row come after)
  std::vector<RowInput> inputs;        // every input, in node order
  std::vector<RowOutput> outputs;      // in the diagram's order
  std::int64_t row_length = 0;         // the diagram's size of r
  bool columns = false;                // a column kernel: r is not innermost (row_axes are the columns)
  ir::AxisId inner = -1;               // column kernels: the innermost column axis (the vectors' axis)
};

// The row form of `d`, or the reason it has none, located at the op that breaks it (the
// composite it came from, for a node of an expansion).
Result<RowForm> recognise_rows(const ir::Diagram& d, const SourceText& src);

// The launch shape a schedule gives a row form (written into the emitted unit's header):
//   - vector: 16 bytes of the narrowest tensor read or written as vectors along r (halved until
//     it divides the row length, for a row kernel);
//   - threads per row: the schedule's, fewer where that would leave a thread under 4 vectors
//     (4 loads in flight per thread), more (up to 1024) where the rows kept would take over 256
//     bytes of registers per thread as loaded; a power of two below 32, a multiple of 32 above;
//   - rows per CTA: the schedule's, more where a CTA would have fewer than 128 threads; whole
//     warps, at most 1024 threads;
//   - in_registers: the rows are read once and kept (else re-read in every pass, from L1/L2);
//     hoisted: inputs along r alone are loaded once per thread, outside the loop over rows;
//     unrolled: some input is kept (arrays indexed by the vector): the loops over a thread's
//     vectors unroll fully; else by 4 (a row of 16M elements is 2048 vectors a thread).
// Elementwise kernels use cta_threads and vector only. Column kernels: vector (halved until it
// divides the inner axis), lanes (threads across the columns: enough vectors for the inner axes,
// at most 32) and depth (threads along r: 256 threads a CTA).
struct RowLaunch {
  int vector = 1;
  int threads_per_row = 32;
  int rows_per_cta = 1;
  int cta_threads = 32;
  int vectors_per_thread = 1;
  bool in_registers = true;
  bool hoisted = true;
  bool unrolled = true;
  int lanes = 0, depth = 0;
  std::string text;  // one line: the schedule, what it became and why
};
RowLaunch row_launch(const RowForm& f, const plan::RowSchedule& s);

// The translation unit, exporting `entry_name` with the C interface of napkin/kernel_abi.h: binds
// the inputs and outputs by their diagram names, checks dtypes, ranks, sizes (the row length
// among them), unit strides along r and alignment (unaligned tensors take a scalar-access
// instantiation), and launches on the caller's stream. Post: deterministic text.
std::string emit_row_kernel(const ir::Diagram& d, const RowForm& f, const plan::RowSchedule& s,
                            const KernelProvenance& prov, const std::string& entry_name);

// One line, e.g. "rows [t] x e=4096; 2 reductions (sum, sum); outputs Y[t e]", or for an
// elementwise kernel "elementwise [t f]; outputs H[t f]".
std::string describe_rows(const RowForm& f);

}  // namespace napkin::emit
