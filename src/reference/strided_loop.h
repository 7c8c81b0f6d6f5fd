// SPDX-License-Identifier: Apache-2.0
// One loop nest over an index space, advancing one offset per operand by that operand's
// stride along each loop axis (0 = broadcast). The innermost axis is a tight loop.
#pragma once

#include <cstdint>
#include <vector>

namespace napkin::reference {

// Calls body(offsets) once per index of the space `sizes` (row-major, outermost first);
// offsets[j] = sum_i index[i] * strides[j][i]. Does nothing if any size is 0.
template <class Body>
void strided_loop(const std::vector<std::int64_t>& sizes,
                  const std::vector<std::vector<std::int64_t>>& strides, Body&& body) {
  const std::size_t n = sizes.size(), k = strides.size();
  for (std::int64_t s : sizes)
    if (s == 0) return;
  std::vector<std::int64_t> offset(k, 0), inner_offset(k, 0), inner_stride(k, 0);
  if (n == 0) {
    body(offset.data());
    return;
  }
  for (std::size_t j = 0; j < k; ++j) inner_stride[j] = strides[j][n - 1];
  std::vector<std::int64_t> index(n, 0);
  const std::int64_t inner = sizes[n - 1];
  for (;;) {
    inner_offset = offset;
    for (std::int64_t i = 0; i < inner; ++i) {
      body(inner_offset.data());
      for (std::size_t j = 0; j < k; ++j) inner_offset[j] += inner_stride[j];
    }
    std::size_t dim = n - 1;
    for (;;) {
      if (dim == 0) return;
      --dim;
      ++index[dim];
      for (std::size_t j = 0; j < k; ++j) offset[j] += strides[j][dim];
      if (index[dim] < sizes[dim]) break;
      for (std::size_t j = 0; j < k; ++j) offset[j] -= strides[j][dim] * sizes[dim];
      index[dim] = 0;
    }
  }
}

}  // namespace napkin::reference
