// SPDX-License-Identifier: Apache-2.0
// `napkin eval` reports the NaN and infinities of its inputs (as read, rounded to their dtype)
// and of its outputs, per tensor (issue #19): a NaN in Q is a NaN row of O, and says so.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "support/npy.h"

namespace napkin {
namespace {

using testing::run_napkin;

TEST(EvalNonFinite, CountsThemPerInputAndOutput) {
  const auto dir = std::filesystem::temp_directory_path() / ("napkin_eval_nan_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto napkin = dir / "a.napkin";
  std::ofstream(napkin) << "axes q=4 k=4 d=2\nin Q[q d] f16\nin K[k d] f32\nin V[k d] f32\n"
                           "O = contract(softmax(contract(Q, K over d) over k), V over k)\nout O\n";
  // Q row 1 holds a NaN; Q row 3 holds 1e6, +inf once rounded to f16.
  NpyArray q{{4, 2}, {0.1, 0.2, std::numeric_limits<double>::quiet_NaN(), 0.3, 0.5, 0.6, 1e6, 0.1}};
  ASSERT_TRUE(write_npy((dir / "q.npy").string(), q).ok());
  const std::string args = "eval '" + napkin.string() + "' -o '" + (dir / "out").string() +
                           "' --input Q='" + (dir / "q.npy").string() + "'";
  auto r = run_napkin(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("non-finite 4 of 8 (4 NaN; mean and rms of the rest)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  input Q (4, 2, f16): non-finite 2 of 8 (1 NaN, 1 +inf)\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("input K"), std::string::npos) << r.out;  // clean inputs stay quiet

  auto j = run_napkin(args + " --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["outputs"][0]["nan"], 4);
  EXPECT_EQ(doc["outputs"][0]["non_finite"], 4);
  bool saw_q = false;
  for (const auto& in : doc["inputs"]) {
    if (in["name"] != "Q") {
      EXPECT_EQ(in["non_finite"], 0) << in.dump();
      continue;
    }
    saw_q = true;
    EXPECT_EQ(in["nan"], 1);
    EXPECT_EQ(in["pos_inf"], 1);
  }
  EXPECT_TRUE(saw_q);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace napkin

namespace napkin {
namespace {

// `napkin eval --low-precision` writes FlashAttention's baseline (every node in its dtype, sums
// in f32): 1 + 2^-25 + 2^-25 is 1 + 2^-24 in f64 but 1 summed in f32, in order.
TEST(EvalLowPrecision, WritesTheBaselineBesideTheSpecification) {
  const auto dir = std::filesystem::temp_directory_path() / ("napkin_eval_low_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto napkin = dir / "a.napkin";
  std::ofstream(napkin) << "axes m=1 k=3\nin A[m k] bf16\nin B[k] bf16\nY = contract(A, B over k)\nout Y\n";
  const double tiny = std::ldexp(1.0, -25);
  NpyArray a{{1, 3}, {1.0, tiny, tiny}}, b{{3}, {1.0, 1.0, 1.0}};
  ASSERT_TRUE(write_npy((dir / "a.npy").string(), a).ok());
  ASSERT_TRUE(write_npy((dir / "b.npy").string(), b).ok());
  const std::string args = "eval '" + napkin.string() + "' --input A='" + (dir / "a.npy").string() + "' --input B='" +
                           (dir / "b.npy").string() + "' -o '";
  auto spec = run_napkin(args + (dir / "spec").string() + "'");
  auto low = run_napkin(args + (dir / "low").string() + "' --low-precision");
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  ASSERT_EQ(low.exit_code, 0) << low.err;
  EXPECT_NE(low.out.find("in low precision (FlashAttention's baseline: each node in its dtype, sums in f32)"), std::string::npos)
      << low.out;
  EXPECT_NE(spec.out.find(" in f64 ("), std::string::npos) << spec.out;
  auto ys = read_npy((dir / "spec" / "Y.npy").string());
  auto yl = read_npy((dir / "low" / "Y.npy").string());
  ASSERT_TRUE(ys.ok() && yl.ok());
  EXPECT_EQ(ys->data[0], 1.0 + 2 * tiny);
  EXPECT_EQ(yl->data[0], 1.0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace napkin
