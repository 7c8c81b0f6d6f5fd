// SPDX-License-Identifier: Apache-2.0
// Block skipping: which (row tile, key chunk) blocks of a streamed softmax a kernel may skip
// because a mask makes every score in them -inf.
//
// A mask is a `select(pred, x, -inf)` whose result reaches a softmax (or logsumexp or
// reduce_max) over the streamed axis through elementwise ops only. Its predicate is evaluated
// over a block by interval arithmetic on the index expressions (iota, constants, + - *, neg,
// abs, min, max, comparisons, and/or/not, casts): where it is false for every index of the
// block, the block contributes exp(-inf) = 0 to every sum and nothing to every max, so it need
// not be loaded or computed. Causal `q >= k` skips the blocks above the diagonal, a sliding
// window those outside the band; a predicate the analysis cannot bound skips nothing.
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

// The predicates of the masks on the way to a softmax, logsumexp or max over `stream_axis`:
// for each `select(pred, x, -inf)` found, `pred` (node order).
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
