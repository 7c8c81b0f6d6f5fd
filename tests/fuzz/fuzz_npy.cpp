// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: any bytes given to the .npy reader yield an array or an error, never a
// crash, hang, sanitizer report or an allocation larger than the data the bytes hold; an array
// holds one value per element of its shape.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "support/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto a = napkin::parse_npy(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.npy");
  if (!a) {
    (void)a.error().format();
    return 0;
  }
  std::uint64_t count = 1;
  for (std::int64_t s : a->shape) {
    if (s < 0) __builtin_trap();
    count *= static_cast<std::uint64_t>(s);
  }
  if (count != a->data.size() || a->data.size() > size) __builtin_trap();
  return 0;
}
