// SPDX-License-Identifier: Apache-2.0
// Row-wise access to one warpgroup's WGMMA accumulator (a 64 x N f32 tile), and the online
// softmax that runs on it.
//
// For wgmma.m64nNk16 with f32 accumulators each thread holds N/2 values in the order
// ((2 cols, 2 rows, N/8 column blocks)): value i = c + 2*r + 4*nb sits at
//   row = 16 * warp_in_warpgroup + lane / 4 + 8 * r,
//   col = 8 * nb + 2 * (lane % 4) + c.
// So a thread owns two rows (r = 0, 1) and N/4 columns of each; a row is spread over the four
// lanes of a quad, and a row reduction is a local reduction plus two quad shuffles.
#pragma once

#include <cmath>
#include <cstdint>

namespace napkin::device {

// Index of the j-th of this thread's N/4 values in row r (j = c + 2 * nb).
__device__ __forceinline__ constexpr int acc_index(int r, int j) { return (j & 1) + 2 * r + 4 * (j >> 1); }
// Column (within the tile) of the j-th value, for a thread at `lane`.
__device__ __forceinline__ int acc_col(int lane, int j) { return 8 * (j >> 1) + 2 * (lane & 3) + (j & 1); }
// Row (within the warpgroup's 64) of row slot r, for warp `warp_in_wg` and `lane`.
__device__ __forceinline__ int acc_row(int warp_in_wg, int lane, int r) { return 16 * warp_in_wg + (lane >> 2) + 8 * r; }

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// 2^x on the special-function unit (ex2.approx: 2 ulp, -inf -> +0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax state of two rows per thread (streamed along the key axis).
// The scale is folded into the exponent: p = 2^(s * scale_log2 - m * scale_log2).
//
// kConditionalRescale (FlashAttention-4's trick): a row's running max moves only when the row
// has grown by more than 2^kRescaleThresholdLog2 since it was last set; otherwise the stale max
// stays, this chunk's probabilities are at most 2^8 (exact in bf16/fp16 as ever: their relative
// precision does not depend on magnitude, and 2^8 is far inside fp16's range), and that row's
// correction is 1. Softmax is shift-invariant, so the result is the same function; the final
// sum and LSE use the max the probabilities used. The decision is per row, without a branch
// (the four threads that share a row share its max); the warp votes only on whether the caller
// must rescale O at all. On random inputs the max settles within a chunk or two, and the O
// rescale (D/2 FMULs a thread a chunk) goes away. Worth it only where that rescale is large
// against the chunk's softmax: the vote and the branch around the rescale cost more than they
// save at d <= 128 (FwdConfig::kConditionalRescale; bench/NOTES.md, v31 and v32).
//
// kFiniteFills (a score modification, which may fill masked scores with a finite value): a row
// whose every score is a fill past about 2^31 / scale (-1e20) has p = 2^r for its max's entries,
// r the rounding error of fl(m scale), up to half an ulp of it: past 2^128 the row's sum is +inf
// and its O inf or NaN. Such a row counts as empty (`cleared`: O = 0, as FlexAttention gives for a
// fully masked row), where the f64 reference averages V (docs/kernels.md). A NaN score still
// gives NaN.
template <int kCols,  // columns of the score tile (kBlockN)
          bool kConditionalRescale = false, bool kFiniteFills = false>
struct OnlineSoftmax {
  static constexpr int kPerRow = kCols / 4;
  static constexpr float kRescaleThresholdLog2 = 8.f;
  float row_max[2];  // raw (unscaled) running max; -inf before any unmasked key
  float row_sum[2];  // this thread's partial sum of p (the quad's sum is taken at the end)
  bool cleared[2];   // (after finish, kFiniteFills) the row's sum overflowed: its O must be 0

  __device__ void init() {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
  }

  // Turns the scores in `s` (f32, masked entries -inf) into unnormalised probabilities in
  // place and updates max and sum. Returns whether the output accumulated so far must be
  // rescaled (always, unless kConditionalRescale; the same for the whole warp), and then by
  // `correction` (per row).
  template <class Frag>
  __device__ bool step(Frag& s, float scale_log2, float (&correction)[2]) {
    bool grown_any = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mx = quad_max(row_max_with(s, r));
      // Without kConditionalRescale every row takes its new max. With it, decided per row (the
      // four threads sharing a row agree: same max), no branch here; rows not grown keep their
      // max and get correction 1. (-inf before any unmasked key: any finite max has grown;
      // -inf - -inf is NaN: not grown.)
      const bool grown = !kConditionalRescale || (mx - row_max[r]) * scale_log2 > kRescaleThresholdLog2;
      const float m_new = scaled_max(mx, scale_log2);
      const float c = exp2_approx(row_max[r] * scale_log2 - m_new);
      correction[r] = grown ? c : 1.f;
      row_max[r] = grown ? mx : row_max[r];
      // (Equal to m_new without kConditionalRescale; spelt so because ptxas schedules the two
      // forms differently, and these are the forms measured: bench/NOTES.md, v32.)
      const float m_scaled = kConditionalRescale ? scaled_max(row_max[r], scale_log2) : m_new;
      row_sum[r] = row_sum[r] * correction[r] + exponentiate_row(s, r, scale_log2, m_scaled);
      grown_any |= grown;
    }
    // The warp votes only on whether the caller must rescale O at all.
    if constexpr (kConditionalRescale) return __any_sync(0xffffffffu, grown_any);
    return true;
  }

  // This thread's max of row r over the chunk and the running max (no quad reduction).
  template <class Frag>
  __device__ float row_max_with(const Frag& s, int r) const {
    float mx = row_max[r];
#pragma unroll
    for (int j = 0; j < kPerRow; ++j) mx = fmaxf(mx, s(acc_index(r, j)));
    return mx;
  }
  // The max in exponent units; 0 for an empty row (so masked scores give 2^-inf = 0, not NaN).
  // (kFiniteFills) At least -FLT_MAX instead, as long a dependency chain: an empty row's scores
  // and those of a row whose max overflows to -inf once scaled (every score below -2.4e38 at
  // scale log2(e): T5's finfo.min mask on unscaled scores) give 2^(s scale + FLT_MAX) = 0.
  __device__ static float scaled_max(float mx, float scale_log2) {
    if constexpr (kFiniteFills) return fmaxf(mx * scale_log2, -3.40282347e38f);
    return mx == -INFINITY ? 0.f : mx * scale_log2;
  }
  // p = 2^(s scale_log2 - m_scaled) in place over this thread's part of row r; returns their sum.
  template <class Frag>
  __device__ static float exponentiate_row(Frag& s, int r, float scale_log2, float m_scaled) {
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kPerRow; ++j) {
      const float p = exp2_approx(fmaf(s(acc_index(r, j)), scale_log2, -m_scaled));
      s(acc_index(r, j)) = p;
      sum += p;
    }
    return sum;
  }

  // Final normalisation: returns 1/sum per row (0 for an empty row) and writes the
  // natural-log LSE (+inf for an empty row).
  __device__ void finish(float scale_log2, float (&inv_sum)[2], float (&lse)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(row_sum[r]);
      bool empty = !(sum > 0.f);  // also catches NaN
      if constexpr (kFiniteFills) {
        cleared[r] = sum == INFINITY;
        empty = empty || cleared[r];
      }
      inv_sum[r] = empty ? 0.f : 1.f / sum;
      lse[r] = empty ? INFINITY : (row_max[r] * scale_log2 + __log2f(sum)) * 0.69314718055994531f;
    }
  }
};

// Multiplies the two rows of a 64 x kCols accumulator fragment by per-row factors.
template <int kCols, class Frag>
__device__ __forceinline__ void scale_rows(Frag& acc, const float (&factor)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int j = 0; j < kCols / 4; ++j) acc(acc_index(r, j)) *= factor[r];
}

// scale_rows, and 0 in the rows marked `cleared` (whatever they hold: inf or NaN).
template <int kCols, class Frag>
__device__ __forceinline__ void scale_or_clear_rows(Frag& acc, const float (&factor)[2], const bool (&cleared)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int j = 0; j < kCols / 4; ++j) acc(acc_index(r, j)) = cleared[r] ? 0.f : acc(acc_index(r, j)) * factor[r];
}

}  // namespace napkin::device
