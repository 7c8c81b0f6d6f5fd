// SPDX-License-Identifier: Apache-2.0
// The timeline of a few CTAs of one attention forward launch, from the kernel's own SM clock
// (napkin/device/trace.h): where in a tile each consumer warpgroup waits. A diagnosis tool for
// the GPU machine, not part of the library; the schedule is fixed at compile time:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
//        -Iruntime/include -I.cutlass/include -DNAPKIN_FWD_TRACE [-DTRACE_D=128 -DTRACE_N=128
//        -DTRACE_WGS=2 -DTRACE_CAUSAL=false ...] bench/attention/trace_tiles.cu -o trace_tiles
//   ./trace_tiles BATCH SEQLEN HEADS
// Prints the SM clock's rate during the launch (clock64 against %globaltimer), then, per CTA and
// warpgroup, the mean cycles between consecutive events over the steady tiles, then the events
// of two tiles of CTA 0 in clock order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "napkin/device/fmha_fwd.h"

#ifndef TRACE_D
#define TRACE_D 128
#endif
#ifndef TRACE_N
#define TRACE_N 128
#endif
#ifndef TRACE_WGS
#define TRACE_WGS 2
#endif
#ifndef TRACE_CAUSAL
#define TRACE_CAUSAL false
#endif
#ifndef TRACE_CTAS_PER_SM
#define TRACE_CTAS_PER_SM 1
#endif
#ifndef TRACE_OVERLAP
#define TRACE_OVERLAP false
#endif
#ifndef TRACE_Q_IN_REGISTERS
#define TRACE_Q_IN_REGISTERS false
#endif
#ifndef TRACE_STAGGER
#define TRACE_STAGGER 0
#endif

using Element = cutlass::bfloat16_t;
// Causal (equal lengths): query row i sees keys j <= i.
struct TraceCausal : napkin::device::FusionDefaults {
  static constexpr bool kMask = true, kSkipsBlocks = true;
  template <class Reads>
  __device__ static bool visible(Args const&, Reads const&, int, int, int q, int k) { return k <= q; }
  __device__ static napkin::device::BlockVisibility block(Args const&, int, int, int q0, int q1, int k0, int k1) {
    return {k0 <= q1, k1 <= q0};
  }
};
// Local chunks of TRACE_LOCAL_CHUNK keys (0: off): causal within each chunk, as chunked_local.
#ifndef TRACE_LOCAL_CHUNK
#define TRACE_LOCAL_CHUNK 0
#endif
struct TraceLocalChunks : napkin::device::FusionDefaults {
  static constexpr bool kMask = true, kSkipsBlocks = true;
  static constexpr int c = TRACE_LOCAL_CHUNK > 0 ? TRACE_LOCAL_CHUNK : 1;
  template <class Reads>
  __device__ static bool visible(Args const&, Reads const&, int, int, int q, int k) { return k <= q && q / c == k / c; }
  __device__ static napkin::device::BlockVisibility block(Args const&, int, int, int q0, int q1, int k0, int k1) {
    return {k0 <= q1 && k1 / c >= q0 / c && k0 / c <= q1 / c,
            k1 <= q0 && q0 / c == q1 / c && k0 / c == k1 / c && q0 / c == k0 / c};
  }
};
using TraceFusion = std::conditional_t<(TRACE_LOCAL_CHUNK > 0), TraceLocalChunks,
                                       std::conditional_t<TRACE_CAUSAL, TraceCausal, napkin::device::FusionDefaults>>;
using Cfg = napkin::device::FwdConfig<Element, TRACE_D, TRACE_N, TRACE_WGS, 2, TraceFusion, TRACE_CTAS_PER_SM, false,
                                      TRACE_OVERLAP, TRACE_Q_IN_REGISTERS, TRACE_STAGGER>;
using napkin::device::FwdEvent;
using napkin::device::FwdTrace;
using napkin::device::fwd_trace_clock;
using napkin::device::fwd_trace_event;

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

static const char* event_name(int e) {
  static const char* names[] = {"?", "tile", "turn", "issued", "S ready", "softmax done", "PV done", "store start",
                                "store end", "first K"};
  return e >= 1 && e <= 9 ? names[e] : "?";
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s BATCH SEQLEN HEADS\n", argv[0]);
    return 2;
  }
  const int batch = std::atoi(argv[1]), seqlen = std::atoi(argv[2]), heads = std::atoi(argv[3]);
  if (batch <= 0 || seqlen <= 0 || heads <= 0) {
    std::fprintf(stderr, "BATCH, SEQLEN and HEADS must be positive integers\n");
    return 2;
  }
  constexpr int d = TRACE_D;
  const size_t n = size_t(batch) * seqlen * heads * d;
  std::vector<Element> host(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto& x : host) x = Element(normal(rng));
  Element *q, *k, *v, *o;
  int* counter;
  CHECK(cudaMalloc(&q, n * sizeof(Element)));
  CHECK(cudaMalloc(&k, n * sizeof(Element)));
  CHECK(cudaMalloc(&v, n * sizeof(Element)));
  CHECK(cudaMalloc(&o, n * sizeof(Element)));
  CHECK(cudaMalloc(&counter, sizeof(int)));
  CHECK(cudaMemset(counter, 0, sizeof(int)));
  for (Element* t : {q, k, v}) CHECK(cudaMemcpy(t, host.data(), n * sizeof(Element), cudaMemcpyHostToDevice));
  const int64_t strides[3] = {int64_t(seqlen) * heads * d, int64_t(heads) * d, d};  // (b, s, h, d)
  auto launch = [&] {
    CHECK(napkin::device::launch_fmha_fwd<Cfg>(q, k, v, o, nullptr, batch, heads, heads, seqlen, seqlen, strides,
                                               strides, strides, strides, 1.0f / std::sqrt(float(d)), true, counter,
                                               nullptr));
  };
  for (int i = 0; i < 5; ++i) launch();
  static unsigned long long zero[FwdTrace::kCtas][FwdTrace::kWarpgroups][FwdTrace::kEvents];
  CHECK(cudaMemcpyToSymbol(napkin::device::g_fwd_trace, zero, sizeof(zero)));
#ifdef NAPKIN_FWD_TRACE_SM0
  const int no_slots = 0;  // the warm-up launches took slots too
  CHECK(cudaMemcpyToSymbol(napkin::device::g_fwd_trace_sm0_slots, &no_slots, sizeof(no_slots)));
#endif
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  CHECK(cudaEventRecord(t0));
  launch();
  CHECK(cudaEventRecord(t1));
  CHECK(cudaDeviceSynchronize());
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, t0, t1));
  static unsigned long long trace[FwdTrace::kCtas][FwdTrace::kWarpgroups][FwdTrace::kEvents];
  CHECK(cudaMemcpyFromSymbol(trace, napkin::device::g_fwd_trace, sizeof(trace)));
  static unsigned long long trace_ns[FwdTrace::kCtas][FwdTrace::kWarpgroups][FwdTrace::kEvents];
  CHECK(cudaMemcpyFromSymbol(trace_ns, napkin::device::g_fwd_trace_ns, sizeof(trace_ns)));
  const double flops = TRACE_LOCAL_CHUNK > 0 ? 4.0 * batch * heads * double(seqlen) * (TRACE_LOCAL_CHUNK + 1) / 2 * d
                                            : 4.0 * batch * heads * double(seqlen) * seqlen * d / (TRACE_CAUSAL ? 2 : 1);
  std::printf("d%d N%d WGs%d causal=%d b%d s%d h%d: %.1f us, %.0f TFLOP/s (traced launch)\n", d, TRACE_N, TRACE_WGS,
              int(TRACE_CAUSAL), batch, seqlen, heads, ms * 1e3, flops / ms / 1e9);

  // The SM clock's rate: clock64 against %globaltimer between CTA 0's first and last tile starts.
  {
    int first = -1, last = -1;
    for (int i = 0; i < FwdTrace::kEvents && trace[0][0][i] != 0; ++i)
      if (fwd_trace_event(trace[0][0][i]) == FwdEvent::kTileStart) (first < 0 ? first : last) = i;
    if (first >= 0 && last > first && trace_ns[0][0][last] > trace_ns[0][0][first]) {
      const double cycles = double(fwd_trace_clock(trace[0][0][last]) - fwd_trace_clock(trace[0][0][first]));
      std::printf("SM clock: %.0f MHz (clock64 against %%globaltimer over CTA 0's tiles)\n",
                  cycles / double(trace_ns[0][0][last] - trace_ns[0][0][first]) * 1e3);
    }
  }

  struct Ev {
    unsigned long long t;
    int e, wg, tile;
  };
  for (int c = 0; c < FwdTrace::kCtas; ++c) {
    std::vector<Ev> all;
    for (int w = 0; w < std::min(TRACE_WGS, FwdTrace::kWarpgroups); ++w) {
      // Mean cycles from each event to the next, keyed by the pair, over tiles 2 .. last-1.
      std::map<std::pair<int, int>, std::pair<double, int>> gaps;
      int tile = -1;
      std::vector<unsigned long long> tile_starts;
      for (int i = 0; i < FwdTrace::kEvents && trace[c][w][i] != 0; ++i) {
        const int e = int(fwd_trace_event(trace[c][w][i]));
        const unsigned long long t = fwd_trace_clock(trace[c][w][i]);
        if (e == int(FwdEvent::kTileStart)) {
          ++tile;
          tile_starts.push_back(t);
        }
        all.push_back({t, e, w, tile});
        if (i + 1 < FwdTrace::kEvents && trace[c][w][i + 1] != 0 && tile >= 2) {
          const int e2 = int(fwd_trace_event(trace[c][w][i + 1]));
          const unsigned long long t2 = fwd_trace_clock(trace[c][w][i + 1]);
          auto& g = gaps[{e, e2}];
          g.first += double(t2 - t);
          g.second++;
        }
      }
      const int tiles = int(tile_starts.size()) - 1;  // the last start is the exit
      if (tiles < 4) continue;
      std::printf("CTA %d WG %d: %d tiles, mean tile %.0f cycles (tiles 2..%d)\n", c, w, tiles,
                  double(tile_starts[tiles] - tile_starts[2]) / (tiles - 2), tiles - 1);
      for (auto& [k2, g] : gaps)
        std::printf("   %-13s -> %-13s %6.0f cycles x %d\n", event_name(k2.first), event_name(k2.second),
                    g.first / g.second, g.second);
    }
    if (c != 0) continue;
    // Two steady tiles of warpgroup 0, from its tile kFirst's start, with every warpgroup's
    // events in that span (the others' tiles start a little later).
    constexpr int kFirst = 4;
    std::sort(all.begin(), all.end(), [](const Ev& a, const Ev& b) { return a.t < b.t; });
    const Ev* first = nullptr;
    const Ev* end = nullptr;
    for (const Ev& x : all)
      if (x.wg == 0 && x.e == int(FwdEvent::kTileStart)) {
        if (x.tile == kFirst) first = &x;
        if (x.tile == kFirst + 2) end = &x;
      }
    if (first == nullptr || end == nullptr) {
      std::printf("CTA 0 ran fewer than %d tiles: no timeline printed (use a larger problem)\n", kFirst + 2);
      continue;
    }
    std::printf("CTA 0, tiles %d-%d of warpgroup 0 (cycles from its tile %d start):\n", kFirst, kFirst + 1, kFirst);
    for (const Ev& x : all)
      if (x.t >= first->t && x.t < end->t) std::printf("  %7llu  WG%d  %s\n", x.t - first->t, x.wg, event_name(x.e));
  }
#ifdef NAPKIN_FWD_TRACE_SM0
  // The CTAs of SM 0 share its clock: every event of theirs, merged in clock order, from CTA
  // slot 0's third tile on, for 60,000 cycles (slot = the order the CTAs started in).
  {
    struct SmEv {
      unsigned long long t;
      int e, cta;
    };
    std::vector<SmEv> merged;
    unsigned long long start = 0;
    int tiles0 = 0;
    for (int i = 0; i < FwdTrace::kEvents && trace[0][0][i] != 0; ++i)
      if (fwd_trace_event(trace[0][0][i]) == FwdEvent::kTileStart && ++tiles0 == 3) start = fwd_trace_clock(trace[0][0][i]);
    for (int c = 0; c < FwdTrace::kCtas; ++c)
      for (int i = 0; i < FwdTrace::kEvents && trace[c][0][i] != 0; ++i) {
        const unsigned long long t = fwd_trace_clock(trace[c][0][i]);
        if (t >= start && t < start + 60000) merged.push_back({t, int(fwd_trace_event(trace[c][0][i])), c});
      }
    std::sort(merged.begin(), merged.end(), [](const SmEv& a, const SmEv& b) { return a.t < b.t; });
    std::printf("SM 0, every resident CTA (slots in start order), cycles from slot 0's tile 3:\n");
    for (const SmEv& x : merged) std::printf("  %7llu  CTA%d  %s\n", x.t - start, x.cta, event_name(x.e));
  }
#endif
  return 0;
}
