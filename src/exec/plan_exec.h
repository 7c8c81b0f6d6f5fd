// SPDX-License-Identifier: Apache-2.0
// The CPU executor of a kernel plan (plan/plan.h): the kernels run in order over one map from
// tensor name to tensor, each intermediate stored in the dtype and order its boundary gives
// (rounded as the GPU stores it). A kernel with a streamed schedule (attention) runs its loop
// nest through exec::execute, a GEMM its tiled loop nest (tiles of its M and N axes, chunks of
// its K axis); row and elementwise kernels run through the reference interpreter.
//
//   auto r = exec::execute_plan(derivation.chosen, reference::random_inputs(d, 7));
//   // r->outputs agree with reference::evaluate(d, inputs) up to the plan's roundings
#pragma once

#include <string>
#include <vector>

#include "plan/plan.h"
#include "reference/interpreter.h"
#include "support/diagnostic.h"

namespace napkin::exec {

struct PlanExecution {
  reference::TensorMap outputs;         // by output name, as reference::evaluate(d, ...) gives them
  std::vector<std::string> nests;       // per kernel: the loop nest it ran, or "reference"
};

// Pre: p was derived for d. `inputs` as reference::evaluate(d, ...) takes them. Errors: a
// kernel's loop nest does not run (its message, naming the kernel).
Result<PlanExecution> execute_plan(const plan::Plan& p, const ir::Diagram& d, const reference::TensorMap& inputs);

}  // namespace napkin::exec
