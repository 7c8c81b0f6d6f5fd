// SPDX-License-Identifier: Apache-2.0
// A diagram (an example file, or text), its streamability report and the h100-sxm5 machine:
// what the configuration solver's tests start from.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"
#include "ir/parser.h"
#include "sched/streaming.h"

namespace napkin::search::testing_fixture {

struct Fixture {
  ir::Diagram d;
  sched::StreamingReport report;
  arch::Machine m;
};

inline Fixture load(const std::string& text_or_file, bool file = true) {
  auto p = file ? ir::load_diagram((napkin::testing::source_dir() / "examples" / text_or_file).string())
                : ir::parse_diagram(SourceText{"t.napkin", text_or_file});
  EXPECT_TRUE(p.ok()) << p.error().format();
  auto m = arch::find_machine("h100-sxm5", arch::default_machines_dir());
  EXPECT_TRUE(m.ok());
  return {p->diagram, sched::analyse_streaming(p->diagram), m.value()};
}

}  // namespace napkin::search::testing_fixture
