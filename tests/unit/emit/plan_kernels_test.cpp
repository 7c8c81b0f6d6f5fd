// SPDX-License-Identifier: Apache-2.0
// The GEMM and row-kernel emitters on the kernels of the examples' plans: a golden file per
// emitted unit and every kernel of every plan accepted by the emitter of its family (the GEMM
// emitter's refusals are gemm_kernel_test's).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"
#include "emit/gemm_kernel.h"
#include "emit/row_kernel.h"
#include "ir/parser.h"
#include "plan/plan.h"

namespace napkin {
namespace {

arch::Machine h100() {
  auto m = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  EXPECT_TRUE(m.ok());
  return *m;
}

struct Loaded {
  SourceText src;
  ir::Diagram diagram;
};
Loaded load(const std::string& name, const std::string& text) {
  Loaded l{{name, text}, {}};
  auto r = ir::parse_diagram(l.src);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().format());
  if (r.ok()) l.diagram = r->diagram;
  return l;
}

// Every kernel of the example's plan, emitted by its family's emitter ("" for attention).
std::vector<std::string> emit_plan(const Loaded& l) {
  std::vector<std::string> out;
  auto d = plan::derive_plan(l.diagram, h100());
  EXPECT_TRUE(d.ok()) << (d.ok() ? "" : d.error().message);
  if (!d.ok()) return out;
  const emit::KernelProvenance prov{"test", "", l.src.name, "(test)"};
  for (std::size_t i = 0; i < d->chosen.kernels.size(); ++i) {
    const plan::Kernel& k = d->chosen.kernels[i];
    const std::string entry = "napkin_plan_kernel_" + std::to_string(i);
    if (k.kind == plan::KernelKind::gemm || k.kind == plan::KernelKind::dual_gemm || k.kind == plan::KernelKind::gemm_reduction) {
      auto f = emit::recognise_gemm(k.diagram, l.src);
      EXPECT_TRUE(f.ok()) << k.name << ": " << (f.ok() ? "" : f.error().format());
      if (f.ok()) out.push_back(emit::emit_gemm_kernel(k.diagram, *f, *k.gemm, prov, entry));
    } else if (k.kind == plan::KernelKind::row_reduction || k.kind == plan::KernelKind::column_reduction ||
               k.kind == plan::KernelKind::elementwise) {
      auto f = emit::recognise_rows(k.diagram, l.src);
      EXPECT_TRUE(f.ok()) << k.name << ": " << (f.ok() ? "" : f.error().format());
      if (f.ok()) out.push_back(emit::emit_row_kernel(k.diagram, *f, *k.rows, prov, entry));
    } else {
      out.push_back("");
    }
  }
  return out;
}

TEST(PlanKernels, GoldenUnitsOfTheGemmFamilyExamples) {
  for (const char* stem : {"matmul", "gelu_mlp", "layernorm", "rmsnorm_matmul", "linear_attention", "softmax_over_q",
                           "matmul_rmsnorm", "batched_matmul", "swiglu_mlp", "normalised_linear_attention", "linear_cross_entropy"}) {
    SCOPED_TRACE(stem);
    const Loaded l = load(std::string("examples/") + stem + ".napkin",
                          testing::read_text(testing::source_dir() / "examples" / (std::string(stem) + ".napkin")));
    const auto units = emit_plan(l);
    ASSERT_FALSE(units.empty());
    for (std::size_t i = 0; i < units.size(); ++i)
      if (!units[i].empty()) testing::expect_golden(fmt::format("kernels/plan_{}_{}.cu", stem, i), units[i]);
  }
}

// A dual GEMM whose epilogue reads inputs (tests/diagrams/biased_swiglu: a bias per expert on each
// product, bf16 and f32): read at the element's coordinates through their strides.
TEST(PlanKernels, ADualGemmReadsBiasesAtEachElementsCoordinates) {
  const Loaded l = load("tests/diagrams/biased_swiglu.napkin",
                        testing::read_text(testing::source_dir() / "tests" / "diagrams" / "biased_swiglu.napkin"));
  const auto units = emit_plan(l);
  ASSERT_EQ(units.size(), 1u);
  EXPECT_NE(units[0].find("napkin::gemm::DualKernel<Config, Combine>"), std::string::npos);
  EXPECT_NE(units[0].find("napkin::rows::load(a.bg + (0 + i_x * a.s_bg_x + i_f * a.s_bg_f))"), std::string::npos) << units[0];
  EXPECT_NE(units[0].find("tb.bind(\"bu\", NAPKIN_F32, \"ln\")"), std::string::npos) << units[0];
  testing::expect_golden("kernels/plan_biased_swiglu_0.cu", units[0]);
}

// An operand's elementwise producer fused into a memory-bound GEMM's mainloop (the prologue
// GEMM): one kernel, its code the operand's transform; and the refusals that keep it correct.
TEST(PlanKernels, AFeatureMapRunsAsThePrologueOfItsGemm) {
  const Loaded l = load("tests/diagrams/feature_projection.napkin",
                        testing::read_text(testing::source_dir() / "tests" / "diagrams" / "feature_projection.napkin"));
  const auto units = emit_plan(l);
  ASSERT_EQ(units.size(), 1u);
  EXPECT_NE(units[0].find("PrologueKernel<Config, PrologueA, cute::identity, Epilogue>"), std::string::npos);
  testing::expect_golden("kernels/plan_feature_projection_0.cu", units[0]);
  // elu(x) + 1, the feature map of normalised linear attention: a select over the same input.
  const Loaded elu = load("elu.napkin", "axes t=8192 d=64 e=64\nin X[t d] bf16\nin W[d e] bf16\n"
                                        "F = select(X > 0, X + 1, exp(X))\nY = contract(F, W over d) as bf16\nout Y\n");
  const auto elu_units = emit_plan(elu);
  ASSERT_EQ(elu_units.size(), 1u);
  EXPECT_NE(elu_units[0].find("struct PrologueA"), std::string::npos);
  EXPECT_NE(elu_units[0].find("napkin::rows::fast_exp(x)"), std::string::npos) << elu_units[0];
  // Not finite at 0 (loads past the edge are zero-filled), a param, two operands nonzero at 0.
  const std::pair<const char*, const char*> refused[] = {
      {"F = log(X)", "not finite where its input is 0"},
      {"param s = 2\nF = exp(X * s)", "reads param 's'"},
      {"F = exp(X)\nG = exp(W)", "both operands are nonzero where their inputs are 0"},
      {"F = exp(X) as f16", "is f16 where its input X is bf16"}};
  for (const auto& [code, why] : refused) {
    SCOPED_TRACE(code);
    const bool f16 = std::string(code).find("as f16") != std::string::npos;  // W as F is (the language's rule)
    const std::string text = fmt::format("axes t=8192 d=64 e=64\nin X[t d] bf16\nin W[d e] {}\n{}\nY = contract(F, {} over d) as bf16\nout Y\n",
                                         f16 ? "f16" : "bf16", code, std::string(code).find("G =") != std::string::npos ? "G" : "W");
    const Loaded x = load("prologue.napkin", text);
    auto d = plan::derive_plan(x.diagram, h100());
    ASSERT_TRUE(d.ok()) << d.error().message;
    // (With both operands computed, the plan fuses one of them and materialises the other.)
    if (std::string(code).find("G =") == std::string::npos)
      for (const plan::Kernel& k : d->chosen.kernels) EXPECT_FALSE(k.gemm && k.gemm->prologue) << k.name;
    ir::Diagram kd = x.diagram;
    auto f = emit::recognise_gemm(kd, x.src);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.error().format().find(why), std::string::npos) << f.error().format();
  }
}

// A GEMM whose output another GEMM reads with a class of its axes split (attention's output
// [b h q d] read by a projection over (h d) as [b q h d]): the plan's GEMM family refuses to write
// L = {b, h} apart, as the emitter does, so the plan transposes instead (found by building the
// test diagrams at random sizes: the plan derived, the emitter refused).
TEST(PlanKernels, AGemmOutputThatSplitsAClassOfAxesIsNotPlanned) {
  const std::string text = testing::read_text(testing::source_dir() / "tests" / "diagrams" / "attention_projection.napkin");
  Loaded l{{"tests/diagrams/attention_projection.napkin", text}, {}};
  auto r = ir::parse_diagram(l.src, {{"b", 1, "b"}, {"h", 100, "h"}, {"q", 64, "q"}, {"d", 1, "d"}, {"c", 8, "c"}});
  ASSERT_TRUE(r.ok()) << r.error().format();
  l.diagram = r->diagram;
  const auto units = emit_plan(l);  // every GEMM and row kernel accepted by its emitter
  EXPECT_GE(units.size(), 4u);
}

// The plan's GEMM family and the GEMM emitter take the same epilogue leaves: every GEMM kernel a
// plan chooses is one the emitter writes, over leaves of every shape and dtype (one mechanism).
TEST(PlanKernels, EveryGemmThePlanChoosesHasAnEmitterWhateverItsLeaves) {
  const char* leaves[] = {"r[t] f32", "c[f] bf16", "R[t f] f32", "R[t f] bf16", "R[f t] f32", "s[] f32",
                          "R[t f] i32", "c[f] f16", "R[b t f] f32", "r[b t] f32", "c[b f] f32"};
  int gemms = 0;
  for (bool batched : {false, true})
    for (const char* leaf : leaves) {
      const std::string l(leaf);
      const std::string name = l.substr(0, 1);
      if (!batched && l.find("b ") != std::string::npos) continue;
      const std::string text =
          batched ? fmt::format("axes b=2 t=256 e=128 f=192\nin X[b t e] bf16\nin W[b e f] bf16\nin {}\n"
                                "Y = contract(X, W over e) * {} + 1 as bf16\nout Y\n",
                                l, name)
                  : fmt::format("axes t=256 e=128 f=192\nin X[t e] bf16\nin W[e f] bf16\nin {}\n"
                                "Y = contract(X, W over e) * {} + 1 as bf16\nout Y\n",
                                l, name);
      SCOPED_TRACE(text);
      const Loaded d = load("leaf.napkin", text);
      auto p = plan::derive_plan(d.diagram, h100());
      if (!p.ok()) continue;  // nothing runs it: derive's message is another test's subject
      for (const plan::Kernel& k : p->chosen.kernels) {
        if (k.kind != plan::KernelKind::gemm) continue;
        auto f = emit::recognise_gemm(k.diagram, d.src);
        EXPECT_TRUE(f.ok()) << k.name << ": " << (f.ok() ? "" : f.error().format());
        ++gemms;
      }
    }
  EXPECT_GE(gemms, 12);
}

TEST(PlanKernels, EveryExamplePlanKernelHasAnEmitter) {
  for (const auto& f : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    SCOPED_TRACE(f.string());
    emit_plan(load(f.string(), testing::read_text(f)));
  }
}

}  // namespace
}  // namespace napkin
