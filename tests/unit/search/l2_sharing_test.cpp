// SPDX-License-Identifier: Apache-2.0
// The bandwidth check with L2 (docs/configuration.md §4): the CTAs of one (b, h) slice read
// each K/V chunk together, so HBM delivers it once for them; every SM's chunk still crosses
// the L2 -> SMEM link. The paper's no-caching figure is kept beside it.
#include <string>

#include <gtest/gtest.h>

#include "search/configure.h"
#include "unit/search/fixture.h"

namespace napkin::search {
namespace {

using testing_fixture::Fixture;
using testing_fixture::load;

// bf16 attention, b x h x s x s, head dim d, on the h100-sxm5 description.
Fixture attention(int b, int h, int s, int d) {
  const std::string text = "axes b=" + std::to_string(b) + " h=" + std::to_string(h) + " q=" + std::to_string(s) +
                           " k=" + std::to_string(s) + " d=" + std::to_string(d) +
                           "\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n"
                           "S = contract(Q, K over d) * 0.0625\nP = softmax(S over k)\n"
                           "O = contract(P, V over k) as bf16\nout O\n";
  return load(text, false);
}

// Two warpgroups of 64 rows (WGMMA's row layout), 32-key chunks: a CTA holds 128 query rows.
Config quad_config() {
  Config c;
  c.rows_per_warpgroup = 64;
  c.chunk = 32;
  c.warpgroups = 2;
  c.stages = 2;
  c.overlap = Overlap::pingpong;
  c.row_layout = RowLayout::quad;
  return c;
}

TEST(L2Sharing, LongSlicesShareEachChunkOverEverySm) {
  // d = 256, 16k tokens: 128 CTAs per (b, h), fewer than the 132 SMs.
  const Fixture f = attention(1, 8, 16384, 256);
  auto c = configure(f.d, f.report, f.m, quad_config());
  ASSERT_TRUE(c.ok()) << c.error().format();
  ASSERT_FALSE(c->rejection.has_value()) << *c->rejection;
  const double chunk_bytes = 2.0 * 32 * 256 * 2;  // K and V, 32 keys x 256, bf16
  EXPECT_DOUBLE_EQ(c->transfer_s_per_iteration, chunk_bytes * 132 / 3.35e12);  // the paper's check
  EXPECT_EQ(c->ctas_sharing_chunk, 128);
  EXPECT_DOUBLE_EQ(c->hbm_s_per_iteration, c->transfer_s_per_iteration / 128);
  EXPECT_DOUBLE_EQ(c->l2_smem_s_per_iteration, chunk_bytes * 132 / 12e12);
  EXPECT_EQ(c->transfer_link(), "l2->smem");
  // 128 rows x 8 tensor clocks at 1.83 GHz (0.56 us) against 0.36 us over L2 -> SMEM, where
  // the check without L2 (1.29 us) calls it memory-bound.
  EXPECT_GT(c->transfer_s_per_iteration, c->compute_s_per_iteration);
  EXPECT_TRUE(c->compute_bound);
}

TEST(L2Sharing, ShortSlicesShareAmongTheirFewCtas) {
  // 256 tokens: 2 CTAs of 128 rows per (b, h), so HBM delivers each chunk once per 2 SMs:
  // 1.29 / 2 = 0.65 us, more than the 0.36 us over L2 -> SMEM, and more than the compute.
  const Fixture f = attention(64, 8, 256, 256);
  auto c = configure(f.d, f.report, f.m, quad_config());
  ASSERT_TRUE(c.ok()) << c.error().format();
  EXPECT_EQ(c->ctas_sharing_chunk, 2);
  EXPECT_DOUBLE_EQ(c->hbm_s_per_iteration, c->transfer_s_per_iteration / 2);
  EXPECT_EQ(c->transfer_link(), "gmem->l2");
  EXPECT_FALSE(c->compute_bound);
}

TEST(L2Sharing, SharingIsCappedAtTheSms) {
  // 64k tokens: 512 CTAs per (b, h); at most 132 run at once.
  const Fixture f = attention(1, 1, 65536, 128);
  auto c = configure(f.d, f.report, f.m, quad_config());
  ASSERT_TRUE(c.ok()) << c.error().format();
  EXPECT_EQ(c->ctas_sharing_chunk, 132);
}

}  // namespace
}  // namespace napkin::search
