// SPDX-License-Identifier: Apache-2.0
// The schedule: *how* a diagram runs on a memory hierarchy, as a small printable value.
//
// For each level below gmem (named as the machine files name them: "smem", "rmem", ...;
// outermost first), the schedule says which axes are tiled (group partition, tile size),
// which are streamed (stream partition, chunk size and accumulator), which tensors are kept
// at the level and in which dtype, how many groups of the level run concurrently inside one
// unit of the level above, the pipeline stages, the cluster size, and how the level's
// concurrent groups overlap their tensor-core work with the rest (overlap=, Hopper warpgroups).
//
// Canonical text (one line; docs/streaming.md has the grammar):
//
//   smem{tile b=1 h=1 q=128; stream k=128:online_softmax; keep Q K:fp8e4m3 V; stages=2} rmem{tile q=64; groups=3}
//
// Clauses print in the fixed order tile, stream, keep, groups, stages, cluster, overlap; a
// clause at its default (empty list, 1, or no overlap named) is left out; axes and tensors keep the order written, which
// is the loop order. to_string(parse(t)) == t for canonical t, and parse(to_string(s)) == s.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/ir.h"
#include "sched/streaming.h"
#include "support/diagnostic.h"
#include "support/dtype.h"

namespace napkin::sched {

struct TiledAxis {
  std::string axis;
  std::int64_t tile = 0;  // elements of the axis per group
  bool operator==(const TiledAxis&) const = default;
};

struct StreamedAxis {
  std::string axis;
  std::int64_t chunk = 0;                 // elements of the axis per step
  std::vector<Accumulator> accumulators;  // as the analysis finds them; empty for a woven axis
  bool operator==(const StreamedAxis&) const = default;
};

// A tensor (an input or named value) held at a level, in `dtype` when set (quantization;
// transfers into the level and the memory it takes there are counted in that dtype), else in
// its diagram dtype.
struct Residency {
  std::string tensor;
  std::optional<DType> dtype;
  bool operator==(const Residency&) const = default;
};

// How a level's groups overlap tensor-core work with the rest (softmax, exp, rescale):
// sequential (one after the other in each group), intra_warpgroup (a group's softmax of one
// chunk under its own next GEMM), pingpong (two groups take turns: one's softmax under the
// other's GEMMs; needs groups >= 2).
enum class Overlap : std::uint8_t { sequential, intra_warpgroup, pingpong };
std::string_view overlap_name(Overlap o);
std::optional<Overlap> parse_overlap(std::string_view name);

struct LevelSchedule {
  std::string level;  // "smem", "rmem", ...; never "gmem"
  std::vector<TiledAxis> tiles;
  std::vector<StreamedAxis> streams;
  std::vector<Residency> keep;
  int groups = 1;   // groups of this level running concurrently in one unit of the level above
                    // (for the first level: per SM, e.g. CTAs or warpgroups per SM)
  int stages = 1;   // pipeline stages (buffers in flight) for the streamed chunks
  int cluster = 1;  // groups that share this level through a thread-block cluster
  std::optional<Overlap> overlap;  // unnamed: the cost model's perfect overlap (roofline)
  bool operator==(const LevelSchedule&) const = default;
};

struct Schedule {
  std::vector<LevelSchedule> levels;  // outermost (just below gmem) first
  bool operator==(const Schedule&) const = default;
  const LevelSchedule* find(std::string_view level) const;
};

// The canonical one-line text form.
std::string to_string(const Schedule& s);

// Parses the text form without a diagram (syntax only: structure, integers, accumulator and
// dtype names, no clause twice in a level). Errors are located in the text as a command-line
// argument: file "--schedule", line 1, the column of the offending token, with the token
// expected and the one found, e.g.
//   --schedule:1:12: error: expected '=' after axis 'q' in 'tile', found ';'
Result<Schedule> parse_schedule_text(std::string_view text);

// Parses and validates against `d` (located as above). Validation: level names are unique and
// not gmem; axes exist, each at most once per level; tile and chunk sizes, groups, stages and
// cluster are positive; a tile or chunk is no larger than the same axis's tile or chunk at an
// enclosing level; tiled axes are woven; streamed axes are streamed with exactly the
// accumulators analyse_streaming finds (or are woven, with none); kept tensors are named values
// and keep floating-point tensors in a floating-point dtype (others in their own).
Result<Schedule> parse_schedule(std::string_view text, const ir::Diagram& d);

// The same validation for a schedule built in C++ (messages without a location; the file is
// "schedule"). Returns the first problem, or nothing when the schedule is valid for d.
std::optional<Diagnostic> validate_schedule(const Schedule& s, const ir::Diagram& d);
std::optional<Diagnostic> validate_schedule(const Schedule& s, const ir::Diagram& d,
                                            const StreamingReport& report);

}  // namespace napkin::sched
