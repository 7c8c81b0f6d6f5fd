// SPDX-License-Identifier: Apache-2.0
// The executor shares the reference's NaN semantics (issue #19): one NaN in Q makes its row
// of O NaN through the streamed online softmax too, and NaN agrees with NaN.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "exec/executor.h"
#include "ir/parser.h"
#include "reference/interpreter.h"
#include "sched/schedule.h"

namespace napkin::exec {
namespace {

TEST(Nan, StreamedSoftmaxPropagatesItLikeTheReference) {
  auto p = ir::parse_diagram(SourceText{"nan.napkin",
      "axes q=3 k=6 d=2\nin Q[q d] f32\nin K[k d] f32\nin V[k d] f32\n"
      "m = max(contract(Q, K over d) over k)\n"
      "O = contract(softmax(contract(Q, K over d) over k), V over k)\nout O\nout m\n"});
  ASSERT_TRUE(p.ok()) << p.error().format();
  const ir::Diagram& d = p->diagram;
  reference::TensorMap in = reference::random_inputs(d, 3);
  in.at("Q").data[2] = std::numeric_limits<double>::quiet_NaN();  // row q = 1
  auto want = reference::evaluate(d, in);
  ASSERT_TRUE(want.ok());
  for (const char* schedule : {"smem{tile q=1; stream k=2:max+online_softmax}", "smem{tile q=2; stream k=4:max+online_softmax}"}) {
    auto s = sched::parse_schedule(schedule, d);
    ASSERT_TRUE(s.ok()) << s.error().format();
    auto run = execute(d, s.value(), in);
    ASSERT_TRUE(run.ok()) << run.error().format();
    const Comparison c = compare(run->outputs, want.value());
    EXPECT_LE(c.max_abs_error, 1e-12) << schedule;
    const reference::Tensor& o = run->outputs.at("O");  // [q d]
    for (std::size_t i = 0; i < o.data.size(); ++i) EXPECT_EQ(std::isnan(o.data[i]), i / 2 == 1) << schedule << " " << i;
    EXPECT_TRUE(std::isnan(run->outputs.at("m").data[1])) << schedule;
  }
}

}  // namespace
}  // namespace napkin::exec
