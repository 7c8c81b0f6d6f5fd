// SPDX-License-Identifier: Apache-2.0
// A head dim is the diagram's, not a choice: the solver pads its tile to WGMMA's step (TMA fills
// zeros past the tensor), swizzles the operands' rows as widely as the tile allows, counts the
// tensor core's work over the padded tile and the FLOPs over the tensor, and refuses only rows
// TMA cannot move.
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "search/configure.h"
#include "search/search.h"
#include "unit/search/fixture.h"

namespace napkin::search {
namespace {

using testing_fixture::Fixture;
using testing_fixture::load;

Fixture attention(int d) {
  return load(fmt::format("axes b=1 h=8 q=4096 k=4096 d={}\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n"
                          "O = contract(softmax(contract(Q, K over d) over k), V over k) as bf16\nout O\n",
                          d),
              false);
}

Config quad_config() {
  Config c;
  c.rows_per_warpgroup = 64;
  c.chunk = 128;
  c.stages = 2;
  c.overlap = Overlap::pingpong;
  c.row_layout = RowLayout::quad;
  c.warpgroups = 2;
  return c;
}

const Divisibility& head(const Configuration& c) {
  for (const Divisibility& dv : c.divisibility)
    if (dv.what == "d") return dv;
  ADD_FAILURE() << "no divisibility entry for d";
  return c.divisibility.front();
}

TEST(HeadDim, SwizzleWidthFollowsTheTile) {
  for (const auto& [d, multiple, reason] : {std::tuple<int, int, std::string>{128, 64, "128-byte coalescing of Q in bf16"},
                                            {96, 32, "64-byte swizzled rows of Q in bf16"},
                                            {80, 16, "32-byte swizzled rows of Q in bf16"}}) {
    const Fixture f = attention(d);
    auto c = configure(f.d, f.report, f.m, quad_config());
    ASSERT_TRUE(c.ok()) << c.error().format();
    EXPECT_FALSE(c->rejection.has_value()) << d << ": " << *c->rejection;
    const Divisibility& dv = head(*c);
    EXPECT_EQ(dv.value, d);
    EXPECT_EQ(dv.padded_from, 0);
    EXPECT_EQ(dv.multiple, multiple) << d;
    EXPECT_NE(fmt::format("{}", fmt::join(dv.reasons, ", ")).find(reason), std::string::npos) << d;
  }
}

TEST(HeadDim, APaddedTileCostsTheTensorCoreButNotTheFlops) {
  const Fixture f40 = attention(40), f48 = attention(48);
  auto c40 = configure(f40.d, f40.report, f40.m, quad_config());
  auto c48 = configure(f48.d, f48.report, f48.m, quad_config());
  ASSERT_TRUE(c40.ok() && c48.ok());
  EXPECT_FALSE(c40->rejection.has_value()) << *c40->rejection;
  const Divisibility& dv = head(*c40);
  EXPECT_EQ(dv.value, 48);
  EXPECT_EQ(dv.padded_from, 40);
  // The tensor core runs the 48-wide tiles either way; the FLOPs are the diagram's.
  EXPECT_DOUBLE_EQ(c40->tensor_clk_per_row, c48->tensor_clk_per_row);
  EXPECT_DOUBLE_EQ(c40->flops_per_row * 48, c48->flops_per_row * 40);
  // Shared memory holds the padded tiles, and the accumulator's rescale runs over them.
  EXPECT_DOUBLE_EQ(c40->smem_per_cta_bytes, c48->smem_per_cta_bytes);
  EXPECT_DOUBLE_EQ(c40->fma_clk_per_row, c48->fma_clk_per_row);
}

TEST(HeadDim, RowsTmaCannotMoveAreTheBindingConstraint) {
  const Fixture f = attention(36);
  auto c = configure(f.d, f.report, f.m, quad_config());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->rejection.has_value());
  EXPECT_EQ(*c->rejection, "divisibility: d = 36: rows of Q in bf16 are 72 bytes, and TMA moves multiples of 16");
}

TEST(HeadDim, AHeadDimPastWgmmasWidestNIsRefused) {
  const Fixture f = attention(264);
  auto c = configure(f.d, f.report, f.m, quad_config());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->rejection.has_value());
  EXPECT_EQ(*c->rejection, "divisibility: d = 264 is a WGMMA's N, at most 256");
}

// V with a head dim of its own (DeepSeek's MLA: 192 for Q and K, 128 for V) leaves d streamable by
// addition (only Q K^T reduces it) and e woven (Q and K lack it): the solver keeps both whole, as
// the tile holds them, and streams k alone; Q's footprint counts d, V's and O's e.
TEST(HeadDim, VsHeadDimOfItsOwnIsWholeBesideQs) {
  const Fixture f = load("axes b=1 h=8 q=4096 k=4096 d=192 e=128\nin Q[b q h d] bf16\nin K[b k h d] bf16\nin V[b k h e] bf16\n"
                         "O = contract(softmax(contract(Q, K over d) over k), V over k) as bf16\nout O[b q h e]\n",
                         false);
  Config config = quad_config();
  config.chunk = 64;
  auto c = configure(f.d, f.report, f.m, config);
  ASSERT_TRUE(c.ok()) << c.error().format();
  EXPECT_FALSE(c->rejection.has_value()) << *c->rejection;
  std::string whole;
  for (const Divisibility& dv : c->divisibility) whole += dv.what + "=" + std::to_string(dv.value) + " ";
  EXPECT_EQ(whole, "w_q=64 s_k=64 d=192 e=128 ");
  for (const Variable& v : c->variables) {
    if (v.name == "Q") EXPECT_EQ(v.shape, "[b:1 q:64 h:1 d:192]");
    if (v.name == "V (x2 stages)") EXPECT_EQ(v.shape, "[b:1 k:64 h:1 e:128]");
    if (v.name == "O (accumulator)") EXPECT_EQ(v.shape, "[b:1 h:1 q:64 e:128]");
  }
  auto r = search(f.d, f.report, f.m, SearchOptions{});
  ASSERT_TRUE(r.ok()) << r.error().format();
  EXPECT_EQ(r->method, "configuration solver");
  // Q's and K's head dim is one TMA box's side: at most 256, whatever V's.
  const Fixture wide = load("axes b=1 h=8 q=4096 k=4096 d=264 e=128\nin Q[b q h d] bf16\nin K[b k h d] bf16\nin V[b k h e] bf16\n"
                            "O = contract(softmax(contract(Q, K over d) over k), V over k) as bf16\nout O[b q h e]\n",
                            false);
  auto w = configure(wide.d, wide.report, wide.m, config);
  ASSERT_TRUE(w.ok()) << w.error().format();
  ASSERT_TRUE(w->rejection.has_value());
  EXPECT_EQ(*w->rejection, "divisibility: d = 264 is kept whole in one TMA box, at most 256 along an axis");
}

}  // namespace
}  // namespace napkin::search
