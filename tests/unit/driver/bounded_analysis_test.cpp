// SPDX-License-Identifier: Apache-2.0
// Every analysis is bounded by the size of its input text, not by the axis sizes it names:
// commands that only model (analyze, pseudocode, derive, compare, report) answer at once for
// axes of 10^11, where they once looped over the pieces of each axis (issue #19).
#include <chrono>

#include <gtest/gtest.h>

#include "common/test_util.h"

namespace napkin {
namespace {

using testing::run_napkin;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(BoundedAnalysis, HugeAxesAnswerAtOnce) {
  const std::string out = (std::filesystem::temp_directory_path() / "napkin_bounded_report").string();
  for (const std::string& args :
       {std::string("analyze examples/attention.napkin --machine h100-sxm5 --set q=99999999999"),
        std::string("pseudocode examples/attention.napkin --machine h100-sxm5 --set q=99999999999"),
        std::string("analyze examples/attention.napkin --machine h100-sxm5 --set q=100000000"),
        std::string("analyze examples/matmul.napkin --machine h100-sxm5 --set m=1000000000"),
        std::string("analyze examples/causal.napkin --machine h100-sxm5 --set q=99999999 --set k=99999999"),
        std::string("derive examples/attention.napkin --machine h100-sxm5 --set q=99999999999"),
        std::string("compare examples/sliding_window.napkin --machines h100-sxm5,a100-sxm4-80g --dtypes bf16 "
                    "--set k=99999999999"),
        "report examples/attention.napkin --machine h100-sxm5 --set q=99999999999 -o " + out}) {
    const auto start = std::chrono::steady_clock::now();
    auto r = run_napkin(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    EXPECT_LT(seconds_since(start), 5.0) << args;
  }
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace napkin
