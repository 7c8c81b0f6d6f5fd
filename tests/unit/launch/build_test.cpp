// SPDX-License-Identifier: Apache-2.0
// napkin build without a GPU: the files it writes, the manifest's contract, the build cache
// (a stand-in nvcc counts its calls), refusals, and napkin run's checks before any GPU work.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "launch/build.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string example(const std::string& stem) { return (testing::source_dir() / "examples" / (stem + ".napkin")).string(); }

std::string write_diagram(const TempDir& tmp, const std::string& text) {
  const fs::path p = tmp.path / "d.napkin";
  std::ofstream(p) << text;
  return p.string();
}

TEST(Build, WritesTheKernelAndAManifestOfItsInputsParamsAndEstimate) {
  TempDir tmp("napkin_build_manifest");
  launch::BuildOptions o;
  o.machine = "h100-sxm5";
  o.out_dir = (tmp.path / "k").string();
  o.compile = false;
  const auto r = launch::build({example("sliding_window"), {}}, o);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(tmp.path / "k" / "kernel.cu"));
  const json m = json::parse(testing::read_text(tmp.path / "k" / "manifest.json"));
  EXPECT_EQ(m["family"], "attention");
  EXPECT_EQ(m["head_dim"], 128);
  EXPECT_EQ(m["inputs"].size(), 3u);
  EXPECT_EQ(m["inputs"][0]["name"], "Q");
  EXPECT_EQ(m["inputs"][0]["axes"][2]["role"], "query");
  EXPECT_EQ(m["outputs"][0]["dtype"], "bf16");
  EXPECT_EQ(m["params"][0]["name"], "w");
  EXPECT_EQ(m["params"][0]["value"], 4096.0);
  EXPECT_TRUE(m["predicted_time_us"].is_number());
  EXPECT_EQ(m["diagram"]["hash"].get<std::string>().size(), 16u);
  EXPECT_NE(r.out.find("mask bounded per block (skips blocks)"), std::string::npos) << r.out;
}

// A plan of fewer kernels built into the directory of a longer one leaves none of its units
// behind, nor the earlier build's library (which would be loaded beside the new sources).
TEST(Build, ARebuildRemovesTheUnitsOfALongerPlan) {
  TempDir tmp("napkin_build_stale");
  launch::BuildOptions o;
  o.machine = "h100-sxm5";
  o.out_dir = (tmp.path / "k").string();
  o.compile = false;
  ASSERT_EQ(launch::build({example("gelu_mlp"), {}}, o).exit_code, 0);
  ASSERT_TRUE(fs::exists(tmp.path / "k" / "kernel_1.cu"));
  std::ofstream(tmp.path / "k" / "libkernel.so") << "an earlier build's library";
  ASSERT_EQ(launch::build({example("matmul"), {}}, o).exit_code, 0);
  EXPECT_TRUE(fs::exists(tmp.path / "k" / "kernel_0.cu"));
  EXPECT_FALSE(fs::exists(tmp.path / "k" / "kernel_1.cu"));
  EXPECT_FALSE(fs::exists(tmp.path / "k" / "libkernel.so"));
}

TEST(Build, ASecondBuildComesFromTheCache) {
  TempDir tmp("napkin_build_cache");
  // A stand-in nvcc: writes its -o file and counts its calls.
  const fs::path nvcc = tmp.path / "fake_nvcc.sh";
  {
    std::ofstream f(nvcc);
    f << "#!/bin/sh\necho call >> '" << (tmp.path / "calls").string()
      << "'\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then echo so > \"$2\"; fi; shift; done\n";
  }
  fs::permissions(nvcc, fs::perms::owner_all);
  ::setenv("NAPKIN_NVCC", nvcc.c_str(), 1);
  ::setenv("NAPKIN_CACHE", (tmp.path / "cache").c_str(), 1);
  ::setenv("NAPKIN_CUTLASS_INCLUDE", (tmp.path / "cutlass").c_str(), 1);
  fs::create_directories(tmp.path / "cutlass" / "cute");
  std::ofstream(tmp.path / "cutlass" / "cute" / "tensor.hpp") << "";
  launch::BuildOptions o;
  o.machine = "h100-sxm5";
  o.out_dir = (tmp.path / "a").string();
  const auto first = launch::build({example("alibi"), {}}, o);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.out.find("compiled"), std::string::npos) << first.out;
  o.out_dir = (tmp.path / "b").string();
  const auto second = launch::build({example("alibi"), {}}, o);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.out.find("from the build cache"), std::string::npos) << second.out;
  EXPECT_TRUE(fs::exists(tmp.path / "b" / "libkernel.so"));
  EXPECT_EQ(testing::read_text(tmp.path / "calls"), "call\n");  // nvcc ran once
  ::unsetenv("NAPKIN_NVCC");
  ::unsetenv("NAPKIN_CACHE");
  ::unsetenv("NAPKIN_CUTLASS_INCLUDE");
}

TEST(Build, RefusesWhatIsNotAttentionAndChecksItsArguments) {
  TempDir tmp("napkin_build_refuse");
  launch::BuildOptions o;
  o.machine = "h100-sxm5";
  o.out_dir = (tmp.path / "k").string();
  o.compile = false;
  // A GEMM-family diagram is a plan: one unit per kernel and the plan's own.
  const auto matmul = launch::build({example("matmul"), {}}, o);
  EXPECT_EQ(matmul.exit_code, 0) << matmul.err;
  EXPECT_TRUE(fs::exists(tmp.path / "k" / "kernel.cu"));
  EXPECT_TRUE(fs::exists(tmp.path / "k" / "kernel_0.cu"));
  // What no family generates is refused with the reason.
  const auto paper = launch::build({example("attention_hopper_paper"), {}}, o);
  EXPECT_EQ(paper.exit_code, 1);
  EXPECT_NE(paper.err.find("one dtype"), std::string::npos) << paper.err;
  o.out_dir = (tmp.path / "k2").string();
  const auto f32 = launch::build({write_diagram(tmp, "axes m=64 k=64 n=64\nin A[m k] f32\nin B[k n] f32\nC = contract(A, B over k)\nout C\n"), {}}, o);
  EXPECT_EQ(f32.exit_code, 1);
  EXPECT_NE(f32.err.find("bf16 or two f16"), std::string::npos) << f32.err;
  // The kernels are sm_90a code: a machine of another compute capability is refused, with why.
  for (const char* machine : {"a100-sxm4-80g", "rtx4090", "b200"}) {
    launch::BuildOptions other = o;
    other.machine = machine;
    other.out_dir = (tmp.path / machine).string();
    const auto r = launch::build({example("attention"), {}}, other);
    EXPECT_EQ(r.exit_code, 1) << machine;
    EXPECT_NE(r.err.find("napkin generates Hopper kernels (sm_90a"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(tmp.path / machine / "kernel.cu")) << machine;
  }
  o.out_dir = (tmp.path / "k").string();
  // napkin run with a library that is not this diagram's: refused before any GPU work.
  launch::BuildOptions b = o;
  ASSERT_EQ(launch::build({example("causal"), {}}, b).exit_code, 0);
  launch::RunOptions r;
  r.machine = "h100-sxm5";
  r.library = (tmp.path / "k" / "missing.so").string();
  const auto run = launch::run({example("causal"), {}}, r);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("cannot load"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace napkin

// napkin run hands a kernel the values the reference interpreter computes with: each input
// rounded to nearest in its dtype. (It once truncated f32's bits to bf16, so the kernel saw
// inputs up to an ulp away from the reference's: ~1 % relative L2 error in attention's output.)
TEST(Run, KernelInputsAreTheReferencesRoundedInputs) {
  napkin::reference::Tensor x;
  x.sizes = {8};
  // 1 + 2^-8 + 2^-10 rounds up in bf16 (truncation goes down); the others cover sign, ties,
  // f16's range and subnormals.
  x.data = {1.0 + 1.0 / 256 + 1.0 / 1024, -(1.0 + 1.0 / 256 + 1.0 / 1024), 1.0 + 1.0 / 256, 0.1, -3.14159,
            70000.0, 1e-6, 0.0};
  for (napkin::DType t : {napkin::DType::bf16, napkin::DType::f16, napkin::DType::f32}) {
    const napkin::launch::HostTensor h = napkin::launch::to_host("x", t, x);
    for (std::size_t i = 0; i < x.data.size(); ++i)
      EXPECT_EQ(napkin::launch::host_value(h, i), napkin::round_to_dtype(x.data[i], t))
          << napkin::dtype_name(t) << " element " << i << " (" << x.data[i] << ")";
  }
}
