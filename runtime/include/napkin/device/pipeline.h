// SPDX-License-Identifier: Apache-2.0
// Producer/consumer stage rings on shared-memory mbarriers (sm_90).
//
// A StageRing<S> is S slots of a circular shared-memory buffer. The producer (one elected
// thread) acquires a slot, then issues TMA loads that complete the slot's `full` barrier with a
// transaction byte count. Consumers wait on `full`, read the slot (WGMMA), and release it by
// arriving on `empty` — one arrival per consumer warp. Phases flip each time the ring wraps.
// A slot also carries a word from the producer to its consumers (`tag`): written after the slot
// is free and before the producer's arrival on `full`, read after the wait. (Shared-memory
// atomics, as compute-sanitizer's racecheck does not see the order the mbarriers give.)
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>

namespace napkin::device {

// Position in a ring of `Stages` slots: slot index and the parity of the current lap.
template <int Stages>
struct RingState {
  int index = 0;
  uint32_t phase = 0;

  __device__ void advance() {
    if (++index == Stages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

// `st` as lane 0 of the warp holds it (a shuffle): ptxas then knows the state is warp-uniform,
// so what derives from it (barrier addresses, WGMMA descriptors) stays in uniform registers.
template <int Stages>
__device__ __forceinline__ RingState<Stages> warp_uniform(RingState<Stages> st) {
  return {__shfl_sync(0xffffffffu, st.index, 0), __shfl_sync(0xffffffffu, st.phase, 0)};
}

template <int Stages>
struct StageRing {
  static constexpr int kStages = Stages;
  using Full = cutlass::arch::ClusterTransactionBarrier;
  using Empty = cutlass::arch::ClusterBarrier;

  uint64_t full[Stages];
  uint64_t empty[Stages];
  uint32_t tag[Stages];

  // One thread; `consumer_arrivals` is the number of arrivals that free a slot.
  __device__ void init(uint32_t consumer_arrivals) {
    for (int s = 0; s < Stages; ++s) {
      Full::init(&full[s], 1);
      Empty::init(&empty[s], consumer_arrivals);
    }
  }

  // Producer side. The producer starts with phase 1 on `empty` so that the first lap never waits.
  __device__ void producer_acquire(RingState<Stages> st, uint32_t tx_bytes) {
    Empty::wait(&empty[st.index], st.phase ^ 1u);
    Full::arrive_and_expect_tx(&full[st.index], tx_bytes);
  }
  // The same, handing `slot_tag` to the slot's consumers (consumer_tag), and running `fill(full)`
  // once the slot is free, before the arrival: it may write what else goes with the slot
  // (generic stores, which the arrival publishes) and issue copies that complete on `full`
  // (after adding their bytes to its transaction count).
  template <class Fill>
  __device__ void producer_acquire(RingState<Stages> st, uint32_t tx_bytes, uint32_t slot_tag, Fill&& fill) {
    Empty::wait(&empty[st.index], st.phase ^ 1u);
    atomicExch(&tag[st.index], slot_tag);
    fill(&full[st.index]);
    Full::arrive_and_expect_tx(&full[st.index], tx_bytes);
  }
  __device__ void producer_acquire(RingState<Stages> st, uint32_t tx_bytes, uint32_t slot_tag) {
    producer_acquire(st, tx_bytes, slot_tag, [](uint64_t*) {});
  }
  __device__ uint64_t& full_barrier(RingState<Stages> st) { return full[st.index]; }

  // Consumer side.
  __device__ void consumer_wait(RingState<Stages> st) { Full::wait(&full[st.index], st.phase); }
  // After consumer_wait(st), before the release, by a whole warp: the word the producer handed
  // with the slot (one read a warp).
  __device__ uint32_t consumer_tag(RingState<Stages> st) {
    uint32_t v = 0;
    if (threadIdx.x % 32 == 0) v = atomicAdd(&tag[st.index], 0u);
    return __shfl_sync(0xffffffffu, v, 0);
  }
  // Called by lane 0 of every consumer warp once the warp's reads of the slot have completed.
  __device__ void consumer_release(RingState<Stages> st) { Empty::arrive(&empty[st.index]); }
};

// A single-shot barrier for a tile that is loaded once (Q): one expect, one wait.
struct OnceBarrier {
  uint64_t bar;
  __device__ void init() { cutlass::arch::ClusterTransactionBarrier::init(&bar, 1); }
  __device__ void arrive_expect(uint32_t tx_bytes) {
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&bar, tx_bytes);
  }
  __device__ void wait(uint32_t phase) { cutlass::arch::ClusterTransactionBarrier::wait(&bar, phase); }
};

}  // namespace napkin::device
