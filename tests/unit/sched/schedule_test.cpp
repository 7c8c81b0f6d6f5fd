// SPDX-License-Identifier: Apache-2.0
// The schedule value: canonical text round trips (property test over random schedules), the
// exact parse and validation errors, and validation through the streamability analysis.
#include <random>

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "ir/parser.h"
#include "sched/schedule.h"

namespace napkin::sched {
namespace {

ir::Diagram example(const std::string& name) {
  auto p = ir::load_diagram((testing::source_dir() / "examples" / name).string());
  EXPECT_TRUE(p.ok()) << p.error().format();
  return p->diagram;
}

// The one-line error for `text` against the attention example (or syntax only).
std::string error_of(const std::string& text, bool syntax_only = false) {
  static const ir::Diagram d = example("attention.napkin");
  auto s = syntax_only ? parse_schedule_text(text) : parse_schedule(text, d);
  if (s.ok()) return "<ok: " + to_string(s.value()) + ">";
  return s.error().headline();
}

constexpr const char* kFlash =
    "smem{tile b=1 h=1 q=128; stream k=128:online_softmax; keep Q K:fp8e4m3 V; stages=2} "
    "rmem{tile q=64; groups=3}";

TEST(Schedule, CanonicalTextRoundTrips) {
  const ir::Diagram d = example("attention.napkin");
  for (const char* text : {kFlash, "", "smem{}", "smem{stream q=64:none; cluster=2}",
                           "smem{tile q=128; keep O:f32; groups=2; stages=3; cluster=2}",
                           "smem{tile q=128; stages=2} rmem{tile q=64; groups=2; overlap=pingpong}",
                           "rmem{tile q=64; overlap=intra_warpgroup}"}) {
    SCOPED_TRACE(text);
    auto s = parse_schedule(text, d);
    ASSERT_TRUE(s.ok()) << s.error().format();
    EXPECT_EQ(to_string(s.value()), text);
    auto again = parse_schedule(to_string(s.value()), d);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again.value(), s.value());
  }
}

// A tensor or axis named like a clause word is written quoted, so the text reads back (the
// key-padding example's mask is called 'keep').
TEST(Schedule, ClauseWordsAsNamesAreQuoted) {
  const std::string text = "smem{tile q=16; keep Q \"keep\" O} rmem{tile q=16; stream \"stages\"=2:add}";
  auto s = parse_schedule_text(text);
  ASSERT_TRUE(s.ok()) << s.error().format();
  EXPECT_EQ(s->levels[0].keep[1].tensor, "keep");
  EXPECT_EQ(s->levels[1].streams[0].axis, "stages");
  EXPECT_EQ(to_string(s.value()), text);
  EXPECT_EQ(error_of("smem{keep Q keep O}", true), "--schedule:1:13: error: expected ';' before the clause 'keep'");
  EXPECT_EQ(error_of("smem{keep \"keep O}", true),
            "--schedule:1:11: error: expected a tensor after 'keep', such as Q or K:fp8e4m3, found the character '\"'");
  EXPECT_EQ(error_of("\"smem\"{} smem{\"tile\" q=1}", true),
            "--schedule:1:15: error: expected a clause: tile, stream, keep, groups=, stages=, cluster= or overlap=, found 'tile'");
}

TEST(Schedule, ParsedValueHasTheFieldsWritten) {
  auto s = parse_schedule(kFlash, example("attention.napkin"));
  ASSERT_TRUE(s.ok()) << s.error().format();
  ASSERT_EQ(s->levels.size(), 2u);
  const LevelSchedule& smem = *s->find("smem");
  EXPECT_EQ(smem.tiles, (std::vector<TiledAxis>{{"b", 1}, {"h", 1}, {"q", 128}}));
  EXPECT_EQ(smem.streams, (std::vector<StreamedAxis>{{"k", 128, {Accumulator::online_softmax}}}));
  EXPECT_EQ(smem.keep, (std::vector<Residency>{{"Q", std::nullopt}, {"K", DType::fp8e4m3}, {"V", std::nullopt}}));
  EXPECT_EQ(smem.stages, 2);
  EXPECT_EQ(smem.groups, 1);
  EXPECT_EQ(s->find("rmem")->groups, 3);
  EXPECT_EQ(s->find("gmem"), nullptr);
}

TEST(Schedule, NonCanonicalSpacingAndClauseOrderNormalise) {
  auto s = parse_schedule("  rmem {  groups = 3 ;tile q=64 }smem{stages=1}", example("attention.napkin"));
  ASSERT_TRUE(s.ok()) << s.error().format();
  EXPECT_EQ(to_string(s.value()), "rmem{tile q=64; groups=3} smem{}");
}

// Property: any schedule value prints to text that parses back to the same value.
TEST(Schedule, RandomSchedulesRoundTrip) {
  std::mt19937_64 rng(12345);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  const std::vector<std::string> names = {"smem", "rmem", "l2", "tmem", "frag", "x_1"};
  const std::vector<std::string> axes = {"b", "h", "q", "k", "stages", "longer_axis"};
  const std::vector<std::string> tensors = {"Q", "K", "V", "keep", "P", "O"};
  const std::vector<Accumulator> accs = {Accumulator::add, Accumulator::max, Accumulator::logsumexp,
                                         Accumulator::normalised_contraction, Accumulator::online_softmax};
  for (int iter = 0; iter < 2000; ++iter) {
    Schedule s;
    const int levels = pick(4);
    for (int l = 0; l < levels; ++l) {
      LevelSchedule ls;
      ls.level = names[static_cast<std::size_t>(pick(6))];
      for (int i = pick(4); i > 0; --i)
        ls.tiles.push_back({axes[static_cast<std::size_t>(pick(6))], static_cast<std::int64_t>(rng() % 100000) - 10});
      for (int i = pick(3); i > 0; --i) {
        StreamedAxis st{axes[static_cast<std::size_t>(pick(6))], static_cast<std::int64_t>(rng() % 4096), {}};
        for (Accumulator a : accs)
          if (pick(3) == 0) st.accumulators.push_back(a);
        ls.streams.push_back(std::move(st));
      }
      for (int i = pick(4); i > 0; --i) {
        Residency r{tensors[static_cast<std::size_t>(pick(6))], std::nullopt};
        if (pick(2)) r.dtype = kAllDTypes[pick(9)];
        ls.keep.push_back(r);
      }
      ls.groups = pick(3) ? 1 : pick(8) - 1;
      ls.stages = pick(3) ? 1 : pick(8);
      ls.cluster = pick(3) ? 1 : pick(8);
      if (pick(2)) ls.overlap = static_cast<Overlap>(pick(3));
      s.levels.push_back(std::move(ls));
    }
    const std::string text = to_string(s);
    auto back = parse_schedule_text(text);
    ASSERT_TRUE(back.ok()) << text << "\n" << back.error().format();
    ASSERT_EQ(back.value(), s) << text;
    ASSERT_EQ(to_string(back.value()), text);
  }
}

TEST(Schedule, SyntaxErrorsNameTheColumnAndTheExpectedToken) {
  EXPECT_EQ(error_of("smem[tile q=1]", true),
            "--schedule:1:5: error: expected '{' after level 'smem', found the character '['");
  EXPECT_EQ(error_of("smem{tile q 128}", true),
            "--schedule:1:13: error: expected '=' after axis 'q' in 'tile', found the number 128");
  EXPECT_EQ(error_of("smem{tile q=x}", true),
            "--schedule:1:13: error: expected a tile size (an integer) after 'q=', found 'x'");
  EXPECT_EQ(error_of("smem{tile}", true),
            "--schedule:1:10: error: expected an axis after 'tile', such as q=128, found '}'");
  EXPECT_EQ(error_of("smem{stream k=128}", true),
            "--schedule:1:18: error: expected ':' and an accumulator after 'k=128' (e.g. "
            "k=128:add), found '}'");
  EXPECT_EQ(error_of("smem{stream k=128:sum}", true),
            "--schedule:1:19: error: unknown accumulator 'sum'; expected add, max, logsumexp, "
            "normalised_contraction, online_softmax or none");
  EXPECT_EQ(error_of("smem{stream k=128:max+add}", true),
            "--schedule:1:19: error: accumulators must be listed in catalogue order: add+max");
  EXPECT_EQ(error_of("smem{tile q=1 k=2 stages=2}", true),
            "--schedule:1:19: error: expected ';' before the clause 'stages'");
  EXPECT_EQ(error_of("smem{tile q=1, k=2}", true),
            "--schedule:1:14: error: expected ';' or '}' in level 'smem', found the character ','");
  EXPECT_EQ(error_of("smem{tiles q=1}", true),
            "--schedule:1:6: error: unknown clause 'tiles'; expected tile, stream, keep, groups=, "
            "stages=, cluster= or overlap=");
  EXPECT_EQ(error_of("smem{tile q=1; tile k=1}", true),
            "--schedule:1:16: error: 'tile' appears twice in level 'smem'");
  EXPECT_EQ(error_of("smem{keep K:fp9}", true),
            "--schedule:1:13: error: unknown dtype 'fp9'; expected f64, f32, tf32, bf16, f16, "
            "fp8e4m3, fp8e5m2, i32 or bool");
  EXPECT_EQ(error_of("smem{groups 3}", true),
            "--schedule:1:13: error: expected '=' after 'groups', found the number 3");
  EXPECT_EQ(error_of("smem{tile q=1", true),
            "--schedule:1:14: error: expected ';' or '}' in level 'smem', found the end of the schedule");
  EXPECT_EQ(error_of("smem{tile q=99999999999999999999}", true),
            "--schedule:1:13: error: 99999999999999999999 is too large");
  EXPECT_EQ(error_of("smem{keep}", true),
            "--schedule:1:10: error: expected a tensor after 'keep', such as Q or K:fp8e4m3, found '}'");
  EXPECT_EQ(error_of("{tile q=1}", true),
            "--schedule:1:1: error: expected a level name such as smem or rmem, found '{'");
}

TEST(Schedule, ValidationErrorsGiveReasons) {
  EXPECT_EQ(error_of("smem{tile x=128}"),
            "--schedule:1:11: error: unknown axis 'x' in 'tile' of level 'smem' (the diagram's "
            "axes are b h q k d)");
  EXPECT_EQ(error_of("smem{tile q=0}"),
            "--schedule:1:13: error: tile size of 'q' must be positive, found 0");
  EXPECT_EQ(error_of("smem{stream k=-64:online_softmax}"),
            "--schedule:1:15: error: chunk size of 'k' must be positive, found -64");
  EXPECT_EQ(error_of("smem{tile k=128}"),
            "--schedule:1:11: error: cannot tile 'k' in level 'smem': it is not woven (max over k "
            "in softmax 'P', sum over k in softmax 'P' and contract 'O' over k reduce over it); "
            "stream it instead, with online_softmax");
  EXPECT_EQ(error_of("smem{tile d=32}"),
            "--schedule:1:11: error: cannot tile 'd' in level 'smem': it is not woven (contract "
            "over d in 'S' reduces over it), and it cannot be streamed either: contract 'O' over "
            "k multiplies 'V', which runs along d, by 'P', which varies along k and depends on "
            "contract over d in 'S', so its partial results cannot be rescaled");
  EXPECT_EQ(error_of("smem{stream d=32:add}"),
            "--schedule:1:13: error: cannot stream 'd' in level 'smem': contract 'O' over k "
            "multiplies 'V', which runs along d, by 'P', which varies along k and depends on "
            "contract over d in 'S', so its partial results cannot be rescaled");
  EXPECT_EQ(error_of("smem{stream k=128:add}"),
            "--schedule:1:19: error: 'k' streams with online_softmax, not add");
  EXPECT_EQ(error_of("smem{stream q=64:add}"),
            "--schedule:1:18: error: 'q' is woven: its chunks are independent and need no "
            "accumulator (write q=64:none)");
  EXPECT_EQ(error_of("smem{tile q=128; stream q=64:none}"),
            "--schedule:1:25: error: axis 'q' is partitioned twice in level 'smem'");
  EXPECT_EQ(error_of("smem{tile q=128} rmem{tile q=256}"),
            "--schedule:1:30: error: tile q=256 in level 'rmem' is larger than the tile q=128 of "
            "level 'smem' that encloses it");
  EXPECT_EQ(error_of("smem{} smem{}"), "--schedule:1:8: error: level 'smem' appears twice");
  EXPECT_EQ(error_of("gmem{tile q=1}"),
            "--schedule:1:1: error: level 'gmem' is the top of the hierarchy; a schedule lists "
            "the levels below it");
  EXPECT_EQ(error_of("smem{keep X}"),
            "--schedule:1:11: error: unknown tensor 'X' in 'keep' of level 'smem' (the "
            "diagram's tensors are Q K V S P O)");
  EXPECT_EQ(error_of("smem{keep K:i32}"),
            "--schedule:1:13: error: tensor 'K' is bf16; it can be kept as a floating-point "
            "dtype, not i32");
  EXPECT_EQ(error_of("smem{keep K K}"), "--schedule:1:13: error: tensor 'K' is kept twice in level 'smem'");
  EXPECT_EQ(error_of("smem{groups=0}"),
            "--schedule:1:13: error: groups in level 'smem' must be positive, found 0");
  EXPECT_EQ(error_of("smem{stages=-1}"),
            "--schedule:1:13: error: stages in level 'smem' must be positive, found -1");
  EXPECT_EQ(error_of("rmem{overlap=pingpong}"),
            "--schedule:1:14: error: overlap=pingpong in level 'rmem' needs groups=2 or more (two groups take "
            "turns), found groups=1");
  EXPECT_EQ(error_of("rmem{overlap=fast}", true),
            "--schedule:1:14: error: unknown overlap 'fast'; expected sequential, intra_warpgroup or pingpong");
  EXPECT_EQ(error_of("rmem{overlap=2}", true),
            "--schedule:1:14: error: expected an overlap after 'overlap=' (sequential, intra_warpgroup or pingpong), "
            "found the number 2");
}

TEST(Schedule, ErrorsShowTheArgumentWithACaret) {
  auto s = parse_schedule("smem{tile q=0}", example("attention.napkin"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().format(),
            "--schedule:1:13: error: tile size of 'q' must be positive, found 0\n"
            "  smem{tile q=0}\n"
            "              ^");
}

TEST(Schedule, ValidateABuiltSchedule) {
  const ir::Diagram d = example("matmul.napkin");
  Schedule s;
  s.levels.push_back({"smem", {{"m", 128}, {"n", 128}}, {{"k", 64, {Accumulator::add}}}, {}, 1, 4, 1});
  EXPECT_FALSE(validate_schedule(s, d).has_value());
  EXPECT_EQ(to_string(s), "smem{tile m=128 n=128; stream k=64:add; stages=4}");
  s.levels[0].tiles.push_back({"k", 32});
  auto e = validate_schedule(s, d);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->headline(),
            "schedule: error: cannot tile 'k' in level 'smem': it is not woven (contract 'C' over "
            "k reduces over it); stream it instead, with add");
}

}  // namespace
}  // namespace napkin::sched
