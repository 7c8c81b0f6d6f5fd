// SPDX-License-Identifier: Apache-2.0
#include "support/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

namespace napkin {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(DType, NamesRoundTrip) {
  for (DType t : kAllDTypes) {
    auto parsed = parse_dtype(dtype_name(t));
    ASSERT_TRUE(parsed.has_value()) << dtype_name(t);
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_FALSE(parse_dtype("float16").has_value());
  EXPECT_EQ(dtype_name(DType::boolean), "bool");
}

TEST(DType, Bytes) {
  EXPECT_EQ(dtype_bytes(DType::f64), 8);
  EXPECT_EQ(dtype_bytes(DType::tf32), 4);
  EXPECT_EQ(dtype_bytes(DType::bf16), 2);
  EXPECT_EQ(dtype_bytes(DType::fp8e4m3), 1);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(round_to_dtype(1.0 + std::ldexp(1.0, -8), DType::bf16), 1.0);  // tie -> even
  EXPECT_EQ(round_to_dtype(1.0 + 3 * std::ldexp(1.0, -8), DType::bf16), 1.0 + std::ldexp(1.0, -6));
  EXPECT_EQ(round_to_dtype(3.14159265, DType::bf16), 3.140625);
  EXPECT_EQ(round_to_dtype(-0.0, DType::bf16), 0.0);
  EXPECT_EQ(round_to_dtype(1e39, DType::bf16), kInf);
}

// bf16 is the top half of an f32: check against that definition on many values.
TEST(DType, Bf16MatchesF32BitTruncationWithRounding) {
  for (int i = -2000; i <= 2000; ++i) {
    const float x = static_cast<float>(i) * 0.0137f + 0.5f;
    std::uint32_t bits;
    std::memcpy(&bits, &x, 4);
    const std::uint32_t rounded = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000u;
    float expected;
    std::memcpy(&expected, &rounded, 4);
    EXPECT_EQ(round_to_dtype(x, DType::bf16), static_cast<double>(expected)) << x;
  }
}

TEST(DType, F16RangeAndSubnormals) {
  EXPECT_EQ(round_to_dtype(65504.0, DType::f16), 65504.0);
  EXPECT_EQ(round_to_dtype(65519.0, DType::f16), 65504.0);  // below the overflow midpoint
  EXPECT_EQ(round_to_dtype(65520.0, DType::f16), kInf);     // at the midpoint: overflows
  EXPECT_EQ(round_to_dtype(std::ldexp(1.0, -24), DType::f16), std::ldexp(1.0, -24));
  EXPECT_EQ(round_to_dtype(std::ldexp(1.0, -26), DType::f16), 0.0);  // below half the smallest
  EXPECT_EQ(round_to_dtype(0.1, DType::f16), 0.0999755859375);
}

TEST(DType, Fp8Formats) {
  EXPECT_EQ(round_to_dtype(448.0, DType::fp8e4m3), 448.0);
  EXPECT_EQ(round_to_dtype(1000.0, DType::fp8e4m3), 448.0);  // saturates, no infinity
  EXPECT_EQ(round_to_dtype(-1000.0, DType::fp8e4m3), -448.0);
  EXPECT_EQ(round_to_dtype(0.3, DType::fp8e4m3), 0.3125);
  EXPECT_EQ(round_to_dtype(std::ldexp(1.0, -9), DType::fp8e4m3), std::ldexp(1.0, -9));  // min subnormal
  EXPECT_EQ(round_to_dtype(57344.0, DType::fp8e5m2), 57344.0);
  EXPECT_EQ(round_to_dtype(70000.0, DType::fp8e5m2), kInf);
  EXPECT_EQ(round_to_dtype(0.3, DType::fp8e5m2), 0.3125);
}

TEST(DType, IntegerAndBool) {
  EXPECT_EQ(round_to_dtype(2.5, DType::i32), 2.0);
  EXPECT_EQ(round_to_dtype(-3.7, DType::i32), -4.0);
  EXPECT_EQ(round_to_dtype(1e12, DType::i32), 2147483647.0);
  EXPECT_EQ(round_to_dtype(0.2, DType::boolean), 1.0);
  EXPECT_EQ(round_to_dtype(0.0, DType::boolean), 0.0);
}

TEST(DType, NanStaysNan) {
  EXPECT_TRUE(std::isnan(round_to_dtype(std::nan(""), DType::bf16)));
  EXPECT_TRUE(std::isnan(round_to_dtype(std::nan(""), DType::fp8e4m3)));
}

TEST(DType, Promotion) {
  EXPECT_EQ(promote_float(DType::bf16, DType::f16), DType::f16);  // more mantissa bits
  EXPECT_EQ(promote_float(DType::bf16, DType::f32), DType::f32);
  EXPECT_EQ(promote_float(DType::fp8e4m3, DType::fp8e5m2), DType::fp8e4m3);
  EXPECT_EQ(promote_float(DType::f16, DType::tf32), DType::tf32);  // same mantissa, wider range
}

}  // namespace
}  // namespace napkin
