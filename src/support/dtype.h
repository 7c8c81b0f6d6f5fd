// SPDX-License-Identifier: Apache-2.0
// Element types of napkin tensors: their names, sizes, and rounding of f64 values to them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace napkin {

enum class DType : std::uint8_t { f64, f32, tf32, bf16, f16, fp8e4m3, fp8e5m2, i32, boolean };

inline constexpr DType kAllDTypes[] = {DType::f64,  DType::f32,     DType::tf32,
                                       DType::bf16, DType::f16,     DType::fp8e4m3,
                                       DType::fp8e5m2, DType::i32,  DType::boolean};

// Canonical spelling as written in .napkin files ("bf16", "bool", ...).
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);

// Bytes one value occupies in memory (tf32 is stored in 4 bytes, bool in 1).
int dtype_bytes(DType t);
bool is_float(DType t);
// Explicit fraction bits of a floating type (f64 52, f32 23, bf16 7, ...).
int mantissa_bits(DType t);

// The wider of two floating types (more mantissa bits, then more exponent range); the
// result type of an elementwise op on mixed floating inputs.
DType promote_float(DType a, DType b);

// Round an f64 value to the nearest value representable in `t` (round-to-nearest-even;
// fp8e4m3 saturates to +-448 and has no infinity, following the OCP FP8 spec's "satfinite"
// conversion; fp8e5m2 overflows to infinity like IEEE formats). i32 rounds to nearest and
// saturates; bool maps nonzero to 1. NaN stays NaN for float types.
double round_to_dtype(double x, DType t);

}  // namespace napkin
