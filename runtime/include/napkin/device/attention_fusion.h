// SPDX-License-Identifier: Apache-2.0
// The fusion points of the attention forward kernel (fmha_fwd.h): the diagram's own elementwise
// code, fused between the two GEMMs and after the second. napkin's emitter writes one Fusion per
// diagram (src/emit/attention_kernel.cpp); the kernel calls it at fixed points.
//
// A Fusion is a struct with
//   struct Args                  auxiliary tensors (pointers and element strides) and scalars;
//                                a kernel parameter, read through `a` below
//   kScoreMod                    score() replaces the raw score; false: the raw score is the
//                                softmax's input (times the scale, folded into its exp2)
//   kScoreFactor, score_factor() a factor of the softmax's input per (batch, head), folded into
//                                the exp2 with the scale: the kernel's softmax is of
//                                score_factor(b, h) * score(raw) (negated first where negative)
//   kMask                        visible() masks scores (to -inf, or to 0 when !kNormalise)
//   kSkipsBlocks                 block() bounds the mask over a block of indices, so a tile
//                                visits only the key chunks the mask may leave visible and masks
//                                only those it does not leave wholly visible (tiles are uneven)
//   kNormalise                   true: P = softmax over the keys (online, rescaled);
//                                false: P = prob(raw) summed plainly into O (no max, no sum)
//   kReadsRowsOrKeys             the fused code reads tensors indexed by query row or key (the
//                                kernel then clamps rows and keys past the ends before calling)
//   kBlockOnHost                 block() is also a host function (it reads no tensor), so the
//                                host sees which chunks each tile visits when it picks a schedule
//   kBlockReadsTensors           block() reads tensors (block summaries): the visible chunks
//                                may have gaps, so each tile's are listed before the kernel
//   kBlockCostly                 block() takes a division, a product or reads of block
//                                summaries (not a few compares): the producer warp evaluates it,
//                                and hands each chunk's mask decision to the consumers
//   kBlockRowsFromTensors        block() reads a tensor indexed by query row (a mask tensor,
//                                segment ids): its visible blocks change with the tensor's row
//                                blocks, so tiles are laid over whole 128-row blocks
//   kQueryAxesInterchangeable    the fused code reads neither the query row nor the GQA group
//                                index, so the launch may make either the tile's rows
//                                (napkin::with_larger_axis_as_rows)
//   kEpilogue, kEpilogueUsesLse  epilogue() maps each output element, given the row's
//                                logsumexp (natural log, -inf for a row that sees no key)
//   kStagedBytes, stage()        score-shaped inputs the kernel may stage through shared
//                                memory (staged_inputs.h): a score's bytes of them, and a visit
//                                of each with its byte offset; score(), prob() and visible()
//                                read them through `rd` (DirectReads or StagedReads)
//   kKeyRowInputs, kKeyRowBytes, stage_keys()  key-indexed inputs (role k without q) the kernel
//                                may copy per chunk beside K (staged_inputs.h, key rows): their
//                                number, a key's bytes over all of them, and a visit of each
//                                with its byte offset and ordinal; the fused code reads each
//                                through `rd.template key<offset, ordinal>(view, b, h, q, k)`
//   kIndexFloatScale, kIndexFloatOffset  the fused code converts index expressions to floats
//                                by index_float, whose values |x| <= scale L + offset (L the
//                                longest index extent: the launch refuses lengths past 2^22)
//   index_int_bound(L)           the largest |x| of the index arithmetic the fused code
//                                computes in int (the launch refuses lengths past 2^31)
//   kSharesAcrossBatch           the fused code reads a tensor indexed by rows or keys but not
//                                the batch: tiles of one head run batch after batch, so the
//                                CTAs running together share it in L2
//   __device__ static float score_factor(Args const& a, int b, int h);
//   template <class Reads> __device__ static float score(Args const& a, Reads const& rd, float raw, int b, int h, int q, int k);
//   template <class Reads> __device__ static bool visible(Args const& a, Reads const& rd, int b, int h, int q, int k);
//   __device__ static BlockVisibility block(Args const& a, int b, int h, int q0, int q1, int k0, int k1);
//   template <class Reads> __device__ static float prob(Args const& a, Reads const& rd, float raw, int b, int h, int q, int k);
//   __device__ static float epilogue(Args const& a, float o, float lse, int b, int h, int q, int e);
// Indices: b batch, h query head, q query row, k key; within the tensors' bounds where
// kReadsRowsOrKeys (else rows and keys past the sequence ends may be passed; they are masked
// or never stored). block() takes inclusive
// ranges [q0, q1] x [k0, k1] and must be conservative: `may` whenever some element is visible,
// `must` only when every element is.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "napkin/elementwise.h"

namespace napkin::device {

struct BlockVisibility {
  bool may;   // some element of the block may be visible
  bool must;  // every element of the block is visible
};

// A Fusion's defaults: plain softmax attention, no mask beyond the sequence ends.
struct FusionDefaults {
  struct Args {};
  static constexpr bool kScoreMod = false, kMask = false, kSkipsBlocks = false, kNormalise = true,
                        kEpilogue = false, kEpilogueUsesLse = false, kReadsRowsOrKeys = false,
                        kBlockOnHost = false, kBlockReadsTensors = false, kBlockRowsFromTensors = false, kBlockCostly = false,
                        kSharesAcrossBatch = false, kScoreFactor = false, kQueryAxesInterchangeable = false;
  // O written in f32 rather than the operands' dtype (a plan's intermediate that later code
  // subtracts from another: differential attention's two maps' outputs).
  static constexpr bool kOutputF32 = false;
  // The LSE written for a row that sees no key: +inf, FlashAttention's (exp(s - LSE) is then 0 in
  // a backward pass); a diagram's logsumexp is -inf there (generated kernels with an LSE output).
  static constexpr float kEmptyRowLse = __builtin_huge_valf();
  // The scores may be large finite fills (a tensor's, a param's, masked_fill's -1e9): rows of
  // nothing but such a fill are guarded (OnlineSoftmax's kFiniteFills).
  static constexpr bool kFiniteFills = false;
  static constexpr long long kIndexFloatScale = 0, kIndexFloatOffset = 0;
  static long long index_int_bound(long long) { return 0; }
  static constexpr int kStagedBytes = 0, kKeyRowInputs = 0, kKeyRowBytes = 0;
  // (Templates over the arguments, so a Fusion with Args of its own inherits them.)
  template <class A, class Reads>
  __device__ static float score(A const&, Reads const&, float raw, int, int, int, int) { return raw; }
  template <class A, class Reads>
  __device__ static bool visible(A const&, Reads const&, int, int, int, int) { return true; }
  template <class A>
  __device__ static BlockVisibility block(A const&, int, int, int, int, int, int) { return {true, false}; }
  template <class A, class Reads>
  __device__ static float prob(A const&, Reads const&, float raw, int, int, int, int) { return raw; }
  template <class A, class Stage>
  __device__ static void stage(A const&, Stage&&) {}
  template <class A, class Stage>
  __device__ static void stage_keys(A const&, Stage&&) {}
  template <class A>
  __device__ static float score_factor(A const&, int, int) { return 1.f; }
  template <class A>
  __device__ static float epilogue(A const&, float o, float, int, int, int, int) { return o; }
};

// Rounding as the reference interpreter's `cast` (round to nearest even; i32 saturates, NaN -> 0).
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float round_f16(float x) { return __half2float(__float2half_rn(x)); }
__device__ __forceinline__ int round_i32(float x) { return x != x ? 0 : __float2int_rn(x); }

// An integer index expression as a float without I2F (which runs on the SFU beside the softmax's
// exponentials): the integer added into the mantissa of 1.5 * 2^23, the offset subtracted.
// Exact for |x| < 2^22; the launch checks the Fusion's kIndexFloatScale * L + kIndexFloatOffset
// against that, L the longest index extent.
__host__ __device__ __forceinline__ float index_float(int x) {
  const int bits = 0x4B400000 + x;
#ifdef __CUDA_ARCH__
  return __int_as_float(bits) - 12582912.0f;
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f - 12582912.0f;
#endif
}
constexpr long long kIndexFloatLimit = 1LL << 22;

// The fused code's transcendental functions: the SFU's approximations (about 2 ulp of f32;
// far below the bf16/f16 rounding of P and O), as FlashAttention's softcap and softmax use. exp
// is the generated elementwise code's (napkin/elementwise.h).
using napkin::rows::fast_exp;
__device__ __forceinline__ float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// floor(x / c) as the reference interpreter's f64 gives it wherever x, c and the quotient are
// integers below 2^24 (a chunk or document index): the fast quotient (2 ulp) is corrected by
// the sign of the exact remainder x - m c (one FMA), so an exact multiple of c never lands
// below its integer.
__device__ __forceinline__ float floor_quotient(float x, float c) {
  const float cs = fabsf(c), xs = c < 0.f ? -x : x;  // floor(x / c) = floor(-x / -c)
  const float m = floorf(__fdividef(xs, cs));
  const float r = fmaf(-m, cs, xs);  // |c| (x / c - m), exact in sign: in [0, |c|) when m is right
  return m + (r >= cs ? 1.f : 0.f) - (r < 0.f ? 1.f : 0.f);
}

// Integer interval arithmetic for block(): the emitter writes a predicate's bounds with these.
struct IntRange {
  long long lo, hi;
};
__host__ __device__ __forceinline__ IntRange irange(long long v) { return {v, v}; }
// A real value (a param) bounds integers by its floor and ceiling (clamped far from overflow).
__host__ __device__ __forceinline__ IntRange range_of_real(double v) {
  const double lo = fmax(-1e15, fmin(1e15, floor(v))), hi = fmax(-1e15, fmin(1e15, ceil(v)));
  return {static_cast<long long>(lo), static_cast<long long>(v == v ? hi : 1e15)};
}
__host__ __device__ __forceinline__ IntRange operator+(IntRange a, IntRange b) { return {a.lo + b.lo, a.hi + b.hi}; }
__host__ __device__ __forceinline__ IntRange operator-(IntRange a, IntRange b) { return {a.lo - b.hi, a.hi - b.lo}; }
__host__ __device__ __forceinline__ IntRange operator-(IntRange a) { return {-a.hi, -a.lo}; }
__host__ __device__ __forceinline__ IntRange range_mul(IntRange a, IntRange b) {
  const long long p[4] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
  long long lo = p[0], hi = p[0];
  for (int i = 1; i < 4; ++i) lo = p[i] < lo ? p[i] : lo, hi = p[i] > hi ? p[i] : hi;
  return {lo, hi};
}
__host__ __device__ __forceinline__ IntRange range_abs(IntRange a) {
  if (a.lo >= 0) return a;
  if (a.hi <= 0) return -a;
  return {0, a.hi > -a.lo ? a.hi : -a.lo};
}
__host__ __device__ __forceinline__ IntRange range_min(IntRange a, IntRange b) {
  return {a.lo < b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi};
}
__host__ __device__ __forceinline__ IntRange range_max(IntRange a, IntRange b) {
  return {a.lo > b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
}
// The largest |x| in the range (Fusion::index_int_bound: the launch refuses lengths whose index
// arithmetic would pass the fused code's 32-bit ints).
__host__ __device__ __forceinline__ long long range_magnitude(IntRange a) { return -a.lo > a.hi ? -a.lo : a.hi; }
// floor(a / c) for a constant c > 0: monotone in a.
__host__ __device__ __forceinline__ long long floor_div(long long a, long long c) { return a >= 0 ? a / c : -((-a + c - 1) / c); }
__host__ __device__ __forceinline__ IntRange range_floor_div(IntRange a, long long c) { return {floor_div(a.lo, c), floor_div(a.hi, c)}; }
// floor(a / c), exact, for an integer |a| <= 2^50 and a real c > 0, given inv_c ~ 1 / c: the
// quotient by the reciprocal, put right by the sign of the exact remainder a - m c (one FMA),
// as floor_quotient in f32. An f64 division is a long dependent sequence, and the producer's
// search for a tile's chunks evaluates the bound a dozen times in a row.
__host__ __device__ __forceinline__ long long floor_div_real(long long a, double c, double inv_c) {
  const double x = static_cast<double>(a);
  const double m = floor(x * inv_c);
  const double r = fma(-m, c, x);
  return static_cast<long long>(m + (r >= c ? 1.0 : 0.0) - (r < 0.0 ? 1.0 : 0.0));
}
// A param c as the divisor of floor(a / c) in a block bound, prepared once on the host
// (make_divisor): an integer c in [1, 2^31) divides an integer |a| < 2^31 by a multiply and a
// shift (the producer's search for a tile's chunks evaluates the bound a dozen times in a row,
// in one thread, where the f64 sequence costs ~100 clocks a call); any other c > 0 through its
// reciprocal (floor_div_real).
struct Divisor {
  double c, inv_c;
  unsigned long long mul;  // ceil(2^shift / c) for an integer c in [1, 2^31); 0 otherwise
  int shift;               // 31 + ceil(log2 c)
};
inline Divisor make_divisor(double c) {
  Divisor d{c, c > 0 ? 1.0 / c : 0.0, 0, 0};
  if (c >= 1 && c < 2147483648.0 && c == static_cast<double>(static_cast<long long>(c))) {
    const unsigned long long n = static_cast<unsigned long long>(c);
    int log2_ceil = 0;
    while ((1ULL << log2_ceil) < n) ++log2_ceil;
    d.shift = 31 + log2_ceil;
    // Exact (Granlund and Montgomery, 1994): mul c - 2^shift < c <= 2^(shift - 31).
    d.mul = ((1ULL << d.shift) + n - 1) / n;
  }
  return d;
}
__host__ __device__ __forceinline__ long long floor_div(long long a, Divisor const& d) {
  if (d.mul != 0 && a >= -2147483648LL && a < 2147483648LL) {
    // floor(a / c) = -1 - floor((-a - 1) / c) for a < 0, so the multiply sees [0, 2^31) only.
    const unsigned long long n = static_cast<unsigned long long>(a >= 0 ? a : -a - 1);
    const long long f = static_cast<long long>((n * d.mul) >> d.shift);
    return a >= 0 ? f : -1 - f;
  }
  return floor_div_real(a, d.c, d.inv_c);
}
// floor(a / c) for a param c: monotone in a where c > 0; unbounded otherwise.
__host__ __device__ __forceinline__ IntRange range_floor_div(IntRange a, Divisor const& d) {
  if (!(d.c > 0)) return {-1000000000000000LL, 1000000000000000LL};
  return {floor_div(a.lo, d), floor_div(a.hi, d)};
}

// A bool over a block: `may` (true somewhere) and `must` (true everywhere), as BlockVisibility.
__host__ __device__ __forceinline__ BlockVisibility bv_lt(IntRange a, IntRange b) { return {a.lo < b.hi, a.hi < b.lo}; }
__host__ __device__ __forceinline__ BlockVisibility bv_le(IntRange a, IntRange b) { return {a.lo <= b.hi, a.hi <= b.lo}; }
__host__ __device__ __forceinline__ BlockVisibility bv_gt(IntRange a, IntRange b) { return bv_lt(b, a); }
__host__ __device__ __forceinline__ BlockVisibility bv_ge(IntRange a, IntRange b) { return bv_le(b, a); }
__host__ __device__ __forceinline__ BlockVisibility bv_eq(IntRange a, IntRange b) {
  return {a.lo <= b.hi && b.lo <= a.hi, a.lo == a.hi && b.lo == b.hi && a.lo == b.lo};
}
__host__ __device__ __forceinline__ BlockVisibility bv_ne(IntRange a, IntRange b) {
  const BlockVisibility e = bv_eq(a, b);
  return {!e.must, !e.may};
}
__host__ __device__ __forceinline__ BlockVisibility bv_and(BlockVisibility a, BlockVisibility b) {
  return {a.may && b.may, a.must && b.must};
}
__host__ __device__ __forceinline__ BlockVisibility bv_or(BlockVisibility a, BlockVisibility b) {
  return {a.may || b.may, a.must || b.must};
}
__host__ __device__ __forceinline__ BlockVisibility bv_not(BlockVisibility a) { return {!a.must, !a.may}; }
// Unknown (data-dependent): may be visible, not surely.
__host__ __device__ __forceinline__ BlockVisibility bv_unknown() { return {true, false}; }

}  // namespace napkin::device
