// SPDX-License-Identifier: Apache-2.0
// Reading and writing NumPy .npy files (format versions 1.0-3.0, C order, little-endian).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/diagnostic.h"

namespace napkin {

struct NpyArray {
  std::vector<std::int64_t> shape;
  std::vector<double> data;  // C order; every supported element type is widened to f64
};

// Supported element types: <f8 <f4 <f2 <i8 <i4 <i2 |i1 |u1 |b1. Errors name the path and what
// was expected (e.g. a Fortran-order or big-endian array).
Result<NpyArray> read_npy(const std::string& path);
// The same for the bytes of a file; `path` names it in errors. Any bytes give an array or an
// error, never a crash, and memory no larger than the data the bytes hold.
Result<NpyArray> parse_npy(std::string_view bytes, const std::string& path);
// Writes `a` as <f8 (version 1.0). Errors name the path.
Result<bool> write_npy(const std::string& path, const NpyArray& a);

}  // namespace napkin
