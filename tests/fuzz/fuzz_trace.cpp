// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: any text given to draw-trace's reader (emit/kernel_trace.h) yields a
// timeline or a located error, never a crash, hang or sanitizer report; a timeline draws.
// Each input is read as sections 0, 1 and 2, and as section 0 with the clock given.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "emit/kernel_trace.h"
#include "emit/svg.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const napkin::SourceText src{"fuzz.txt", std::string(reinterpret_cast<const char*>(data), size)};
  for (const auto [section, clock_mhz] : {std::pair{0, 0.0}, {1, 0.0}, {2, 0.0}, {0, 1500.0}}) {
    auto t = napkin::emit::parse_kernel_trace(src, section, clock_mhz);
    if (!t) {
      (void)t.error().format();
      continue;
    }
    if (!(t->clock_mhz > 0)) __builtin_trap();
    if (napkin::emit::draw_timeline_svg(t->lanes, 0, t->title).empty()) __builtin_trap();
  }
  return 0;
}
