// SPDX-License-Identifier: Apache-2.0
// The GEMM-family emitter: a golden translation unit per kernel shape it generates (plain,
// batched, row-major activation with bias and GELU/SiLU, the gated MLP's second half with an
// aux tensor, a row scale, flattened modes with params, scalars and an M-major output); the axis
// classes, leaves, major modes and one-line descriptions it finds; and every near miss refused
// with the op's location and the reason.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "emit/gemm_kernel.h"
#include "ir/parser.h"
#include "ir/printer.h"

namespace napkin {
namespace {

using emit::GemmLeaf;

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

plan::GemmSchedule cooperative() { return {128, 128, 64, 2, 1, 0, false}; }
plan::GemmSchedule pingpong() { return {128, 128, 64, 1, 1, 4, true}; }

struct Case {
  const char* name;      // golden: kernels/gemm_<name>.cu
  const char* text;      // the kernel's diagram
  plan::GemmSchedule schedule;
  const char* describe;  // describe_gemm
};

const Case kCases[] = {
    {"matmul",
     "axes m=4096 k=4096 n=4096\nin A[m k] bf16\nin B[k n] bf16\nC = contract(A, B over k) as bf16\nout C\n",
     cooperative(), "gemm [m k]x[k n] -> [m n]; epilogue: acc as bf16; no aux input"},
    {"batched_attention_scores",
     "axes b=2 h=16 q=1024 k=1024 d=128\nin Q[b h q d] f16\nin K[b h k d] f16\nS = contract(Q, K over d)\nout S\n",
     pingpong(), "gemm [b h q d]x[b h k d] -> [b h q k]; epilogue: acc; no aux input"},
    {"bias_gelu",
     "axes t=8192 e=4096 f=16384\nin X[t e] bf16\nin W[e f] bf16\nin bias[f] f32\n"
     "H = contract(X, W over e) + bias\n"
     "G = H * 0.5 * (1 + tanh(0.7978845608028654 * (H + 0.044715 * H * H * H))) as bf16\nout G\n",
     cooperative(),
     "gemm [t e]x[e f] -> [t f]; epilogue: H * 0.5 * (1 + tanh(0.7978845608028654 * (H + 0.044715 * H * H * H))) as bf16 "
     "with H = acc + bias; 1 aux input"},
    {"bias_silu",
     "axes t=8192 e=4096 f=11008\nin X[t e] bf16\nin W[e f] bf16\nin bias[f] bf16\n"
     "H = contract(X, W over e) + bias\nY = H / (1 + exp(-H)) as bf16\nout Y\n",
     pingpong(), "gemm [t e]x[e f] -> [t f]; epilogue: H / (1 + exp(-H)) as bf16 with H = acc + bias; 1 aux input"},
    {"gated_mlp",
     "axes t=8192 e=4096 f=11008\nin X[t e] bf16\nin Wu[e f] bf16\nin G[t f] f32\n"
     "H = G / (1 + exp(-G)) * contract(X, Wu over e) as bf16\nout H\n",
     cooperative(), "gemm [t e]x[e f] -> [t f]; epilogue: G / (1 + exp(-G)) * acc as bf16; 1 aux input"},
    {"row_scale",
     "axes t=8192 e=4096 f=4096\nin X[t e] bf16\nin W[e f] bf16\nin r[t] f32\n"
     "Y = contract(X, W over e) * r as bf16\nout Y\n",
     cooperative(), "gemm [t e]x[e f] -> [t f]; epilogue: acc * r as bf16; 1 aux input"},
    // M = (b s) and N = (h d) flattened, an MN-major B (W[e h d] contracted over e), an M-major f32
    // output, a per-batch scalar and a param.
    {"flattened_params",
     "axes g=4 b=8 s=512 e=1024 h=8 d=128\nparam alpha = 0.125\nin X[g b s e] f16\nin W[g e h d] f16\n"
     "in gain[g] f32\nin res[g h d b s] f16\n"
     "Y = max(contract(X, W over e) * alpha * gain, 0) + res\nout Y[g h d b s]\n",
     cooperative(), "gemm [g b s e]x[g e h d] -> [g h d b s]; epilogue: max(acc * alpha * gain, 0) + res; 2 aux inputs, 1 param"},
    // Every kind of leaf in unusual dtypes, an M-major A and an N-major B, the batch in every
    // tensor but one; ping-pong with a fixed stage count and a cluster along N.
    {"every_leaf",
     "axes l=2 m=256 k=128 n=512\nparam beta = 0.5\nin A[l k m] bf16\nin B[l k n] bf16\nin s[l] f64\nin r[l m] bf16\n"
     "in c[n] f16\nin t[l m n] f64\nY = select(contract(A, B over k) * s + r > c, t * beta, -t) as f16\nout Y\n",
     {128, 64, 64, 1, 2, 4, true},
     "gemm [l k m]x[l k n] -> [l m n]; epilogue: select(acc * s + r > c, t * beta, -t) as f16; 4 aux inputs, 1 param"},
};

const Case& find_case(const std::string& name) {
  for (const Case& c : kCases)
    if (name == c.name) return c;
  ADD_FAILURE() << "no case " << name;
  return kCases[0];
}

std::string emit_case(const Case& c) {
  const Loaded l = parse(std::string("gemm_") + c.name + ".napkin", c.text);
  auto f = emit::recognise_gemm(l.diagram, l.src);
  EXPECT_TRUE(f.ok()) << c.name << ": " << (f.ok() ? "" : f.error().format());
  if (!f.ok()) return "";
  const emit::KernelProvenance prov{"test", ir::diagram_key(l.diagram), l.src.name, "(plan not run in this test)"};
  return emit::emit_gemm_kernel(l.diagram, *f, c.schedule, prov, "napkin_plan_kernel_0");
}

TEST(GemmKernel, GoldenUnits) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    testing::expect_golden(std::string("kernels/gemm_") + c.name + ".cu", emit_case(c));
  }
}

TEST(GemmKernel, DescribesEachCaseInOneLine) {
  for (const Case& c : kCases) {
    const Loaded l = parse(c.name, c.text);
    auto f = emit::recognise_gemm(l.diagram, l.src);
    ASSERT_TRUE(f.ok()) << c.name << ": " << f.error().format();
    EXPECT_EQ(emit::describe_gemm(*f), c.describe) << c.name;
  }
}

std::vector<std::string> axis_names(const ir::Diagram& d, const std::vector<ir::AxisId>& axes) {
  std::vector<std::string> out;
  for (ir::AxisId a : axes) out.push_back(d.axis(a).name);
  return out;
}
using Names = std::vector<std::string>;

TEST(GemmKernel, FindsAxisClassesLeavesAndMajorModes) {
  {
    const Case& c = find_case("batched_attention_scores");
    const Loaded l = parse(c.name, c.text);
    auto f = emit::recognise_gemm(l.diagram, l.src);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(axis_names(l.diagram, f->m), (Names{"q"}));
    EXPECT_EQ(axis_names(l.diagram, f->n), (Names{"k"}));
    EXPECT_EQ(axis_names(l.diagram, f->k), (Names{"d"}));
    EXPECT_EQ(axis_names(l.diagram, f->l), (Names{"b", "h"}));
    EXPECT_TRUE(f->a_k_major && f->b_k_major && f->out_n_major);
    EXPECT_EQ(f->element, DType::f16);
    EXPECT_EQ(f->out_dtype, DType::f32);
    EXPECT_TRUE(f->leaves.empty());
  }
  {
    const Case& c = find_case("flattened_params");
    const Loaded l = parse(c.name, c.text);
    auto f = emit::recognise_gemm(l.diagram, l.src);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(axis_names(l.diagram, f->m), (Names{"b", "s"}));
    EXPECT_EQ(axis_names(l.diagram, f->n), (Names{"h", "d"}));
    EXPECT_EQ(axis_names(l.diagram, f->k), (Names{"e"}));
    EXPECT_EQ(axis_names(l.diagram, f->l), (Names{"g"}));
    EXPECT_TRUE(f->a_k_major);
    EXPECT_FALSE(f->b_k_major);    // W[g e h d]: N innermost
    EXPECT_FALSE(f->out_n_major);  // Y[g h d b s]: M innermost
    ASSERT_EQ(f->leaves.size(), 2u);
    EXPECT_EQ(l.diagram.node(f->leaves[0].node).name, "gain");
    EXPECT_EQ(f->leaves[0].kind, GemmLeaf::Kind::scalar);
    EXPECT_EQ(l.diagram.node(f->leaves[1].node).name, "res");
    EXPECT_EQ(f->leaves[1].kind, GemmLeaf::Kind::tensor);
    ASSERT_EQ(f->params.size(), 1u);
    EXPECT_EQ(l.diagram.node(f->params[0]).name, "alpha");
  }
  // Every kind of leaf, and A M-major.
  const Loaded l = parse("leaves.napkin",
                         "axes l=2 m=256 k=128 n=512\nin A[l k m] bf16\nin B[l k n] bf16\nin s[l] bf16\nin r[l m] f16\n"
                         "in c[n] f32\nin t[l m n] f32\nY = (contract(A, B over k) * s + r + c) * t as f16\nout Y\n");
  auto f = emit::recognise_gemm(l.diagram, l.src);
  ASSERT_TRUE(f.ok()) << f.error().format();
  EXPECT_FALSE(f->a_k_major);
  EXPECT_TRUE(f->b_k_major == false);  // B[l k n]: N innermost
  ASSERT_EQ(f->leaves.size(), 4u);
  EXPECT_EQ(f->leaves[0].kind, GemmLeaf::Kind::scalar);
  EXPECT_EQ(f->leaves[1].kind, GemmLeaf::Kind::row_vector);
  EXPECT_EQ(f->leaves[2].kind, GemmLeaf::Kind::col_vector);
  EXPECT_EQ(f->leaves[3].kind, GemmLeaf::Kind::tensor);
  EXPECT_EQ(emit::describe_gemm(*f), "gemm [l k m]x[l k n] -> [l m n]; epilogue: (acc * s + r + c) * t as f16; 4 aux inputs");
}

TEST(GemmKernel, EmitsTheScheduleRolesAndChecks) {
  const std::string unit = emit_case(find_case("flattened_params"));
  // The schedule, compiled in; the operands' layouts.
  EXPECT_NE(unit.find("cutlass::layout::RowMajor, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor,\n"
                      "                                    128, 128, 64, 2, 1, 0, false, 1>"),
            std::string::npos)
      << unit;
  // One role letter per dim: M (b s) = "mM", N (h d) = "nN", K (e) = "K", L (g) = "l".
  EXPECT_NE(unit.find("tb.bind(\"X\", NAPKIN_F16, \"lmMK\")"), std::string::npos);
  EXPECT_NE(unit.find("tb.bind(\"W\", NAPKIN_F16, \"lKnN\")"), std::string::npos);
  EXPECT_NE(unit.find("tb.bind(\"Y\", NAPKIN_F32, \"lnNmM\")"), std::string::npos);
  EXPECT_NE(unit.find("s.mode(D, \"Y\", \"M\", {3, 4})"), std::string::npos);
  EXPECT_NE(unit.find("params.alpha = static_cast<float>(tb.param(\"alpha\", 0.125));"), std::string::npos);
  // Every TMA tensor is checked, each along its contiguous mode.
  EXPECT_NE(unit.find("s.tma(A, \"X\", ak, \"K\", {am, al}, true);"), std::string::npos);
  EXPECT_NE(unit.find("s.tma(B, \"W\", bn, \"N\", {bk, bl}, true);"), std::string::npos);
  EXPECT_NE(unit.find("s.tma(D, \"Y\", dm, \"M\", {dn, dl}, true);"), std::string::npos);
  EXPECT_NE(unit.find("s.tma(X2, \"res\", x2m, \"M\", {x2n, x2l}, false);"), std::string::npos);
  // Exactly one exported entry.
  std::size_t exported = 0;
  for (std::size_t at = unit.find("extern \"C\""); at != std::string::npos; at = unit.find("extern \"C\"", at + 1)) ++exported;
  EXPECT_EQ(exported, 1u);
}

TEST(GemmKernel, RoundsIntermediateCastsInTheEpilogue) {
  const Loaded l = parse("round.napkin",
                         "axes m=256 k=256 n=256\nin A[m k] bf16\nin B[k n] bf16\n"
                         "Y = (contract(A, B over k) as bf16) * 3 as f16\nout Y\n");
  auto f = emit::recognise_gemm(l.diagram, l.src);
  ASSERT_TRUE(f.ok()) << f.error().format();
  const std::string unit = emit::emit_gemm_kernel(l.diagram, *f, cooperative(), {"test", "", "round.napkin", ""}, "entry");
  EXPECT_NE(unit.find("napkin::rows::round_bf16(acc[i])"), std::string::npos) << unit;
  EXPECT_NE(unit.find("napkin::rows::round_f16("), std::string::npos) << unit;
  EXPECT_NE(unit.find("Config<cutlass::bfloat16_t, cutlass::half_t,"), std::string::npos) << unit;
}

struct Refusal {
  const char* what;
  std::string text;     // the whole diagram
  std::string message;  // a fragment of the message
  int line;             // where it points (0: no location)
};

TEST(GemmKernel, RefusesWhatIsNotAGemmWithTheOpAndWhy) {
  const std::string h = "axes t=256 e=128 f=64 g=32\nin X[t e] bf16\nin W[e f] bf16\n";
  const Refusal cases[] = {
      {"an index in the epilogue", h + "Y = contract(X, W over e) + t as bf16\nout Y\n", "axis index 't' in the epilogue",
       4},
      {"a reduction in the epilogue", h + "C = contract(X, W over e)\nY = C - max(C over f) as bf16\nout Y\n",
       "a GEMM's epilogue is elementwise code", 5},
      {"a normalisation in the epilogue", h + "Y = softmax(contract(X, W over e) over f) as bf16\nout Y\n",
       "a GEMM's epilogue is elementwise code", 4},
      {"a second contraction", h + "in V[f g] bf16\nY = contract(contract(X, W over e) as bf16, V over f) as bf16\nout Y\n",
       "a second contraction", 5},
      {"a computed operand", h + "in Z[t e] bf16\nY = contract(X + Z, W over e) as bf16\nout Y\n", "a prologue transforms one", 5},
      {"f32 operands", "axes t=256 e=128 f=64\nin X[t e] f32\nin W[e f] f32\nY = contract(X, W over e) as bf16\nout Y\n",
       "two bf16 or two f16 operands", 4},
      {"fp8 operands",
       "axes t=256 e=128 f=64\nin X[t e] fp8e4m3\nin W[e f] fp8e4m3\nY = contract(X, W over e) as bf16\nout Y\n",
       "two bf16 or two f16 operands", 4},
      {"an output that is not the contraction's", h + "in Z[t f] f32\nC = contract(X, W over e)\nY = Z * 2 as bf16\nout Y\n",
       "does not read the contraction", 7},
      {"an f64 output", h + "Y = contract(X, W over e) as f64\nout Y\n", "a GEMM writes bf16, f16 or f32", 5},
      {"an fp8 cast in the epilogue", h + "Y = contract(X, W over e) as fp8e4m3 as bf16\nout Y\n", "a cast to fp8e4m3", 4},
      {"an axis the epilogue adds", h + "in Z[t f g] f32\nY = contract(X, W over e) * Z as bf16\nout Y\n",
       "the epilogue may not add axes", 6},
      {"an input over part of M",
       "axes s=4 t=64 e=128 f=64\nin X[s t e] bf16\nin W[e f] bf16\nin r[t] f32\nY = contract(X, W over e) * r as bf16\nout Y\n",
       "has part of the M axes", 4},
      {"an input over part of the batch",
       "axes b=2 h=4 t=64 e=128 f=64\nin X[b h t e] bf16\nin W[b h e f] bf16\nin r[h t] f32\n"
       "Y = contract(X, W over e) * r as bf16\nout Y\n",
       "some of the batch axes", 4},
      {"a tensor leaf broadcast over the batch",
       "axes b=2 t=64 e=128 f=64\nin X[b t e] bf16\nin W[b e f] bf16\nin R[t f] f32\nY = contract(X, W over e) * R as bf16\nout Y\n",
       "a tensor leaf is loaded by TMA over all of the output's axes", 4},
      {"an i32 epilogue input", h + "in Z[t f] i32\nY = contract(X, W over e) * Z as bf16\nout Y\n",
       "reads bf16, f16, f32 or f64 inputs", 4},
      {"M axes not adjacent",
       "axes s=4 t=64 e=128 f=64\nin X[s e t] bf16\nin W[e f] bf16\nY = contract(X, W over e) as bf16\nout Y\n",
       "are not adjacent", 2},
      {"M axes in another order in the output",
       "axes s=4 t=64 e=128 f=64\nin X[s t e] bf16\nin W[e f] bf16\nY = contract(X, W over e) as bf16\nout Y[t s f]\n",
       "in the order [t s], A has [s t]", 5},
      {"K axes in another order in B",
       "axes t=64 c=4 e=128 f=64\nin X[t c e] bf16\nin W[e c f] bf16\nY = contract(X, W over c e) as bf16\nout Y\n",
       "its K axes are in the order [e c], A has [c e]", 3},
      {"a batch axis innermost",
       "axes b=4 t=64 e=128 f=64\nin X[t e b] bf16\nin W[b e f] bf16\nY = contract(X, W over e) as bf16\nout Y\n",
       "innermost axis b is of class L", 2},
      {"a row vector with the batch innermost",
       "axes b=4 t=64 e=128 f=64\nin X[b t e] bf16\nin W[b e f] bf16\nin r[t b] f32\nY = contract(X, W over e) * r as bf16\nout Y\n",
       "a row vector is read with unit stride along M", 4},
      {"no M axis", "axes e=128 f=64\nin X[e] bf16\nin W[e f] bf16\nY = contract(X, W over e) as bf16\nout Y\n",
       "a GEMM needs an axis of A alone (M)", 4},
      {"no contraction", h + "Y = X as bf16\nout Y\n", "near_miss.napkin: no contraction", 0},
      {"two outputs", h + "C = contract(X, W over e)\nY = C as bf16\nZ = C * 2 as bf16\nout Y\nout Z\n",
       "2 outputs: a GEMM kernel writes one", 8},
  };
  for (const Refusal& c : cases) {
    const Loaded l = parse("near_miss.napkin", c.text);
    auto f = emit::recognise_gemm(l.diagram, l.src);
    ASSERT_FALSE(f.ok()) << c.what;
    const std::string text = f.error().format();
    EXPECT_NE(text.find(c.message), std::string::npos) << c.what << ":\n" << text;
    if (c.line > 0) EXPECT_EQ(f.error().loc.line, c.line) << c.what << ":\n" << text;
  }
}

TEST(GemmKernel, ASumOfTheOperandOverKIsARowSumTheEpilogueReads) {
  // X[t f] times W[f g] plus X's own row sum: the prologue mainloop sums each row of X as it loads.
  const Loaded l = parse("operand.napkin",
                         "axes t=64 f=64 g=64\nin X[t f] bf16\nin W[f g] bf16\nY = contract(X, W over f) + sum(X * X over f) as bf16\nout Y\n");
  auto f = emit::recognise_gemm(l.diagram, l.src);
  ASSERT_TRUE(f.ok()) << f.error().format();
  ASSERT_EQ(f->row_sums.size(), 1u);
  EXPECT_TRUE(f->row_sums[0].out_axes.empty());
  EXPECT_NE(emit::describe_gemm(*f).find("row sums: "), std::string::npos) << emit::describe_gemm(*f);
  const std::string unit = emit::emit_gemm_kernel(l.diagram, *f, plan::GemmSchedule{64, 64, 64, 1, 1, 2, false}, {}, "entry");
  EXPECT_NE(unit.find("PrologueKernel<Config, cute::identity, cute::identity, Epilogue, RowSums>"), std::string::npos) << unit;
  EXPECT_NE(unit.find("rows[0]"), std::string::npos) << unit;
}

TEST(GemmKernel, RefusesAnOperandReadInTheEpilogue) {
  // X[t f] times W[f g] plus X's own row maximum (no row sum) would need A in the epilogue.
  const Loaded l = parse("operand.napkin",
                         "axes t=64 f=64 g=64\nin X[t f] bf16\nin W[f g] bf16\nY = contract(X, W over f) + max(X over f) as bf16\nout Y\n");
  auto f = emit::recognise_gemm(l.diagram, l.src);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("'X' is read by"), std::string::npos) << f.error().format();
  EXPECT_EQ(f.error().loc.line, 4);
}

TEST(GemmKernel, IsDeterministic) {
  const Case& c = find_case("gated_mlp");
  EXPECT_EQ(emit_case(c), emit_case(c));
}

}  // namespace
}  // namespace napkin
