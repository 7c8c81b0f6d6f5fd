// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: any text given to the machine loader (TOML, docs/machines.md) yields a
// verified machine or a located error, never a crash, hang or sanitizer report; a machine
// holds the post-conditions of arch::parse_machine that need no text to check.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "arch/load.h"

namespace {

// The value of the first `name = "..."` line, so that the stem check (the file's stem is the
// machine's name) passes and the fuzzer reaches the rest of the verification.
std::string stem_of(const std::string& text) {
  const auto at = text.find("name = \"");
  if (at == std::string::npos) return "fuzz";
  const auto end = text.find('"', at + 8);
  const std::string name = text.substr(at + 8, end == std::string::npos ? 0 : end - at - 8);
  return name.empty() || name.find('/') != std::string::npos ? "fuzz" : name;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace napkin::arch;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto m = parse_machine(text, stem_of(text) + ".toml");
  if (!m) {
    (void)m.error().format();
    return 0;
  }
  const auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  if (!positive(static_cast<double>(m->sm_count.value)) || !positive(m->clock_hz.value)) __builtin_trap();
  for (const char* level : {"gmem", "l2", "smem", "rmem"})
    if (m->capacity_bytes(level) <= 0 || m->total_capacity_bytes(level) < m->capacity_bytes(level)) __builtin_trap();
  for (const char* level : {"l2", "smem", "rmem"})
    if (!positive(m->bytes_per_s(level))) __builtin_trap();
  (void)machine_key(*m);
  return 0;
}
