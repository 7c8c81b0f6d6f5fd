// SPDX-License-Identifier: Apache-2.0
// The search (derivation step 6): enumerate configurations, keep the feasible ones ranked by
// predicted time, and count the rejected ones by reason. Attention-shaped diagrams (rows and
// one streamed axis) go through the configuration solver; others through the cost model over
// candidate schedules (tile and chunk sizes at smem, with l2 above).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cost/cost.h"
#include "search/configure.h"

namespace napkin::search {

struct SearchOptions {
  std::vector<std::int64_t> rows = {64, 128, 192, 256};       // w_q
  std::vector<std::int64_t> chunks = {32, 64, 96, 128, 176, 256};
  std::vector<int> warpgroups = {1, 2, 3, 4};
  std::vector<int> stages = {1, 2, 3};
  std::vector<Overlap> overlaps = {Overlap::sequential, Overlap::intra_warpgroup, Overlap::pingpong};
  double overhead = 0.5;                     // allowance on non-tensor work (the paper's 50 %)
  std::optional<DType> accumulator_dtype;
  std::vector<std::int64_t> subloops;
  RowLayout row_layout = RowLayout::thread;  // the paper's one row per thread by default
};

// One ranked candidate: a schedule with its predicted time, from either path.
struct Ranked {
  sched::Schedule schedule;
  double predicted_time_s = 0;
  double tflops = 0;
  std::string bound;
  int groups_per_sm = 1;                     // consumer warpgroups (solver) or CTAs per SM
  std::optional<Configuration> configuration;  // set on the solver path
  std::string summary;                       // one line: "w_q=128 s_k=64 N=3 stages=2 pingpong"
};

struct Rejection {
  std::string candidate;  // the same one-line summary
  std::string reason;
};

struct SearchResult {
  std::string method;                        // "configuration solver" or "cost model over schedules"
  std::vector<Ranked> ranked;                // feasible, fastest first
  std::map<std::string, int> rejected;       // reason class ("smem", "registers", ...) -> count
  std::vector<Rejection> rejections;         // every rejected candidate, for -v
  int considered = 0;
};

// The class a rejection reason is counted under (SearchResult::rejected): its text before the
// first ':' ("smem", "registers", "divisibility", ...).
std::string reason_class(const std::string& reason);

// Pre: report = analyse_streaming(d). Errors only for machines lacking what the diagram needs.
Result<SearchResult> search(const ir::Diagram& d, const sched::StreamingReport& report,
                            const arch::Machine& m, const SearchOptions& options = {});

}  // namespace napkin::search
