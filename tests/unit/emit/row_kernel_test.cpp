// SPDX-License-Identifier: Apache-2.0
// The row-kernel emitter: a golden unit per family member (layernorm, rmsnorm, rmsnorm statistics,
// softmax over a materialised axis, a masked softmax with its logsumexp on short rows, a softmax
// over rows too long for registers, SwiGLU's silu * mul, an elementwise kernel with every kind of
// broadcast); the forms it finds; the launch
// shapes it takes from a schedule over many row lengths; refusals located at the op with the
// reason; and every row or elementwise kernel of the examples' plans accepted.
#include <limits>
#include <regex>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"
#include "emit/expression.h"
#include "emit/row_kernel.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "plan/plan.h"

namespace napkin {
namespace {

struct Loaded {
  SourceText src;
  ir::Diagram diagram;
};

Loaded parse(const std::string& name, const std::string& text) {
  Loaded l{{name, text}, {}};
  auto r = ir::parse_diagram(l.src);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().format());
  if (r.ok()) l.diagram = r->diagram;
  return l;
}

emit::RowForm form(const Loaded& l) {
  auto f = emit::recognise_rows(l.diagram, l.src);
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().format());
  return f.ok() ? *f : emit::RowForm{};
}

std::string emit_for(const Loaded& l, plan::RowSchedule s) {
  const emit::KernelProvenance prov{"test", ir::diagram_key(l.diagram), l.src.name, "(derivation not run in this test)"};
  return emit::emit_row_kernel(l.diagram, form(l), s, prov, "napkin_rows_entry");
}

const char* kLayerNorm = R"(axes t=8192 e=4096
in X[t e] bf16
in gamma[e] f32
in beta[e] f32
Y = layernorm(X over e, eps=1e-5) * gamma + beta as bf16
out Y
)";
const char* kRmsNorm = R"(axes t=8192 e=4096
in X[t e] bf16
in gamma[e] bf16
Y = rmsnorm(X over e, eps=1e-6) * gamma as bf16
out Y
)";
const char* kRmsStatistics = R"(axes t=8192 e=4096
in X[t e] bf16
R[t] = exp(-0.5 * log(sum(X * X over e) / 4096 + 1e-6))
out R
)";
const char* kSoftmax = R"(axes b=2 h=16 q=2048 k=2048
in S[b h q k] f32
P = softmax(S over k) as bf16
out P
)";
// Short rows (300: vectors of 4, a tail of threads), a causal mask from indices, a param, and the
// row's logsumexp as a second output.
const char* kMaskedSoftmax = R"(axes b=2 h=4 q=64 k=300
in S[b h q k] f32
param scale = 0.125
M = select(k <= q, S * scale, -inf)
P = softmax(M over k) as bf16
L = logsumexp(M over k)
out P
out L
)";
const char* kSiluMul = R"(axes t=8192 f=14336
in G[t f] bf16
in U[t f] bf16
H = G / (1 + exp(-G)) * U as bf16
out H
)";
// Rows too long for registers (256k f32 scores): re-read from L1/L2 in every pass.
const char* kLongSoftmax = R"(axes h=8 k=262144
in S[h k] f32
P = softmax(S over k) as bf16
out P
)";
// An elementwise kernel with an input stored the other way round (read element by element), a
// vector along the row axis, one per row and a scalar.
const char* kBroadcast = R"(axes t=512 f=1024
in A[t f] bf16
in B[f t] f32
in bias[f] f32
in s[t] f32
in c[] f32
C = (A * B + bias * s) * c as f16
out C
)";

// A column kernel: two sums over t of X[t c] (t not innermost), one weighted by w[t], and code
// per column after them (an inverse root mean square, a scale gamma[c], a param).
const char* kColumnStatistics = R"(axes t=8192 c=1024
in X[t c] bf16
in w[t] f32
in gamma[c] f32
param eps = 1e-5
M = sum(X * w over t)
S = sum(X * X over t)
R = gamma * exp(-0.5 * log(S / 8192 + eps)) as bf16
out M
out R
)";

// A column kernel reading a mask m[b t] that lacks the inner axis e: one value per step of t for
// all of a thread's columns (masked mean pooling's sum).
const char* kMaskedColumnSum = R"(axes b=64 t=512 e=768
in X[b t e] bf16
in m[b t] bool
in n[b] f32
Y = sum(select(m, X, 0) over t) / n as bf16
out Y
)";

TEST(RowKernel, GoldenUnits) {
  struct Case {
    const char* stem;
    const char* text;
    plan::RowSchedule schedule;
  };
  const Case cases[] = {
      {"layernorm", kLayerNorm, {1, 512}},          {"rmsnorm", kRmsNorm, {1, 512}},
      {"rmsnorm_statistics", kRmsStatistics, {1, 512}}, {"softmax", kSoftmax, {1, 256}},
      {"masked_softmax", kMaskedSoftmax, {8, 32}},  {"silu_mul", kSiluMul, {8, 32}},
      {"broadcast", kBroadcast, {8, 32}},           {"long_softmax", kLongSoftmax, {1, 1024}},
      {"column_statistics", kColumnStatistics, {1, 256, true}},
      {"masked_column_sum", kMaskedColumnSum, {1, 256, true}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.stem);
    const Loaded l = parse(std::string(c.stem) + ".napkin", c.text);
    testing::expect_golden(fmt::format("kernels/rows_{}.cu", c.stem), emit_for(l, c.schedule));
  }
}

TEST(RowKernel, FindsTheRowAxisPassesAndHowEachTensorIsRead) {
  const emit::RowForm ln = form(parse("ln.napkin", kLayerNorm));
  EXPECT_EQ(emit::describe_rows(ln), "rows [t] x e=4096; 2 reductions (sum, sum); outputs Y[t e]");
  EXPECT_EQ(ln.passes, 2);  // the variance sums the centred values: after the mean
  ASSERT_EQ(ln.inputs.size(), 3u);
  EXPECT_EQ(ln.inputs[0].read, emit::RowRead::rows);
  EXPECT_EQ(ln.inputs[1].read, emit::RowRead::along);
  EXPECT_EQ(ln.outputs[0].write, emit::RowWrite::vectors);

  const emit::RowForm stats = form(parse("stats.napkin", kRmsStatistics));
  EXPECT_EQ(emit::describe_rows(stats), "rows [t] x e=4096; 1 reduction (sum); outputs R[t]");
  EXPECT_EQ(stats.outputs[0].write, emit::RowWrite::per_row);

  const emit::RowForm sm = form(parse("sm.napkin", kMaskedSoftmax));
  // The softmax and the logsumexp of M expand to the same max and sum of exponentials: merged.
  EXPECT_EQ(emit::describe_rows(sm), "rows [b h q] x k=300; 2 reductions (max, sum); outputs P[b h q k] L[b h q]");
  EXPECT_EQ(sm.passes, 2);

  const emit::RowForm silu = form(parse("silu.napkin", kSiluMul));
  EXPECT_FALSE(silu.reduces);
  EXPECT_EQ(emit::describe_rows(silu), "elementwise [t f]; outputs H[t f]");

  const emit::RowForm b = form(parse("b.napkin", kBroadcast));
  ASSERT_EQ(b.inputs.size(), 5u);
  EXPECT_EQ(b.inputs[0].read, emit::RowRead::rows);
  EXPECT_EQ(b.inputs[1].read, emit::RowRead::gather);
  EXPECT_EQ(b.inputs[2].read, emit::RowRead::along);
  EXPECT_EQ(b.inputs[3].read, emit::RowRead::per_row);
  EXPECT_EQ(b.inputs[4].read, emit::RowRead::scalar);

  // The row axes are numbered in the input's storage order; an output with the row axis
  // elsewhere is written element by element.
  const emit::RowForm over_q = form(parse("q.napkin", R"(axes b=2 h=4 q=256 k=128
in S[b h k q] f32
P = softmax(S over q) as bf16
out P
)"));
  EXPECT_EQ(emit::describe_rows(over_q), "rows [b h k] x q=256; 2 reductions (max, sum); outputs P[b h q k]");
  EXPECT_EQ(over_q.outputs[0].write, emit::RowWrite::strided);
}

TEST(RowKernel, LaunchShapesKeepTheirInvariantsOverManyRowLengths) {
  // For every row length and schedule: whole warps, at most 1024 threads, the vector divides the
  // row, at least 4 vectors per thread unless the row is shorter, the kept row within its
  // register budget.
  for (const char* dtype : {"bf16", "f32", "f64", "bool"}) {
    for (std::int64_t n : {1, 2, 3, 7, 8, 31, 64, 100, 300, 1000, 1024, 1025, 2048, 4096, 4100, 8192, 14336, 65536, 1 << 20}) {
      const std::string sum = std::string(dtype) == "bool" ? "sum(select(X, 1, 0) over e)" : "sum(X over e)";
      const Loaded l = parse("n.napkin", fmt::format("axes t=64 e={}\nin X[t e] {}\nin Y0[t e] {}\nR = {}\nout R\n", n, dtype, dtype, sum));
      const emit::RowForm f = form(l);
      for (plan::RowSchedule s : {plan::RowSchedule{8, 32}, plan::RowSchedule{1, 128}, plan::RowSchedule{1, 512}, plan::RowSchedule{1, 1024},
                                  plan::RowSchedule{4, 7}, plan::RowSchedule{1, 100}}) {
        SCOPED_TRACE(fmt::format("{} n={} schedule {}x{}", dtype, n, s.rows_per_cta, s.threads_per_row));
        const emit::RowLaunch r = emit::row_launch(f, s);
        const int bytes = std::string(dtype) == "bf16" ? 2 : std::string(dtype) == "bool" ? 1 : std::string(dtype) == "f64" ? 8 : 4;
        EXPECT_EQ(n % r.vector, 0);
        EXPECT_LE(r.vector * bytes, 16);
        const int t = r.threads_per_row;
        EXPECT_TRUE((t < 32 && 32 % t == 0) || (t % 32 == 0 && t <= 1024)) << t;
        EXPECT_EQ(r.cta_threads, t * r.rows_per_cta);
        EXPECT_EQ(r.cta_threads % 32, 0);
        EXPECT_LE(r.cta_threads, 1024);
        const std::int64_t vectors = n / r.vector;
        EXPECT_EQ(r.vectors_per_thread, (vectors + t - 1) / t);
        if (r.in_registers) EXPECT_LE(r.vectors_per_thread * r.vector * bytes, 256);  // one input kept (Y0 is unused)
        else EXPECT_EQ(t, 1024);
        // Fewer than 4 vectors per thread only where the row is short or 4 would not fit the budget.
        if (vectors >= 4 * t) EXPECT_GE(r.vectors_per_thread, 4);
        EXPECT_FALSE(r.text.empty());
      }
    }
  }
}

struct Refusal {
  const char* what;
  const char* text;
  const char* message;  // a fragment of the error
  int line;             // where it points
};

TEST(RowKernel, RefusesWhatIsNotARowKernelWithTheOpAndWhy) {
  const Refusal cases[] = {
      {"a contraction", "axes t=64 e=128 f=32\nin X[t e] bf16\nin W[e f] bf16\nY = contract(X, W over e) as bf16\nout Y\n",
       "is a contraction: a row kernel has none", 4},
      {"two reduced axes", "axes t=64 e=128\nin X[t e] f32\nA = sum(X over e)\nB = max(X - A over t)\nout B\n",
       "'B' reduces over t where 'A' reduces over e: a row kernel reduces along one axis", 4},
      {"a reduction over two axes at once", "axes t=64 e=128\nin X[t e] f32\nA = sum(X over t e)\nout A\n", "reduces over 2 axes", 3},
      {"the row axis not innermost, an output along it", "axes t=64 e=128\nin X[e t] bf16\nY = softmax(X over e) as bf16\nout Y\n",
       "output 'Y' is over [t e]: a column kernel writes one value per column [t]", 4},
      {"columns read along other inner axes", "axes t=64 e=128\nin X[e t] f32\nin Z[t e] f32\nA = sum(X + Z over e)\nout A\n",
       "input 'Z' stores [t e] and 'X' [e t]: a column kernel reads the inputs that have e along the same inner axes", 3},
      {"columns over an axis the first input lacks", "axes t=64 e=128 b=4\nin X[e t] f32\nin Z[b t] f32\nA = sum(X over e) + Z\nout A\n",
       "is over b, which input 'X' [e t] does not have", 3},
      {"a column reduction of another", "axes t=64 e=128\nin X[e t] f32\nA = sum(X over e)\nB = max(X - A over e)\nout B\n",
       "'B' reads another reduction over e: a column kernel makes one pass over e", 4},
      {"an output over part of the row axes", "axes b=2 t=64 e=128\nin X[b t e] f32\nin Z[t e] f32\nA = X - sum(X over e)\nB = sum(Z over e)\nout A\nout B\n",
       "output 'B' is over [t]: a row kernel writes over the row axes [b t]", 7},
      {"an fp8 input", "axes t=64 e=128\nin X[t e] fp8e4m3\nY = sum(X over e)\nout Y\n", "input 'X' is fp8e4m3", 2},
      {"elementwise outputs over different axes", "axes t=64 e=128\nin X[t e] f32\nin b[t] f32\nY = X * 2\nZ = b + 1\nout Y\nout Z\n",
       "the outputs of an elementwise kernel share their axes", 7},
      {"a softmax over another axis than a sum", "axes t=64 e=128\nin X[t e] f32\nA = sum(X over e)\nP = softmax(X - A over t)\nout P\n",
       "'P' (a softmax) reduces over t where 'A' reduces over e", 4},
  };
  for (const Refusal& c : cases) {
    const Loaded l = parse("near_miss.napkin", c.text);
    auto f = emit::recognise_rows(l.diagram, l.src);
    ASSERT_FALSE(f.ok()) << c.what;
    const std::string text = f.error().format();
    EXPECT_NE(text.find(c.message), std::string::npos) << c.what << ":\n" << text;
    EXPECT_EQ(f.error().loc.line, c.line) << c.what << ":\n" << text;
    EXPECT_NE(text.find("near_miss.napkin:"), std::string::npos) << c.what << ":\n" << text;
  }
}

TEST(RowKernel, TheEntryChecksWhatTheKernelAssumes) {
  const std::string ln = emit_for(parse("ln.napkin", kLayerNorm), {1, 512});
  // The row length is compiled in and checked; rows along e are unit-stride and aligned, or the
  // kernel takes its instantiation of one element per access.
  EXPECT_NE(ln.find("constexpr int kRowLength = 4096;"), std::string::npos);
  EXPECT_NE(ln.find("if (n_e != kRowLength)"), std::string::npos);
  EXPECT_NE(ln.find("napkin::rows::stride_error(\"X\", \"e\", t->strides[1])"), std::string::npos);
  EXPECT_NE(ln.find("napkin::rows::launch<row_kernel<1>, kCtaThreads>"), std::string::npos);
  EXPECT_NE(ln.find("tb.bind(\"gamma\", NAPKIN_F32, \"r\")"), std::string::npos);
  // Exactly one exported entry.
  const std::regex exported(R"(extern "C")");
  EXPECT_EQ(std::distance(std::sregex_iterator(ln.begin(), ln.end(), exported), std::sregex_iterator()), 1);
  // A param is a kernel argument with the diagram's value by default.
  const std::string sm = emit_for(parse("sm.napkin", kMaskedSoftmax), {8, 32});
  EXPECT_NE(sm.find("a.scale = tb.param(\"scale\", 0.125);"), std::string::npos);
}

// Arithmetic on indices is exact past 2^31 as in the reference interpreter ((q - k)^2 at 50,000
// rows): computed in 64 bits; the indices and comparisons of them stay 32-bit.
TEST(RowKernel, IndexArithmeticIsComputedIn64Bits) {
  const std::string unit = emit_for(parse("sq.napkin", "axes q=50000 k=64\nin X[q k] f32\n"
                                                       "A = select(q >= k, X * ((q - k) * (q - k)), X)\nout A\n"),
                                    {1, 64});
  EXPECT_NE(unit.find("const long long v4 = static_cast<long long>(static_cast<int>(i_q)) - static_cast<int>(i_k);"),
            std::string::npos) << unit;
  EXPECT_NE(unit.find("const long long v5 = static_cast<long long>(v4) * v4;"), std::string::npos) << unit;
  EXPECT_NE(unit.find("const bool v3 = static_cast<int>(i_q) >= static_cast<int>(i_k);"), std::string::npos) << unit;
}

// A row that no thread keeps (its only input read along the row: a norm over every axis) is
// walked in loops unrolled by 4, not fully: 2048 vectors a thread unrolled took nvcc 7 minutes
// and 8 GB. A kept row unrolls fully (its vectors are arrays indexed by the loop).
TEST(RowKernel, LoopsOverVectorsNoThreadKeepsAreNotUnrolledFully) {
  const Loaded global = parse("g.napkin", "axes n=16777216\nin X[n] bf16\nY = layernorm(X over n) as bf16\nout Y\n");
  const emit::RowLaunch r = emit::row_launch(form(global), {1, 1024});
  EXPECT_FALSE(r.unrolled);
  EXPECT_EQ(r.text.find("the row in registers"), std::string::npos) << r.text;
  const std::string unit = emit_for(global, {1, 1024});
  EXPECT_NE(unit.find("#pragma unroll 4\n"), std::string::npos);
  const Loaded kept = parse("k.napkin", "axes t=64 e=4096\nin X[t e] bf16\nY = layernorm(X over e) as bf16\nout Y\n");
  EXPECT_TRUE(emit::row_launch(form(kept), {1, 512}).unrolled);
}

// Integer values are exact (64 bits) and an i32 output saturates as it is stored, as the
// reference's stored i32 values do (a flat index t * V + y past 2^31).
TEST(RowKernel, IntegerOutputsSaturateWhenStored) {
  const std::string unit = emit_for(parse("flat.napkin", "axes t=65536\nin y[t] i32\nflat = t * 128256 + y\nout flat\n"), {1, 256});
  EXPECT_NE(unit.find("long long oflat[kV];"), std::string::npos) << unit;
}

// A column kernel's entry: sizes are the caller's (none compiled in), vectors along the inner
// axis only where it is unit-stride and aligned, and the split workspace through launch_columns.
TEST(RowKernel, AColumnKernelSplitsTheReducedAxisAndChecksItsVectors) {
  const Loaded l = parse("cs.napkin", kColumnStatistics);
  auto f = emit::recognise_rows(l.diagram, l.src);
  ASSERT_TRUE(f.ok()) << f.error().format();
  EXPECT_TRUE(f->columns);
  EXPECT_EQ(l.diagram.axis(f->row_axis).name, "t");
  EXPECT_EQ(f->normalised.axis(f->inner).name, "c");
  ASSERT_EQ(f->inputs.size(), 3u);
  EXPECT_EQ(f->inputs[0].read, emit::RowRead::rows);
  EXPECT_EQ(f->inputs[1].read, emit::RowRead::along);
  EXPECT_EQ(f->inputs[2].read, emit::RowRead::per_row);
  const emit::RowLaunch launch = emit::row_launch(*f, {1, 256, true});
  EXPECT_EQ(launch.vector, 8);
  EXPECT_EQ(launch.lanes, 16);  // 128 vectors of c: 16 lanes leave 8 column tiles for the split combine
  EXPECT_EQ(launch.cta_threads, 256);
  const std::string unit = emit_for(l, {1, 256, true});
  EXPECT_EQ(unit.find("kRowLength"), std::string::npos);
  EXPECT_NE(unit.find("aligned = aligned && a.s_X_c == 1 && napkin::rows::aligned(a.X, kVector) && a.s_X_t % kVector == 0;"),
            std::string::npos) << unit;
  EXPECT_NE(unit.find("launch_columns<column_kernel<1>"), std::string::npos);
  EXPECT_NE(unit.find("g.finish(sPartials, a.partial_, a.arrivals_, live, acc0, acc1)"), std::string::npos);
  // Inner axes of 3 columns: one column a vector.
  const Loaded odd = parse("odd.napkin", "axes t=4096 c=3\nin X[t c] bf16\nY = sum(X over t)\nout Y\n");
  auto fo = emit::recognise_rows(odd.diagram, odd.src);
  ASSERT_TRUE(fo.ok());
  EXPECT_EQ(emit::row_launch(*fo, {1, 256, true}).vector, 1);
  EXPECT_EQ(emit::row_launch(*fo, {1, 256, true}).lanes, 4);
}

TEST(RowKernel, IsDeterministic) {
  const Loaded l = parse("sm.napkin", kMaskedSoftmax);
  EXPECT_EQ(emit_for(l, {8, 32}), emit_for(l, {8, 32}));
}

TEST(RowKernel, AcceptsEveryRowAndElementwiseKernelOfTheExamplesPlans) {
  auto machine = arch::load_machine((testing::source_dir() / "machines" / "h100-sxm5.toml").string());
  ASSERT_TRUE(machine.ok());
  int kernels = 0;
  for (const auto& path : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    SCOPED_TRACE(path.string());
    const Loaded l = parse(path.string(), testing::read_text(path));
    auto d = plan::derive_plan(l.diagram, *machine);
    ASSERT_TRUE(d.ok()) << d.error().message;
    for (const plan::Kernel& k : d->chosen.kernels) {
      if (k.kind != plan::KernelKind::row_reduction && k.kind != plan::KernelKind::column_reduction &&
          k.kind != plan::KernelKind::elementwise)
        continue;
      auto f = emit::recognise_rows(k.diagram, l.src);
      ASSERT_TRUE(f.ok()) << k.name << ": " << f.error().format();
      EXPECT_EQ(f->reduces, k.kind != plan::KernelKind::elementwise) << k.name;
      EXPECT_EQ(f->columns, k.kind == plan::KernelKind::column_reduction) << k.name;
      const std::string unit = emit::emit_row_kernel(k.diagram, *f, k.rows.value_or(plan::RowSchedule{}), {"test", "", "x", ""}, "entry");
      EXPECT_EQ(std::count(unit.begin(), unit.end(), '{'), std::count(unit.begin(), unit.end(), '}')) << k.name;
      ++kernels;
    }
  }
  EXPECT_GE(kernels, 4);
}

// A constant is written as an f32 literal nvcc takes: a finite double past f32's range at 2^123
// (a PyTorch-style mask fill of -1e300 stays finite, as in the f64 reference, with headroom for a
// kernel's own scaling, a power of two that any scale multiplies exactly), one below its smallest
// subnormal a zero.
TEST(Expression, ConstantsAsF32HoldsThem) {
  EXPECT_EQ(emit::expression::literal(-1e300), "-1.0633824e+37f");
  EXPECT_EQ(emit::expression::literal(1e39), "1.0633824e+37f");
  EXPECT_EQ(emit::expression::literal(1e-50), "0.0f");
  EXPECT_EQ(emit::expression::literal(0.5), "0.5f");
  EXPECT_EQ(emit::expression::literal(-std::numeric_limits<double>::infinity()), "-INFINITY");
}

}  // namespace
}  // namespace napkin
