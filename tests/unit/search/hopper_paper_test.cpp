// SPDX-License-Identifier: Apache-2.0
// The paper's Hopper derivation (sections 5.6-5.7) and its reading of FlashAttention-3
// (section 6), from the configuration solver's arithmetic on examples/attention_hopper_paper.
#include <cmath>

#include <gtest/gtest.h>

#include "search/configure.h"
#include "search/search.h"
#include "unit/search/fixture.h"

namespace napkin::search {
namespace {

using testing_fixture::Fixture;
using testing_fixture::load;

// The paper's choices (Tables 1-2): w_q = 128, s_x = 64, FP16 accumulation, sub-loops d' = 32
// and d'' = 8; the number of warpgroups is left to the solver.
Config paper_config() {
  Config c;
  c.rows_per_warpgroup = 128;
  c.chunk = 64;
  c.stages = 2;
  c.overlap = Overlap::pingpong;
  c.accumulator_dtype = DType::f16;
  c.subloops = {32, 8};
  return c;
}

TEST(HopperPaper, ThreeWarpgroupsFromSharedMemoryAndRegisters) {
  const Fixture f = load("attention_hopper_paper.napkin");
  auto conf = configure(f.d, f.report, f.m, paper_config());
  ASSERT_TRUE(conf.ok()) << conf.error().format();
  EXPECT_FALSE(conf->rejection.has_value()) << *conf->rejection;
  // Table 2: SMEM per CTA 48 KB (K and V chunks, two stages), per warpgroup 48 KB (Q tile and
  // the O store), registers per warpgroup 74.75 KB.
  EXPECT_EQ(conf->smem_per_cta_bytes, 48 * 1024);
  EXPECT_EQ(conf->smem_per_warpgroup_bytes, 48 * 1024);
  EXPECT_EQ(conf->registers_per_warpgroup_bytes, 74.75 * 1024);
  EXPECT_EQ(std::floor(conf->max_warpgroups_smem * 10) / 10, 3.7);
  EXPECT_EQ(std::floor(conf->max_warpgroups_registers * 10) / 10, 3.4);
  EXPECT_EQ(conf->warpgroups, 3);
  // Divisibility: w_q % 128, d % 128.
  EXPECT_EQ(conf->divisibility[0].multiple, 128);
  for (const Divisibility& dv : conf->divisibility)
    if (dv.what == "d") EXPECT_EQ(dv.multiple, 128);
}

TEST(HopperPaper, ThroughputTableAndTheOnePointThreeTwoPetaflops) {
  const Fixture f = load("attention_hopper_paper.napkin");
  auto conf = configure(f.d, f.report, f.m, paper_config());
  ASSERT_TRUE(conf.ok());
  // Table 3: QK 2 clk (fp8), exp 4.06 clk, PV 4 clk (f16), FP16 accumulate 0.5 clk.
  ASSERT_EQ(conf->rates.size(), 4u);
  EXPECT_DOUBLE_EQ(conf->rates[0].clk_per_row, 2.0);
  EXPECT_NEAR(conf->rates[1].clk_per_row, 4.0625, 1e-12);
  EXPECT_DOUBLE_EQ(conf->rates[2].clk_per_row, 4.0);
  EXPECT_DOUBLE_EQ(conf->rates[3].clk_per_row, 0.5);
  EXPECT_EQ(conf->bound_unit, "tensor_core");
  // 384 rows x 6 clk at 1.83 GHz: 1.26 us of compute against 0.97 us to stream K and V to
  // every SM over HBM: compute-bound.
  EXPECT_NEAR(conf->compute_s_per_iteration * 1e6, 1.26, 0.005);
  EXPECT_NEAR(conf->transfer_s_per_iteration * 1e6, 0.97, 0.005);
  EXPECT_TRUE(conf->compute_bound);
  EXPECT_NEAR(conf->ideal_flops_per_s / 1e15, 1.32, 0.005);
}

// Section 6: with a 66 % softmax overhead, FP16 with the softmax under the next GEMM inside a
// warpgroup reaches 75 % of peak, and FP8 with ping-pong 60 %.
TEST(HopperPaper, ReadingOfFlashAttention3) {
  const std::string body =
      "axes b=4 h=16 q=8192 k=8192 d=128\nin Q[b h q d] {0}\nin K[b h k d] {0}\nin V[b h k d] {0}\n"
      "S = contract(Q, K over d) * 0.08838834764831845\nP = softmax(S over k) as {0}\n"
      "O = contract(P, V over k) as {0}\nout O\n";
  auto efficiency = [&](const char* dtype, Overlap overlap) {
    std::string text = body;
    for (std::size_t pos; (pos = text.find("{0}")) != std::string::npos;) text.replace(pos, 3, dtype);
    const Fixture f = load(text, false);
    Config c = paper_config();
    c.overhead = 0.66;
    c.overlap = overlap;
    auto conf = configure(f.d, f.report, f.m, c);
    EXPECT_TRUE(conf.ok()) << conf.error().format();
    return conf->efficiency;
  };
  EXPECT_NEAR(efficiency("f16", Overlap::intra_warpgroup), 0.75, 0.01);
  EXPECT_NEAR(efficiency("fp8e4m3", Overlap::pingpong), 0.60, 0.01);
}

TEST(Search, RanksFeasibleConfigurationsAndCountsRejections) {
  const Fixture f = load("attention_hopper_paper.napkin");
  SearchOptions o;
  o.accumulator_dtype = DType::f16;
  o.subloops = {32, 8};
  auto r = search(f.d, f.report, f.m, o);
  ASSERT_TRUE(r.ok()) << r.error().format();
  EXPECT_EQ(r->method, "configuration solver");
  ASSERT_FALSE(r->ranked.empty());
  for (std::size_t i = 1; i < r->ranked.size(); ++i)
    EXPECT_LE(r->ranked[i - 1].predicted_time_s, r->ranked[i].predicted_time_s);
  int rejected = 0;
  for (const auto& [reason, n] : r->rejected) rejected += n;
  EXPECT_EQ(rejected + static_cast<int>(r->ranked.size()), r->considered);
  EXPECT_GT(r->rejected.at("divisibility"), 0);
  EXPECT_GT(r->rejected.at("registers") + r->rejected.at("smem"), 0);
  EXPECT_EQ(r->rejections.size(), static_cast<std::size_t>(rejected));
}

TEST(Search, OtherShapesGoThroughTheCostModel) {
  const Fixture f = load("matmul.napkin");
  auto r = search(f.d, f.report, f.m);
  ASSERT_TRUE(r.ok()) << r.error().format();
  EXPECT_EQ(r->method, "cost model over schedules");
  ASSERT_FALSE(r->ranked.empty());
  EXPECT_GT(r->ranked.front().tflops, 0);
}

// Attention without a softmax (a plain sum over the keys after the first contraction) is still
// attention's shape: the configuration solver, with its exponential and the division by a
// score on the SFU and no row statistics or rescale.
TEST(Search, UnnormalisedAttentionGoesThroughTheSolver) {
  const Fixture f = load("sigmoid_attention.napkin");
  auto r = search(f.d, f.report, f.m);
  ASSERT_TRUE(r.ok()) << r.error().format();
  EXPECT_EQ(r->method, "configuration solver");
  ASSERT_FALSE(r->ranked.empty());
  const Configuration& c = *r->ranked.front().configuration;
  std::vector<std::string> sfu;
  for (const auto& rate : c.rates)
    if (rate.unit == arch::Unit::sfu) sfu.push_back(rate.op);
  EXPECT_EQ(sfu, (std::vector<std::string>{"exp", "reciprocal (a division by a score)"}));
  for (const auto& v : c.variables) EXPECT_EQ(v.name.find("row statistics"), std::string::npos) << v.name;
}

}  // namespace
}  // namespace napkin::search
