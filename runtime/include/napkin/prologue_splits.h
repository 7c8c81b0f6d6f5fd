// SPDX-License-Identifier: Apache-2.0
// How the prologue GEMM (napkin/gemm_prologue.h) splits each output tile's K range at launch.
// Host-only (no CUDA), so that the solver (search/kernel_solver.cpp) models the split the launch
// takes.
#pragma once

#include <algorithm>
#include <cstdint>

namespace napkin::gemm {

// As many units (tiles x splits) as the GPU holds CTAs at once, `resident` a SM (a memory-bound
// kernel needs several loads in flight on every SM, and a unit past the resident CTAs makes a
// second round), each split at least eight K tiles (a split's CTA pays its first loads' latency,
// and the tile's last split adds the partial tiles one round of L2 latency each: normalised
// linear attention's state GEMM, 16 tiles of 64 K tiles, ran 0.89x the time at 8 splits and 4
// stages of its 17 splits at 2 stages on the H100), at most 32; 1 where the tiles already fill
// the SMs.
inline int prologue_splits(int64_t tiles, int64_t k_tiles, int sms, int resident) {
  constexpr int64_t kMinKTiles = 8;
  if (tiles >= sms || k_tiles < 2 * kMinKTiles) return 1;
  const int64_t want = static_cast<int64_t>(sms) * std::max(1, resident) / tiles;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, k_tiles / kMinKTiles, 32})));
}

}  // namespace napkin::gemm
