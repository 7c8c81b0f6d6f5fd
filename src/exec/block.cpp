// SPDX-License-Identifier: Apache-2.0
#include "exec/block.h"

#include <algorithm>

#include <fmt/format.h>

namespace napkin::exec {

using ir::AxisId;

namespace {
std::size_t at(AxisId a) { return static_cast<std::size_t>(a); }
}  // namespace

Box Box::whole(const ir::Diagram& d) {
  Box b;
  b.lo.assign(d.axes.size(), 0);
  for (const ir::Axis& a : d.axes) b.hi.push_back(a.size);
  return b;
}

Block Block::filled(const std::vector<AxisId>& axes, const Box& box, double fill) {
  Block b;
  b.axes = axes;
  std::int64_t n = 1;
  for (AxisId a : axes) {
    b.lo.push_back(box.lo[at(a)]);
    b.sizes.push_back(box.size(a));
    n *= box.size(a);
  }
  b.data.assign(static_cast<std::size_t>(n), fill);
  return b;
}

Block Block::scalar(double value) {
  Block b;
  b.data.assign(1, value);
  return b;
}

std::int64_t Block::stride_of(AxisId axis) const {
  std::int64_t stride = 1;
  for (std::size_t i = axes.size(); i-- > 0;) {
    if (axes[i] == axis) return stride;
    stride *= sizes[i];
  }
  return 0;
}

bool Block::has(AxisId axis) const { return std::find(axes.begin(), axes.end(), axis) != axes.end(); }

void Block::check_on(const Box& box) const {
  for (std::size_t i = 0; i < axes.size(); ++i)
    NAPKIN_CHECK(lo[i] == box.lo[at(axes[i])] && sizes[i] == box.size(axes[i]),
                 fmt::format("block range [{}, {}) of axis #{} is not the box's [{}, {})", lo[i],
                             lo[i] + sizes[i], axes[i], box.lo[at(axes[i])], box.hi[at(axes[i])]));
}

namespace detail {

std::vector<std::int64_t> sizes_in(const std::vector<AxisId>& loop, const Box& box) {
  std::vector<std::int64_t> s;
  for (AxisId a : loop) s.push_back(box.size(a));
  return s;
}

std::vector<std::int64_t> strides_in(const Block& b, const std::vector<AxisId>& loop) {
  std::vector<std::int64_t> s;
  for (AxisId a : loop) s.push_back(b.stride_of(a));
  return s;
}

}  // namespace detail

Block slice(const reference::Tensor& full, const Box& box, DType dtype) {
  Block out = Block::filled(full.axes, box, 0.0);
  std::int64_t base = 0;
  std::vector<std::int64_t> strides;
  for (AxisId a : full.axes) {
    base += box.lo[at(a)] * full.stride_of(a);
    strides.push_back(full.stride_of(a));
  }
  std::size_t o = 0;
  reference::strided_loop(out.sizes, {strides}, [&](const std::int64_t* off) {
    out.data[o++] = round_to_dtype(full.data[static_cast<std::size_t>(base + off[0])], dtype);
  });
  return out;
}

Block iota(AxisId axis, const Box& box) {
  Block out = Block::filled({axis}, box, 0.0);
  for (std::size_t i = 0; i < out.data.size(); ++i)
    out.data[i] = static_cast<double>(box.lo[at(axis)] + static_cast<std::int64_t>(i));
  return out;
}

namespace {

// Offset of part's first element inside `outer` and the strides of part's axes there, for a
// part whose ranges lie inside outer's (same axes, same order).
std::pair<std::int64_t, std::vector<std::int64_t>> place(const std::vector<AxisId>& axes,
                                                         const std::vector<std::int64_t>& outer_lo,
                                                         const std::vector<std::int64_t>& outer_sizes,
                                                         const std::vector<std::int64_t>& part_lo,
                                                         const std::vector<std::int64_t>& part_sizes) {
  std::vector<std::int64_t> strides(axes.size());
  std::int64_t stride = 1, base = 0;
  for (std::size_t i = axes.size(); i-- > 0;) {
    NAPKIN_CHECK(part_lo[i] >= outer_lo[i] && part_lo[i] + part_sizes[i] <= outer_lo[i] + outer_sizes[i],
                 fmt::format("range [{}, {}) is outside [{}, {}) on axis #{}", part_lo[i],
                             part_lo[i] + part_sizes[i], outer_lo[i], outer_lo[i] + outer_sizes[i], axes[i]));
    strides[i] = stride;
    base += (part_lo[i] - outer_lo[i]) * stride;
    stride *= outer_sizes[i];
  }
  return {base, strides};
}

}  // namespace

Block read(const Block& state, const Box& box) {
  Block out = Block::filled(state.axes, box, 0.0);
  const auto [base, strides] = place(state.axes, state.lo, state.sizes, out.lo, out.sizes);
  std::size_t o = 0;
  reference::strided_loop(out.sizes, {strides}, [&, base = base](const std::int64_t* off) {
    out.data[o++] = state.data[static_cast<std::size_t>(base + off[0])];
  });
  return out;
}

void write(Block& state, const Block& part) {
  NAPKIN_CHECK(state.axes == part.axes, "write: the part's axes differ from the state's");
  const auto [base, strides] = place(state.axes, state.lo, state.sizes, part.lo, part.sizes);
  std::size_t o = 0;
  reference::strided_loop(part.sizes, {strides}, [&, base = base](const std::int64_t* off) {
    state.data[static_cast<std::size_t>(base + off[0])] = part.data[o++];
  });
}

void write(reference::Tensor& full, const Block& part) {
  NAPKIN_CHECK(full.axes == part.axes, "write: the part's axes differ from the output's");
  const std::vector<std::int64_t> zeros(full.axes.size(), 0);
  const auto [base, strides] = place(full.axes, zeros, full.sizes, part.lo, part.sizes);
  std::size_t o = 0;
  reference::strided_loop(part.sizes, {strides}, [&, base = base](const std::int64_t* off) {
    full.data[static_cast<std::size_t>(base + off[0])] = part.data[o++];
  });
}

Block contract(const std::vector<AxisId>& out_axes, const std::vector<AxisId>& over, const Box& box,
               const std::vector<const Block*>& xs) {
  Block out = Block::filled(out_axes, box, 0.0);
  std::vector<AxisId> loop = out_axes;
  loop.insert(loop.end(), over.begin(), over.end());
  std::vector<std::vector<std::int64_t>> strides{detail::strides_in(out, loop)};
  for (const Block* x : xs) {
    x->check_on(box);
    strides.push_back(detail::strides_in(*x, loop));
  }
  reference::strided_loop(detail::sizes_in(loop, box), strides, [&](const std::int64_t* off) {
    double p = xs[0]->data[static_cast<std::size_t>(off[1])];
    for (std::size_t j = 1; j < xs.size(); ++j) p *= xs[j]->data[static_cast<std::size_t>(off[j + 1])];
    out.data[static_cast<std::size_t>(off[0])] += p;
  });
  return out;
}

}  // namespace napkin::exec
