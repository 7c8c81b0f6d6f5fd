// SPDX-License-Identifier: Apache-2.0
// A dense f64 tensor over named diagram axes, row-major in the order of `axes`.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/ir.h"

namespace napkin::reference {

struct Tensor {
  std::vector<ir::AxisId> axes;
  std::vector<std::int64_t> sizes;  // sizes[i] is the size of axes[i]
  std::vector<double> data;         // row-major; data.size() == product of sizes

  static Tensor zeros(const ir::Diagram& d, const std::vector<ir::AxisId>& axes, double fill = 0.0);
  std::int64_t elements() const { return static_cast<std::int64_t>(data.size()); }
  // Row-major stride of `axis` in this tensor, or 0 if the tensor does not have it (so the
  // tensor is broadcast along it).
  std::int64_t stride_of(ir::AxisId axis) const;
  // A copy with its axes reordered to `order` (a permutation of axes).
  Tensor permuted(const std::vector<ir::AxisId>& order) const;
};

}  // namespace napkin::reference
