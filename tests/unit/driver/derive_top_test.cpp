// SPDX-License-Identifier: Apache-2.0
// `derive --top N`: N schedules (or every feasible one), each listed once and each shown whole,
// so that two schedules differing only at the end of their text never print alike.
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "driver/derive_command.h"

namespace napkin::driver {
namespace {

TEST(DeriveTop, ListsDistinctSchedulesEachShownWhole) {
  int checked = 0, cost_model = 0;
  for (const auto& f : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    for (const char* machine : {"h100-sxm5", "a100-sxm4-80g"}) {
      SCOPED_TRACE(f.filename().string() + " on " + machine);
      DeriveOptions o;
      o.machine = machine;
      o.top = 1000;
      o.json = true;
      const CommandOutput j = derive({f.string(), {}}, o);
      if (j.exit_code != 0) continue;  // no feasible configuration: not this test's subject
      const auto parsed = nlohmann::json::parse(j.out);
      if (parsed.at("method") == "kernel plan") {
        // Each GEMM kernel of a plan lists its solver's distinct schedules.
        o.json = false;
        const CommandOutput text = derive({f.string(), {}}, o);
        ASSERT_EQ(text.exit_code, 0) << text.err;
        std::set<std::string> lines;
        std::istringstream in(text.out);
        for (std::string line; std::getline(in, line);) {
          if (line.rfind("  ", 0) == 0 && line.size() > 3 && line[2] != ' ') lines.clear();  // the next kernel
          if (line.find("stages auto") != std::string::npos && line.find(". tile ") != std::string::npos)
            EXPECT_TRUE(lines.insert(line).second) << "listed twice: " << line;
        }
        continue;
      }
      const auto& top = parsed.at("top");
      EXPECT_EQ(top.size(), parsed.at("feasible").get<std::size_t>());
      std::set<std::string> summaries;
      for (const auto& k : top) summaries.insert(k.at("summary").get<std::string>());
      EXPECT_EQ(summaries.size(), top.size()) << "a schedule is listed twice";

      o.json = false;
      const CommandOutput text = derive({f.string(), {}}, o);
      ASSERT_EQ(text.exit_code, 0) << text.err;
      const std::string listing = text.out.substr(text.out.find("\ntop "));
      std::size_t at = 0;
      for (const auto& k : top) {  // in rank order, each summary in full
        at = listing.find(k.at("summary").get<std::string>(), at);
        ASSERT_NE(at, std::string::npos) << k.at("summary") << " is not printed whole in\n" << listing;
      }
      for (int n : {1, 3}) {  // exactly min(N, feasible) entries
        o.top = n;
        const CommandOutput few = derive({f.string(), {}}, o);
        EXPECT_NE(few.out.find(fmt::format("\ntop {}:\n", std::min<std::size_t>(n, top.size()))), std::string::npos);
        for (std::size_t i = 1; i <= top.size() && i <= 4; ++i)
          EXPECT_EQ(few.out.find(fmt::format("\n  {:>2}. ", i)) != std::string::npos, i <= static_cast<std::size_t>(n))
              << "entry " << i << " of --top " << n;
      }
      ++checked;
      cost_model += parsed.at("method") != "configuration solver";
    }
  }
  EXPECT_GE(checked, 10);
  EXPECT_GE(cost_model, 1) << "no diagram went through the cost-model search (whole schedule texts)";
}

}  // namespace
}  // namespace napkin::driver
