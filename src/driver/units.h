// SPDX-License-Identifier: Apache-2.0
// Numbers as the commands print them, in one place so that derive, analyze and report agree.
#pragma once

#include <string>
#include <string_view>

#include "ir/ir.h"
#include "support/dtype.h"

namespace napkin::driver {

// A duration in s, ms or us with four significant digits, trailing zeros kept ("1.480 ms", "80.13 us"), or in whole
// ns below a microsecond ("970 ns"). `micro` is the microsecond unit: "us" in plain text, "µs"
// in HTML.
std::string seconds_text(double s, std::string_view micro = "us");

// Bytes in KiB with two decimals: "32.00 KiB".
std::string kib_text(double bytes);

// The dtype the diagram's contractions run in: its first narrow floating-point input's (bf16,
// f16, fp8), or f32 when every input is f32 or wider.
DType compute_dtype(const ir::Diagram& d);

}  // namespace napkin::driver
