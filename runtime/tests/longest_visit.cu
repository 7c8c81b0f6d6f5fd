// SPDX-License-Identifier: Apache-2.0
// napkin::detail::longest_visit: the keys the most visiting tile of a mask sees, counted on the
// host from the mask's block bound (a Fusion with kBlockOnHost), which picks the schedule
// (choose_fwd_schedule); the block bounds' integer division and the fused code's index_float.
// Host code only: runs without a GPU.
#include <cstdio>

#include "napkin/attention_kernel.h"

namespace {

namespace dev = napkin::device;
int failures = 0;

void expect(int got, int want, const char* what) {
  if (got != want) {
    std::printf("FAIL %s: %d keys, expected %d\n", what, got, want);
    ++failures;
  }
}

// The bounds the emitter writes for q >= k, for q >= k && q - k < w, and for
// q >= k && floor(q / c) == floor(k / c) (tests/golden/kernels/*.cu).
struct Causal : dev::FusionDefaults {
  struct Args {
    int group;
  };
  static constexpr bool kMask = true, kSkipsBlocks = true, kBlockOnHost = true;
  __host__ __device__ static dev::BlockVisibility block(Args const&, int, int, int q0, int q1, int k0, int k1) {
    return dev::bv_ge(dev::IntRange{q0, q1}, dev::IntRange{k0, k1});
  }
};
struct Window : Causal {
  struct Args {
    int group;
    double param_w;
  };
  __host__ __device__ static dev::BlockVisibility block(Args const& a, int, int, int q0, int q1, int k0, int k1) {
    const dev::IntRange qr{q0, q1}, kr{k0, k1};
    return dev::bv_and(dev::bv_ge(qr, kr), dev::bv_lt(qr - kr, dev::range_of_real(a.param_w)));
  }
};
struct Chunks : Causal {
  struct Args {
    int group;
    dev::Divisor divisor_c;
  };
  __host__ __device__ static dev::BlockVisibility block(Args const& a, int, int, int q0, int q1, int k0, int k1) {
    const dev::IntRange qr{q0, q1}, kr{k0, k1};
    return dev::bv_and(dev::bv_ge(qr, kr),
                       dev::bv_eq(dev::range_floor_div(qr, a.divisor_c), dev::range_floor_div(kr, a.divisor_c)));
  }
};

napkin::AttentionFwdArgs lengths(int q, int k) {
  napkin::AttentionFwdArgs a;
  a.seqlen_q = q, a.seqlen_k = k, a.head_dim = 64, a.causal = true;
  return a;
}

}  // namespace

int main() {
  using napkin::detail::longest_visit;
  // Causal: the last tile sees every key.
  expect(longest_visit<Causal>({1}, lengths(16384, 16384)), 16384, "causal 16k");
  expect(longest_visit<Causal>({1}, lengths(300, 77)), 77, "causal, fewer keys than rows");
  // A window of 1024 keys: 8 chunks behind a tile's 128 rows and its own, at any length.
  expect(longest_visit<Window>({1, 1024.0}, lengths(16384, 16384)), 1152, "window 1024 at 16k");
  expect(longest_visit<Window>({1, 1024.0}, lengths(2048, 2048)), 1152, "window 1024 at 2k");
  // Local chunks of 1024: a tile sees its own chunk up to the diagonal.
  expect(longest_visit<Chunks>({1, dev::make_divisor(1024.0)}, lengths(16384, 16384)), 1024, "chunks of 1024 at 16k");
  // Chunks of 100 (not a multiple of the 128-key chunks): a tile may straddle two.
  expect(longest_visit<Chunks>({1, dev::make_divisor(100.0)}, lengths(8192, 8192)), 256, "chunks of 100");
  // A bound that is not a host function, or no bound: unknown.
  expect(longest_visit<dev::FusionDefaults>({}, lengths(4096, 4096)), -1, "no mask");
  // The choice these give: the short d = 64 schedule for the window at 16k, not for causal.
  using K = napkin::detail::FwdScheduleKind;
  const napkin::AttentionFwdArgs a = lengths(16384, 16384);
  if (napkin::detail::choose_fwd_schedule(a, longest_visit<Window>({1, 1024.0}, a)) != K::kD64Short ||
      napkin::detail::choose_fwd_schedule(a, longest_visit<Causal>({1}, a)) != K::kPlain) {
    std::printf("FAIL schedule choice by visited keys\n");
    ++failures;
  }
  // The bounds' floor(a / c) without a division: exact on integers, multiples of c included,
  // for whole and fractional c (the chunk index the kernel's visible() computes), by the
  // reciprocal and by a Divisor (its multiply-shift path for whole c < 2^31, the extremes
  // of which are tried, and the reciprocal past |a| = 2^31).
  for (const double c : {1.0, 2.0, 3.0, 7.0, 100.0, 1024.0, 2047.0, 65537.0, 1e9 + 7, 2147483647.0, 2147483648.0, 2.5,
                         0.75, 1e-3, 12345.678}) {
    const dev::Divisor divisor = dev::make_divisor(c);
    for (long long x = -5000; x <= 5000; x += 7) {
      for (const long long a : {x, x * 1024, x * 997 + 1, x * 429497LL, 2147483647LL - x, -2147483648LL + x,
                                x * 1000000007LL}) {
        const long long got[2] = {dev::floor_div_real(a, c, 1.0 / c), dev::floor_div(a, divisor)};
        for (int i = 0; i < 2; ++i) {
          const long long g = got[i];
          // Exact: g c <= a < (g + 1) c, compared in long double.
          const long double lo = static_cast<long double>(g) * c, hi = static_cast<long double>(g + 1) * c;
          if (!(lo <= a && a < hi)) {
            std::printf("FAIL floor(%lld / %.17g) = %lld (%s)\n", a, c, g, i == 0 ? "reciprocal" : "divisor");
            ++failures;
          }
        }
      }
    }
  }
  if (dev::make_divisor(1024.0).mul == 0 || dev::make_divisor(2.5).mul != 0 || dev::make_divisor(2147483648.0).mul != 0) {
    std::printf("FAIL make_divisor: the multiply-shift path for whole c in [1, 2^31) only\n");
    ++failures;
  }
  // index_float (the fused code's index arithmetic as floats, without I2F): exact over the range
  // the launch allows, |x| < 2^22, every value.
  for (long long x = -dev::kIndexFloatLimit; x < dev::kIndexFloatLimit; ++x)
    if (dev::index_float(static_cast<int>(x)) != static_cast<float>(x)) {
      std::printf("FAIL index_float(%lld) = %.9g\n", x, dev::index_float(static_cast<int>(x)));
      ++failures;
      break;
    }
  if (failures == 0) std::printf("longest_visit: all cases as expected\n");
  return failures == 0 ? 0 : 1;
}
