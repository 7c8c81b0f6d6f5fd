// SPDX-License-Identifier: Apache-2.0
// Block skipping: the interval analysis of mask predicates against brute force over every
// index of every block, on causal (aligned and bottom-right), sliding-window and
// data-dependent masks.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include <fmt/format.h>

#include "ir/parser.h"
#include "sched/skip.h"
#include "support/dtype.h"

namespace napkin::sched {
namespace {

ir::Diagram parse(const std::string& text) {
  auto p = ir::parse_diagram(SourceText{"t.napkin", text});
  EXPECT_TRUE(p.ok()) << p.error().format();
  return p->diagram;
}

// Attention over q x k with the given mask line (defines `visible`), or none.
ir::Diagram attention(std::int64_t q, std::int64_t k, const std::string& mask) {
  std::string text = fmt::format("axes q={} k={} d=16\nin Q[q d] bf16\nin K[k d] bf16\nin V[k d] bf16\n"
                                 "S = contract(Q, K over d)\n", q, k);
  if (mask.empty()) {
    text += "P = softmax(S over k)\n";
  } else {
    text += mask + "\nP = softmax(select(visible, S, -inf) over k)\n";
  }
  return parse(text + "O = contract(P, V over k)\nout O\n");
}

// Blocks with at least one visible (q, k), counted index by index.
std::int64_t brute_force(std::int64_t q, std::int64_t k, std::int64_t tile, std::int64_t chunk,
                         const std::function<bool(std::int64_t, std::int64_t)>& visible) {
  std::int64_t n = 0;
  for (std::int64_t t = 0; t * tile < q; ++t)
    for (std::int64_t c = 0; c * chunk < k; ++c) {
      bool any = false;
      for (std::int64_t i = t * tile; i < std::min(q, (t + 1) * tile) && !any; ++i)
        for (std::int64_t j = c * chunk; j < std::min(k, (c + 1) * chunk) && !any; ++j) any = visible(i, j);
      n += any;
    }
  return n;
}

BlockSkipping skipping(const ir::Diagram& d, std::int64_t tile, std::int64_t chunk) {
  return block_skipping(d, *d.find_axis("q"), tile, *d.find_axis("k"), chunk);
}

TEST(BlockSkipping, CausalVisitsTheLowerTriangleOfBlocks) {
  const BlockSkipping s = skipping(attention(8, 8, "visible = q >= k"), 2, 2);
  EXPECT_EQ(s.masks, 1);
  EXPECT_EQ(s.blocks, 16);
  EXPECT_EQ(s.visited, 10);  // 4 + 3 + 2 + 1 blocks
  EXPECT_DOUBLE_EQ(s.visited_fraction(), 10.0 / 16.0);
}

TEST(BlockSkipping, WithoutAMaskEveryBlockIsVisited) {
  const BlockSkipping s = skipping(attention(100, 70, ""), 32, 16);
  EXPECT_EQ(s.masks, 0);
  EXPECT_EQ(s.blocks, 4 * 5);
  EXPECT_EQ(s.visited, s.blocks);
}

TEST(BlockSkipping, MatchesBruteForceOnAffineMasks) {
  struct Case {
    std::string mask;
    std::function<bool(std::int64_t, std::int64_t, std::int64_t, std::int64_t)> visible;  // (i, j, q, k)
  };
  const Case cases[] = {
      {"visible = q >= k", [](auto i, auto j, auto, auto) { return i >= j; }},
      {"visible = q + 9 >= k", [](auto i, auto j, auto, auto) { return i + 9 >= j; }},  // bottom-right, k = q + 9
      {"visible = q >= k && |q - k| < 13", [](auto i, auto j, auto, auto) { return i >= j && std::abs(i - j) < 13; }},
      {"visible = !(k > q) || k < 3", [](auto i, auto j, auto, auto) { return !(j > i) || j < 3; }},
      {"visible = q * 2 - k != 5 && k <= 40", [](auto i, auto j, auto, auto) { return i * 2 - j != 5 && j <= 40; }},
      // Chunked-local: the quotient by a positive constant is bounded by its ends' quotients.
      {"visible = q >= k && floor(q / 7) == floor(k / 7)",
       [](auto i, auto j, auto, auto) { return i >= j && i / 7 == j / 7; }},
      {"visible = floor(q / 16) == floor(k / 16)", [](auto i, auto j, auto, auto) { return i / 16 == j / 16; }},
      // fp8e4m3 keeps 3 mantissa bits: 37 rounds to 36 and 46 to 48, so the cast decides.
      {"visible = (q as fp8e4m3) >= (k as fp8e4m3)",
       [](auto i, auto j, auto, auto) { return round_to_dtype(double(i), DType::fp8e4m3) >= round_to_dtype(double(j), DType::fp8e4m3); }},
  };
  for (const Case& c : cases)
    for (auto [q, k] : {std::pair<std::int64_t, std::int64_t>{37, 46}, {64, 64}, {5, 90}})
      for (auto [tile, chunk] : {std::pair<std::int64_t, std::int64_t>{8, 8}, {16, 5}, {3, 32}}) {
        const BlockSkipping s = skipping(attention(q, k, c.mask), tile, chunk);
        const auto visible = [&](std::int64_t i, std::int64_t j) { return c.visible(i, j, q, k); };
        // Interval bounds are exact here (each conjunct bounds the same q - k); with `!=`, or
        // conjuncts over different expressions, a block may be kept that has no visible
        // index, never the other way round.
        const std::int64_t exact = brute_force(q, k, tile, chunk, visible);
        if (c.mask.find("!=") == std::string::npos) {
          EXPECT_EQ(s.visited, exact) << c.mask << " q=" << q << " k=" << k << " tile=" << tile << " chunk=" << chunk;
        } else {
          EXPECT_GE(s.visited, exact) << c.mask;
        }
      }
}

TEST(BlockSkipping, LargeDiagramsAreJudgedInGroupsAndNeverUndercount) {
  // 2^20 queries and keys, 256-row tiles, 32-key chunks: 2^27 blocks, far past the analysis's
  // budget of evaluations. Exact: tile i visits 8 (i + 1) of the 32768 chunks.
  const BlockSkipping s = skipping(attention(1 << 20, 1 << 20, "visible = q >= k"), 256, 32);
  const double tiles = 4096, chunks = 32768;
  const double exact = 8 * tiles * (tiles + 1) / 2 / (tiles * chunks);
  EXPECT_EQ(s.blocks, 4096 * 32768);
  EXPECT_GE(s.visited_fraction(), exact);
  EXPECT_LT(s.visited_fraction(), exact + 0.005);
}

TEST(BlockSkipping, DataDependentMasksSkipNothing) {
  // A predicate on the scores' values is no mask (sched::peel_masks): it bounds no block.
  const BlockSkipping s = skipping(attention(64, 64, "visible = S > 0"), 16, 16);
  EXPECT_EQ(s.masks, 0);
  EXPECT_EQ(s.visited, s.blocks);
}

// The inputs a mask reads are named (derive says the generated kernel skips by their values).
TEST(BlockSkipping, NamesTheInputsTheMasksRead) {
  const ir::Diagram d = parse(
      "axes q=64 k=64 d=16\nin Q[q d] bf16\nin K[k d] bf16\nin V[k d] bf16\nin seg_q[q] i32\nin seg_k[k] i32\n"
      "in bias[k] f32\nS = contract(Q, K over d) + bias\nvisible = seg_q == seg_k && q >= k\n"
      "P = softmax(select(visible, S, -inf) over k)\nO = contract(P, V over k)\nout O\n");
  std::vector<std::string> names;
  for (ir::NodeId n : sched::mask_inputs(d, *d.find_axis("k"))) names.push_back(d.node(n).name);
  EXPECT_EQ(names, (std::vector<std::string>{"seg_q", "seg_k"}));  // not bias, which the scores read
  EXPECT_TRUE(sched::mask_inputs(attention(64, 64, "visible = q >= k"), 1).empty());
}

TEST(BlockSkipping, OnlyMasksThatReachAReductionOverTheStreamedAxisCount) {
  // The -inf select feeds a softmax over d, not over k: skipping k chunks would be wrong.
  const ir::Diagram d = parse(
      "axes q=32 k=32 d=16\nin X[q k d] f32\nM = select(q >= k, X, -inf)\nP = softmax(M over d)\n"
      "O = sum(P over k)\nout O\n");
  const BlockSkipping s = skipping(d, 8, 8);
  EXPECT_EQ(s.masks, 0);
  EXPECT_EQ(s.visited, s.blocks);
}

// Without a softmax, a 0 fill on P V's operand masks too (sigmoid attention, causal): the
// blocks above the diagonal add 0 to O.
TEST(BlockSkipping, AZeroFillMasksASumWithoutASoftmax) {
  const ir::Diagram d = parse(
      "axes q=64 k=64 d=16\nin Q[q d] bf16\nin K[k d] bf16\nin V[k d] bf16\nS = contract(Q, K over d)\n"
      "P = select(q >= k, 1 / (1 + exp(-S)), 0)\nO = contract(P, V over k)\nout O\n");
  const BlockSkipping s = skipping(d, 16, 16);
  EXPECT_EQ(s.masks, 1);
  EXPECT_EQ(s.visited, 10);  // 4 tiles: 1 + 2 + 3 + 4 chunks
}

// A block is skipped only where every reduction over the streamed axis is masked there: an
// unmasked sum over k beside the causal softmax reads every block.
TEST(BlockSkipping, EveryReductionOverTheStreamedAxisMustBeMasked) {
  const std::string head = "axes q=64 k=64 d=16\nin Q[q d] bf16\nin K[k d] bf16\nin V[k d] bf16\nS = contract(Q, K over d)\n"
                           "P = softmax(select(q >= k, S, -inf) over k)\nO = contract(P, V over k)\nout O\n";
  const BlockSkipping unmasked = skipping(parse(head + "R = sum(S over k)\nout R\n"), 16, 16);
  EXPECT_EQ(unmasked.masks, 0);
  EXPECT_EQ(unmasked.visited, unmasked.blocks);
  // The same mask written twice masks both.
  const BlockSkipping both = skipping(parse(head + "L = logsumexp(select(q >= k, S, -inf) over k)\nout L\n"), 16, 16);
  EXPECT_EQ(both.masks, 1);
  EXPECT_EQ(both.visited, 10);
}

}  // namespace
}  // namespace napkin::sched
