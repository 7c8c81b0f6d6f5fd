// SPDX-License-Identifier: Apache-2.0
#include "support/dtype.h"

#include <cmath>
#include <limits>

namespace napkin {

namespace {

struct FloatFormat {
  int mantissa_bits;   // explicit fraction bits
  int min_exponent;    // exponent of the smallest normal number (2^min_exponent)
  double max_finite;   // largest finite value
  bool saturates;      // overflow gives +-max_finite instead of +-inf
};

FloatFormat float_format(DType t) {
  switch (t) {
    case DType::f32: return {23, -126, 3.4028234663852886e38, false};
    case DType::tf32: return {10, -126, 3.4011621342146535e38, false};
    case DType::bf16: return {7, -126, 3.3895313892515355e38, false};
    case DType::f16: return {10, -14, 65504.0, false};
    case DType::fp8e4m3: return {3, -6, 448.0, true};
    case DType::fp8e5m2: return {2, -14, 57344.0, false};
    default: return {52, -1022, std::numeric_limits<double>::max(), false};
  }
}

// Round x to `mantissa_bits` fraction bits at its binade, with subnormals below min_exponent.
double round_float(double x, const FloatFormat& f) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  int exponent = std::ilogb(x);
  if (exponent < f.min_exponent) exponent = f.min_exponent;
  const double quantum = std::ldexp(1.0, exponent - f.mantissa_bits);
  const double rounded = std::nearbyint(x / quantum) * quantum;  // default mode: ties to even
  if (std::fabs(rounded) > f.max_finite) {
    // Values within half a quantum above max_finite round down to it (IEEE overflow rule).
    const double top_quantum = std::ldexp(1.0, std::ilogb(f.max_finite) - f.mantissa_bits);
    if (f.saturates || std::fabs(x) < f.max_finite + top_quantum / 2)
      return std::copysign(f.max_finite, x);
    return std::copysign(std::numeric_limits<double>::infinity(), x);
  }
  return rounded;
}

}  // namespace

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::tf32: return "tf32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::fp8e4m3: return "fp8e4m3";
    case DType::fp8e5m2: return "fp8e5m2";
    case DType::i32: return "i32";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType t : kAllDTypes)
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

int dtype_bytes(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: case DType::tf32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: return 2;
    case DType::fp8e4m3: case DType::fp8e5m2: case DType::boolean: return 1;
  }
  return 0;
}

bool is_float(DType t) { return t != DType::i32 && t != DType::boolean; }

int mantissa_bits(DType t) { return float_format(t).mantissa_bits; }

DType promote_float(DType a, DType b) {
  const FloatFormat fa = float_format(a), fb = float_format(b);
  if (fa.mantissa_bits != fb.mantissa_bits) return fa.mantissa_bits > fb.mantissa_bits ? a : b;
  return fa.min_exponent <= fb.min_exponent ? a : b;
}

double round_to_dtype(double x, DType t) {
  switch (t) {
    case DType::f64: return x;
    case DType::i32: {
      if (std::isnan(x)) return 0.0;
      const double r = std::nearbyint(x);
      return std::fmax(-2147483648.0, std::fmin(2147483647.0, r));
    }
    case DType::boolean: return x != 0.0 ? 1.0 : 0.0;
    default: return round_float(x, float_format(t));
  }
}

}  // namespace napkin
