// SPDX-License-Identifier: Apache-2.0
// `napkin run-schedule` and `napkin run-plan` as a user meets them: the comparison with the
// reference, the transfer table, JSON that parses, and located errors for bad schedules.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"

namespace napkin {
namespace {

using testing::run_napkin;

TEST(ExecCli, RunScheduleMatchesTheReferenceAndPrintsTransfers) {
  auto r = run_napkin(
      "run-schedule examples/attention.napkin --set b=1 --set h=2 --set q=13 --set k=11 --set d=4 "
      "--schedule 'smem{tile b=1 h=1 q=8; stream k=4:online_softmax} rmem{tile q=4}'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("nest: tile b=1 (smem) > tile h=1 (smem) > tile q=8 (smem) > tile q=4 (rmem) > "
                       "stream k=4:online_softmax (smem)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("groups: smem 4, rmem 8\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": match\n"), std::string::npos) << r.out;
  // K: 2 heads x 11 keys x 4 per q tile; 2 smem tiles (8 + 5) and 4 rmem tiles (4 4 4 1).
  EXPECT_NE(r.out.find("  smem     K                       176              -\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  rmem     K                       352              -\n"), std::string::npos) << r.out;
}

TEST(ExecCli, JsonReportsErrorsTransfersAndNotes) {
  auto r = run_napkin(
      "run-schedule examples/rmsnorm_matmul.napkin --set t=5 --set e=9 --set f=4 --seed 3 --json "
      "--schedule 'smem{tile t=2; stream e=4:normalised_contraction}'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("matches"), true);
  EXPECT_EQ(j.at("streamed_axis"), "e");
  EXPECT_EQ(j.at("loads").at("smem").at("W"), 9 * 4 * 3);  // once per t tile
  EXPECT_EQ(j.at("stores").at("smem").at("Y"), 5 * 4);
  ASSERT_EQ(j.at("notes").size(), 1u);  // N is cast to bf16 before the streamed matmul
  EXPECT_LE(j.at("max_rel_error").get<double>(), 0.1);
}

TEST(ExecCli, BadSchedulesAndSizesAreLocatedErrors) {
  auto r = run_napkin("run-schedule examples/attention.napkin --set q=4 --set k=4 --schedule 'smem{tile k=2}'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.substr(0, r.err.find('\n')),
            "--schedule:1:11: error: cannot tile 'k' in level 'smem': it is not woven (max over k in "
            "softmax 'P', sum over k in softmax 'P' and contract 'O' over k reduce over it); stream it "
            "instead, with online_softmax");
  r = run_napkin("run-schedule examples/attention.napkin --schedule 'smem{tile q=2}'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("more than --max-work"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(e.g. --set q=64)"), std::string::npos) << r.err;  // the diagram's largest axis
}

// The derived plan's kernels run in order on the CPU: a GEMM through its tiled loop nest, the
// row kernels through the reference over their own diagrams; each output's error is printed.
TEST(ExecCli, RunPlanRunsEveryKernelAgainstTheReference) {
  auto r = run_napkin("run-plan examples/swiglu_mlp.napkin --machine h100-sxm5 --set t=19 --set e=64 --set f=48");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("plan on h100-sxm5: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("     ran: tile"), std::string::npos) << r.out;  // a GEMM's loop nest
  EXPECT_NE(r.out.find("  Y            max abs error "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" match\n"), std::string::npos) << r.out;
  r = run_napkin("run-plan examples/layernorm.napkin --machine h100-sxm5 --set t=7 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("matches"), true);
  EXPECT_GE(j.at("kernels").size(), 1u);
  EXPECT_LE(j.at("outputs").at(0).at("scaled_error").get<double>(), 0.03);
  // Sizes the reference cannot run, a machine that does not exist: errors, exit 1.
  r = run_napkin("run-plan examples/swiglu_mlp.napkin --machine h100-sxm5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("more than --max-work"), std::string::npos) << r.err;
  r = run_napkin("run-plan examples/layernorm.napkin --machine no-such-gpu --set t=7");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no-such-gpu"), std::string::npos) << r.err;
}

// run-plan runs the plan derive prints and build builds: an output no kernel writes (fp8 from a
// row kernel) is refused by all three alike, not run by the planner's rules alone.
TEST(ExecCli, RunPlanRefusesWhatBuildRefuses) {
  const auto file = (std::filesystem::temp_directory_path() / "napkin_run_plan_fp8.napkin").string();
  std::ofstream(file) << "axes t=64 e=256\nin X[t e] bf16\ns = max(X over e)\nQx = X / s as fp8e4m3\nout Qx\n";
  for (const std::string cmd : {"derive", "run-plan"}) {
    auto r = run_napkin(cmd + " " + file + " --machine h100-sxm5");
    EXPECT_EQ(r.exit_code, 1) << cmd << ": " << r.out;
    EXPECT_NE(r.err.find("output 'Qx' is fp8e4m3: row kernels write"), std::string::npos) << cmd << ": " << r.err;
  }
}

}  // namespace
}  // namespace napkin
