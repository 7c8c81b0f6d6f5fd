// SPDX-License-Identifier: Apache-2.0
// Every example in examples/ evaluated by the reference interpreter at small sizes, against an
// independent hand-written loop computation of the same function.
#include <cmath>
#include <functional>
#include <limits>

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "ir/parser.h"
#include "reference/interpreter.h"

namespace napkin::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Loaded {
  ir::Diagram diagram;
  TensorMap inputs;   // rounded to their declared dtypes, as the interpreter sees them
  TensorMap outputs;  // from the interpreter
};

Loaded run_example(const std::string& name, const std::vector<ir::Binding>& bindings,
                   std::uint64_t seed = 7) {
  auto p = ir::load_diagram((testing::source_dir() / "examples" / name).string(), bindings);
  EXPECT_TRUE(p.ok()) << p.error().format();
  Loaded l{p->diagram, random_inputs(p->diagram, seed), {}};
  auto out = evaluate(l.diagram, l.inputs);
  EXPECT_TRUE(out.ok()) << out.error().format();
  l.outputs = out.value();
  for (auto& [input, t] : l.inputs) {
    const DType dt = l.diagram.node(*l.diagram.find_node(input)).dtype;
    for (double& v : t.data) v = round_to_dtype(v, dt);
  }
  return l;
}

// Row-major element of t at the given index (in t's own axis order).
double at(const Tensor& t, std::initializer_list<std::int64_t> index) {
  std::int64_t off = 0;
  std::size_t i = 0;
  for (std::int64_t x : index) off = off * t.sizes[i++] + x;
  return t.data[static_cast<std::size_t>(off)];
}

void expect_near_all(const Tensor& actual, const std::vector<double>& expected, double tol = 1e-9) {
  ASSERT_EQ(actual.data.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(actual.data[i], expected[i], tol * (1 + std::fabs(expected[i]))) << "at element " << i;
}

// Attention for one (batch, head): logits -> optional transform -> masked softmax -> P V.
// Returns O[b h q d] in row-major order; `kv_head(h)` maps a query head to its KV head.
struct AttentionSpec {
  std::int64_t b, h, q, k, d;
  double scale;
  std::function<double(std::int64_t h, std::int64_t q, std::int64_t k, double s)> logit =
      [](std::int64_t, std::int64_t, std::int64_t, double s) { return s; };
  std::function<bool(std::int64_t q, std::int64_t k)> visible = [](std::int64_t, std::int64_t) { return true; };
  std::function<double(const Tensor&, std::int64_t, std::int64_t, std::int64_t, std::int64_t)> load =
      [](const Tensor& t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
        return at(t, {b, h, i, j});
      };
};

std::vector<double> attention(const AttentionSpec& s, const Tensor& Q, const Tensor& K, const Tensor& V) {
  std::vector<double> O(static_cast<std::size_t>(s.b * s.h * s.q * s.d), 0.0);
  for (std::int64_t b = 0; b < s.b; ++b)
    for (std::int64_t h = 0; h < s.h; ++h)
      for (std::int64_t i = 0; i < s.q; ++i) {
        std::vector<double> row(static_cast<std::size_t>(s.k));
        double mx = -kInf;
        for (std::int64_t j = 0; j < s.k; ++j) {
          double dot = 0;
          for (std::int64_t e = 0; e < s.d; ++e) dot += s.load(Q, b, h, i, e) * s.load(K, b, h, j, e);
          double v = s.logit(h, i, j, dot * s.scale);
          if (!s.visible(i, j)) v = -kInf;
          row[static_cast<std::size_t>(j)] = v;
          mx = std::max(mx, v);
        }
        double sum = 0;
        for (double& v : row) {
          v = mx == -kInf ? 0.0 : std::exp(v - mx);
          sum += v;
        }
        for (std::int64_t e = 0; e < s.d; ++e) {
          double acc = 0;
          for (std::int64_t j = 0; j < s.k; ++j)
            acc += (sum > 0 ? row[static_cast<std::size_t>(j)] / sum : 0.0) * s.load(V, b, h, j, e);
          O[static_cast<std::size_t>(((b * s.h + h) * s.q + i) * s.d + e)] = round_to_dtype(acc, DType::bf16);
        }
      }
  return O;
}

const std::vector<ir::Binding> kSmallAttention = {
    {"b", 2, "b=2"}, {"h", 3, "h=3"}, {"q", 7, "q=7"}, {"k", 9, "k=9"}, {"d", 5, "d=5"}};

TEST(Examples, Matmul) {
  auto l = run_example("matmul.napkin", {{"m", 6, ""}, {"k", 7, ""}, {"n", 5, ""}});
  const Tensor &A = l.inputs.at("A"), &B = l.inputs.at("B");
  std::vector<double> C;
  for (int m = 0; m < 6; ++m)
    for (int n = 0; n < 5; ++n) {
      double acc = 0;
      for (int k = 0; k < 7; ++k) acc += at(A, {m, k}) * at(B, {k, n});
      C.push_back(round_to_dtype(acc, DType::bf16));
    }
  expect_near_all(l.outputs.at("C"), C);
}

TEST(Examples, Attention) {
  auto l = run_example("attention.napkin", kSmallAttention);
  AttentionSpec s{2, 3, 7, 9, 5, 0.08838834764831845};
  expect_near_all(l.outputs.at("O"), attention(s, l.inputs.at("Q"), l.inputs.at("K"), l.inputs.at("V")));
}

TEST(Examples, Causal) {
  auto l = run_example("causal.napkin", kSmallAttention);
  AttentionSpec s{2, 3, 7, 9, 5, 0.08838834764831845};
  s.visible = [](std::int64_t q, std::int64_t k) { return q >= k; };
  expect_near_all(l.outputs.at("O"), attention(s, l.inputs.at("Q"), l.inputs.at("K"), l.inputs.at("V")));
}

TEST(Examples, SlidingWindow) {
  auto bindings = kSmallAttention;
  bindings.push_back({"w", 3, "w=3"});
  auto l = run_example("sliding_window.napkin", bindings);
  AttentionSpec s{2, 3, 7, 9, 5, 0.08838834764831845};
  s.visible = [](std::int64_t q, std::int64_t k) { return q >= k && std::abs(q - k) < 3; };
  expect_near_all(l.outputs.at("O"), attention(s, l.inputs.at("Q"), l.inputs.at("K"), l.inputs.at("V")));
}

TEST(Examples, Softcap) {
  auto l = run_example("softcap.napkin", kSmallAttention);
  AttentionSpec s{2, 3, 7, 9, 5, 0.0625};
  s.logit = [](std::int64_t, std::int64_t, std::int64_t, double x) { return 50.0 * std::tanh(x / 50.0); };
  s.visible = [](std::int64_t q, std::int64_t k) { return q >= k; };
  expect_near_all(l.outputs.at("O"), attention(s, l.inputs.at("Q"), l.inputs.at("K"), l.inputs.at("V")));
}

TEST(Examples, Alibi) {
  auto l = run_example("alibi.napkin", kSmallAttention);
  const Tensor& slope = l.inputs.at("slope");
  AttentionSpec s{2, 3, 7, 9, 5, 0.08838834764831845};
  s.logit = [&](std::int64_t h, std::int64_t q, std::int64_t k, double x) {
    return x + at(slope, {h}) * static_cast<double>(k - q);
  };
  s.visible = [](std::int64_t q, std::int64_t k) { return q >= k; };
  expect_near_all(l.outputs.at("O"), attention(s, l.inputs.at("Q"), l.inputs.at("K"), l.inputs.at("V")));
}

TEST(Examples, GroupedQueryAttention) {
  // 2 KV heads, 3 query heads each: query head (g, r) reads KV head g.
  auto l = run_example("gqa.napkin", {{"b", 2, ""}, {"g", 2, ""}, {"r", 3, ""}, {"q", 6, ""}, {"k", 8, ""}, {"d", 4, ""}});
  const Tensor &Q = l.inputs.at("Q"), &K = l.inputs.at("K"), &V = l.inputs.at("V");
  AttentionSpec s{2, 6, 6, 8, 4, 0.08838834764831845};
  s.load = [&](const Tensor& t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    if (&t == &Q) return at(t, {b, h / 3, h % 3, i, j});
    return at(t, {b, h / 3, i, j});
  };
  const std::vector<double> bhqd = attention(s, Q, K, V);
  // The output is written as O[b q g r d].
  std::vector<double> bqgrd;
  for (int b = 0; b < 2; ++b)
    for (int q = 0; q < 6; ++q)
      for (int h = 0; h < 6; ++h)
        for (int e = 0; e < 4; ++e) bqgrd.push_back(bhqd[static_cast<std::size_t>(((b * 6 + h) * 6 + q) * 4 + e)]);
  expect_near_all(l.outputs.at("O"), bqgrd);
}

TEST(Examples, SwigluMlp) {
  auto l = run_example("swiglu_mlp.napkin", {{"t", 4, ""}, {"e", 6, ""}, {"f", 5, ""}});
  const Tensor &X = l.inputs.at("X"), &Wg = l.inputs.at("Wg"), &Wu = l.inputs.at("Wu"), &Wd = l.inputs.at("Wd");
  std::vector<double> Y;
  for (int t = 0; t < 4; ++t) {
    std::vector<double> H(5);
    for (int f = 0; f < 5; ++f) {
      double g = 0, u = 0;
      for (int e = 0; e < 6; ++e) {
        g += at(X, {t, e}) * at(Wg, {e, f});
        u += at(X, {t, e}) * at(Wu, {e, f});
      }
      g = round_to_dtype(g, DType::bf16), u = round_to_dtype(u, DType::bf16);  // the projections' `as bf16`
      H[static_cast<std::size_t>(f)] = round_to_dtype(g / (1 + std::exp(-g)) * u, DType::bf16);
    }
    for (int e = 0; e < 6; ++e) {
      double y = 0;
      for (int f = 0; f < 5; ++f) y += H[static_cast<std::size_t>(f)] * at(Wd, {f, e});
      Y.push_back(round_to_dtype(y, DType::bf16));
    }
  }
  expect_near_all(l.outputs.at("Y"), Y);
}

TEST(Examples, RmsnormMatmul) {
  auto l = run_example("rmsnorm_matmul.napkin", {{"t", 4, ""}, {"e", 6, ""}, {"f", 3, ""}});
  const Tensor &X = l.inputs.at("X"), &gamma = l.inputs.at("gamma"), &W = l.inputs.at("W");
  std::vector<double> Y;
  for (int t = 0; t < 4; ++t) {
    double ms = 0;
    for (int e = 0; e < 6; ++e) ms += at(X, {t, e}) * at(X, {t, e}) / 6.0;
    std::vector<double> N(6);
    for (int e = 0; e < 6; ++e)
      N[static_cast<std::size_t>(e)] = round_to_dtype(at(X, {t, e}) / std::sqrt(ms + 1e-6) * at(gamma, {e}), DType::bf16);
    for (int f = 0; f < 3; ++f) {
      double y = 0;
      for (int e = 0; e < 6; ++e) y += N[static_cast<std::size_t>(e)] * at(W, {e, f});
      Y.push_back(round_to_dtype(y, DType::bf16));
    }
  }
  expect_near_all(l.outputs.at("Y"), Y);
}

TEST(Examples, Layernorm) {
  auto l = run_example("layernorm.napkin", {{"t", 5, ""}, {"e", 7, ""}});
  const Tensor &X = l.inputs.at("X"), &gamma = l.inputs.at("gamma"), &beta = l.inputs.at("beta");
  std::vector<double> Y;
  for (int t = 0; t < 5; ++t) {
    double mean = 0, var = 0;
    for (int e = 0; e < 7; ++e) mean += at(X, {t, e}) / 7.0;
    for (int e = 0; e < 7; ++e) var += (at(X, {t, e}) - mean) * (at(X, {t, e}) - mean) / 7.0;
    for (int e = 0; e < 7; ++e)
      Y.push_back(round_to_dtype((at(X, {t, e}) - mean) / std::sqrt(var + 1e-5) * at(gamma, {e}) + at(beta, {e}),
                                 DType::bf16));
  }
  expect_near_all(l.outputs.at("Y"), Y);
}

// A mask that hides every key from some rows: those rows must be 0 (softmax) / -inf (lse).
TEST(Interpreter, FullyMaskedSoftmaxRowsGiveZerosNotNan) {
  auto p = ir::parse_diagram(SourceText{"m.napkin",
                                        "axes q=3 k=4\nin S[q k] f32\n"
                                        "P = softmax(select(q > k + 1, S, -inf) over k)\n"
                                        "L = logsumexp(select(q > k + 1, S, -inf) over k)\nout P\nout L\n"});
  ASSERT_TRUE(p.ok()) << p.error().format();
  auto out = evaluate(p->diagram, random_inputs(p->diagram, 1));
  ASSERT_TRUE(out.ok());
  for (double v : out->at("P").data) EXPECT_FALSE(std::isnan(v));
  EXPECT_EQ(at(out->at("P"), {0, 0}), 0.0);  // row q=0 sees no key
  EXPECT_EQ(at(out->at("L"), {1}), -kInf);   // row q=1 sees no key either (needs k < 0)
  EXPECT_EQ(at(out->at("P"), {2, 0}), 1.0);  // row q=2 sees only k=0
}

TEST(Interpreter, InputsAreRoundedToTheirDtype) {
  auto p = ir::parse_diagram(SourceText{"r.napkin", "axes q=1\nin X[q] fp8e4m3\nY = X * 1\nout Y\n"});
  ASSERT_TRUE(p.ok());
  TensorMap in;
  in["X"] = Tensor::zeros(p->diagram, {0}, 0.3);
  auto out = evaluate(p->diagram, in);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->at("Y").data[0], 0.3125);
}

// Integer arithmetic is exact; an i32 output saturates (as a cast to i32 does), as the kernels
// store it.
TEST(Interpreter, IntegerArithmeticIsExactAndAnI32OutputSaturates) {
  auto p = ir::parse_diagram(SourceText{"i.napkin", "axes t=3\nin y[t] i32\nflat = t * 2000000000 + y\n"
                                                    "back = flat - t * 2000000000\nout flat\nout back\n"});
  ASSERT_TRUE(p.ok());
  TensorMap in;
  in["y"] = Tensor::zeros(p->diagram, {0}, 7);
  auto out = evaluate(p->diagram, in);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->at("flat").data, (std::vector<double>{7, 2000000007, 2147483647}));
  EXPECT_EQ(out->at("back").data, (std::vector<double>{7, 7, 7}));  // exact in between
}

TEST(Interpreter, WrongInputShapeIsAnError) {
  auto p = ir::parse_diagram(SourceText{"r.napkin", "axes q=2 d=3\nin X[q d] f32\nY = X * 1\nout Y\n"});
  ASSERT_TRUE(p.ok());
  TensorMap in;
  in["X"] = Tensor::zeros(p->diagram, {1, 0});
  auto out = evaluate(p->diagram, in);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().message, "input 'X' must have shape (2, 3) for [q d], found (3, 2)");
}

TEST(Interpreter, RandomInputsAreSeededAndNotZero) {
  auto p = ir::load_diagram((testing::source_dir() / "examples/attention.napkin").string(), kSmallAttention);
  ASSERT_TRUE(p.ok());
  const TensorMap a = random_inputs(p->diagram, 3), b = random_inputs(p->diagram, 3), c = random_inputs(p->diagram, 4);
  EXPECT_EQ(a.at("Q").data, b.at("Q").data);
  EXPECT_NE(a.at("Q").data, c.at("Q").data);
  EXPECT_NE(a.at("Q").data, a.at("K").data);
  double sq = 0;
  for (double v : a.at("Q").data) sq += v * v;
  EXPECT_NEAR(sq / static_cast<double>(a.at("Q").data.size()), 1.0, 0.25);  // ~N(0, 1)
}

}  // namespace
}  // namespace napkin::reference
