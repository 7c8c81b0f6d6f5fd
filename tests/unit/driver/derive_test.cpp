// SPDX-License-Identifier: Apache-2.0
// `napkin derive` as a script and a reader use it.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"

namespace napkin {
namespace {

using testing::run_napkin;

TEST(Derive, JsonContract) {
  auto r = run_napkin("derive examples/attention.napkin --machine h100-sxm5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"schedule", "predicted_time_s", "tflops", "bound", "groups_per_sm", "rejected"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["method"], "configuration solver");
  EXPECT_GE(j["groups_per_sm"].get<int>(), 1);
  int rejected = 0;
  for (const auto& [reason, n] : j["rejected"].items()) rejected += n.get<int>();
  EXPECT_EQ(rejected + j["feasible"].get<int>(), j["considered"].get<int>());
  EXPECT_LT(j["search_s"].get<double>(), 0.5);
}

// --timeline draws what was derived: one SM's iteration of an attention configuration, or a plan's
// kernels in order (each as long as predicted), never nothing.
TEST(Derive, TimelineOfAConfigurationAndOfAPlan) {
  const auto dir = std::filesystem::temp_directory_path() / "napkin_derive_timeline";
  std::filesystem::create_directories(dir);
  for (const char* example : {"attention", "swiglu_mlp"}) {
    const auto svg = dir / (std::string(example) + ".svg");
    std::filesystem::remove(svg);
    auto r = run_napkin(std::string("derive examples/") + example + ".napkin --machine h100-sxm5 --timeline " + svg.string());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(std::filesystem::exists(svg)) << example;
    const std::string text = testing::read_text(svg);
    EXPECT_NE(text.find("<svg"), std::string::npos) << example;
    if (std::string(example) == "swiglu_mlp") {
      EXPECT_NE(text.find("1. dual_gemm H &lt;- X Wg Wu"), std::string::npos) << text.substr(0, 3000);
      EXPECT_NE(text.find("2. gemm Y &lt;- Wd H"), std::string::npos);
    }
  }
}

TEST(Derive, PaperExampleTextMatchesGolden) {
  auto r = run_napkin("derive examples/attention_hopper_paper.napkin --machine h100-sxm5 --accumulator f16 --subloops 32,8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  testing::expect_golden("derive/attention_hopper_paper_h100-sxm5.txt", r.out);
  auto v = run_napkin("derive examples/attention.napkin --machine h100-sxm5 -v");
  ASSERT_EQ(v.exit_code, 0);
  EXPECT_NE(v.out.find("rejected:\n"), std::string::npos);
  EXPECT_NE(v.out.find("divisibility: w_q = 64 is not a multiple of 128"), std::string::npos) << v.out.substr(0, 2000);
}

// An attention kernel whose inputs and outputs outgrow the GPU's memory derives with a warning
// (as a plan does); one that fits has none.
TEST(Derive, AnAttentionLargerThanTheGpuSaysSo) {
  auto huge = run_napkin("derive examples/attention.napkin --machine h100-sxm5 --set q=4294967297");
  ASSERT_EQ(huge.exit_code, 0) << huge.err;
  EXPECT_NE(huge.out.find("warning: the inputs and outputs take 7.037e+04 GB, more than h100-sxm5's 85.9 GB of memory"),
            std::string::npos) << huge.out.substr(0, 1500);
  auto fits = run_napkin("derive examples/attention.napkin --machine h100-sxm5");
  EXPECT_EQ(fits.out.find("warning:"), std::string::npos);
}

// An attention kernel the generator does not take (the fp8 paper example: V in f16) derives,
// and says that `napkin build` refuses it and why; one it takes says nothing of the kind.
TEST(Derive, SaysWhereBuildGeneratesNoKernel) {
  auto paper = run_napkin("derive examples/attention_hopper_paper.napkin --machine h100-sxm5");
  ASSERT_EQ(paper.exit_code, 0) << paper.err;
  EXPECT_NE(paper.out.find("note: napkin build generates no kernel for it: examples/attention_hopper_paper.napkin:9:4: "
                           "error: 'V' is f16 and 'Q' fp8e4m3"),
            std::string::npos) << paper.out;
  auto plain = run_napkin("derive examples/causal.napkin --machine h100-sxm5");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("generates no kernel"), std::string::npos);
}

// Derive plans only kernels napkin build generates (the emitters' recognisers): two matmuls whose
// shape is attention's but whose layout the attention kernel does not read (C stored [d p], the
// head dim not innermost) are two GEMMs; an fp8 output, which no epilogue rounds to, is refused
// naming the generator's reason.
TEST(Derive, PlansOnlyKernelsThatBuildGenerates) {
  const auto dir = std::filesystem::temp_directory_path() / "napkin_derive_generates";
  std::filesystem::create_directories(dir);
  const auto chain = dir / "chain.napkin";
  std::ofstream(chain) << "axes m=8192 d=128 p=64 r=128\nin A[m d] bf16\nin C[d p] bf16\nin D[p r] bf16\n"
                          "T = contract(A, C over d) as bf16\nY = contract(T, D over p) as bf16\nout Y\n";
  auto r = run_napkin("derive " + chain.string() + " --machine h100-sxm5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1. gemm T <- A C"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2. gemm Y <- D T"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("generates no kernel"), std::string::npos) << r.out;
  const auto fp8 = dir / "fp8_out.napkin";
  std::ofstream(fp8) << "axes m=512 n=512 k=512\nin A[m k] bf16\nin B[n k] bf16\n"
                        "Y = contract(A, B over k) as fp8e4m3\nout Y\n";
  r = run_napkin("derive " + fp8.string() + " --machine h100-sxm5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("napkin build generates no such kernel"), std::string::npos) << r.err;
}

TEST(Derive, PseudocodeOfTheBestSchedule) {
  auto r = run_napkin("derive examples/causal.napkin --machine h100-sxm5 --top 1 --pseudocode");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto at = r.out.find("pseudocode of the best schedule:");
  ASSERT_NE(at, std::string::npos);
  EXPECT_NE(r.out.find("O_acc <- alpha * O_acc + (P @ V over k)", at), std::string::npos) << r.out.substr(at);
}

TEST(Derive, RowLayoutQuadMakesHeadDim256Feasible) {
  // One row per thread (the paper) needs 128 KiB of registers per warpgroup for a d = 256
  // accumulator; WGMMA's layout (64 rows per warpgroup over quads of threads) needs half.
  // The paper's layout fits nothing, so derive gives the plan, whose attention kernel is
  // configured with the kernel's own (quad) layout.
  auto paper = run_napkin("derive examples/attention.napkin --machine h100-sxm5 --set d=256 --set h=8");
  EXPECT_EQ(paper.exit_code, 0) << paper.err;
  EXPECT_NE(paper.out.find("chosen plan: 1 kernel"), std::string::npos) << paper.out;
  EXPECT_NE(paper.out.find("1. attention O <- Q K V"), std::string::npos) << paper.out;
  auto quad = run_napkin("derive examples/attention.napkin --machine h100-sxm5 --set d=256 --set h=8 --row-layout quad --json");
  ASSERT_EQ(quad.exit_code, 0) << quad.err;
  const auto j = nlohmann::json::parse(quad.out);
  EXPECT_EQ(j["configuration"]["row_layout"], "quad");
  EXPECT_EQ(j["configuration"]["rows_per_warpgroup"].get<int>() % 64, 0);
  for (const auto& dv : j["configuration"]["divisibility"])
    for (const auto& why : dv["reasons"]) EXPECT_EQ(why.get<std::string>().find("one row per thread"), std::string::npos);
}

TEST(Derive, BadArguments) {
  auto acc = run_napkin("derive examples/attention.napkin --machine h100-sxm5 --accumulator i32");
  EXPECT_EQ(acc.exit_code, 2);  // a usage error (tools/napkin/cli.h)
  EXPECT_EQ(acc.err.substr(0, acc.err.find('\n')),
            "error: --accumulator i32: expected a floating-point dtype: f64, f32, tf32, bf16, f16, fp8e4m3 or fp8e5m2");
  auto layout = run_napkin("derive examples/attention.napkin --machine h100-sxm5 --row-layout quads");
  EXPECT_EQ(layout.exit_code, 2);
  EXPECT_EQ(layout.err.substr(0, layout.err.find('\n')),
            "error: --row-layout quads: expected one of: thread quad; did you mean 'quad'?");
  auto a100 = run_napkin("derive examples/attention_hopper_paper.napkin --machine a100-sxm4-80g");
  EXPECT_EQ(a100.exit_code, 1);
  EXPECT_NE(a100.err.find("a100-sxm4-80g"), std::string::npos) << a100.err;
}

}  // namespace
}  // namespace napkin
