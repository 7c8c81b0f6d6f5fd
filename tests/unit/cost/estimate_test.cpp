// SPDX-License-Identifier: Apache-2.0
// The per-schedule estimate: transfers agree with the closed form's counting rule, memory
// with the paper's M >= 2 g_q d + 2 s_x d, time and bound follow the machine's rates.
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"
#include "cost/cost.h"
#include "ir/parser.h"
#include "sched/schedule.h"

namespace napkin::cost {
namespace {

arch::Machine h100() {
  auto m = arch::find_machine("h100-sxm5", arch::default_machines_dir());
  EXPECT_TRUE(m.ok());
  return m.value();
}

ir::Diagram attention(int q, int k, int d) {
  auto p = ir::parse_diagram(SourceText{"a.napkin", fmt::format(
      "axes q={} k={} d={}\nin Q[q d] f16\nin K[k d] f16\nin V[k d] f16\n"
      "O = contract(softmax(contract(Q, K over d) over k), V over k)\nout O\n", q, k, d)});
  EXPECT_TRUE(p.ok()) << p.error().format();
  return p->diagram;
}

Estimate run(const ir::Diagram& d, const std::string& schedule) {
  auto s = sched::parse_schedule(schedule, d);
  EXPECT_TRUE(s.ok()) << s.error().format();
  auto e = estimate(d, s.value(), h100());
  EXPECT_TRUE(e.ok()) << e.error().format();
  return e.value();
}

const LevelCost& level(const Estimate& e, const std::string& name) {
  for (const auto& l : e.levels)
    if (l.name == name) return l;
  ADD_FAILURE() << "no level " << name;
  return e.levels.front();
}

TEST(Estimate, AttentionTransfersAreTwoQdPlusTwoXdQOverGq) {
  const ir::Diagram d = attention(1024, 4096, 64);
  for (int g : {16, 64, 128, 1000}) {
    const Estimate e = run(d, fmt::format("smem{{tile q={}; stream k=64:online_softmax}}", g));
    const double q = 1024, x = 4096, dd = 64;
    const double tiles = std::ceil(q / g);  // ragged last tile for g = 1000
    // H = 2qd (Q in, O out) + 2xd per q tile (K and V re-read): section 3.2.
    EXPECT_DOUBLE_EQ(level(e, "smem").transfer_elements, 2 * q * dd + 2 * x * dd * tiles) << g;
    // Without caching, HBM (the gmem->l2 link) carries the same traffic.
    EXPECT_DOUBLE_EQ(level(e, "l2").transfer_elements, level(e, "smem").transfer_elements);
  }
}

// §12: a causal mask leaves the (tile, chunk) blocks on and below the diagonal; the others
// are neither loaded nor computed.
TEST(Estimate, CausalMaskSkipsTheBlocksAboveTheDiagonal) {
  auto causal = [](int n) {
    auto p = ir::parse_diagram(SourceText{"c.napkin", fmt::format(
        "axes q={0} k={0} d=64\nin Q[q d] f16\nin K[k d] f16\nin V[k d] f16\n"
        "S = contract(Q, K over d)\nM = select(q >= k, S, -inf)\n"
        "O = contract(softmax(M over k), V over k)\nout O\n", n)});
    EXPECT_TRUE(p.ok()) << p.error().format();
    return p->diagram;
  };
  const std::string schedule = "smem{tile q=128; stream k=64:online_softmax}";
  const Estimate full = run(attention(1024, 1024, 64), schedule);
  const Estimate masked = run(causal(1024), schedule);
  // 8 row tiles of 128 against 16 chunks of 64: tile t sees chunks 0 .. 2t + 1, 72 of 128.
  const double visited = 72.0 / 128.0;
  EXPECT_DOUBLE_EQ(masked.visited_fraction, visited);
  EXPECT_DOUBLE_EQ(level(masked, "smem").visited_fraction, visited);
  EXPECT_DOUBLE_EQ(full.visited_fraction, 1.0);
  // Q in and O out once; K and V once per visited block.
  const double q = 1024, dd = 64, tiles = 8;
  EXPECT_DOUBLE_EQ(level(masked, "smem").transfer_elements, 2 * q * dd + 2 * q * dd * tiles * visited);
  EXPECT_DOUBLE_EQ(level(full, "smem").transfer_elements, 2 * q * dd + 2 * q * dd * tiles);
  // The two contractions' FLOPs and the tensor-core time scale with the visited blocks.
  EXPECT_DOUBLE_EQ(masked.flops, full.flops * visited);
  double tc_full = 0, tc_masked = 0;
  for (const UnitCost& u : full.units)
    if (u.unit == arch::Unit::tensor_core) tc_full += u.ops;
  for (const UnitCost& u : masked.units)
    if (u.unit == arch::Unit::tensor_core) tc_masked += u.ops;
  EXPECT_DOUBLE_EQ(tc_masked, tc_full * visited);
}

TEST(Estimate, AMaskOfTheStreamedAxisAloneSkipsWholeChunks) {
  auto p = ir::parse_diagram(SourceText{"k.napkin",
      "axes q=1024 k=4096 d=64\nin Q[q d] f16\nin K[k d] f16\nin V[k d] f16\n"
      "S = contract(Q, K over d)\nM = select(k < 1000, S, -inf)\n"
      "O = contract(softmax(M over k), V over k)\nout O\n"});
  ASSERT_TRUE(p.ok()) << p.error().format();
  // Chunks 0-15 of 64 keys hold keys below 1000: 16 of 64 chunks, for every row tile.
  const Estimate e = run(p->diagram, "smem{tile q=128; stream k=64:online_softmax}");
  EXPECT_DOUBLE_EQ(e.visited_fraction, 16.0 / 64.0);
}

TEST(Estimate, AttentionMemoryIsTwoGqdPlusTwoSxd) {
  const ir::Diagram d = attention(1024, 4096, 64);
  const Estimate e = run(d, "l2{tile q=1024; keep Q K V O} smem{tile q=128; stream k=32:online_softmax; keep Q K V O}");
  const LevelCost& smem = level(e, "smem");
  // f16: Q tile and O tile (an f32 accumulator: streamed), K and V chunks.
  double q_tile = 0, k_chunk = 0, o_acc = 0;
  for (const auto& f : smem.footprint) {
    if (f.tensor == "Q") q_tile = f.bytes;
    if (f.tensor == "K") k_chunk = f.bytes;
    if (f.tensor == "O") o_acc = f.bytes;
  }
  EXPECT_EQ(q_tile, 128 * 64 * 2);
  EXPECT_EQ(k_chunk, 32 * 64 * 2);
  EXPECT_EQ(o_acc, 128 * 64 * 4);
  // The l2 level holds whole K and V: the gmem link moves each tensor once.
  EXPECT_DOUBLE_EQ(level(e, "l2").transfer_elements, 2 * 1024 * 64 + 2 * 4096 * 64);
}

TEST(Estimate, MatmulTransfersAndTensorCoreTime) {
  auto matmul = [](int a) {
    auto p = ir::parse_diagram(SourceText{"m.napkin", fmt::format(
        "axes m={0} k={0} n={0}\nin A[m k] bf16\nin B[k n] bf16\nC = contract(A, B over k) as bf16\nout C\n", a)});
    EXPECT_TRUE(p.ok());
    return p->diagram;
  };
  // smem: A and B chunks (2 stages) and C's tile, 160 KiB; rmem: C's f32 accumulator, 96 KiB.
  const Estimate e = run(matmul(4096), "smem{tile m=128 n=256; stream k=64:add; stages=2} "
                                       "rmem{tile m=64 n=256; stream k=64:add; keep C; groups=2}");
  ASSERT_TRUE(e.fits()) << e.does_not_fit;
  const double a = 4096;
  // H = abc (1/g_n + 1/g_m) + ac
  EXPECT_DOUBLE_EQ(level(e, "smem").transfer_elements, a * a * a * (1.0 / 256 + 1.0 / 128) + a * a);
  EXPECT_DOUBLE_EQ(e.flops, 2 * a * a * a);
  // 512 tiles on 132 SMs: 4 waves of 132, efficiency 512 / 528.
  EXPECT_NEAR(e.wave_efficiency, 512.0 / 528.0, 1e-12);
  const double peak = *h100().peak_flop_per_s(arch::Unit::tensor_core, DType::bf16);
  bool found = false;
  for (const auto& u : e.units)
    if (u.unit == arch::Unit::tensor_core) {
      EXPECT_NEAR(u.time_s, 2 * a * a * a / peak / e.wave_efficiency, 1e-12);
      found = true;
    }
  EXPECT_TRUE(found);
  // Without caching, HBM carries every re-read: bound by the gmem link (0.49 ms against
  // 0.14 ms of tensor-core time). With an l2 level holding whole rows and columns (of a
  // matmul whose three matrices fit in L2 together), each tensor crosses HBM once and the
  // tensor core bounds.
  EXPECT_EQ(e.bound, "transfer gmem->l2");
  const double c = 2048;
  const Estimate cached = run(matmul(2048), "l2{tile m=2048 n=2048; keep A B C} smem{tile m=128 n=256; stream k=64:add; "
                                            "keep A B C; stages=2} rmem{tile m=64 n=256; stream k=64:add; keep C; groups=2}");
  ASSERT_TRUE(cached.fits()) << cached.does_not_fit;
  EXPECT_DOUBLE_EQ(level(cached, "l2").transfer_elements, 3 * c * c);
  EXPECT_EQ(cached.bound, "tensor_core bf16");
}

// A schedule over a capacity cannot run: it gets no time, and the reason names the level, what
// one group needs and which capacity it exceeds (issue #19: stages=1000000 predicted 422 TFLOP/s).
TEST(Estimate, NoTimeForAScheduleThatDoesNotFit) {
  const ir::Diagram d = attention(8192, 8192, 128);
  const Estimate staged = run(d, "smem{tile q=128; stream k=64:online_softmax; stages=1000000}");
  EXPECT_FALSE(staged.fits());
  EXPECT_EQ(staged.does_not_fit.rfind("smem: one group needs ", 0), 0u) << staged.does_not_fit;
  EXPECT_NE(staged.does_not_fit.find(" KiB, over its capacity of 227.00 KiB (the per-block limit)"), std::string::npos)
      << staged.does_not_fit;
  EXPECT_EQ(staged.predicted_time_s, 0);
  EXPECT_EQ(staged.sequential_time_s, 0);
  EXPECT_EQ(staged.bound, "");
  EXPECT_EQ(staged.tflops(), 0);
  for (const auto& u : staged.units) EXPECT_EQ(u.time_s, 0) << u.what;
  EXPECT_GT(level(staged, "smem").transfer_elements, 0);  // what it would move is still shown
  // Registers: 2 warpgroups share an SM's 256 KiB.
  const Estimate regs = run(d, "smem{tile q=128; stream k=64:online_softmax} rmem{tile q=128; stream k=64:online_softmax; groups=2}");
  EXPECT_EQ(regs.does_not_fit.rfind("rmem: one group needs", 0), 0u) << regs.does_not_fit;
  EXPECT_NE(regs.does_not_fit.find("over its capacity of 128.00 KiB (256.00 KiB per SM / 2 groups)"), std::string::npos)
      << regs.does_not_fit;
  EXPECT_EQ(regs.predicted_time_s, 0);
  // Within capacity: a time.
  const Estimate fits = run(d, "smem{tile q=128; stream k=64:online_softmax; stages=2}");
  EXPECT_TRUE(fits.fits()) << fits.does_not_fit;
  EXPECT_GT(fits.predicted_time_s, 0);
}

TEST(Estimate, QuantizationChangesBytesAndTheTensorCoreRate) {
  const ir::Diagram d = attention(2048, 2048, 128);
  const Estimate f16 = run(d, "smem{tile q=128; stream k=64:online_softmax}");
  const Estimate fp8 = run(d, "smem{tile q=128; stream k=64:online_softmax; keep Q:fp8e4m3 K:fp8e4m3 V:fp8e4m3 O}");
  EXPECT_DOUBLE_EQ(level(fp8, "smem").transfer_elements, level(f16, "smem").transfer_elements);
  EXPECT_LT(level(fp8, "smem").transfer_bytes, level(f16, "smem").transfer_bytes);
  bool fp8_tensor = false;
  for (const auto& u : fp8.units) fp8_tensor = fp8_tensor || (u.unit == arch::Unit::tensor_core && u.dtype == DType::fp8e4m3);
  EXPECT_TRUE(fp8_tensor);
}

TEST(Estimate, MissingLevelsAndRatesAreErrors) {
  const ir::Diagram d = attention(64, 64, 64);
  sched::Schedule s;
  s.levels.push_back({"xmem", {{"q", 16}}, {}, {}, 1, 1, 1});
  auto e = estimate(d, s, h100());
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "schedule level 'xmem' is not a level of machine h100-sxm5 (levels: gmem l2 smem rmem tc)");
  auto a100 = arch::find_machine("a100-sxm4-80g", arch::default_machines_dir());
  ASSERT_TRUE(a100.ok());
  auto fp8 = sched::parse_schedule("smem{tile q=16; stream k=16:online_softmax; keep Q:fp8e4m3 K:fp8e4m3 V O}", d);
  ASSERT_TRUE(fp8.ok()) << fp8.error().format();
  auto no_fp8 = estimate(d, fp8.value(), a100.value());
  ASSERT_FALSE(no_fp8.ok());
  EXPECT_NE(no_fp8.error().message.find("has no tensor_core rate for fp8e4m3"), std::string::npos)
      << no_fp8.error().message;
}

TEST(Estimate, DefaultScheduleFitsAndIsValid) {
  for (const char* name : {"attention.napkin", "causal.napkin", "gqa.napkin", "matmul.napkin", "softcap.napkin"}) {
    auto p = ir::load_diagram((testing::source_dir() / "examples" / name).string());
    ASSERT_TRUE(p.ok());
    const auto report = sched::analyse_streaming(p->diagram);
    const sched::Schedule s = default_schedule(p->diagram, report, h100());
    EXPECT_FALSE(sched::validate_schedule(s, p->diagram, report).has_value()) << name << ": " << sched::to_string(s);
    auto e = estimate(p->diagram, s, h100());
    ASSERT_TRUE(e.ok()) << name;
    for (const auto& l : e->levels)
      if (l.scheduled) EXPECT_LE(l.peak_bytes, l.capacity_bytes) << name << " " << l.name;
    EXPECT_GT(e->tflops(), 0) << name;
  }
  // SwiGLU cannot be fused into one kernel at these sizes: e is contracted and kept, so a
  // group needs whole rows of e; the estimate says so instead of pretending it fits.
  auto p = ir::load_diagram((testing::source_dir() / "examples/swiglu_mlp.napkin").string());
  ASSERT_TRUE(p.ok());
  auto e = estimate(p->diagram, default_schedule(p->diagram, sched::analyse_streaming(p->diagram), h100()), h100());
  ASSERT_TRUE(e.ok());
  bool over = false;
  for (const auto& l : e->levels) over = over || (l.scheduled && l.peak_bytes > l.capacity_bytes);
  EXPECT_TRUE(over);
}

// Nothing in the estimate costs time or memory in proportion to an axis size: the pieces of a
// split axis are counted in closed form. 10^11 queries split 128 then 48 (ragged at both
// levels) give exact counts, at once.
TEST(Estimate, HugeAxesCostNoTimeAndCountExactly) {
  auto p = ir::parse_diagram(SourceText{"a.napkin",
      "axes q=99999999999 k=8192 d=128\nin Q[q d] bf16\nin K[k d] bf16\nin V[k d] bf16\n"
      "O = contract(softmax(contract(Q, K over d) over k), V over k) as bf16\nout O\n"});
  ASSERT_TRUE(p.ok()) << p.error().format();
  const auto start = std::chrono::steady_clock::now();
  const Estimate e = run(p->diagram, "smem{tile q=128; stream k=64:online_softmax; keep Q K V O} "
                                     "rmem{tile q=48; stream k=16:online_softmax; keep O}");
  const auto report = sched::analyse_streaming(p->diagram);
  const sched::Schedule fallback = default_schedule(p->diagram, report, h100());
  EXPECT_TRUE(estimate(p->diagram, fallback, h100()).ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  // ceil(99999999999 / 128) = 781250000 tiles (the last of 127 rows), each cut into 48 + 48 + 32
  // (the last 48 + 48 + 31) at rmem.
  EXPECT_DOUBLE_EQ(level(e, "smem").groups_total, 781250000.0);
  EXPECT_DOUBLE_EQ(level(e, "rmem").groups_total, 3 * 781250000.0);
  // K and V cross into smem once per q tile.
  EXPECT_DOUBLE_EQ(level(e, "smem").transfer_elements,
                   2 * 99999999999.0 * 128 + 2 * 8192.0 * 128 * 781250000.0);
}

// A param is a literal with a name (issue #19): `S * scale` keeps S's dtype, so the cost model
// counts the same f32 FMAs for it as for `S * 0.125`, never f64 ones.
TEST(Estimate, AParamCostsLikeTheSameLiteral) {
  auto with = [](const std::string& factor, const std::string& param) {
    auto p = ir::parse_diagram(SourceText{"p.napkin",
        "axes q=1024 k=1024 d=64\n" + param + "in Q[q d] bf16\nin K[k d] bf16\nin V[k d] bf16\n"
        "S = contract(Q, K over d) * " + factor + "\nT = S + " + factor + "\n"
        "O = contract(softmax(T over k), V over k) as bf16\nout O\n"});
    EXPECT_TRUE(p.ok()) << p.error().format();
    return p->diagram;
  };
  const ir::Diagram param = with("c", "param c = 0.125\n"), literal = with("0.125", "");
  EXPECT_EQ(param.node(*param.find_node("S")).dtype, DType::f32);
  EXPECT_EQ(param.node(*param.find_node("T")).dtype, DType::f32);
  // So does arithmetic on params and literals alone.
  for (const char* factor : {"(1 / c)", "(-c * 2)", "exp(c)"}) {
    const ir::Diagram derived = with(factor, "param c = 0.125\n");
    EXPECT_EQ(derived.node(*derived.find_node("S")).dtype, DType::f32) << factor;
  }
  const std::string schedule = "smem{tile q=128; stream k=64:online_softmax}";
  const Estimate a = run(param, schedule), b = run(literal, schedule);
  ASSERT_EQ(a.units.size(), b.units.size());
  for (std::size_t i = 0; i < a.units.size(); ++i) {
    EXPECT_NE(a.units[i].dtype, DType::f64) << a.units[i].what;
    EXPECT_EQ(a.units[i].what, b.units[i].what);
    EXPECT_DOUBLE_EQ(a.units[i].ops, b.units[i].ops) << a.units[i].what;
  }
  EXPECT_DOUBLE_EQ(a.predicted_time_s, b.predicted_time_s);
}

// Without wgmma (sm_80: mma.sync) the warps that issue the tensor-core work also issue the exp
// and the FP32 work, so the compute units' times add; with it (sm_90) they overlap.
TEST(Estimate, SynchronousMmaSerialisesTheComputeUnits) {
  const ir::Diagram d = attention(4096, 4096, 128);
  auto s = sched::parse_schedule("smem{tile q=128; stream k=64:online_softmax; stages=2} rmem{tile q=64; groups=2}", d);
  ASSERT_TRUE(s.ok()) << s.error().format();
  auto a100 = arch::find_machine("a100-sxm4-80g", arch::default_machines_dir());
  ASSERT_TRUE(a100.ok());
  for (const arch::Machine& m : {h100(), a100.value()}) {
    SCOPED_TRACE(m.name);
    auto e = estimate(d, s.value(), m);
    ASSERT_TRUE(e.ok()) << e.error().format();
    double units = 0, worst_unit = 0, worst_link = 0;
    for (const auto& u : e->units) units += u.time_s, worst_unit = std::max(worst_unit, u.time_s);
    for (const auto& l : e->levels) worst_link = std::max(worst_link, l.transfer_time_s);
    ASSERT_GT(e->units.size(), 1u);
    if (m.limits.warpgroup_size_threads) {
      EXPECT_EQ(e->exposed_fill_s, 0);
      EXPECT_DOUBLE_EQ(e->predicted_time_s, std::max(worst_unit, worst_link));
    } else {
      // ... and each wave's fill is exposed (no TMA): more than the compute, less than the link's whole time.
      EXPECT_GT(e->exposed_fill_s, 0);
      EXPECT_DOUBLE_EQ(e->predicted_time_s, std::max(units, worst_link) + e->exposed_fill_s);
      EXPECT_NE(e->bound.find(" in series"), std::string::npos) << e->bound;
      EXPECT_NE(e->overlap.find("serialise"), std::string::npos) << e->overlap;
      // FlashAttention-2 reaches 50-73 % of the A100's tensor-core peak (digest, FA2).
      EXPECT_LT(e->tflops() * 1e12 / *m.peak_flop_per_s(arch::Unit::tensor_core, DType::f16), 0.8);
    }
    EXPECT_LE(e->predicted_time_s, e->sequential_time_s * (1 + 1e-12));
  }
}

}  // namespace
}  // namespace napkin::cost
