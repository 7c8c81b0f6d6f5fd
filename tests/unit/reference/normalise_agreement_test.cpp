// SPDX-License-Identifier: Apache-2.0
// ir::normalise agrees with the reference interpreter: every example (every axis bound to a
// tiny size) and every composite, on random inputs, and on fully masked (-inf) slices, where
// the guarded expansion must give softmax 0 and logsumexp -inf, never NaN.
// (It lives with the reference tests because it needs the interpreter; normalise is in ir.)
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "ir/normalise.h"
#include "ir/parser.h"
#include "reference/interpreter.h"

namespace napkin::reference {
namespace {

// Two units in the last place of the output dtype (the f64 expansions round differently
// before a final cast), and 1e-9 relative for wide types.
double tolerance(DType t, double x) {
  double rel = 1e-9;
  switch (t) {
    case DType::bf16: rel = 0x1p-7; break;
    case DType::f16: rel = 0x1p-10; break;
    case DType::fp8e4m3: rel = 0x1p-3; break;
    case DType::fp8e5m2: rel = 0x1p-2; break;
    case DType::tf32: rel = 0x1p-10; break;
    case DType::f32: rel = 0x1p-23; break;
    default: break;
  }
  return std::max(1e-9, rel) * (1.0 + std::fabs(x));
}

void expect_agree(const ir::Diagram& d, std::uint64_t seed, const TensorMap* given = nullptr) {
  const ir::Diagram n = ir::normalise(d);
  const TensorMap inputs = given ? *given : random_inputs(d, seed);
  auto want = evaluate(d, inputs);
  auto got = evaluate(n, inputs);
  ASSERT_TRUE(want.ok()) << want.error().format();
  ASSERT_TRUE(got.ok()) << got.error().format();
  ASSERT_EQ(want->size(), got->size());
  for (const auto& [name, w] : want.value()) {
    const Tensor& g = got->at(name);
    ASSERT_EQ(g.sizes, w.sizes) << name;
    const DType dt = d.node(*d.find_node(name)).dtype;
    for (std::size_t i = 0; i < w.data.size(); ++i) {
      ASSERT_FALSE(std::isnan(g.data[i])) << name << "[" << i << "]";
      if (std::isinf(w.data[i])) {
        EXPECT_EQ(g.data[i], w.data[i]) << name << "[" << i << "]";
        continue;
      }
      EXPECT_NEAR(g.data[i], w.data[i], tolerance(dt, w.data[i])) << name << "[" << i << "] seed " << seed;
    }
  }
}

TEST(NormaliseAgreement, EveryExampleAtTinySizes) {
  const auto files = testing::files_in(testing::source_dir() / "examples", ".napkin");
  ASSERT_FALSE(files.empty());
  for (const auto& path : files) {
    SCOPED_TRACE(path.filename().string());
    auto full = ir::load_diagram(path.string());
    ASSERT_TRUE(full.ok()) << full.error().format();
    std::vector<ir::Binding> bindings;
    int size = 3;
    for (const ir::Axis& a : full->diagram.axes)
      bindings.push_back({a.name, static_cast<double>(size++ % 3 + 3), a.name + "=small"});
    auto p = ir::load_diagram(path.string(), bindings);
    ASSERT_TRUE(p.ok()) << p.error().format();
    for (std::uint64_t seed : {1u, 2u, 3u}) expect_agree(p->diagram, seed);
  }
}

TEST(NormaliseAgreement, EveryCompositeOnEveryFloatDtype) {
  for (std::string op : {"softmax", "logsumexp", "rmsnorm", "layernorm"})
    for (std::string dt : {"f64", "f32", "bf16", "f16", "fp8e4m3"}) {
      SCOPED_TRACE(op + " " + dt);
      auto p = ir::parse_diagram(SourceText{"t.napkin", "axes a=3 b=4 c=2\nin X[a b c] " + dt +
                                                            "\nY = " + op + "(X over b c)\nout Y\n"});
      ASSERT_TRUE(p.ok()) << p.error().format();
      for (std::uint64_t seed = 0; seed < 5; ++seed) expect_agree(p->diagram, seed);
    }
}

TEST(NormaliseAgreement, FullyMaskedSlicesGiveZeroAndMinusInfinityWithoutNaN) {
  // Row q=0 sees no key (k > q + 2 never holds for q=0 with k < 3); other rows see some.
  auto p = ir::parse_diagram(SourceText{"t.napkin",
                                        "axes q=4 k=3\nin S[q k] f32\n"
                                        "M = select(k > q + 2 || q == 0, -inf, S)\n"
                                        "P = softmax(M over k)\nL = logsumexp(M over k)\n"
                                        "out P\nout L\n"});
  ASSERT_TRUE(p.ok()) << p.error().format();
  const ir::Diagram& d = p->diagram;
  for (std::uint64_t seed = 0; seed < 4; ++seed) expect_agree(d, seed);
  auto out = evaluate(ir::normalise(d), random_inputs(d, 9));
  ASSERT_TRUE(out.ok());
  for (double v : {out->at("P").data[0], out->at("P").data[1], out->at("P").data[2]}) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(out->at("L").data[0], -std::numeric_limits<double>::infinity());
}

}  // namespace
}  // namespace napkin::reference
