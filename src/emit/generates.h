// SPDX-License-Identifier: Apache-2.0
// What napkin build generates, as the planner asks it (plan::PlanOptions::generates): each
// family's recogniser, so that derive plans only kernels that build emits.
#pragma once

#include "plan/plan.h"
#include "support/diagnostic.h"

namespace napkin::emit {

// The recognisers of the kernel families' emitters, their refusals located in `src` (the
// diagram's text) as "line:column: why".
plan::Generates generates(SourceText src);

}  // namespace napkin::emit
