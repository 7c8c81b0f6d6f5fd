// SPDX-License-Identifier: Apache-2.0
// Pseudocode: the algorithm a schedule describes, written out as the paper's section 5.1 does
// by hand (init / loop / finalize per level, every variable listed with its shape, dtype,
// level and bytes). docs/pseudocode.md shows the output and states the rules.
//
// The loop nest is derived, not templated:
//  - one loop per scheduled level, outermost first, over the groups of its tiled axes
//    (`parallel for` where the groups run concurrently: on the SMs for smem, inside the
//    enclosing group below it), with the tensors the level holds loaded at its start;
//  - inside the innermost group, the computation of the normalised diagram (ir/normalise.h):
//    what does not depend on the streamed axis before the loop, `init` of every fold over it,
//    `for each chunk` with the chunk's loads and the body in node order, then `finalize` and
//    the stores. The accumulator recurrences come from the structure the streaming analysis
//    accepts (sched/streaming.h): a fold over a local value adds (`+=`), a max fold keeps a
//    running max, a fold over exp(x - F) of a running stabiliser F is rescaled by
//    alpha = exp(F_old - F_new) (online softmax, logsumexp), and a folded factor multiplied
//    or divided into the folded operand is deferred to finalize (normalised contraction,
//    the softmax divisor).
//  - A diagram or schedule without a streamed reduction gives a plain tiled loop.
//
// Output is deterministic and opens with a provenance comment (napkin version, file and
// ir::diagram_key, the canonical schedule, the machine). Text is ASCII: `<-` assigns, `*`
// multiplies, `A @ B over k` contracts A and B over k, `sum_k(x)` and `max_k(x)` reduce.
#pragma once

#include <string>
#include <vector>

#include "arch/machine.h"
#include "ir/ir.h"
#include "sched/schedule.h"

namespace napkin::emit {

// One scheduled level's live memory per group at the peak, as a model counts it, with the
// capacity it is judged against. The caller supplies it, since it knows which model judged the
// schedule (and emit does not depend on search): the cost model's (cost::LevelCost::peak_bytes,
// what analyze prints) or derive's configuration solver's. The variable table lists every variable, and they are not all live at
// once; this is the one count the fit is judged by.
struct LiveMemory {
  std::string level;
  double peak_bytes = 0;
  double capacity_bytes = 0;
  std::string model;  // who counted it: "the cost model's count, as analyze prints it"
};

// Pre: d verified; s valid for d (sched::validate_schedule). `machine` (optional) adds its name
// to the provenance and each level's capacity per group under the variable table; `live`
// (optional) adds each level's live memory at the peak, its model and the verdict. Returns the
// provenance comment, the loop nest and the variable table (name, shape at the level's extents,
// dtype, level, bytes per group, role), as aligned plain text.
std::string pseudocode_text(const ir::Diagram& d, const sched::Schedule& s, const arch::Machine* machine,
                            const std::vector<LiveMemory>& live = {});

// The same as Markdown: the provenance and loop nest in a fenced code block, then the variable
// table as a Markdown table.
std::string pseudocode_markdown(const ir::Diagram& d, const sched::Schedule& s,
                                const arch::Machine* machine, const std::vector<LiveMemory>& live = {});

}  // namespace napkin::emit
