// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: any byte string given to the parser yields a diagram or a diagnostic,
// never a crash, hang or sanitizer report; a parsed diagram must print and re-parse equivalent
// (ir::equivalent: equal up to node order), and
// the attention emitter must either refuse it with a diagnostic or write its kernel (the text
// napkin build would compile: the recogniser, the fused code, the block bound and summaries).
#include <cstddef>
#include <cstdint>
#include <string>

#include "emit/attention_kernel.h"
#include "ir/parser.h"
#include "ir/printer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const napkin::SourceText src{"fuzz.napkin", std::string(reinterpret_cast<const char*>(data), size)};
  auto parsed = napkin::ir::parse_diagram(src);
  if (!parsed) {
    (void)parsed.error().format();
    return 0;
  }
  const std::string printed = napkin::ir::print_diagram(parsed->diagram);
  auto again = napkin::ir::parse_diagram({"printed.napkin", printed});
  if (!again || !napkin::ir::equivalent(again->diagram, parsed->diagram)) __builtin_trap();  // round-trip broken
  auto form = napkin::emit::recognise_attention(parsed->diagram, src);
  if (!form) {
    (void)form.error().format();
    return 0;
  }
  const napkin::emit::KernelProvenance prov{"fuzz", napkin::ir::diagram_key(parsed->diagram), src.name, ""};
  if (napkin::emit::emit_attention_kernel(parsed->diagram, *form, prov, "{}").empty()) __builtin_trap();
  return 0;
}
