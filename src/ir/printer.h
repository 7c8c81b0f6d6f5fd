// SPDX-License-Identifier: Apache-2.0
// The canonical printer. print_diagram's output parses back to an equivalent Diagram (for any
// diagram the parser produced: equal up to the node order that recognition may change,
// ir::equivalent) and is a fixed point of print(parse(.)) for builder diagrams.
#pragma once

#include <cstdint>
#include <string>

#include "ir/ir.h"

namespace napkin::ir {

// Canonical .napkin text: axes, params, inputs, then one line per named value in node order
// (unnamed single-use nodes inlined as expressions), then outputs.
std::string print_diagram(const Diagram& d);

// One line naming the diagram by its sizes and a hash of its canonical text, e.g.
// "b=4 h=16 q=8192 k=8192 d=128 #3f2a9c1e": used in file headers and benchmark keys.
std::string diagram_key(const Diagram& d);

// FNV-1a 64-bit hash (stable across platforms) used for provenance headers.
std::uint64_t stable_hash(const std::string& text);

// Shortest decimal text that reads back to exactly `v` ("0.125", "1e-06", "inf", "-inf").
std::string format_number(double v);

}  // namespace napkin::ir
