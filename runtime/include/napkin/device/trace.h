// SPDX-License-Identifier: Apache-2.0
// An in-kernel timeline for diagnosis (bench/attention/trace_tiles.cu): with NAPKIN_FWD_TRACE
// defined, thread 0 of each consumer warpgroup of the first FwdTrace::kCtas CTAs (with
// NAPKIN_FWD_TRACE_SM0 too: of the CTAs resident on SM 0, in start order) records
// (event, SM clock) pairs in g_fwd_trace. ncu aggregates stalls over the kernel; this shows
// where in a tile the tensor cores wait. Without the macro every hook compiles to nothing, so
// the library's kernels are untouched (checked: identical SASS).
//
// Reading it: an event marks a point in the source. ptxas schedules within basic blocks and may
// move a wait across an event (in the plain schedule the wait for the previous P V sits at the
// top of the softmax's block, so "S ready -> softmax done" includes it; FwdConfig::
// kSoftmaxOverlapsPV), so read intervals beside the SASS. The clock reads and stores slow a
// traced launch by 5-15 %: compare proportions, not absolute times. g_fwd_trace is defined
// here, so only one translation unit of a program may define NAPKIN_FWD_TRACE.
#pragma once

#include <cstdint>

namespace napkin::device {

enum class FwdEvent : uint8_t {
  kTileStart = 1,   // the tile's Q is ready and its index read
  kTurn = 2,        // the ping-pong turn is ours (before a WGMMA batch is issued)
  kIssued = 3,      // a WGMMA batch is issued and the turn passed on
  kSReady = 4,      // S of the current chunk is in registers
  kSoftmaxDone = 5, // P is computed, before the wait for the previous P V
  kPVDone = 6,      // the previous P V is complete
  kStoreStart = 7,  // the O store begins (stmatrix)
  kStoreEnd = 8,    // the O store is issued
  kFirstK = 9,      // the tile's first K chunk is in shared memory (before its turn)
};

// A recorded word: the event in the top 8 bits, the SM clock below. Packed by FwdTracer,
// unpacked by the host (bench/attention/trace_tiles.cu) with these.
constexpr int kFwdTraceEventShift = 56;
inline constexpr unsigned long long fwd_trace_word(FwdEvent e, unsigned long long clock) {
  return (static_cast<unsigned long long>(e) << kFwdTraceEventShift) | clock;
}
inline constexpr FwdEvent fwd_trace_event(unsigned long long word) {
  return static_cast<FwdEvent>(word >> kFwdTraceEventShift);
}
inline constexpr unsigned long long fwd_trace_clock(unsigned long long word) {
  return word & ((1ull << kFwdTraceEventShift) - 1);
}

#ifdef NAPKIN_FWD_TRACE
struct FwdTrace {
  static constexpr int kCtas = 4, kWarpgroups = 3, kEvents = 2048;
};
__device__ unsigned long long g_fwd_trace[FwdTrace::kCtas][FwdTrace::kWarpgroups][FwdTrace::kEvents];
// At each tile start also %globaltimer (ns), at the same index: the clock's rate, for the axis.
__device__ unsigned long long g_fwd_trace_ns[FwdTrace::kCtas][FwdTrace::kWarpgroups][FwdTrace::kEvents];
#ifdef NAPKIN_FWD_TRACE_SM0
// The CTAs resident on SM 0 instead of the first ones, in the order they start: they share one
// SM clock, so their events can be merged (several CTAs per SM, one consumer warpgroup each).
__device__ int g_fwd_trace_sm0_slots;
#endif
// Per consumer thread: the next free entry (only thread 0 of a warpgroup writes).
struct FwdTracer {
  int n = 0, cta = 0;
  bool on = false;
  __device__ void init(int warpgroup_thread, int consumer) {
    cta = static_cast<int>(blockIdx.x);
#ifdef NAPKIN_FWD_TRACE_SM0
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (warpgroup_thread == 0 && consumer == 0 && smid == 0) cta = atomicAdd(&g_fwd_trace_sm0_slots, 1);
    else cta = FwdTrace::kCtas;
#endif
    on = warpgroup_thread == 0 && cta < FwdTrace::kCtas && consumer < FwdTrace::kWarpgroups;
  }
  __device__ __forceinline__ void operator()(FwdEvent e, int consumer) {
    if (on && n < FwdTrace::kEvents) {
      g_fwd_trace[cta][consumer][n] = fwd_trace_word(e, clock64());
      if (e == FwdEvent::kTileStart) {
        unsigned long long ns;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
        g_fwd_trace_ns[cta][consumer][n] = ns;
      }
    }
    ++n;
  }
};
#else
struct FwdTracer {
  __device__ void init(int, int) {}
  __device__ __forceinline__ void operator()(FwdEvent, int) {}
};
#endif

}  // namespace napkin::device
