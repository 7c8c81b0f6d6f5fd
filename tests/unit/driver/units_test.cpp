// SPDX-License-Identifier: Apache-2.0
// The numbers derive, analyze and report print come from one place (driver/units.h).
#include <gtest/gtest.h>

#include "driver/units.h"
#include "ir/parser.h"

namespace napkin::driver {
namespace {

TEST(Units, DurationsKeepFourSignificantDigitsAndWholeNanoseconds) {
  EXPECT_EQ(seconds_text(1.48e-3), "1.480 ms");
  EXPECT_EQ(seconds_text(8.013e-5), "80.13 us");
  EXPECT_EQ(seconds_text(8.013e-5, "µs"), "80.13 µs");
  EXPECT_EQ(seconds_text(2.5), "2.500 s");
  EXPECT_EQ(seconds_text(5.596e-7), "560 ns");
  EXPECT_EQ(seconds_text(2.017e-8), "20 ns");
}

TEST(Units, KibibytesWithTwoDecimals) {
  EXPECT_EQ(kib_text(32 * 1024), "32.00 KiB");
  EXPECT_EQ(kib_text(1536), "1.50 KiB");
}

TEST(Units, ComputeDtypeIsTheFirstNarrowInput) {
  auto narrow = ir::parse_diagram(
      SourceText{"t.napkin", "axes m=4 k=4\nin A[m k] f32\nin B[m k] bf16\nC[m] = contract(A, B over k)\nout C\n"});
  ASSERT_TRUE(narrow.ok()) << narrow.error().format();
  EXPECT_EQ(compute_dtype(narrow->diagram), DType::bf16);
  auto wide = ir::parse_diagram(
      SourceText{"t.napkin", "axes m=4 k=4\nin A[m k] f32\nin B[m k] f64\nC[m] = contract(A, B over k)\nout C\n"});
  ASSERT_TRUE(wide.ok()) << wide.error().format();
  EXPECT_EQ(compute_dtype(wide->diagram), DType::f32);
}

}  // namespace
}  // namespace napkin::driver
