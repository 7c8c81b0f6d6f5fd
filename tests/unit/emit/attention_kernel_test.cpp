// SPDX-License-Identifier: Apache-2.0
// The attention-family emitter: a golden kernel.cu for every example it accepts; every other
// example and a set of near misses refused with the op's location and the reason; the roles,
// masks and block bounds it finds; and the list of examples CMake compiles (runtime/
// CMakeLists.txt) equal to the examples it accepts.
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "emit/attention_kernel.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "sched/skip.h"

namespace napkin {
namespace {

struct Loaded {
  SourceText src;
  ir::Diagram diagram;
};

Loaded parse(const std::string& name, const std::string& text) {
  SourceText src{name, text};
  auto r = ir::parse_diagram(src);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().format());
  return {src, r.ok() ? r.value().diagram : ir::Diagram{}};
}

Loaded example(const std::string& stem) {
  const auto path = testing::source_dir() / "examples" / (stem + ".napkin");
  return parse("examples/" + stem + ".napkin", testing::read_text(path));
}

std::string emit_for(const Loaded& l) {
  auto f = emit::recognise_attention(l.diagram, l.src);
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().format());
  if (!f.ok()) return "";
  const emit::KernelProvenance prov{"test", ir::diagram_key(l.diagram), l.src.name, "(derivation not run in this test)"};
  return emit::emit_attention_kernel(l.diagram, *f, prov, "{}");
}

// The examples runtime/CMakeLists.txt compiles (NAPKIN_ATTENTION_EXAMPLES).
std::set<std::string> cmake_list() {
  const std::string cm = testing::read_text(testing::source_dir() / "runtime" / "CMakeLists.txt");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(cm, m, std::regex(R"(set\(NAPKIN_ATTENTION_EXAMPLES([^)]*)\))")));
  std::set<std::string> names;
  std::string body = m[1];
  std::regex word(R"([a-z_0-9]+)");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), word); it != std::sregex_iterator(); ++it)
    names.insert(it->str());
  return names;
}

TEST(AttentionKernel, EveryAcceptedExampleHasAGoldenKernelAndCMakeCompilesExactlyThose) {
  std::set<std::string> accepted;
  for (const auto& path : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    const std::string stem = path.stem().string();
    const Loaded l = example(stem);
    auto f = emit::recognise_attention(l.diagram, l.src);
    if (!f.ok()) {
      // A refusal names the diagram and says why.
      EXPECT_NE(f.error().format().find(stem), std::string::npos) << f.error().format();
      continue;
    }
    accepted.insert(stem);
    testing::expect_golden("kernels/" + stem + ".cu", emit_for(l));
  }
  EXPECT_EQ(accepted, cmake_list());
  // The eight diagrams of issue 17 and the original attention examples are all accepted.
  for (const char* n : {"attention", "causal", "gqa", "sliding_window", "softcap", "alibi", "sigmoid_attention",
                        "key_padding", "relative_bias", "document_mask", "prefix_lm", "chunked_local",
                        "head_temperature", "attention_sinks", "mask_tensor"})
    EXPECT_TRUE(accepted.count(n)) << n;
}

TEST(AttentionKernel, FindsRolesMasksAndBlockBounds) {
  auto form = [](const char* stem) {
    const Loaded l = example(stem);
    return emit::recognise_attention(l.diagram, l.src).value();
  };
  const auto plain = form("attention");
  EXPECT_TRUE(plain.score_is_raw);
  EXPECT_FALSE(plain.factor_per_tile);
  EXPECT_DOUBLE_EQ(plain.factor_constant, 0.08838834764831845);
  EXPECT_TRUE(plain.masks.empty());
  EXPECT_EQ(plain.q_roles, "bhqd");
  EXPECT_EQ(plain.v_roles, "bhke");
  const auto gqa = form("gqa");
  EXPECT_EQ(gqa.q_roles, "bhgqd");   // Q[b g r q d]: g is the KV head, r the group
  EXPECT_EQ(gqa.o_roles, "bqhge");   // out O[b q g r d]
  EXPECT_TRUE(form("causal").skips_blocks);
  EXPECT_TRUE(form("chunked_local").skips_blocks);     // floor(q / c) == floor(k / c) is bounded
  EXPECT_TRUE(form("document_mask").skips_blocks);     // doc_q == doc_k through block summaries, and q >= k
  EXPECT_TRUE(form("key_padding").skips_blocks);       // keep[b k] through its block summary
  EXPECT_FALSE(form("alibi").score_is_raw);
  EXPECT_EQ(form("alibi").aux.size(), 1u);
  EXPECT_EQ(form("sigmoid_attention").normaliser, -1);
  EXPECT_GE(form("attention_sinks").lse, 0);
  EXPECT_EQ(form("sliding_window").params.size(), 1u);
}

// K and V without Q's batch axis are one copy that every batch reads (batch stride 0 at launch),
// not a GQA group: the group is the Q-only axis after the head, the batch the one before it.
TEST(AttentionKernel, ReadsKeysSharedAcrossTheBatchAtBatchStrideZero) {
  auto roles = [](const std::string& q, const std::string& kv) {
    const Loaded l = parse("shared.napkin", "axes b=2 h=4 g=2 q=64 k=300 d=64 e=64\nin Q[" + q + "] bf16\nin K[" + kv +
                                                " d] bf16\nin V[" + kv + " e] bf16\n"
                                                "O = contract(softmax(contract(Q, K over d) over k), V over k) as bf16\nout O\n");
    auto f = emit::recognise_attention(l.diagram, l.src);
    return f.ok() ? f->q_roles + " " + f->k_roles + " " + f->v_roles : f.error().format();
  };
  EXPECT_EQ(roles("b h q d", "h k"), "bhqd hkd hke");
  EXPECT_EQ(roles("b h g q d", "h k"), "bhgqd hkd hke");
  EXPECT_EQ(roles("b h g q d", "b h k"), "bhgqd bhkd bhke");
  EXPECT_EQ(roles("b h q d", "b k"), "hgqd hkd hke");  // MQA: b the KV head (one per sequence), h its group
  // MQA in [s b h d]: the query is declared first; the longest Q-only axis, not a batch.
  EXPECT_EQ(roles("q b h d", "k b"), "qhgd khd khe");
  // A group declared before the head in Q but after it in O (out O: [b h g q e]): O decides, and
  // the launch names Q, whose heads cannot merge.
  EXPECT_EQ(roles("b g h q d", "h k"), "bghqd hkd hke");
}

// A fraction or a param times an index is real in the score and the mask (tests/diagrams/
// fractional_index: 0.25 |q - k| and k <= q + 2.5), never an integer product that truncates it.
TEST(AttentionKernel, AnIndexTimesAFractionIsNotTruncated) {
  const std::string rel = "tests/diagrams/fractional_index.napkin";
  const std::string unit = emit_for(parse(rel, testing::read_text(testing::source_dir() / rel)));
  EXPECT_NE(unit.find("raw - (0.25f * 8.0f) * napkin::device::index_float("), std::string::npos) << unit;
  EXPECT_NE(unit.find("napkin::device::index_float(q) + a.param_lag_f32"), std::string::npos) << unit;
  EXPECT_EQ(unit.find("static_cast<int>("), std::string::npos) << unit;
  testing::expect_golden("kernels/fractional_index.cu", unit);
}

// A softmax written out (tests/diagrams/written_softmax) is the composite (ir/recognise.h): the
// kernel is the one `softmax(S over k)` gives, line for line past the diagram's own text.
TEST(AttentionKernel, AWrittenOutSoftmaxIsTheFusedKernel) {
  const std::string rel = "tests/diagrams/written_softmax.napkin";
  const std::string text = testing::read_text(testing::source_dir() / rel);
  const std::string written = emit_for(parse(rel, text));
  std::string composite_text = text;
  const std::string by_hand = "M = max(S over k)\nE = exp(S - M)\nP = E / sum(E over k)\n";
  ASSERT_NE(composite_text.find(by_hand), std::string::npos);
  composite_text.replace(composite_text.find(by_hand), by_hand.size(), "P = softmax(S over k)\n");
  const std::string composite = emit_for(parse(rel, composite_text));
  auto code = [](const std::string& unit) { return unit.substr(unit.find("#include")); };
  EXPECT_EQ(code(written), code(composite));
  testing::expect_golden("kernels/written_softmax.cu", written);
}

// A causal mask written under the scale or added as a bias table of 0 and -inf is the mask
// (ir::hoist_masks), and a scale written on Q is the scores' factor
// (ir::pull_factors_out_of_contractions): the kernel is causal attention's, which skips the
// blocks above the diagonal.
TEST(AttentionKernel, AMaskWrittenInsideTheScoresIsTheMask) {
  const std::string head = "axes b=2 h=4 q=256 k=256 d=64\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n";
  const std::string tail = "O = contract(P, V over k) as bf16\nout O\n";
  auto code = [](const std::string& unit) { return unit.substr(unit.find("#include")); };
  const std::string causal =
      code(emit_for(parse("c.napkin", head + "P = softmax(select(q >= k, contract(Q, K over d) * 0.125, -inf) over k)\n" + tail)));
  EXPECT_NE(causal.find("kSkipsBlocks = true"), std::string::npos);
  for (std::string p : {"P = softmax(select(q >= k, contract(Q, K over d), -inf) * 0.125 over k)\n",
                        "P = softmax(contract(Q, K over d) * 0.125 + select(q >= k, 0, -inf) over k)\n",
                        "P = softmax(select(q >= k, contract(Q * 0.125, K over d), -inf) over k)\n"}) {
    SCOPED_TRACE(p);
    std::string unit = code(emit_for(parse("c.napkin", head + p + tail)));
    // Node numbers in the generated names may differ; the code may not.
    const std::regex numbered("([vr])[0-9]+\\b");
    EXPECT_EQ(std::regex_replace(unit, numbered, "$1#"), std::regex_replace(causal, numbered, "$1#"));
  }
}

// FlashAttention's arithmetic written out (tests/diagrams/base_two_causal: an additive causal
// mask, exp2 with the scale times log2(e)) is causal attention: the mask skips blocks, the scale
// folds into the softmax's exp2, no score code is left.
TEST(AttentionKernel, FlashAttentionsArithmeticWrittenOutIsCausalAttention) {
  const std::string rel = "tests/diagrams/base_two_causal.napkin";
  const std::string unit = emit_for(parse(rel, testing::read_text(testing::source_dir() / rel)));
  EXPECT_NE(unit.find("kScoreMod = false, kMask = true, kSkipsBlocks = true, kNormalise = true"), std::string::npos);
  testing::expect_golden("kernels/base_two_causal.cu", unit);
}

// Masks as ported PyTorch code writes them (tests/diagrams/masked_fill_lse: masked_fill's form,
// an additive causal mask) are the kernel's masks, and the row logsumexp of the same scores,
// each mask hoisted for it separately, is the kernel's second output.
TEST(AttentionKernel, MaskedFillAndAdditiveMasksWithTheLogsumexpAreOneKernel) {
  const std::string rel = "tests/diagrams/masked_fill_lse.napkin";
  const Loaded l = parse(rel, testing::read_text(testing::source_dir() / rel));
  auto f = emit::recognise_attention(l.diagram, l.src);
  ASSERT_TRUE(f.ok()) << f.error().format();
  EXPECT_GE(f->lse_output, 0);
  const std::string unit = emit_for(l);
  EXPECT_NE(unit.find("kMask = true, kSkipsBlocks = true"), std::string::npos) << unit;
  testing::expect_golden("kernels/masked_fill_lse.cu", unit);
}

// An integer literal past f32's 24-bit significand is written as the int it is: through a float
// literal, q + 16777217 became q + 16777216 per score while the block bound kept 16777217.
TEST(AttentionKernel, IntegerLiteralsAreExact) {
  const std::string unit = emit_for(parse("big.napkin",
      "axes b=1 h=2 q=256 k=256 d=64\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n"
      "P = softmax(select(q + 16777217 >= k + 16777216, contract(Q, K over d) * 0.125, -inf) over k)\n"
      "O = contract(P, V over k) as bf16\nout O\n"));
  EXPECT_NE(unit.find("q + 16777217;"), std::string::npos) << unit;
  EXPECT_EQ(unit.find("static_cast<int>(16777216.0f)"), std::string::npos);
}

// Arithmetic on i32 input tensors is 64-bit (their values are not known at launch; the
// reference's integers are exact); index arithmetic stays 32-bit under the launch's range check.
TEST(AttentionKernel, ArithmeticOnIntegerInputsIs64Bit) {
  const std::string unit = emit_for(parse("pos.napkin",
      "axes b=1 h=2 q=256 k=256 d=64\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n"
      "in pq[b q] i32\nin pk[b k] i32\n"
      "P = softmax(contract(Q, K over d) * 0.125 - 1e-9 * (pq * pk) - 0.01 * (q - k) over k)\n"
      "O = contract(P, V over k) as bf16\nout O\n"));
  EXPECT_NE(unit.find("const long long"), std::string::npos) << unit;
  EXPECT_NE(unit.find("static_cast<long long>("), std::string::npos) << unit;
  EXPECT_NE(unit.find("const int v"), std::string::npos) << unit;  // q - k
}

// derive counts skipped blocks by the masks the kernel reads: one peel (sched::peel_masks) for
// both, on every attention-family diagram napkin ships.
TEST(AttentionKernel, TheKernelsMasksAreTheOnesDeriveSkipsBy) {
  int checked = 0;
  for (const char* dir : {"examples", "tests/diagrams"})
    for (const auto& path : testing::files_in(testing::source_dir() / dir, ".napkin")) {
      const Loaded l = parse(path.filename().string(), testing::read_text(path));
      auto f = emit::recognise_attention(l.diagram, l.src);
      if (!f.ok()) continue;
      std::vector<ir::NodeId> kernel = f->masks, derive = sched::mask_predicates(l.diagram, f->key);
      std::sort(kernel.begin(), kernel.end());
      std::sort(derive.begin(), derive.end());
      EXPECT_EQ(kernel, derive) << path;
      ++checked;
    }
  EXPECT_GT(checked, 20);
}

// The query axis is the one the mask compares with the key index, whatever the sizes or the
// storage order: a causal MQA in [s b h d] at 16 heads of 8 tokens.
TEST(AttentionKernel, TheQueryIsTheAxisTheMaskComparesWithTheKey) {
  const Loaded l = parse("mqa.napkin", "axes b=2 h=16 q=8 k=300 d=64\nin Q[q b h d] bf16\nin K[k b d] bf16\nin V[k b d] bf16\n"
                                       "O = contract(softmax(select(q >= k, contract(Q, K over d), -inf) over k), V over k) as bf16\n"
                                       "out O[q b h d]\n");
  auto f = emit::recognise_attention(l.diagram, l.src);
  ASSERT_TRUE(f.ok()) << f.error().format();
  EXPECT_EQ(f->q_roles, "qhgd");
}

// Head dims other than 64, 128 and 256 (tests/diagrams: 40 in f16, Stable Diffusion's; 96 causal
// GQA): the kernel is instantiated at the diagram's head dim (the device library pads its tiles).
TEST(AttentionKernel, EmitsOtherHeadDims) {
  for (const auto& [name, dim] : {std::pair<std::string, int>{"latent_attention", 40}, {"causal_d96", 96}}) {
    const std::string rel = "tests/diagrams/" + name + ".napkin";
    const Loaded l = parse(rel, testing::read_text(testing::source_dir() / rel));
    auto f = emit::recognise_attention(l.diagram, l.src);
    ASSERT_TRUE(f.ok()) << f.error().format();
    EXPECT_EQ(f->head_dim, dim);
    const std::string unit = emit_for(l);
    EXPECT_NE(unit.find(fmt::format("NAPKIN_GENERATED_ATTENTION(Fusion, {}, {},", dim == 40 ? "cutlass::half_t" : "cutlass::bfloat16_t", dim)),
              std::string::npos)
        << unit;
    testing::expect_golden("kernels/" + name + ".cu", unit);
  }
  // DeepSeek's MLA: V's head dim of its own, instantiated beside Q's.
  const Loaded mla = example("mla_attention");
  auto f = emit::recognise_attention(mla.diagram, mla.src);
  ASSERT_TRUE(f.ok()) << f.error().format();
  EXPECT_EQ(f->head_dim, 192);
  EXPECT_EQ(f->head_dim_v, 128);
  EXPECT_NE(emit_for(mla).find("NAPKIN_GENERATED_ATTENTION(Fusion, cutlass::bfloat16_t, 192, 128,"), std::string::npos);
}

// An output left in f32 (a plan's intermediate: differential attention's first map's P V) is
// written in f32 from the accumulators.
TEST(AttentionKernel, WritesAnF32Output) {
  const Loaded l = parse("f32.napkin", "axes b=1 h=2 q=64 k=64 d=64\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n"
                                       "O = contract(softmax(contract(Q, K over d) over k), V over k)\nout O\n");
  auto f = emit::recognise_attention(l.diagram, l.src);
  ASSERT_TRUE(f.ok()) << f.error().format();
  EXPECT_EQ(f->output_dtype, DType::f32);
  EXPECT_NE(emit_for(l).find("static constexpr bool kOutputF32 = true;"), std::string::npos);
}

// TMA moves rows along the head dim: an operand or an output stored with another axis innermost
// is refused, naming the order that builds.
TEST(AttentionKernel, RefusesAHeadDimThatIsNotInnermost) {
  const std::string base = "axes b=1 h=2 q=64 k=64 d=64\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n"
                           "O = contract(softmax(contract(Q, K over d) over k), V over k) as bf16\nout O\n";
  auto refusal = [&](const std::string& from, const std::string& to) {
    std::string text = base;
    text.replace(text.find(from), from.size(), to);
    const Loaded l = parse("layout.napkin", text);
    auto f = emit::recognise_attention(l.diagram, l.src);
    return f.ok() ? std::string() : f.error().message;
  };
  EXPECT_EQ(refusal("K[b h k d]", "K[b h d k]"),
            "'K' is stored with 'k' innermost: the kernel reads Q, K and V with their head dim innermost (TMA rows along "
            "it); declare it as K[b h k d]");
  EXPECT_NE(refusal("V[b h k d]", "V[b d h k]").find("declare it as V[b h k d]"), std::string::npos);
  EXPECT_EQ(refusal("out O\n", "out O[b h d q]\n"),
            "the kernel writes O with its head dim innermost (TMA rows along it): write it as out O[b h q d]");
  EXPECT_EQ(refusal("out O\n", "out O[b q h d]\n"), "");
}

// The row logsumexp as a second output (FlashAttention's LSE): f32, written batch, head, group,
// query; -inf for a row that sees no key (the reference's), and no exchange of q and g.
TEST(AttentionKernel, WritesTheRowLogsumexpAsASecondOutput) {
  const auto path = testing::source_dir() / "tests" / "diagrams" / "attention_lse.napkin";
  const Loaded l = parse("tests/diagrams/attention_lse.napkin", testing::read_text(path));
  auto f = emit::recognise_attention(l.diagram, l.src);
  ASSERT_TRUE(f.ok()) << f.error().format();
  EXPECT_GE(f->lse_output, 0);
  EXPECT_EQ(f->lse_roles, "bhgq");
  EXPECT_EQ(f->o_index, 0u);
  const std::string unit = emit_for(l);
  EXPECT_NE(unit.find("\"L\", \"bhgq\"}"), std::string::npos);
  EXPECT_NE(unit.find("kEmptyRowLse = -INFINITY"), std::string::npos);
  EXPECT_EQ(unit.find("kQueryAxesInterchangeable"), std::string::npos);
  testing::expect_golden("kernels/attention_lse.cu", unit);
  auto refused = [&](const std::string& from, const std::string& to) {
    std::string text = testing::read_text(path);
    text.replace(text.find(from), from.size(), to);
    const Loaded m = parse("lse.napkin", text);
    auto r = emit::recognise_attention(m.diagram, m.src);
    return r.ok() ? std::string("accepted") : r.error().format();
  };
  EXPECT_NE(refused("out L", "out L[b q h g]").find("write it as out L[b h g q]"), std::string::npos);
  EXPECT_NE(refused("L = logsumexp(M over k)", "L = logsumexp(S over k)").find("the row logsumexp of the softmax's own input"),
            std::string::npos);
  EXPECT_NE(refused("L = logsumexp(M over k)", "L = logsumexp(M over k) as f16").find("one output, O (and its row logsumexp)"),
            std::string::npos);
  // Listed first, it is still the LSE.
  auto swapped = [&]() {
    std::string text = testing::read_text(path);
    text.replace(text.find("out O\nout L"), 11, "out L\nout O");
    const Loaded m = parse("lse.napkin", text);
    return emit::recognise_attention(m.diagram, m.src);
  }();
  ASSERT_TRUE(swapped.ok()) << swapped.error().format();
  EXPECT_EQ(swapped->o_index, 1u);
}

// Where the fused code reads neither the query row nor the GQA group, the launch may make either
// the tile's rows (decoding packs a KV group's heads into one tile); any read of either keeps the
// build's roles.
TEST(AttentionKernel, MarksQueryAxesInterchangeableOnlyWhereNothingReadsThem) {
  const std::string head = "axes b=2 g=4 r=8 q=64 k=300 d=64\nin Q[b g r q d] bf16\nin K[b g k d] bf16\nin V[b g k d] bf16\n";
  const std::string tail = "O = contract(P, V over k) as bf16\nout O[b q g r d]\n";
  struct Case {
    const char* name;
    std::string body;
    bool interchangeable;
  } cases[] = {
      {"plain", "S = contract(Q, K over d) * 0.125\nP = softmax(S over k)\n", true},
      {"key padding", "in keep[b k] bool\nS = contract(Q, K over d) * 0.125\nP = softmax(select(keep, S, -inf) over k)\n",
       true},
      {"per KV head bias", "in bias[g k] f32\nS = contract(Q, K over d) * 0.125 + bias\nP = softmax(S over k)\n", true},
      {"causal", "S = contract(Q, K over d) * 0.125\nP = softmax(select(q >= k, S, -inf) over k)\n", false},
      {"per query head slope", "in slope[r] f32\nS = contract(Q, K over d) * 0.125 + slope * k\nP = softmax(S over k)\n",
       false},
      {"row input", "in seg[b q] i32\nin kseg[b k] i32\nS = contract(Q, K over d) * 0.125\n"
                    "P = softmax(select(seg == kseg, S, -inf) over k)\n", false},
  };
  for (const Case& c : cases) {
    const Loaded l = parse(std::string(c.name) + ".napkin", head + c.body + tail);
    const std::string cu = emit_for(l);
    EXPECT_EQ(cu.find("kQueryAxesInterchangeable = true") != std::string::npos, c.interchangeable) << c.name;
  }
  // The test diagram of GQA decoding (a length per sequence, bounded per tile as it is read).
  const auto path = testing::source_dir() / "tests" / "diagrams" / "gqa_decode.napkin";
  const std::string decode = emit_for(parse("tests/diagrams/gqa_decode.napkin", testing::read_text(path)));
  EXPECT_NE(decode.find("kQueryAxesInterchangeable = true"), std::string::npos);
  EXPECT_NE(decode.find("kSkipsBlocks = true"), std::string::npos);
  testing::expect_golden("kernels/gqa_decode.cu", decode);
  // Without a group there is nothing to exchange.
  EXPECT_EQ(emit_for(example("attention")).find("kQueryAxesInterchangeable"), std::string::npos);
}

// The score's factor free of rows and keys is taken out of the per-score code and folded into the
// softmax's exponent: at compile time where it is a positive constant, else per (batch, head)
// tile, signed; terms added beside the scores are divided by the factor below them.
TEST(AttentionKernel, FoldsTheScoresFactorIntoTheExponent) {
  struct Case {
    const char* score;
    bool raw, per_tile;
    double constant;
    std::vector<std::string> emitted;  // substrings of the kernel
  };
  const std::vector<Case> cases = {
      {"contract(Q, K over d) * 0.125 / temp", true, true, 0.125,
       {"kScoreMod = false", "kScoreFactor = true", "return 0.125f * __fdividef(1.0f, a.in_temp.at(b, h, q, k));"}},
      {"contract(Q, K over d) * 0.5 + slope * (k - q)", false, false, 0.5,
       {"raw + (a.in_slope.at(b, h, q, k) * 2.0f) * napkin::device::index_float(", ", 0.5f};", "kIndexFloatScale = 2, kIndexFloatOffset = 0;"}},
      {"softcap(contract(Q, K over d) * 0.125, 30)", false, false, 30,
       {"napkin::device::fast_tanh(raw * 0.00416666688f)", ", 30.0f};"}},
      // A negative constant is signed: folded per tile (the running max is of the negated scores).
      {"-(contract(Q, K over d) * 2)", true, true, -2, {"return -2.0f;"}},
      // Below a nonlinear op nothing is taken out; above it, a param is.
      {"tanh(contract(Q, K over d) * 0.5) * t", false, true, 1, {"napkin::device::fast_tanh(", "static_cast<float>(a.param_t)"}},
      // A multiplier that depends on the key stays in the per-score code.
      {"contract(Q, K over d) * bias_k * 0.25", false, false, 0.25, {"raw * rd.template key<0, 0>(a.in_bias_k, b, h, q, k)"}},
      {"(contract(Q, K over d) + bias_k) / (temp * 2)", false, true, 1, {"raw + rd.template key<0, 0>(a.in_bias_k, b, h, q, k);",
                                                                         "__fdividef(1.0f, v"}},
      // Below a sum only nonzero constants come out: the terms beside it are divided by them, and
      // a per-head value there may be 0 (the score is then the bias alone).
      {"contract(Q, K over d) * temp * 0.5 + bias_k", false, false, 0.5,
       {"raw * a.in_temp.at(b, h, q, k)", "rd.template key<0, 0>(a.in_bias_k, b, h, q, k) * 2.0f"}},
      {"contract(Q, K over d) * 0 + bias_k", false, false, 1, {"raw * 0.0f"}},
  };
  for (const Case& c : cases) {
    const std::string text = std::string("axes b=2 h=4 q=256 k=256 d=64\nparam t = 3\nin Q[b h q d] bf16\nin K[b h k d] bf16\n"
                                         "in V[b h k d] bf16\nin temp[h] f32\nin slope[h] f32\nin bias_k[b k] f32\nS = ") +
                             c.score + "\nP = softmax(S over k)\nO = contract(P, V over k) as bf16\nout O\n";
    const Loaded l = parse("factor.napkin", text);
    auto f = emit::recognise_attention(l.diagram, l.src);
    ASSERT_TRUE(f.ok()) << c.score << ": " << f.error().format();
    EXPECT_EQ(f->score_is_raw, c.raw) << c.score;
    EXPECT_EQ(f->factor_per_tile, c.per_tile) << c.score;
    EXPECT_DOUBLE_EQ(f->factor_constant, c.constant) << c.score;
    const std::string kernel = emit_for(l);
    for (const std::string& s : c.emitted) EXPECT_NE(kernel.find(s), std::string::npos) << c.score << " lacks " << s << "\n" << kernel;
  }
}

// Inputs a mask reads along the query or key axis alone (i32 or bool) are summarised per block, so
// the bound covers them; any other input leaves its term unknown over a block.
TEST(AttentionKernel, BoundsMasksOverInputsThroughBlockSummaries) {
  auto kernel = [](const std::string& decls, const std::string& pred) {
    const std::string text = "axes b=2 h=4 q=256 k=256 d=64\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n" +
                             decls + "S = contract(Q, K over d)\nP = softmax(select(" + pred +
                             ", S, -inf) over k)\nO = contract(P, V over k) as bf16\nout O\n";
    const Loaded l = parse("summaries.napkin", text);
    auto f = emit::recognise_attention(l.diagram, l.src);
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().format());
    return std::make_pair(f.ok() && f->skips_blocks, f.ok() ? emit_for(l) : std::string());
  };
  const auto doc = kernel("in seg_q[b h q] i32\nin seg_k[b k] i32\n", "seg_q == seg_k");
  EXPECT_TRUE(doc.first);
  EXPECT_NE(doc.second.find("napkin::BlockSummary<napkin::kAuxB | napkin::kAuxH> blocks_seg_q;"), std::string::npos);
  EXPECT_NE(doc.second.find("a.blocks_seg_k = s.of(a.in_seg_k, tb, 'k');"), std::string::npos);
  EXPECT_NE(doc.second.find("bv_eq(r"), std::string::npos);
  const auto keep = kernel("in keep[b k] bool\n", "keep && q >= k");
  EXPECT_TRUE(keep.first);
  EXPECT_NE(keep.second.find("a.blocks_keep.visibility(b, h, k0, k1)"), std::string::npos);
  // A mask tensor over rows and keys: a summary per group of rows along the keys.
  const auto tensor = kernel("in allowed[b q k] bool\n", "allowed");
  EXPECT_TRUE(tensor.first);
  EXPECT_NE(tensor.second.find("napkin::BlockSummary2D<napkin::kAuxB> blocks_allowed;"), std::string::npos);
  EXPECT_NE(tensor.second.find("a.blocks_allowed.visibility(b, h, q0, q1, k0, k1)"), std::string::npos);
  EXPECT_NE(tensor.second.find("a.blocks_allowed = s.of_rows_and_keys(a.in_allowed, tb);"), std::string::npos);
  // A bound that reads summaries lists each tile's visible chunks before the kernel; one over
  // indices alone is also a host function, which picks the schedule by the keys a tile visits.
  for (const auto* reads : {&doc, &keep, &tensor}) {
    EXPECT_NE(reads->second.find("static constexpr bool kBlockReadsTensors = true;"), std::string::npos);
    EXPECT_EQ(reads->second.find("kBlockOnHost"), std::string::npos);
    EXPECT_NE(reads->second.find("  __device__ static napkin::device::BlockVisibility block("), std::string::npos);
  }
  // Tensors indexed by the query row lay the tiles over whole row blocks; one by key alone not.
  for (const auto* rows : {&doc, &tensor})
    EXPECT_NE(rows->second.find("static constexpr bool kBlockRowsFromTensors = true;"), std::string::npos);
  EXPECT_EQ(keep.second.find("kBlockRowsFromTensors"), std::string::npos);
  // Not summarised: a float input.
  EXPECT_FALSE(kernel("in bias[b k] f32\n", "bias > 0").first);
  const auto mixed = kernel("in weight[b k] f32\n", "weight > 0 && q >= k");
  EXPECT_TRUE(mixed.first);  // the index conjunct still bounds it
  EXPECT_EQ(mixed.second.find("blocks_"), std::string::npos);
  EXPECT_NE(mixed.second.find("static constexpr bool kBlockOnHost = true;"), std::string::npos);
  EXPECT_NE(mixed.second.find("__host__ __device__ static napkin::device::BlockVisibility block("), std::string::npos);
  EXPECT_EQ(mixed.second.find("kBlockReadsTensors"), std::string::npos);
  // Reads of summaries make the bound costly (the producer evaluates it); compares do not.
  for (const auto* reads : {&doc, &keep, &tensor})
    EXPECT_NE(reads->second.find("static constexpr bool kBlockCostly = true;"), std::string::npos);
  EXPECT_EQ(mixed.second.find("kBlockCostly"), std::string::npos);
}

// A bound with a division, a product of ranges or four operations is costly (Fusion::kBlockCostly:
// the producer warp evaluates it and hands each chunk's mask decision to the consumers); one of
// up to three compares (causal, prefix-LM) stays in the consumers.
TEST(AttentionKernel, MarksBoundsWithDivisionsProductsOrManyOperationsCostly) {
  auto costly = [](const std::string& pred) {
    const Loaded l = parse("costly.napkin", "axes b=2 h=4 q=256 k=256 d=64\nparam c = 64\nin Q[b h q d] bf16\n"
                                            "in K[b h k d] bf16\nin V[b h k d] bf16\nS = contract(Q, K over d)\n"
                                            "P = softmax(select(" + pred + ", S, -inf) over k)\n"
                                            "O = contract(P, V over k) as bf16\nout O\n");
    const std::string cu = emit_for(l);
    EXPECT_NE(cu.find("block(Args const& a"), std::string::npos) << pred;
    return cu.find("static constexpr bool kBlockCostly = true;") != std::string::npos;
  };
  EXPECT_FALSE(costly("q >= k"));
  EXPECT_FALSE(costly("k < c || q >= k"));
  EXPECT_TRUE(costly("q >= k && q - k < c"));
  EXPECT_TRUE(costly("q >= k && floor(q / c) == floor(k / c)"));
  EXPECT_TRUE(costly("2 * q >= k"));
}

// floor(x / c) in a mask: the corrected quotient, exact on integers as the reference and the
// block bound compute it (a fast quotient could put an exact multiple of c below its integer).
TEST(AttentionKernel, FloorOfAQuotientIsExact) {
  const Loaded l = parse("chunks.napkin",
                         "axes b=2 h=4 q=256 k=256 d=64\nparam c = 100\nin Q[b h q d] bf16\nin K[b h k d] bf16\n"
                         "in V[b h k d] bf16\nS = contract(Q, K over d)\n"
                         "P = softmax(select(floor(q / c) == floor(k / c), S, -inf) over k)\n"
                         "O = contract(P, V over k) as bf16\nout O\n");
  const std::string cu = emit_for(l);
  EXPECT_NE(cu.find("napkin::device::floor_quotient(napkin::device::index_float(q), a.param_c_f32)"), std::string::npos);
  EXPECT_EQ(cu.find("floorf(__fdividef"), std::string::npos);
}

// The diagram's names become Args members with a prefix per kind, so a param named `group`, an
// input named after a C++ keyword or after another input's summary compile.
TEST(AttentionKernel, ArgsMembersNeverCollide) {
  const Loaded l = parse("names.napkin",
                         "axes b=2 h=4 q=256 k=256 d=64\nparam group = 3\nin Q[b h q d] bf16\nin K[b h k d] bf16\n"
                         "in V[b h k d] bf16\nin keep[b k] bool\nin blocks_keep[b k] bool\nin float[h] f32\n"
                         "S = contract(Q, K over d) * float\n"
                         "P = softmax(select(keep && blocks_keep && k < group * 50, S, -inf) over k)\n"
                         "O = contract(P, V over k) as bf16\nout O\n");
  const std::string cu = emit_for(l);
  const std::string args = cu.substr(cu.find("struct Args {"), cu.find("};", cu.find("struct Args {")) - cu.find("struct Args {"));
  std::set<std::string> members;
  std::regex member(R"((\w+);  //)");
  for (auto it = std::sregex_iterator(args.begin(), args.end(), member); it != std::sregex_iterator(); ++it)
    EXPECT_TRUE(members.insert((*it)[1]).second) << "two members named " << (*it)[1] << " in\n" << args;
  for (const char* m : {"group", "param_group", "in_keep", "in_blocks_keep", "blocks_keep", "blocks_blocks_keep", "in_float"})
    EXPECT_TRUE(members.count(m)) << m << " in\n" << args;
}

struct Refusal {
  const char* what;
  const char* body;     // the lines after the common header
  const char* message;  // a fragment of the error
  int line;             // where it points (0: no location)
};

TEST(AttentionKernel, RefusesWhatIsNotAttentionWithTheOpAndWhy) {
  const std::string header =
      "axes b=2 h=4 q=256 k=256 d=64\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n";
  const Refusal cases[] = {
      {"softmax over q", "S = contract(Q, K over d)\nP = softmax(S over q)\nO = contract(P, V over k) as bf16\nout O\n",
       "softmax over q", 6},
      {"score from V", "S = contract(Q, K over d) + sum(V over d)\nP = softmax(S over k)\nO = contract(P, V over k) as bf16\nout O\n",
       "'V' is read by", 5},
      {"two softmaxes", "S = contract(Q, K over d)\nP = softmax(softmax(S over k) over k)\nO = contract(P, V over k) as bf16\nout O\n",
       "two chained normalisations", 6},
      {"dropout after the softmax", "in keep[b h q k] bool\nP = softmax(contract(Q, K over d) over k)\n"
       "O = contract(select(keep, P * 1.25, 0), V over k) as bf16\nout O\n", "P V reads 'P' changed after its softmax", 6},
      {"f16 output of bf16 operands", "S = contract(Q, K over d)\nP = softmax(S over k)\nO = contract(P, V over k) as f16\nout O\n",
       "end it with `as bf16`", 7},
      {"a reduction in the scores", "S = contract(Q, K over d)\nP = softmax(S - max(S over k) over k)\nO = contract(P, V over k) as bf16\nout O\n",
       "only elementwise ops", 6},
      {"a third contraction", "S = contract(Q, K over d)\nP = softmax(S over k)\nO = contract(P, V over k)\nY = contract(O, Q over d) as bf16\nout Y\n",
       "two contractions", 8},
      {"scores read after P V", "S = contract(Q, K over d)\nP = softmax(S over k)\nO = contract(P, V over k) * max(S over k) as bf16\nout O\n",
       "", 0},
  };
  for (const Refusal& c : cases) {
    const Loaded l = parse("near_miss.napkin", header + c.body);
    auto f = emit::recognise_attention(l.diagram, l.src);
    ASSERT_FALSE(f.ok()) << c.what;
    const std::string text = f.error().format();
    EXPECT_NE(text.find(c.message), std::string::npos) << c.what << ":\n" << text;
    if (c.line > 0) EXPECT_EQ(f.error().loc.line, c.line) << c.what << ":\n" << text;
  }
  // Operands the device library does not take.
  const Loaded fp8 = parse("fp8.napkin",
                           "axes b=1 h=1 q=64 k=64 d=64\nin Q[b h q d] fp8e4m3\nin K[b h k d] fp8e4m3\nin V[b h k d] fp8e4m3\n"
                           "O = contract(softmax(contract(Q, K over d) over k), V over k) as fp8e4m3\nout O\n");
  EXPECT_NE(emit::recognise_attention(fp8.diagram, fp8.src).error().message.find("bf16 or f16"), std::string::npos);
  // Head dims: any multiple of 8 up to WGMMA's widest N (the kernel pads its tiles to 16).
  auto head_dim = [&](int d) {
    return parse("d.napkin", fmt::format("axes b=1 h=1 q=64 k=64 d={}\nin Q[b h q d] bf16\nin K[b h k d] bf16\n"
                                         "in V[b h k d] bf16\nO = contract(softmax(contract(Q, K over d) over k), V over k) "
                                         "as bf16\nout O\n",
                                         d));
  };
  for (int d : {8, 40, 96, 192}) {
    const Loaded l = head_dim(d);
    auto f = emit::recognise_attention(l.diagram, l.src);
    ASSERT_TRUE(f.ok()) << d << ": " << f.error().format();
    EXPECT_EQ(f->head_dim, d);
  }
  for (int d : {36, 264}) {
    const Loaded l = head_dim(d);
    EXPECT_NE(emit::recognise_attention(l.diagram, l.src).error().message.find("a multiple of 8 from 8 to 256"),
              std::string::npos)
        << d;
  }
}

TEST(AttentionKernel, IsDeterministic) {
  const Loaded l = example("alibi");
  EXPECT_EQ(emit_for(l), emit_for(l));
}

}  // namespace
}  // namespace napkin
