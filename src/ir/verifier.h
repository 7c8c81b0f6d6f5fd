// SPDX-License-Identifier: Apache-2.0
// The verifier: checks every invariant a Diagram promises (see ir.h) and finds the problems
// that are not type errors (no outputs, unused inputs and values).
#pragma once

#include <vector>

#include "ir/ir.h"

namespace napkin::ir {

// Returns the warnings (unused inputs and values) on success, or the first error. `source`
// (may be null) supplies the lines shown under located messages.
Result<std::vector<Diagnostic>> verify(const Diagram& d, const SourceText* source);

}  // namespace napkin::ir
