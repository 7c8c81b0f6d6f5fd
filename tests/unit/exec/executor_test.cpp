// SPDX-License-Identifier: Apache-2.0
// The executable schedule against the reference interpreter: every example under fixed and
// random schedules and sizes (ragged tiles and chunks, several levels, fully masked rows),
// every accumulator of the catalogue, the transfer counts against the paper's closed forms,
// and the errors for schedules the executor does not run.
#include <cmath>
#include <random>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "exec/executor.h"
#include "ir/parser.h"
#include "reference/interpreter.h"
#include "sched/schedule.h"
#include "sched/streaming.h"

namespace napkin::exec {
namespace {

constexpr double kTolerance = 1e-9;
// Where the executor notes a cast of a partial value (rounded before its rescale, as a real
// kernel rounds P), the two agree to the cast's precision only; the same diagram without its
// casts is then checked to kTolerance as well.
constexpr double kCastTolerance = 0.1;

std::vector<ir::Binding> bindings_of(const std::map<std::string, std::int64_t>& sizes) {
  std::vector<ir::Binding> bindings;
  for (const auto& [axis, size] : sizes)
    bindings.push_back({axis, static_cast<double>(size), fmt::format("{}={}", axis, size)});
  return bindings;
}

// An example at the given sizes; with `without_casts`, every `as DTYPE` removed (inputs keep
// their dtypes), so that a stream through a cast can be checked to f64 rounding too.
ir::Diagram load_example(const std::string& name, const std::map<std::string, std::int64_t>& sizes,
                         bool without_casts = false) {
  const auto path = testing::source_dir() / "examples" / name;
  std::string text = testing::read_text(path);
  if (without_casts) text = std::regex_replace(text, std::regex(R"( as [a-z0-9]+)"), "");
  auto p = ir::parse_diagram(SourceText{path.string(), text}, bindings_of(sizes));
  EXPECT_TRUE(p.ok()) << p.error().format();
  return p->diagram;
}

ir::Diagram parse_text(const std::string& text, const std::vector<ir::Binding>& bindings = {}) {
  auto p = ir::parse_diagram(SourceText{"t.napkin", text}, bindings);
  EXPECT_TRUE(p.ok()) << p.error().format();
  return p->diagram;
}

bool all_finite(const reference::TensorMap& outputs) {
  for (const auto& [name, t] : outputs)
    for (double v : t.data)
      if (std::isnan(v)) return false;
  return true;
}

// Runs `s` on d with seeded inputs and compares with the reference; returns the result.
ExecutionResult expect_matches(const ir::Diagram& d, const sched::Schedule& s, std::uint64_t seed) {
  const reference::TensorMap inputs = reference::random_inputs(d, seed);
  auto expected = reference::evaluate(d, inputs);
  EXPECT_TRUE(expected.ok()) << expected.error().format();
  auto actual = execute(d, s, inputs);
  EXPECT_TRUE(actual.ok()) << actual.error().format();
  if (!actual.ok() || !expected.ok()) return {};
  const Comparison c = compare(actual->outputs, *expected);
  EXPECT_LE(c.max_rel_error, actual->notes.empty() ? kTolerance : kCastTolerance)
      << "schedule " << sched::to_string(s) << " on " << d.source_name << " (seed " << seed
      << "): output '" << c.worst_output << "' differs, max abs error " << c.max_abs_error;
  EXPECT_EQ(all_finite(actual->outputs), all_finite(*expected));
  return std::move(actual.value());
}

ExecutionResult expect_matches(const ir::Diagram& d, const std::string& schedule, std::uint64_t seed = 7) {
  auto s = sched::parse_schedule(schedule, d);
  EXPECT_TRUE(s.ok()) << s.error().format();
  if (!s.ok()) return {};
  return expect_matches(d, *s, seed);
}

// ---------------------------------------------------------------------------------------------
// Fixed schedules: the ones the paper derives.

TEST(Exec, AttentionWithTheFlashAttentionScheduleMatchesTheReference) {
  const ir::Diagram d = load_example("attention.napkin", {{"b", 2}, {"h", 2}, {"q", 13}, {"k", 11}, {"d", 4}});
  const ExecutionResult r =
      expect_matches(d, "smem{tile b=1 h=1 q=8; stream k=4:online_softmax} rmem{tile q=4}");
  EXPECT_EQ(r.streamed_axis, "k");
  EXPECT_EQ(r.nest,
            "tile b=1 (smem) > tile h=1 (smem) > tile q=8 (smem) > tile q=4 (rmem) > "
            "stream k=4:online_softmax (smem)");
  // Groups: 2 * 2 * 2 smem tiles of q (8 + 5); rmem splits them into 4 + 4 and 4 + 1.
  EXPECT_EQ(r.groups.at("smem"), 8);
  EXPECT_EQ(r.groups.at("rmem"), 16);
  EXPECT_EQ(r.chunks, 16 * 3);  // k = 11 in chunks of 4: 4 + 4 + 3
  EXPECT_TRUE(r.notes.empty());
}

TEST(Exec, EveryExampleMatchesTheReferenceUnderATypicalSchedule) {
  struct Case {
    std::string example;
    std::map<std::string, std::int64_t> sizes;
    std::string schedule;
  };
  const std::vector<Case> cases = {
      {"attention.napkin", {{"b", 1}, {"h", 2}, {"q", 9}, {"k", 10}, {"d", 3}}, "smem{tile q=4; stream k=3:online_softmax}"},
      {"causal.napkin", {{"b", 1}, {"h", 2}, {"q", 9}, {"k", 7}, {"d", 3}}, "smem{tile h=1 q=4; stream k=3:online_softmax} rmem{tile q=2; stream k=2:online_softmax}"},
      {"alibi.napkin", {{"b", 1}, {"h", 3}, {"q", 7}, {"k", 9}, {"d", 2}}, "smem{tile q=5; stream k=2:online_softmax}"},
      {"sliding_window.napkin", {{"b", 1}, {"h", 1}, {"q", 12}, {"k", 5}, {"d", 2}, {"w", 3}}, "smem{tile q=5; stream k=2:online_softmax}"},
      {"softcap.napkin", {{"b", 1}, {"h", 2}, {"q", 6}, {"k", 8}, {"d", 3}}, "smem{tile q=4; stream k=3:online_softmax}"},
      {"gqa.napkin", {{"b", 1}, {"g", 2}, {"r", 3}, {"q", 5}, {"k", 7}, {"d", 2}}, "smem{tile g=1 r=2 q=4; stream k=3:online_softmax}"},
      {"matmul.napkin", {{"m", 11}, {"k", 9}, {"n", 7}}, "smem{tile m=4 n=3; stream k=2:add} rmem{tile m=2; stream k=1:add}"},
      {"swiglu_mlp.napkin", {{"t", 5}, {"e", 6}, {"f", 9}}, "smem{tile t=2; stream f=4:add}"},
      {"layernorm.napkin", {{"t", 7}, {"e", 9}}, "smem{tile t=3} rmem{stream t=2:none}"},
      {"rmsnorm_matmul.napkin", {{"t", 7}, {"e", 9}, {"f", 5}}, "smem{tile t=3 f=2}"},
  };
  // Examples added later are covered by the property test below.
  for (const Case& c : cases) {
    SCOPED_TRACE(c.example + " under " + c.schedule);
    expect_matches(load_example(c.example, c.sizes), c.schedule);
  }
}

// RMSNorm's output is cast to bf16 before the matmul that streams e: a streamed kernel rounds
// the unnormalised partial value, the reference the normalised one. Without the cast the two
// agree to f64 rounding; with it, to bf16's, and the executor says so.
TEST(Exec, RmsnormMatmulStreamsTheNormalisedContraction) {
  const std::string schedule = "smem{tile t=3 f=2; stream e=4:normalised_contraction}";
  const std::map<std::string, std::int64_t> sizes{{"t", 7}, {"e", 9}, {"f", 5}};
  EXPECT_TRUE(expect_matches(load_example("rmsnorm_matmul.napkin", sizes, true), schedule).notes.empty());
  const ExecutionResult r = expect_matches(load_example("rmsnorm_matmul.napkin", sizes), schedule);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("casts a partial value of the stream over 'e'"), std::string::npos) << r.notes[0];
}

// A woven axis chunked inside or outside the stream: folds lacking it (RMSNorm's sum of
// squares, lacking f) take each chunk of the streamed axis once and are shared by its chunks;
// folds having it (softmax's max and sum, having q) are kept per chunk.
TEST(Exec, WovenChunksInsideOrOutsideTheStreamShareTheFoldsThatLackThem) {
  const ir::Diagram rms = load_example("rmsnorm_matmul.napkin", {{"t", 4}, {"e", 10}, {"f", 7}}, true);
  for (const char* schedule : {"smem{tile t=2; stream e=3:normalised_contraction} rmem{stream f=2:none}",
                               "smem{stream f=2:none e=3:normalised_contraction}"}) {
    SCOPED_TRACE(schedule);
    expect_matches(rms, schedule, 4);
  }
  const ir::Diagram att = load_example("causal.napkin", {{"b", 1}, {"h", 2}, {"q", 7}, {"k", 9}, {"d", 2}});
  for (const char* schedule : {"smem{stream k=3:online_softmax q=2:none}", "smem{stream h=1:none q=3:none k=2:online_softmax}",
                               "smem{tile q=4; stream k=4:online_softmax} rmem{stream q=3:none k=1:online_softmax}"}) {
    SCOPED_TRACE(schedule);
    expect_matches(att, schedule, 5);
  }
}

// ---------------------------------------------------------------------------------------------
// Every accumulator of the catalogue, on diagrams written to need it.

TEST(Exec, EveryAccumulatorOfTheCatalogueRuns) {
  struct Case {
    std::string text;
    std::string schedule;
  };
  const std::vector<Case> cases = {
      // logsumexp
      {"axes q=5 k=11\nin S[q k] f32\nL = logsumexp(S over k)\nout L\n", "smem{tile q=2; stream k=3:logsumexp}"},
      // add+max
      {"axes q=4 k=9\nin S[q k] f32\nm = max(S over k)\nt = sum(S over k)\nout m\nout t\n",
       "smem{stream k=4:add+max}"},
      // normalised_contraction: exp without a max
      {"axes q=3 k=10 d=2\nin S[q k] f32\nin V[k d] f32\nE = exp(S)\n"
       "O = contract(E / sum(E over k), V over k)\nout O\n",
       "smem{tile q=2; stream k=3:normalised_contraction}"},
      // online_softmax with the log-sum-exp as a second output, written by hand, in exp2
      {"axes q=6 k=9 d=3\nin Q[q d] f32\nin K[k d] f32\nin V[k d] f32\n"
       "S = contract(Q, K over d)\nm = max(S over k)\nE = exp2((S - m) * 1.4426950408889634)\n"
       "z = sum(E over k)\nO = contract(E / z, V over k)\nL = m + log(z)\nout O\nout L\n",
       "smem{tile q=4; stream k=2:online_softmax} rmem{tile q=3; stream k=1:online_softmax}"},
      // a streamed axis that is also an output axis (local outputs written chunk by chunk)
      {"axes q=4 k=7\nin S[q k] f32\nT = exp(S) * 2\nt = sum(T over k)\nout T\nout t\n",
       "smem{stream k=3:add}"},
      // max alone, over -inf masked entries
      {"axes q=6 k=5\nin S[q k] f32\nm = max(select(q < k, S, -inf) over k)\nout m\n",
       "smem{tile q=4; stream k=2:max}"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text + c.schedule);
    const ir::Diagram d = parse_text(c.text);
    for (std::uint64_t seed : {1, 2, 3}) expect_matches(d, c.schedule, seed);
  }
}

// Sliding-window attention with more queries than keys: the last rows see no key at all. The
// reference gives 0 there; so must every chunk order, never NaN.
TEST(Exec, FullyMaskedRowsGiveZerosNotNaN) {
  const ir::Diagram d = load_example("sliding_window.napkin", {{"b", 1}, {"h", 1}, {"q", 13}, {"k", 3}, {"d", 2}, {"w", 2}});
  for (const char* schedule : {"smem{tile q=4; stream k=1:online_softmax}", "smem{stream k=2:online_softmax}",
                               "smem{tile q=1; stream k=3:online_softmax}"}) {
    SCOPED_TRACE(schedule);
    const ExecutionResult r = expect_matches(d, schedule);
    const reference::Tensor& o = r.outputs.at("O");
    ASSERT_EQ(o.sizes, (std::vector<std::int64_t>{1, 1, 13, 2}));
    for (std::int64_t q = 4; q < 13; ++q)  // q - k >= 2 for every k < 3: fully masked
      for (std::int64_t e = 0; e < 2; ++e) EXPECT_EQ(o.data[static_cast<std::size_t>(q * 2 + e)], 0.0) << q;
  }
}

// ---------------------------------------------------------------------------------------------
// Property test: every example, random sizes (1..13 on the long axes), random schedules of one
// or two levels (tiles and chunks 1..8, rarely dividing the sizes), many seeds.

struct Generator {
  std::mt19937_64 rng;
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
};

std::map<std::string, std::int64_t> random_sizes(const std::string& example, Generator& g) {
  const ir::Diagram d = load_example(example, {});
  std::map<std::string, std::int64_t> sizes;
  for (const ir::Axis& a : d.axes) {
    if (a.name == "b" || a.name == "h" || a.name == "g") sizes[a.name] = g.uniform(1, 2);
    else if (a.name == "r") sizes[a.name] = g.uniform(1, 3);
    else if (a.name == "d") sizes[a.name] = g.uniform(1, 4);
    else sizes[a.name] = g.uniform(1, 13);
  }
  if (example == "sliding_window.napkin") sizes["w"] = g.uniform(1, 6);
  return sizes;
}

sched::Schedule random_schedule(const ir::Diagram& d, Generator& g) {
  const sched::StreamingReport report = sched::analyse_streaming(d);
  std::vector<std::string> woven, streamed;
  for (const sched::AxisStreaming& a : report.axes) {
    if (a.kind == sched::AxisKind::woven) woven.push_back(d.axis(a.axis).name);
    if (a.kind == sched::AxisKind::streamed) streamed.push_back(d.axis(a.axis).name);
  }
  sched::Schedule s;
  std::map<std::string, std::int64_t> tile_of, chunk_of;
  std::string stream_axis;
  if (!streamed.empty() && g.chance(0.85)) stream_axis = streamed[static_cast<std::size_t>(g.uniform(0, static_cast<std::int64_t>(streamed.size()) - 1))];
  std::string woven_stream;  // a woven axis chunked without an accumulator, in the last level
  const int levels = static_cast<int>(g.uniform(1, 2));
  for (int l = 0; l < levels; ++l) {
    sched::LevelSchedule level;
    level.level = l == 0 ? "smem" : "rmem";
    for (const std::string& a : woven) {
      if (!g.chance(0.5)) continue;
      const std::int64_t outer = tile_of.count(a) ? tile_of[a] : 8;
      tile_of[a] = g.uniform(1, outer);
      level.tiles.push_back({a, tile_of[a]});
    }
    if (!stream_axis.empty() && (l == 0 || g.chance(0.5))) {
      const std::int64_t outer = chunk_of.count(stream_axis) ? chunk_of[stream_axis] : 8;
      chunk_of[stream_axis] = g.uniform(1, outer);
      level.streams.push_back({stream_axis, chunk_of[stream_axis], report.of(*d.find_axis(stream_axis)).accumulators});
    }
    if (l + 1 == levels && g.chance(0.3) && !woven.empty()) {
      const std::string a = woven[static_cast<std::size_t>(g.uniform(0, static_cast<std::int64_t>(woven.size()) - 1))];
      bool tiled_here = false;
      for (const auto& t : level.tiles) tiled_here = tiled_here || t.axis == a;
      if (!tiled_here) {
        const std::int64_t chunk = g.uniform(1, tile_of.count(a) ? tile_of[a] : 8);
        level.streams.insert(level.streams.begin() + (g.chance(0.5) ? 0 : static_cast<std::ptrdiff_t>(level.streams.size())),
                             sched::StreamedAxis{a, chunk, {}});
      }
    }
    s.levels.push_back(std::move(level));
  }
  return s;
}

TEST(Exec, RandomSchedulesAndSizesMatchTheReferenceOnEveryExample) {
  const auto examples = testing::files_in(testing::source_dir() / "examples", ".napkin");
  ASSERT_GE(examples.size(), 10u);
  int runs = 0;
  for (const auto& path : examples) {
    const std::string example = path.filename().string();
    Generator g{std::mt19937_64(std::hash<std::string>{}(example) % 1000)};
    for (int trial = 0; trial < 25; ++trial) {
      const auto sizes = random_sizes(example, g);
      ir::Diagram d = load_example(example, sizes);
      const sched::Schedule s = random_schedule(d, g);
      if (auto problem = sched::validate_schedule(s, d)) {
        ADD_FAILURE() << "generated an invalid schedule " << sched::to_string(s) << ": " << problem->format();
        continue;
      }
      std::string size_text;
      for (const auto& [axis, size] : sizes) size_text += fmt::format(" {}={}", axis, size);
      SCOPED_TRACE(fmt::format("{}{} schedule {}", example, size_text, sched::to_string(s)));
      const ExecutionResult r = expect_matches(d, s, static_cast<std::uint64_t>(trial));
      if (!r.notes.empty()) expect_matches(load_example(example, sizes, true), s, static_cast<std::uint64_t>(trial));
      ++runs;
    }
  }
  EXPECT_GE(runs, 250);
}

// ---------------------------------------------------------------------------------------------
// Transfers: the paper's closed forms (section 3).

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Attention per batch-head: H = 2qd + 2xd q/g_q (Q and O once, K and V once per q tile).
TEST(Exec, AttentionTransfersAreTheClosedForm) {
  Generator g{std::mt19937_64(11)};
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t b = g.uniform(1, 2), h = g.uniform(1, 3), q = g.uniform(1, 13), x = g.uniform(1, 13),
                       dd = g.uniform(1, 4), gq = g.uniform(1, 8), sx = g.uniform(1, 8), wq = g.uniform(1, gq);
    const ir::Diagram d = load_example("attention.napkin", {{"b", b}, {"h", h}, {"q", q}, {"k", x}, {"d", dd}});
    const std::string schedule =
        trial % 2 ? fmt::format("smem{{tile b=1 h=1 q={}; stream k={}:online_softmax}} rmem{{tile q={}}}", gq, sx, wq)
                  : fmt::format("smem{{tile q={}; stream k={}:online_softmax}} rmem{{tile q={}}}", gq, sx, wq);
    auto s = sched::parse_schedule(schedule, d);
    ASSERT_TRUE(s.ok()) << s.error().format();
    auto t = count_transfers(d, *s);
    ASSERT_TRUE(t.ok()) << t.error().format();
    const std::int64_t bh = b * h, smem_tiles = ceil_div(q, gq);
    // rmem tiles nest inside smem tiles: the full ones, then the ragged last one.
    const std::int64_t rmem_tiles = (q / gq) * ceil_div(gq, wq) + ceil_div(q % gq, wq);
    EXPECT_EQ(t->loads.at("smem").at("Q"), bh * q * dd);
    EXPECT_EQ(t->loads.at("smem").at("K"), bh * x * dd * smem_tiles);
    EXPECT_EQ(t->loads.at("smem").at("V"), bh * x * dd * smem_tiles);
    EXPECT_EQ(t->stores.at("smem").at("O"), bh * q * dd);
    EXPECT_EQ(t->loads.at("rmem").at("Q"), bh * q * dd);
    EXPECT_EQ(t->loads.at("rmem").at("K"), bh * x * dd * rmem_tiles);
    EXPECT_EQ(t->stores.at("rmem").at("O"), bh * q * dd);
    if (q % gq == 0) {  // the paper's H = 2qd + 2xdq/g_q, per batch-head
      const std::int64_t H = t->loads.at("smem").at("Q") + t->loads.at("smem").at("K") +
                             t->loads.at("smem").at("V") + t->stores.at("smem").at("O");
      EXPECT_EQ(H, bh * (2 * q * dd + 2 * x * dd * q / gq));
    }
    if (trial < 8) {  // the run reports the same counts as the walk alone
      auto r = execute(d, *s, reference::random_inputs(d, 1));
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r->loads, t->loads);
      EXPECT_EQ(r->stores, t->stores);
    }
  }
}

// Matmul C[a c] = A[a b] B[b c]: H = abc (1/g_a + 1/g_c) + ac.
TEST(Exec, MatmulTransfersAreTheClosedForm) {
  Generator g{std::mt19937_64(5)};
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t m = g.uniform(1, 13), k = g.uniform(1, 13), n = g.uniform(1, 13), gm = g.uniform(1, 8),
                       gn = g.uniform(1, 8), sk = g.uniform(1, 8);
    const ir::Diagram d = load_example("matmul.napkin", {{"m", m}, {"k", k}, {"n", n}});
    auto s = sched::parse_schedule(fmt::format("smem{{tile m={} n={}; stream k={}:add}}", gm, gn, sk), d);
    ASSERT_TRUE(s.ok()) << s.error().format();
    auto t = count_transfers(d, *s);
    ASSERT_TRUE(t.ok()) << t.error().format();
    EXPECT_EQ(t->loads.at("smem").at("A"), m * k * ceil_div(n, gn));
    EXPECT_EQ(t->loads.at("smem").at("B"), k * n * ceil_div(m, gm));
    EXPECT_EQ(t->stores.at("smem").at("C"), m * n);
    EXPECT_EQ(t->groups.at("smem"), ceil_div(m, gm) * ceil_div(n, gn));
    if (m % gm == 0 && n % gn == 0) {
      const std::int64_t H = t->loads.at("smem").at("A") + t->loads.at("smem").at("B") + t->stores.at("smem").at("C");
      EXPECT_EQ(H, m * k * n / gm + m * k * n / gn + m * n);
    }
  }
}

// A tensor stays resident across the chunks of a stream loop over an axis it lacks, and is
// re-read per chunk of one enclosing the innermost loop over its own axes. Outputs leave once
// per group.
TEST(Exec, StreamLoopOrderDecidesWhatStaysResident) {
  const ir::Diagram d = load_example("matmul.napkin", {{"m", 8}, {"k", 6}, {"n", 4}});
  auto inner = sched::parse_schedule("smem{stream k=3:add m=2:none}", d);
  ASSERT_TRUE(inner.ok()) << inner.error().format();
  ExecutionResult r = expect_matches(d, *inner, 3);
  EXPECT_EQ(r.loads.at("smem").at("A"), 8 * 6);
  EXPECT_EQ(r.loads.at("smem").at("B"), 6 * 4);  // resident across the chunks of m
  EXPECT_EQ(r.stores.at("smem").at("C"), 8 * 4);
  EXPECT_EQ(r.chunks, 2 * 4);
  auto outer = sched::parse_schedule("smem{stream m=2:none k=3:add}", d);
  ASSERT_TRUE(outer.ok()) << outer.error().format();
  r = expect_matches(d, *outer, 3);
  EXPECT_EQ(r.loads.at("smem").at("A"), 8 * 6);
  EXPECT_EQ(r.loads.at("smem").at("B"), 6 * 4 * 4);  // re-read per chunk of m (4 chunks)
  EXPECT_EQ(r.stores.at("smem").at("C"), 8 * 4);
}

// ---------------------------------------------------------------------------------------------
// Errors: schedules the executor refuses, with the reason.

TEST(Exec, RefusesInvalidAndUnsupportedSchedulesWithAReason) {
  const ir::Diagram att = load_example("attention.napkin", {{"b", 1}, {"h", 1}, {"q", 4}, {"k", 4}, {"d", 2}});
  const reference::TensorMap inputs = reference::random_inputs(att, 1);
  auto parsed = sched::parse_schedule_text("smem{tile k=2}");
  ASSERT_TRUE(parsed.ok());
  auto r = execute(att, *parsed, inputs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("cannot tile 'k' in level 'smem'"), std::string::npos) << r.error().message;

  auto inside = sched::parse_schedule("smem{stream q=4:none} rmem{tile q=2}", att);
  ASSERT_TRUE(inside.ok()) << inside.error().format();
  r = execute(att, *inside, inputs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "the executor cannot tile 'q' in level 'rmem' inside the stream of 'q' of level 'smem': "
            "tiles are independent groups and run outside every stream; tile it at 'smem' or stream "
            "it at 'rmem' too");

  const ir::Diagram two = parse_text("axes i=3 j=4 k=5\nin A[i j k] f32\nC = sum(A over j k)\nout C\n");
  auto both = sched::parse_schedule("smem{stream j=2:add k=2:add}", two);
  ASSERT_TRUE(both.ok()) << both.error().format();
  r = execute(two, *both, reference::random_inputs(two, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "the executor runs one streamed axis with accumulators per schedule; this schedule "
            "streams j (add) and k (add)");

  reference::TensorMap missing = inputs;
  missing.erase("V");
  auto ok_schedule = sched::parse_schedule("smem{stream k=2:online_softmax}", att);
  ASSERT_TRUE(ok_schedule.ok());
  r = execute(att, *ok_schedule, missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "no value given for input 'V'");
}

TEST(Exec, AnEmptyScheduleIsOneGroupAndOneStep) {
  const ir::Diagram d = load_example("causal.napkin", {{"b", 1}, {"h", 2}, {"q", 5}, {"k", 6}, {"d", 3}});
  const ExecutionResult r = expect_matches(d, sched::Schedule{}, 4);
  EXPECT_EQ(r.chunks, 1);
  EXPECT_EQ(r.nest, "one group, one step");
  EXPECT_TRUE(r.loads.empty());
}

TEST(Exec, CompareFlagsNaNAndShapeMismatches) {
  reference::Tensor t;
  t.sizes = {2};
  t.data = {1.0, 2.0};
  reference::Tensor nan = t;
  nan.data[1] = std::nan("");
  EXPECT_EQ(compare({{"O", t}}, {{"O", t}}).max_rel_error, 0.0);
  EXPECT_TRUE(std::isinf(compare({{"O", nan}}, {{"O", t}}).max_rel_error));
  EXPECT_TRUE(std::isinf(compare({}, {{"O", t}}).max_rel_error));
  reference::Tensor near = t;
  near.data[1] = 2.0 + 1e-12;
  EXPECT_NEAR(compare({{"O", near}}, {{"O", t}}).max_rel_error, 0.5e-12, 1e-15);
}

}  // namespace
}  // namespace napkin::exec
