// SPDX-License-Identifier: Apache-2.0
#include "reference/tensor.h"

#include <algorithm>

#include "reference/strided_loop.h"

namespace napkin::reference {

Tensor Tensor::zeros(const ir::Diagram& d, const std::vector<ir::AxisId>& axes, double fill) {
  Tensor t;
  t.axes = axes;
  for (ir::AxisId a : axes) t.sizes.push_back(d.axis(a).size);
  t.data.assign(static_cast<std::size_t>(d.elements(axes)), fill);
  return t;
}

std::int64_t Tensor::stride_of(ir::AxisId axis) const {
  std::int64_t stride = 1;
  for (std::size_t i = axes.size(); i-- > 0;) {
    if (axes[i] == axis) return stride;
    stride *= sizes[i];
  }
  return 0;
}

Tensor Tensor::permuted(const std::vector<ir::AxisId>& order) const {
  if (order == axes) return *this;
  Tensor out;
  out.axes = order;
  for (ir::AxisId a : order) {
    const auto it = std::find(axes.begin(), axes.end(), a);
    out.sizes.push_back(sizes[static_cast<std::size_t>(it - axes.begin())]);
  }
  out.data.resize(data.size());
  std::vector<std::int64_t> src;
  for (ir::AxisId a : order) src.push_back(stride_of(a));
  std::int64_t dst = 0;
  strided_loop(out.sizes, {src}, [&](const std::int64_t* off) {
    out.data[static_cast<std::size_t>(dst++)] = data[static_cast<std::size_t>(off[0])];
  });
  return out;
}

}  // namespace napkin::reference
