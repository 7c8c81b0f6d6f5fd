// SPDX-License-Identifier: Apache-2.0
// Normalisation (derivation step 1): composites expanded into primitive ops, so that the
// streamability analysis (src/sched/streaming.h) sees only reductions, contractions and
// elementwise maps. docs/streaming.md lists every expansion.
//
//   softmax(x over A)    m = max(x over A); m0 = select(m == -inf, 0, m)
//                        e = exp(x - m0);    z = sum(e over A)
//                        y = e / select(z == 0, 1, z)
//   logsumexp(x over A)  m, m0, e, z as above;  y = m0 + log(z)
//   rmsnorm(x over A)    y = x / exp(0.5 * log(sum(x * x over A) / n + eps))
//   layernorm(x over A)  c = x - sum(x over A) / n
//                        y = c / exp(0.5 * log(sum(c * c over A) / n + eps))
//   (n is the number of elements of A; sqrt is written exp(0.5 * log(.)))
//
// The two `select` guards reproduce ir.h's rule for a slice that is entirely -inf (softmax
// gives 0, logsumexp -inf) without NaN: the "safe max" m0 is 0 there, so exp(-inf - 0) = 0,
// z = 0, and the guarded divisor 1 gives 0 / 1 = 0. On any slice with a finite max they are
// the identity (z >= 1 there). FlashAttention guards its running max and final sum the same
// way.
#pragma once

#include <vector>

#include "ir/ir.h"

namespace napkin::ir {

struct Normalised {
  Diagram diagram;
  // origin[i] is the node of the input diagram that node i of `diagram` comes from (the
  // composite it expands, or the node it copies).
  std::vector<NodeId> origin;
};

// Pre: d is verified. Post: the result is verified (a broken post-condition is a checked
// bug), contains no composite op, has the same axes, inputs, outputs and named values (each
// composite's name and location move to the last node of its expansion, whose type equals
// the composite's), and agrees with d under the reference interpreter up to rounding (the
// expansions are exact rewrites except sqrt, computed as exp(0.5 * log(.))). A diagram with
// no composites comes back equal. Idempotent.
Normalised normalise_with_origin(const Diagram& d);
Diagram normalise(const Diagram& d);

}  // namespace napkin::ir
