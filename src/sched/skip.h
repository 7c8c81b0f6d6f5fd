// SPDX-License-Identifier: Apache-2.0
// Block skipping: which (row tile, key chunk) blocks of a streamed softmax a kernel may skip
// because a mask makes every score in them -inf.
//
// A mask is a `select(pred, x, -inf)` on top of the input of a softmax, logsumexp or max over
// the streamed axis (ir::hoist_masks puts every mask written deeper there), or a
// `select(pred, x, 0)` on top of an operand of a sum or contraction over it (a softmax under
// one counts with its masks), whose predicate reads indices, inputs, params and literals alone.
// A block may be skipped where, for every reduction over the streamed axis, one of its masks'
// predicates is false on the whole block: there the block contributes exp(-inf) = 0 to every
// sum and nothing to every max. Predicates are evaluated over a block by interval arithmetic on
// the index expressions (iota, constants, + - *, neg, abs, min, max, comparisons, and/or/not,
// casts). Causal `q >= k` skips the blocks above the diagonal, a sliding window those outside
// the band; a predicate the analysis cannot bound skips nothing. The attention emitter reads
// masks with the same peel_masks, so derive and build count the same blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/ir.h"

namespace napkin::sched {

struct BlockSkipping {
  int masks = 0;              // masks found on the way to a reduction over the streamed axis
  std::int64_t blocks = 0;    // (row tile, chunk) blocks
  std::int64_t visited = 0;   // blocks not provably all masked
  double visited_fraction() const { return blocks ? static_cast<double>(visited) / static_cast<double>(blocks) : 1.0; }
};

// The masks on top of x: while x is `select(p, y, fill)` (fill an unnamed literal) with p
// reading indices, inputs, params and literals alone, p, outermost first; x becomes y.
std::vector<ir::NodeId> peel_masks(const ir::Diagram& d, ir::NodeId& x, double fill);

// The predicates of the masks that mask every reduction over `stream_axis` (above; each once,
// by value), or none where some reduction over it has no mask.
std::vector<ir::NodeId> mask_predicates(const ir::Diagram& d, ir::AxisId stream_axis);

// The inputs the masks' predicates read (node order): their values bound no block here, but a
// generated kernel bounds i32 and bool ones through block summaries and skips by their data.
std::vector<ir::NodeId> mask_inputs(const ir::Diagram& d, ir::AxisId stream_axis);

// Tiles of `row_tile` indices along `row_axis` against chunks of `chunk` along `stream_axis`
// (the last tile and chunk may be partial); every other axis spans its whole range. Exact up
// to 2^16 blocks; beyond, neighbouring blocks are judged in groups, so `visited` may exceed
// the exact count along the mask's boundary, never fall below it.
// Pre: d verified, row_tile >= 1, chunk >= 1, the two axes distinct.
BlockSkipping block_skipping(const ir::Diagram& d, ir::AxisId row_axis, std::int64_t row_tile,
                             ir::AxisId stream_axis, std::int64_t chunk);

}  // namespace napkin::sched
