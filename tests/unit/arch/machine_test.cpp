// SPDX-License-Identifier: Apache-2.0
// The shipped machine files: each loads, its headline figures come out of its own numbers,
// and its canonical text form is stable. No GPU needed.
#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"

namespace napkin::arch {
namespace {

std::string machines_dir() { return (testing::source_dir() / "machines").string(); }

Machine load(std::string_view name) {
  auto m = find_machine(name, machines_dir());
  if (!m) ADD_FAILURE() << m.error().format();
  return m.ok() ? m.value() : Machine{};
}

// Relative comparison for peaks of order 1e12..1e15.
void expect_close(double actual, double expected, double rel = 1e-9) {
  EXPECT_NEAR(actual, expected, expected * rel);
}

TEST(Machines, EveryShippedMachineLoads) {
  const std::vector<std::string> expected = {"a100-sxm4-80g", "b200",   "h100-pcie",
                                             "h100-sxm5",     "h200",   "rtx4090"};
  EXPECT_EQ(machine_names(machines_dir()), expected);
  auto all = load_machines(machines_dir());
  ASSERT_TRUE(all.ok()) << all.error().format();
  ASSERT_EQ(all->size(), expected.size());
  for (const Machine& m : *all) {
    SCOPED_TRACE(m.name);
    // The level tree is the chain gmem <- l2 <- smem <- rmem <- tc, one smem per SM.
    ASSERT_EQ(m.levels.size(), 5u);
    const char* order[] = {"gmem", "l2", "smem", "rmem", "tc"};
    for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(m.levels[i].name, order[i]);
    EXPECT_EQ(m.level(kSmem)->instances, m.sm_count.value);
    EXPECT_EQ(m.capacity_bytes(kSmem), m.limits.smem_bytes_per_sm.value);
    EXPECT_LE(m.limits.smem_bytes_per_block.value, m.limits.smem_bytes_per_sm.value);
    EXPECT_TRUE(m.peak_flop_per_s(Unit::tensor_core, DType::bf16).has_value());
    EXPECT_EQ(m.file, (std::filesystem::path(machines_dir()) / (m.name + ".toml")).string());
  }
}

// Every number in every shipped file carries a non-empty source.
TEST(Machines, EveryNumberHasASource) {
  auto all = load_machines(machines_dir());
  ASSERT_TRUE(all.ok());
  for (const Machine& m : *all) {
    SCOPED_TRACE(m.name);
    EXPECT_FALSE(m.sm_count.source.empty());
    EXPECT_FALSE(m.clock_hz.source.empty());
    for (const Level& l : m.levels) {
      EXPECT_FALSE(l.capacity_bytes.source.empty()) << l.name;
      if (l.parent.empty()) continue;
      EXPECT_FALSE(l.bytes_per_s.source.empty()) << l.name;
      EXPECT_FALSE(l.instances_per_parent.source.empty()) << l.name;
    }
    for (const Throughput& t : m.throughput) EXPECT_FALSE(t.ops_per_clk_per_sm.source.empty());
    const Limits& k = m.limits;
    for (const auto* s : {&k.registers_per_thread, &k.registers_per_block, &k.registers_per_sm,
                          &k.smem_bytes_per_block, &k.smem_bytes_per_sm, &k.threads_per_block,
                          &k.threads_per_sm, &k.ctas_per_sm, &k.warp_size_threads})
      EXPECT_FALSE(s->source.empty());
  }
}

// The paper's H100 SXM5 figures (digest §1.4 and §6) from the file's own numbers.
TEST(Machines, H100Sxm5Headline) {
  const Machine m = load("h100-sxm5");
  EXPECT_EQ(m.sm_count.value, 132);
  EXPECT_EQ(m.clock_hz.value, 1.83e9);
  EXPECT_EQ(*m.ops_per_clk_per_sm(Unit::tensor_core, DType::bf16), 4096);
  EXPECT_EQ(*m.ops_per_clk_per_sm(Unit::tensor_core, DType::fp8e4m3), 8192);
  expect_close(*m.peak_flop_per_s(Unit::tensor_core, DType::bf16), 132 * 1.83e9 * 4096);  // 989 TF
  expect_close(*m.peak_flop_per_s(Unit::tensor_core, DType::f16), 989.36e12, 1e-4);
  expect_close(*m.peak_flop_per_s(Unit::tensor_core, DType::fp8e5m2), 1978.7e12, 1e-4);
  // SFU: 16 ops/clk/SM = 3.87e12 exp/s (FA3 §3.1 says 3.9 TFLOP/s).
  expect_close(*m.peak_flop_per_s(Unit::sfu, DType::f32), 16 * 132 * 1.83e9);
  // FMA counts 2 FLOP per op: 128 FMA/clk/SM is 256 FLOP/clk/SM.
  expect_close(*m.peak_flop_per_s(Unit::fma, DType::f32), 2 * *m.peak_ops_per_s(Unit::fma, DType::f32));
  EXPECT_EQ(m.bytes_per_s(kL2), 3.35e12);   // HBM3, the gmem<->l2 link
  EXPECT_EQ(m.bytes_per_s(kSmem), 12e12);   // L2, the l2<->smem link
  EXPECT_EQ(m.capacity_bytes(kL2), 50 * 1024 * 1024);
  EXPECT_EQ(m.capacity_bytes(kSmem), 228 * 1024);
  EXPECT_EQ(m.limits.smem_bytes_per_block.value, 227 * 1024);
  EXPECT_EQ(m.capacity_bytes(kRmem), 256 * 1024);
  EXPECT_EQ(m.total_capacity_bytes(kRmem), 132LL * 256 * 1024);
  EXPECT_EQ(m.level(kTensorCore)->instances, 4 * 132);
  EXPECT_EQ(m.limits.registers_per_thread.value, 255);
  EXPECT_EQ(m.limits.registers_per_sm.value, 65536);
  EXPECT_EQ(m.limits.warpgroup_size_threads->value, 128);
  ASSERT_TRUE(m.cluster.has_value());
  EXPECT_EQ(m.cluster->dsmem_bytes_per_s.at(2).value, 3.27e12);
  EXPECT_EQ(m.cluster->dsmem_bytes_per_s.at(4).value, 2.65e12);
  EXPECT_EQ(m.cluster->gmem_smem_bytes_per_s->value, 2.04e12);
  // Napkin App. B.1: the compute-bound threshold at HBM, 989e12 / (2 x 1.675e12 fp16/s) ~ 295.
  const double values_per_s = m.bytes_per_s(kL2) / dtype_bytes(DType::f16);
  EXPECT_NEAR(*m.peak_flop_per_s(Unit::tensor_core, DType::f16) / (2 * values_per_s), 295.3, 0.1);
  // ... and the minimum upper-level memory (K/H)^2 values x 2 B ~ 681 KiB.
  const double ratio = *m.peak_flop_per_s(Unit::tensor_core, DType::f16) / (2 * values_per_s);
  EXPECT_NEAR(4 * ratio * ratio * 2 / 1024, 681, 1);
}

TEST(Machines, OtherHeadlines) {
  const Machine a100 = load("a100-sxm4-80g");
  expect_close(*a100.peak_flop_per_s(Unit::tensor_core, DType::bf16), 311.9e12, 1e-3);
  expect_close(*a100.peak_flop_per_s(Unit::fma, DType::f32), 19.5e12, 1e-2);  // FA2 §3.1
  EXPECT_FALSE(a100.peak_flop_per_s(Unit::tensor_core, DType::fp8e4m3).has_value());
  EXPECT_FALSE(a100.cluster.has_value());
  EXPECT_FALSE(a100.limits.warpgroup_size_threads.has_value());

  const Machine pcie = load("h100-pcie");
  expect_close(*pcie.peak_flop_per_s(Unit::tensor_core, DType::f16), 756e12, 1e-3);  // digest §6 #6

  const Machine h200 = load("h200");
  EXPECT_EQ(h200.bytes_per_s(kL2), 4.8e12);
  // Digest §6 #41: the roofline knee, 989e12 / 4.8e12 ~ 206 FLOP/byte.
  EXPECT_NEAR(*h200.peak_flop_per_s(Unit::tensor_core, DType::bf16) / h200.bytes_per_s(kL2), 206, 0.5);

  const Machine b200 = load("b200");
  expect_close(*b200.peak_flop_per_s(Unit::tensor_core, DType::bf16), 2.25e15, 1e-3);
  expect_close(*b200.peak_flop_per_s(Unit::tensor_core, DType::fp8e4m3), 4.5e15, 1e-3);

  const Machine rtx = load("rtx4090");
  expect_close(*rtx.peak_flop_per_s(Unit::tensor_core, DType::f16), 165.2e12, 1e-3);
  EXPECT_EQ(rtx.limits.smem_bytes_per_block.value, 99 * 1024);
  EXPECT_EQ(rtx.limits.threads_per_sm.value, 1536);
}

// The canonical text form, pinned for the paper's machine.
TEST(Machines, CanonicalTextForm) {
  const Machine m = load("h100-sxm5");
  EXPECT_EQ(machine_key(m),
            "machine h100-sxm5 cc=9.0 sm_count=132 clock_hz=1.83e+09 "
            "levels[gmem:85899345920B l2<gmemx1:52428800B@3.35e+12B/s "
            "smem<l2x132:233472B@1.2e+13B/s rmem<smemx1:262144B@3.092e+13B/s "
            "tc<rmemx4:1280B@1.855e+14B/s] "
            "tensor_core[f64=256 tf32=2048 bf16=4096 f16=4096 fp8e4m3=8192 fp8e5m2=8192] "
            "fma[f64=64 f32=128 f16=256] sfu[f32=16] "
            "limits[regs/thread=255 regs/block=65536 regs/sm=65536 smem/block=232448B "
            "smem/sm=233472B threads/block=1024 threads/sm=2048 ctas/sm=32 warp=32 warpgroup=128] "
            "cluster[portable=8 nonportable=16 dsmem2=3.27e+12B/s dsmem4=2.65e+12B/s "
            "gmem-smem=2.04e+12B/s]");
  EXPECT_EQ(machine_key(m).find('\n'), std::string::npos);
}

// The same machine written differently (tables moved, numbers spelt otherwise) is the same
// value with the same text form; a changed number changes both.
TEST(Machines, CanonicalFormIgnoresLayout) {
  const std::string path = machines_dir() + "/h100-sxm5.toml";
  std::string text = testing::read_text(path);
  const Machine original = load("h100-sxm5");

  const auto limits_at = text.find("[limits]");
  const auto cluster_at = text.find("[cluster]");
  ASSERT_LT(limits_at, cluster_at);
  std::string moved = text.substr(0, limits_at) + text.substr(cluster_at) + "\n" +
                      text.substr(limits_at, cluster_at - limits_at);
  const std::string clock = "value = 1.83e9,";
  ASSERT_NE(moved.find(clock), std::string::npos);
  moved.replace(moved.find(clock), clock.size(), "value = 1_830_000_000.0,");
  auto relaid = parse_machine(moved, path);
  ASSERT_TRUE(relaid.ok()) << relaid.error().format();
  EXPECT_EQ(*relaid, original);
  EXPECT_EQ(machine_key(*relaid), machine_key(original));

  std::string changed = text;
  changed.replace(changed.find("value = 3.35e12"), 15, "value = 3.36e12");
  auto other = parse_machine(changed, path);
  ASSERT_TRUE(other.ok()) << other.error().format();
  EXPECT_FALSE(*other == original);
  EXPECT_NE(machine_key(*other), machine_key(original));
}

TEST(Machines, UnknownNameListsTheMachines) {
  auto m = find_machine("h100", machines_dir());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().message, "unknown machine 'h100'; " + machines_dir() +
                                   " has: a100-sxm4-80g, b200, h100-pcie, h100-sxm5, h200, rtx4090");
  auto missing = load_machines(machines_dir() + "/no-such-dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, machines_dir() + "/no-such-dir: not a directory of machine files");
}

TEST(Machines, DefaultDirectoryIsTheSourceTree) {
  EXPECT_EQ(std::filesystem::canonical(default_machines_dir()),
            std::filesystem::canonical(machines_dir()));
}

// docs/machines.md documents every shipped machine, number by number.
TEST(Machines, EveryMachineIsDocumented) {
  const std::string doc = testing::read_text(testing::source_dir() / "docs/machines.md");
  for (const std::string& name : machine_names(machines_dir())) {
    EXPECT_NE(doc.find("### `" + name + "`"), std::string::npos) << name;
    EXPECT_NE(doc.find("| `" + name + "` |"), std::string::npos) << name;
  }
}

TEST(Units, NamesRoundTrip) {
  for (Unit u : kAllUnits) EXPECT_EQ(parse_unit(unit_name(u)), u);
  EXPECT_FALSE(parse_unit("mufu").has_value());
  EXPECT_EQ(flop_per_op(Unit::tensor_core), 1);
  EXPECT_EQ(flop_per_op(Unit::fma), 2);
  EXPECT_EQ(flop_per_op(Unit::sfu), 1);
}

TEST(Units, FormatNumberRoundTrips) {
  for (double x : {1.83e9, 3.35e12, 16.0, 0.1, 185.5e12, 1.0 / 3})
    EXPECT_EQ(std::stod(format_number(x)), x);
  EXPECT_EQ(format_number(16), "16");
  EXPECT_EQ(format_number(1.83e9), "1.83e+09");
}

}  // namespace
}  // namespace napkin::arch
