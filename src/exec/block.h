// SPDX-License-Identifier: Apache-2.0
// Blocks: the values the executor computes on. A Block is a dense f64 tensor over some diagram
// axes, each restricted to a half-open range of the axis: the part of a value that one tile,
// or one chunk of a tile, holds. The kernels here are the reference interpreter's (same
// arithmetic, same loop order per element) applied to a box of the index space instead of
// the whole of it.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/ir.h"
#include "reference/strided_loop.h"
#include "reference/tensor.h"
#include "support/diagnostic.h"

namespace napkin::exec {

// A box of the index space: one range [lo[a], hi[a]) per diagram axis a.
struct Box {
  std::vector<std::int64_t> lo, hi;
  std::int64_t size(ir::AxisId a) const {
    return hi[static_cast<std::size_t>(a)] - lo[static_cast<std::size_t>(a)];
  }
  // The whole index space of d.
  static Box whole(const ir::Diagram& d);
};

struct Block {
  std::vector<ir::AxisId> axes;     // any order; row-major in this order
  std::vector<std::int64_t> lo;     // lo[i]: first index of axes[i] held
  std::vector<std::int64_t> sizes;  // sizes[i]: how many indices of axes[i] are held
  std::vector<double> data;

  // A block over `axes` restricted to `box`, every element `fill`.
  static Block filled(const std::vector<ir::AxisId>& axes, const Box& box, double fill);
  static Block scalar(double value);
  std::int64_t elements() const { return static_cast<std::int64_t>(data.size()); }
  // Row-major stride of `axis`, or 0 when the block lacks it (broadcast along it).
  std::int64_t stride_of(ir::AxisId axis) const;
  bool has(ir::AxisId axis) const;
  // Pre: for every axis of the block, its range is box's range of that axis.
  void check_on(const Box& box) const;
};

// The part of `full` (a tensor over whole axes) inside `box`, every value rounded to `dtype`.
Block slice(const reference::Tensor& full, const Box& box, DType dtype);
// The index along `axis` (global, so masks like q >= k see true positions), over box.
Block iota(ir::AxisId axis, const Box& box);
// The part of `state` inside `box`. Pre: box's ranges lie inside state's on state's axes.
Block read(const Block& state, const Box& box);
// Writes `part` into the same positions of `state` (part's ranges inside state's, same axes).
void write(Block& state, const Block& part);
// Writes `part` into `full`, a tensor over the same axes in the same order, whole.
void write(reference::Tensor& full, const Block& part);

namespace detail {
std::vector<std::int64_t> sizes_in(const std::vector<ir::AxisId>& loop, const Box& box);
std::vector<std::int64_t> strides_in(const Block& b, const std::vector<ir::AxisId>& loop);
}  // namespace detail

// out[i] = fn(values of xs at i), over out_axes within box; operands broadcast along axes they
// lack. Pre: every operand lies on box (Block::check_on).
template <class Fn>
Block map(const std::vector<ir::AxisId>& out_axes, const Box& box,
          const std::vector<const Block*>& xs, Fn fn) {
  Block out = Block::filled(out_axes, box, 0.0);
  std::vector<std::vector<std::int64_t>> strides;
  for (const Block* x : xs) {
    x->check_on(box);
    strides.push_back(detail::strides_in(*x, out_axes));
  }
  std::vector<double> vals(xs.size());
  std::size_t o = 0;
  reference::strided_loop(detail::sizes_in(out_axes, box), strides, [&](const std::int64_t* off) {
    for (std::size_t j = 0; j < xs.size(); ++j) vals[j] = xs[j]->data[static_cast<std::size_t>(off[j])];
    out.data[o++] = fn(vals.data());
  });
  return out;
}

// Reduces x over `over` (inside box) with combine from init; the result is over out_axes.
template <class Combine>
Block reduce(const std::vector<ir::AxisId>& out_axes, const std::vector<ir::AxisId>& over,
             const Box& box, const Block& x, double init, Combine combine) {
  x.check_on(box);
  Block out = Block::filled(out_axes, box, init);
  std::vector<ir::AxisId> loop = out_axes;
  loop.insert(loop.end(), over.begin(), over.end());
  reference::strided_loop(detail::sizes_in(loop, box),
                          {detail::strides_in(out, loop), detail::strides_in(x, loop)},
                          [&](const std::int64_t* off) {
                            double& acc = out.data[static_cast<std::size_t>(off[0])];
                            acc = combine(acc, x.data[static_cast<std::size_t>(off[1])]);
                          });
  return out;
}

// The sum over `over` (inside box) of the product of xs; the result is over out_axes.
Block contract(const std::vector<ir::AxisId>& out_axes, const std::vector<ir::AxisId>& over,
               const Box& box, const std::vector<const Block*>& xs);

}  // namespace napkin::exec
