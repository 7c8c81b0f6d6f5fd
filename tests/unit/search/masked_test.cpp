// SPDX-License-Identifier: Apache-2.0
// The configuration solver skips the blocks a mask makes all -inf: causal attention costs the
// visited fraction of the unmasked time, and the fraction is the block count of the diagonal.
#include <cmath>

#include <gtest/gtest.h>

#include "search/configure.h"
#include "search/kernel_solver.h"
#include "search/search.h"
#include "unit/search/fixture.h"

namespace napkin::search {
namespace {

using testing_fixture::Fixture;
using testing_fixture::load;

Config config() {
  Config c;
  c.rows_per_warpgroup = 128;
  c.chunk = 32;
  c.warpgroups = 2;
  c.stages = 2;
  c.overlap = Overlap::pingpong;
  return c;
}

TEST(MaskedConfiguration, CausalCostsTheVisitedBlocksOfTheUnmaskedTime) {
  const Fixture full = load("attention.napkin"), causal = load("causal.napkin");  // same sizes
  auto a = configure(full.d, full.report, full.m, config());
  auto b = configure(causal.d, causal.report, causal.m, config());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_FALSE(a->rejection) << *a->rejection;
  ASSERT_FALSE(b->rejection) << *b->rejection;
  EXPECT_EQ(a->visited_fraction, 1.0);
  // q = k = 8192, CTA tiles of 2 x 128 = 256 rows, chunks of 32 keys: tile i visits 8 (i + 1)
  // of the 256 chunks.
  const double tiles = 8192 / 256, chunks = 8192 / 32;
  EXPECT_DOUBLE_EQ(b->visited_fraction, 8 * tiles * (tiles + 1) / 2 / (tiles * chunks));
  const double fill = a->tile_fill_s;
  ASSERT_EQ(a->tile_fill_s, b->tile_fill_s);
  const double waves = std::ceil(2.0 * 16 * tiles / 132);
  // (Less the pipeline fills and the launch's fixed cost, which a mask does not change.)
  const double fixed = waves * fill + search::kKernelFixedS;
  EXPECT_NEAR(b->predicted_time_s - fixed, b->visited_fraction * (a->predicted_time_s - fixed), 1e-12);
}

// A window of two keys visits 5 % of the blocks, yet Q, K, V and O still move through HBM once:
// the prediction is at least that, however few blocks compute.
TEST(MaskedConfiguration, NoPredictionBeatsMovingTheInputsAndOutputsOnce) {
  const Fixture narrow = load("axes b=4 h=32 q=4096 k=4096 d=128\nin Q[b h q d] bf16\nin K[b h k d] bf16\n"
                              "in V[b h k d] bf16\nS = contract(Q, K over d) * 0.125\n"
                              "P = softmax(select(|q - k| < 2, S, -inf) over k)\nO = contract(P, V over k) as bf16\nout O\n",
                              false);
  auto c = configure(narrow.d, narrow.report, narrow.m, config());
  ASSERT_TRUE(c.ok());
  ASSERT_FALSE(c->rejection) << *c->rejection;
  EXPECT_LT(c->visited_fraction, 0.1);
  const double bytes = 4.0 * (4 * 32 * 4096.0 * 128 * 2);  // Q, K, V read, O written, bf16
  EXPECT_NEAR(c->compulsory_s - kKernelFixedS, bytes / narrow.m.bytes_per_s(arch::kL2), 1e-9);
  EXPECT_DOUBLE_EQ(c->predicted_time_s, c->compulsory_s);
  EXPECT_TRUE(c->bound_by_compulsory());
  // Causal attention computes longer than it moves.
  const Fixture causal = load("causal.napkin");
  auto k = configure(causal.d, causal.report, causal.m, config());
  ASSERT_TRUE(k.ok());
  EXPECT_FALSE(k->bound_by_compulsory());
}

TEST(MaskedConfiguration, SearchReportsTheThroughputOfTheWorkDone) {
  const Fixture causal = load("causal.napkin");
  auto r = search(causal.d, causal.report, causal.m, SearchOptions{});
  ASSERT_TRUE(r.ok()) << r.error().format();
  ASSERT_FALSE(r->ranked.empty());
  const Ranked& best = r->ranked.front();
  ASSERT_TRUE(best.configuration.has_value());
  const double flops = 4.0 * 2 * 16 * 8192.0 * 8192 * 128;  // both contractions, all blocks
  EXPECT_NEAR(best.tflops, flops * best.configuration->visited_fraction / best.predicted_time_s / 1e12, 1e-6);
  EXPECT_LT(best.configuration->visited_fraction, 0.6);
}

}  // namespace
}  // namespace napkin::search
