// SPDX-License-Identifier: Apache-2.0
// Every analysis is bounded by the size of its input text, not by the axis sizes it names:
// commands that only model (analyze, pseudocode, derive, compare, report) answer at once for
// axes of 10^11, where they once looped over the pieces of each axis (issue #19).
#include <chrono>
#include <string>
#include <utility>
#include <vector>

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
  // Exit 1 where the only schedule of the default shape does not fit (K and V of 10^8 keys
  // exceed L2 at any tile): no estimate, at once.
  for (const auto& [args, exit_code] : std::vector<std::pair<std::string, int>>{
           {"analyze examples/attention.napkin --machine h100-sxm5 --set q=99999999999", 0},
           {"pseudocode examples/attention.napkin --machine h100-sxm5 --set q=99999999999", 0},
           {"analyze examples/attention.napkin --machine h100-sxm5 --set q=100000000", 0},
           {"analyze examples/matmul.napkin --machine h100-sxm5 --set m=1000000000", 0},
           {"analyze examples/causal.napkin --machine h100-sxm5 --set q=99999999 --set k=99999999", 1},
           {"derive examples/attention.napkin --machine h100-sxm5 --set q=99999999999", 0},
           {"compare examples/sliding_window.napkin --machines h100-sxm5,a100-sxm4-80g --dtypes bf16 --set k=99999999999", 0},
           {"report examples/attention.napkin --machine h100-sxm5 --set q=99999999999 -o " + out, 0}}) {
    const auto start = std::chrono::steady_clock::now();
    auto r = run_napkin(args);
    EXPECT_EQ(r.exit_code, exit_code) << args << "\n" << r.err;
    EXPECT_LT(seconds_since(start), 5.0) << args;
  }
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace napkin
