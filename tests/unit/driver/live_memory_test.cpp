// SPDX-License-Identifier: Apache-2.0
// One count of live memory per command (issue #19): the pseudocode states, under its variable
// table, the live memory at the peak as the schedule was judged (derive's configuration solver
// for the schedule it derived, the cost model that analyze prints otherwise), with its model
// named; the variables listed, as if all were live at once, are only an upper bound beside it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"

namespace napkin {
namespace {

using testing::run_napkin;

TEST(LiveMemory, DerivesPseudocodeCountsAsTheSolverDoes) {
  auto r = run_napkin("derive examples/attention.napkin --machine h100-sxm5 --pseudocode");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Step 2: 195 registers per thread, 97.5 KiB per warpgroup; two warpgroups share 256 KiB.
  EXPECT_NE(r.out.find("registers: N_max = 256.00 KiB / 97.50 KiB per warpgroup"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  rmem: 97.5 KiB live per group at the peak (the configuration solver's count, as derive's "
                       "step 2 prints it); capacity per group on h100-sxm5: 128 KiB; every variable listed, as if all "
                       "were live at once: 131.5 KiB\n"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("does not fit"), std::string::npos) << r.out;
}

TEST(LiveMemory, PseudocodeCountsAsAnalyzeDoesForEveryExample) {
  for (const auto& path : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    const std::string file = "examples/" + path.filename().string();
    auto a = run_napkin("analyze " + file + " --machine h100-sxm5 --json");
    auto p = run_napkin("pseudocode " + file + " --machine h100-sxm5");
    ASSERT_EQ(p.exit_code, 0) << file << ": " << p.err;
    if (p.out.find("\n# plan: ") != std::string::npos) {
      // A plan of kernels (PseudocodePrintsThePlanOfKernels): no kernel of it said not to fit.
      EXPECT_EQ(p.out.find("does not fit"), std::string::npos) << file << "\n" << p.out;
      continue;
    }
    if (a.exit_code != 0) {  // no estimate: the pseudocode says which level does not fit
      EXPECT_NE(p.out.find(": does not fit"), std::string::npos) << file << "\n" << p.out;
      continue;
    }
    const auto j = nlohmann::json::parse(a.out);
    for (const auto& l : j["levels"]) {
      if (!l["scheduled"].get<bool>()) continue;
      const std::string name = l["name"];
      const auto at = p.out.rfind("\n  " + name + ": ");  // the totals close the text
      ASSERT_NE(at, std::string::npos) << file << " " << name;
      const std::string line = p.out.substr(at + 1, p.out.find('\n', at + 1) - at - 1);
      EXPECT_NE(line.find("live per group at the peak (the cost model's count, as analyze prints it)"), std::string::npos)
          << file << ": " << line;
      EXPECT_EQ(line.find("does not fit"), std::string::npos) << file << ": " << line;
      // The same bytes as analyze's peak/group (the pseudocode prints 3 significant digits).
      const double kib = l["peak_bytes"].get<double>() / 1024;
      const std::string shown = line.substr(name.size() + 4, line.find(" live") - name.size() - 4);
      double value = std::stod(shown);
      if (shown.find("MiB") != std::string::npos) value *= 1024;
      if (shown.find(" B") != std::string::npos && shown.find("KiB") == std::string::npos) value /= 1024;
      EXPECT_NEAR(value, kib, 0.01 * kib) << file << ": " << line;
    }
  }
}

// A diagram that derives a plan of kernels prints the plan, each kernel's loop nest as the CPU
// executor runs it (a GEMM's output tile, its K axis streamed), not one fused schedule.
TEST(LiveMemory, PseudocodePrintsThePlanOfKernels) {
  auto p = run_napkin("pseudocode examples/swiglu_mlp.napkin --machine h100-sxm5");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  for (const char* part : {"# plan: 2 kernels in order", "## kernel 1 of 2: dual_gemm H <- X Wg Wu",
                           "## kernel 2 of 2: gemm Y <- Wd H", "# materialised in global memory: H[t f] bf16",
                           "G_acc += X @ Wg over e", "U_acc += X @ Wu over e", "Y_acc += H @ Wd over f"})
    EXPECT_NE(p.out.find(part), std::string::npos) << part << "\n" << p.out;
  auto md = run_napkin("pseudocode examples/layernorm.napkin --machine h100-sxm5 --markdown");
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("one pass over its rows"), std::string::npos) << md.out;
}

}  // namespace
}  // namespace napkin
