// SPDX-License-Identifier: Apache-2.0
// Streamability analysis (derivation step 2): for every axis of a diagram, whether the
// computation is woven over it (it may be tiled: group partition), streamable along it (it
// may be chunked: stream partition) with which accumulator, or neither, and why.
//
// The analysis runs on the normalised diagram (ir/normalise.h) and recognises accumulators
// by structure, never by name: for each axis it propagates one state per node (invariant,
// local, folded, shifted, scaled, whole; docs/streaming.md defines them) and accepts the axis
// when every output is invariant, local or folded. The catalogue:
//
//   add                      sums and contractions over the axis (dot product, matmul)
//   max                      running max
//   logsumexp                running max mu and sum z rescaled by exp(mu_old - mu_new)
//   normalised_contraction   (o, z) <- (o + sum a1(x) y, z + sum a2(x)); o / b(z) at the end
//   online_softmax           running max, rescaled running sum and rescaled contraction
//                            (FlashAttention)
//
// Closure (the paper's Theorem 1): ops woven over the axis may be pre-composed (masks,
// biases, scales, QK^T before softmax) and every other axis is woven through.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/ir.h"
#include "ir/normalise.h"

namespace napkin::sched {

// The accumulator catalogue. A streamed axis carries one or more (a tuple of independent
// accumulators, e.g. add+max when two outputs reduce the axis separately).
enum class Accumulator : std::uint8_t { add, max, logsumexp, normalised_contraction, online_softmax };
std::string_view accumulator_name(Accumulator a);  // "online_softmax", ...
std::optional<Accumulator> parse_accumulator(std::string_view name);
// "add+max"; "none" for an empty list.
std::string accumulators_text(const std::vector<Accumulator>& accs);

enum class AxisKind : std::uint8_t {
  woven,     // no op reduces over the axis: it may be tiled (and trivially chunked)
  streamed,  // some op reduces over it and an accumulator exists: it may be chunked
  none,      // reduced, and no accumulator in the catalogue applies: neither
};
std::string_view axis_kind_name(AxisKind k);  // "woven", "streamed", "none"

struct AxisStreaming {
  ir::AxisId axis = -1;
  AxisKind kind = AxisKind::none;
  std::vector<Accumulator> accumulators;  // streamed only: sorted, no duplicates, non-empty
  // One sentence naming the ops involved: woven: that nothing reduces over the axis;
  // streamed: which reductions form the accumulator; none: why streaming is refused.
  std::string reason;
  // Inputs (by name, in node order) that have the axis (woven over it) and that lack it. An
  // input lacking a tiled axis is re-read once per tile (the cost model's broadcast term):
  // for attention's q these are K and V.
  std::vector<std::string> woven_inputs;
  std::vector<std::string> broadcast_inputs;
  // The reductions and contractions over the axis (ids in StreamingReport::normalised).
  std::vector<ir::NodeId> folds;
  std::vector<std::string> fold_labels;  // parallel to folds: "max over k in softmax 'P'"
};

struct StreamingReport {
  ir::Normalised normalised;      // the diagram the analysis ran on, with node origins
  std::vector<AxisStreaming> axes;  // one per diagram axis, in axis order
  const AxisStreaming& of(ir::AxisId a) const { return axes.at(static_cast<std::size_t>(a)); }
};

// Pre: d is verified (composites allowed: it is normalised first). Post: one entry per axis;
// an axis is woven iff no node reachable from an output reduces over it.
StreamingReport analyse_streaming(const ir::Diagram& d);

// The report as text, one line per axis: "k: streamed online_softmax: <reason>", then the
// woven/broadcast inputs. Deterministic; used by golden tests and `napkin analyze`.
std::string report_text(const StreamingReport& r);

}  // namespace napkin::sched
