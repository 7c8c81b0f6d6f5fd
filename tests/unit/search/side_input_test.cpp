// SPDX-License-Identifier: Apache-2.0
// Side inputs (a mask, segment ids, a bias) ride along with attention: they neither make an
// axis they lack a row axis nor ask the chunk for 128-byte rows (issue #19: a bool key-padding
// mask left no feasible configuration, "divisibility 720, registers 144").
#include <gtest/gtest.h>

#include "search/configure.h"
#include "search/search.h"
#include "unit/search/fixture.h"

namespace napkin::search {
namespace {

using testing_fixture::Fixture;
using testing_fixture::load;

std::string padded(const std::string& dtype, const std::string& condition) {
  return "axes b=2 h=16 q=8192 k=8192 d=128\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n"
         "in pad[b k] " + dtype + "\nS = contract(Q, K over d) * 0.08838834764831845\n"
         "P = softmax(select(" + condition + ", S, -inf) over k)\nO = contract(P, V over k) as bf16\nout O\n";
}

TEST(SideInputs, AKeyPaddingMaskDerivesLikePlainAttentionInBoolAndI32) {
  const Fixture plain = load("attention.napkin");
  auto base = search(plain.d, plain.report, plain.m);
  ASSERT_TRUE(base.ok() && !base->ranked.empty());
  for (const auto& [dtype, condition] : {std::pair<std::string, std::string>{"bool", "pad"}, {"i32", "pad != 0"}}) {
    const Fixture f = load(padded(dtype, condition), false);
    auto r = search(f.d, f.report, f.m);
    ASSERT_TRUE(r.ok()) << r.error().format();
    ASSERT_FALSE(r->ranked.empty()) << dtype;
    EXPECT_EQ(r->method, "configuration solver");
    // The same best configuration as without the mask, and its time within the mask's traffic.
    EXPECT_EQ(r->ranked.front().summary, base->ranked.front().summary) << dtype;
    EXPECT_NEAR(r->ranked.front().predicted_time_s, base->ranked.front().predicted_time_s,
                0.01 * base->ranked.front().predicted_time_s) << dtype;
    // h stays a batch axis (the mask lacks it, Q, K and V do not); the chunk asks only TMA's
    // 16-byte rows of the mask.
    const auto& c = *r->ranked.front().configuration;
    for (const Divisibility& dv : c.divisibility) {
      if (dv.what != "s_k") continue;
      EXPECT_EQ(dv.multiple, 16) << dtype;  // WGMMA K of P V (bf16): 16; the mask: 16 / 1 or 16 / 4
      bool tma = false;
      for (const std::string& why : dv.reasons) tma = tma || why.find("16-byte TMA rows of pad in " + dtype) != std::string::npos;
      EXPECT_TRUE(tma) << dtype;
    }
  }
}

TEST(SideInputs, SegmentIdsAndABiasDerive) {
  for (const char* name : {"key_padding.napkin", "document_mask.napkin", "relative_bias.napkin", "alibi.napkin"}) {
    const Fixture f = load(name);
    auto r = search(f.d, f.report, f.m);
    ASSERT_TRUE(r.ok()) << name << ": " << r.error().format();
    EXPECT_FALSE(r->ranked.empty()) << name;
  }
}

// V with a head dim of its own (e): Q K's d is then reducible too, and the default schedule
// streams it beside k. A schedule streams one axis with accumulators, so d is kept whole and
// k streamed (every candidate was rejected before: "executor 60").
TEST(SideInputs, AValueHeadDimOfItsOwnKeepsDWhole) {
  const Fixture f = load("axes b=2 h=8 q=1024 k=1024 d=128 e=128\nin Q[b h q d] bf16\nin K[b h k d] bf16\n"
                         "in V[b h k e] bf16\nP = softmax(contract(Q, K over d) * 0.08838834764831845 over k)\n"
                         "O = contract(P, V over k) as bf16\nout O\n",
                         false);
  auto r = search(f.d, f.report, f.m);
  ASSERT_TRUE(r.ok()) << r.error().format();
  ASSERT_FALSE(r->ranked.empty());
  EXPECT_EQ(r->rejected.count("executor"), 0u);
  for (const auto& l : r->ranked.front().schedule.levels)
    for (const auto& st : l.streams) EXPECT_EQ(st.axis, "k") << r->ranked.front().summary;
}

}  // namespace
}  // namespace napkin::search
