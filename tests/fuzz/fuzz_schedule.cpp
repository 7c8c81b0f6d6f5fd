// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: any text given to the schedule parser yields a schedule or a located
// error, never a crash, hang or sanitizer report. A parsed schedule prints and re-parses equal;
// one valid for a diagram (attention, matmul) gets an estimate or an error, and its estimate
// lies between the time of its bound unit alone and the no-overlap sum, and it prints as
// pseudocode.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "arch/load.h"
#include "cost/cost.h"
#include "emit/pseudocode.h"
#include "ir/parser.h"
#include "sched/schedule.h"

namespace {

using namespace napkin;

struct Fixture {
  std::vector<ir::Diagram> diagrams;
  arch::Machine machine;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    for (const char* text : {
             "axes b=1 h=2 q=256 k=256 d=64\nin Q[b h q d] bf16\nin K[b h k d] bf16\nin V[b h k d] bf16\n"
             "S[b h q k] = contract(Q, K over d) * 0.125\nP[b h q k] = softmax(S over k)\n"
             "O[b h q d] = contract(P, V over k) as bf16\nout O\n",
             "axes m=512 k=256 n=128\nin A[m k] bf16\nin B[k n] bf16\nC[m n] = contract(A, B over k) as bf16\nout C\n"}) {
      auto p = ir::parse_diagram({"fixture.napkin", text});
      if (!p) __builtin_trap();
      x.diagrams.push_back(p->diagram);
    }
    auto m = arch::find_machine("h100-sxm5", arch::default_machines_dir());
    if (!m) __builtin_trap();
    x.machine = *m;
    return x;
  }();
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto s = sched::parse_schedule_text(text);
  if (!s) {
    (void)s.error().format();
    return 0;
  }
  auto again = sched::parse_schedule_text(sched::to_string(*s));
  if (!again || !(*again == *s)) __builtin_trap();  // round trip broken
  const Fixture& f = fixture();
  for (const ir::Diagram& d : f.diagrams) {
    auto valid = sched::parse_schedule(text, d);
    if (!valid) {
      (void)valid.error().format();
      continue;
    }
    auto e = cost::estimate(d, *valid, f.machine);
    if (!e) continue;
    const double t = e->predicted_time_s, all = e->sequential_time_s;
    if (!std::isfinite(t) || t < 0 || t > all * (1 + 1e-9)) __builtin_trap();
    (void)emit::pseudocode_text(d, *valid, &f.machine);
  }
  return 0;
}
