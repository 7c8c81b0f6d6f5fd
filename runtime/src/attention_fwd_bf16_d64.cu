// SPDX-License-Identifier: Apache-2.0
#include "attention_fwd_impl.h"

namespace napkin::detail {
NAPKIN_INSTANTIATE_FWD(cutlass::bfloat16_t, 64)
}  // namespace napkin::detail
