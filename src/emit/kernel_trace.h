// SPDX-License-Identifier: Apache-2.0
// A measured kernel timeline: the text that bench/attention/trace_tiles.cu prints (the
// attention kernel's own clock at each event, runtime/include/napkin/device/trace.h) read
// into the lanes of emit::draw_timeline_svg, so the measured timeline is drawn as napkin draws
// its predicted one (`napkin draw-trace`; docs/drawings.md).
#pragma once

#include <string>
#include <vector>

#include "emit/svg.h"
#include "support/diagnostic.h"

namespace napkin::emit {

struct KernelTrace {
  std::string title;                // from the run's header line, e.g. "d128 N128 WGs2 causal=0 ..."
  double clock_mhz = 0;             // the SM clock the cycles are converted with
  std::vector<TimelineLane> lanes;  // one per consumer warpgroup (per CTA in an SM's block)
};

// Reads timeline number `section` (0-based: the text may hold several runs, each printing a
// "CTA 0, tiles ..." block of "  CYCLES  WG<k>  EVENT" lines, and, traced with
// NAPKIN_FWD_TRACE_SM0, a "SM 0, every resident CTA ..." block of "  CYCLES  CTA<k>  EVENT"
// lines) and the "SM clock: N MHz" line before it; `clock_mhz` > 0 overrides that line. A lane
// per warpgroup, or per CTA in an SM's block; each span runs from one event of a lane to its
// next and is named by the pair (e.g. "softmax": S ready -> softmax done).
// Errors name the file, line and column: no such section, a malformed event line, an unknown
// event, no clock.
Result<KernelTrace> parse_kernel_trace(const SourceText& src, int section, double clock_mhz = 0);

}  // namespace napkin::emit
