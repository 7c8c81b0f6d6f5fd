// SPDX-License-Identifier: Apache-2.0
#include "attention_fwd_impl.h"

namespace napkin::detail {
NAPKIN_INSTANTIATE_FWD(cutlass::half_t, 256)
}  // namespace napkin::detail
