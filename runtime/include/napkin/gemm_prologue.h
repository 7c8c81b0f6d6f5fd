// SPDX-License-Identifier: Apache-2.0
// The prologue GEMM of the device library: a GEMM whose operands are elementwise functions of
// the tensors in memory, applied as each tile is loaded (src/emit/gemm_kernel.h writes the
// functions from the diagram):
//
//   D[m n l] = Epilogue( sum_k PrologueA(A[m k l]) PrologueB(B[n k l]), m, n, l )    in f32, stored as ElementD
//
// The epilogue is a functor from one accumulator value and its output coordinates (clamped to
// the tensor: values past its edge are computed at the edge and never stored) to the output, given
// its Arguments (the epilogue inputs it reads: a bias, a row scale, a normaliser; params).
//
// A plan fuses an operand's elementwise producer here instead of materialising it, where the
// GEMM is memory-bound anyway (one of M, N or K small: linear attention's feature maps feeding
// its state and its output). CUTLASS's sm90 collectives feed WGMMA straight from the TMA's
// shared memory, with no place for such code, so the mainloop is this file's, over CuTe's atoms:
//
//   producer warp (one thread)      TMA loads of each K tile of A and B into a ring of stages
//   consumer warpgroups (4 warps    each waits for a stage, applies the prologues to it in shared
//   each, one or two)               memory (each element once, 16 bytes a thread), fences it for
//                                   the async proxy, then SS-WGMMA; the stage is released once
//                                   its WGMMAs have retired (with one warpgroup: once the next
//                                   stage's are issued)
//
// Two consumer warpgroups take a unit's K tiles in turn, each into its own accumulator of the
// whole tile, so that one transforms its stage while the other's WGMMAs run and each thread's
// serial work a K tile halves; at the unit's end the second hands its accumulator (and its row
// sums' partials) to the first through shared memory, then goes on to its share of the next unit
// while the first runs the split combine and the epilogue.
//
// The CTAs are persistent: each takes work units (an output tile, or one split of its K range)
// in a stride over the grid, and the producer loads the next unit's stages while the consumers
// run this one's epilogue.
//
// Contract of the prologues: stateless functors from the operand's element to the operand's
// element, whose value at 0 is finite. TMA fills loads past the tensor's edge with zeros; a zero
// turned into f(0) multiplies the other operand's zero (along K) or lands in a row or column
// that is never stored (along M and N), so at most one operand may map 0 to other than 0 (the
// plan fuses a prologue into one operand only).
//
// Row sums of the A operand: R_j[m l] = sum over k of summand_j(A'[m k l], k, l), where A' is the
// operand as the WGMMAs read it (after its prologue). Where A is K-major each thread sums one row
// over a run of K, reading the stage of A' once more, 16 bytes a load, after its WGMMAs are
// issued; where it is M-major, 8 adjacent rows over a few k, in the same pass as A's prologue
// where there is one. The threads' partial sums are added in a fixed order; the sums ride with the split partials,
// and reach the epilogue as the row's values (its `rows` argument) and, where RowSums stores them,
// memory (by the units of N tile 0). K past the tensor's edge is skipped (the zero-filled loads'
// f(0) is not summed).
//
// Split along K: where the output tiles are fewer than two per SM (a state of d x e per head
// reduced over a long sequence), each tile's K range is cut into splits; each split stores its
// partial sums to an f32 workspace, and the last split of a tile to arrive (a counter per tile)
// sums them in split order, zeroes the counter for the next launch, and runs the epilogue. The
// workspace belongs to the (device, stream) pair; its counters are zeroed when allocated.
#pragma once

#include "napkin/device/pipeline.h"
#include "napkin/gemm_kernel.h"
#include "napkin/prologue_splits.h"

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>

namespace napkin::gemm {

// The configuration: operand dtype (bf16 or f16), output dtype, each operand's major mode and the
// output's, the CTA tile (kTileM 64 or 128, a consumer warpgroup's WGMMA rows once or twice;
// kTileN a multiple of 64 up to 256; K tile 64, one 128-byte swizzle row), the stages and the
// consumer warpgroups (1 or 2, taking the K tiles in turn).
template <class ElementAB, class ElementD_, bool kAKMajor, bool kBKMajor, bool kDNMajor, int kTileM, int kTileN, int kStages_,
          int kConsumerWGs_>
struct PrologueConfig {
  static_assert(kTileM == 64 || kTileM == 128, "a consumer warpgroup's tile: 64 or 128 rows");
  static_assert(kConsumerWGs_ == 1 || kConsumerWGs_ == 2, "one or two consumer warpgroups");
  static_assert(kTileN % 64 == 0 && kTileN <= 256, "WGMMA's N: a multiple of 64 up to 256");
  static_assert(kStages_ >= 2, "a ring of at least two stages");
  using Element = ElementAB;
  using ElementD = ElementD_;
  static constexpr int kTileK = 64;
  static constexpr int kStages = kStages_;
  static constexpr bool kDNMajorOut = kDNMajor;
  static constexpr bool kAKMajorIn = kAKMajor;
  using TileShape = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Int<kTileK>>;
  // Strides in CUTLASS's modes (A (M, K, L), B (N, K, L), D (M, N, L)), the unit one static.
  using StrideA = std::conditional_t<kAKMajor, cute::Stride<int64_t, cute::_1, int64_t>, cute::Stride<cute::_1, int64_t, int64_t>>;
  using StrideB = std::conditional_t<kBKMajor, cute::Stride<int64_t, cute::_1, int64_t>, cute::Stride<cute::_1, int64_t, int64_t>>;
  using StrideD = std::conditional_t<kDNMajor, cute::Stride<int64_t, cute::_1, int64_t>, cute::Stride<cute::_1, int64_t, int64_t>>;
  static constexpr auto kMajorA = kAKMajor ? cute::SM90::GMMA::Major::K : cute::SM90::GMMA::Major::MN;
  static constexpr auto kMajorB = kBKMajor ? cute::SM90::GMMA::Major::K : cute::SM90::GMMA::Major::MN;
  using SmemAtomA = std::conditional_t<kAKMajor, cute::GMMA::Layout_K_SW128_Atom<ElementAB>, cute::GMMA::Layout_MN_SW128_Atom<ElementAB>>;
  using SmemAtomB = std::conditional_t<kBKMajor, cute::GMMA::Layout_K_SW128_Atom<ElementAB>, cute::GMMA::Layout_MN_SW128_Atom<ElementAB>>;
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::SM90::GMMA::ss_op_selector<ElementAB, ElementAB, float, cute::Shape<cute::_64, cute::Int<kTileN>, cute::Int<kTileK>>,
                                       kMajorA, kMajorB>()));
  // The output tile, staged in shared memory for the TMA store (full lines; stores from the
  // accumulators' layout write half sectors).
  using SmemAtomD = std::conditional_t<kDNMajor, cute::GMMA::Layout_K_SW128_Atom<ElementD_>, cute::GMMA::Layout_MN_SW128_Atom<ElementD_>>;
  static constexpr int kConsumerWGs = kConsumerWGs_;
  static constexpr int kWarpgroupThreads = 128;
  static constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWGs;
  static constexpr int kThreads = kConsumerThreads + 32;  // the consumer warpgroups and the producer warp
};

// No row sums (the RowSums of a prologue GEMM without them). A RowSums functor has kCount sums
// and kSlots >= kCount values a row (the sums, then what finish() derives from them once per row:
// the reciprocal of a sum the epilogue divides by), its Arguments (the leaves its summands read,
// where it stores), add(sums, a, k, l, args) adding each summand of the element a = A'[m k l] to
// sums[j], finish(row) filling the derived slots, and store(row, m, l, args) writing the row's
// finished sums to memory.
struct NoRowSums {
  static constexpr int kCount = 0, kSlots = 0;
  struct Arguments {};
  template <class Sums>
  CUTLASS_DEVICE void add(Sums&, float, int64_t, int64_t, Arguments const&) const {}
  CUTLASS_DEVICE void finish(float*) const {}
  CUTLASS_DEVICE void store(const float*, int64_t, int64_t, Arguments const&) const {}
};

template <class Cfg, class PrologueA_, class PrologueB_, template <class> class Epilogue, class RowSums_ = NoRowSums>
struct PrologueKernel {
  using Cfg_ = Cfg;
  using PrologueA = PrologueA_;
  using PrologueB = PrologueB_;
  using RowSums = RowSums_;
  static constexpr int kSums = RowSums::kCount;
  static constexpr int kSumSlots = RowSums::kSlots > 0 ? RowSums::kSlots : 1;  // array extents
  using Output = Epilogue<float>;
  using Element = typename Cfg::Element;
  using ElementD = typename Cfg::ElementD;
  static constexpr int kTileM = cute::size<0>(typename Cfg::TileShape{}), kTileN = cute::size<1>(typename Cfg::TileShape{});
  // Row sums' shared memory (one float each where there are none): each thread's partials (a
  // K-major A: one row a thread; M-major: 8 rows a thread), and the finished values of the rows.
  static constexpr int kWGRowPartials = Cfg::kAKMajorIn ? Cfg::kWarpgroupThreads : 8 * Cfg::kWarpgroupThreads;  // a warpgroup's
  static constexpr int kRowPartials = kSums == 0 ? 1 : Cfg::kConsumerWGs * kWGRowPartials;
  static constexpr int kRowsHeld = kSums == 0 ? 1 : kTileM;
  using SmemLayoutA = decltype(cute::tile_to_shape(typename Cfg::SmemAtomA{},
                                                   cute::Shape<cute::Int<kTileM>, cute::Int<Cfg::kTileK>, cute::Int<Cfg::kStages>>{}));
  using SmemLayoutB = decltype(cute::tile_to_shape(typename Cfg::SmemAtomB{},
                                                   cute::Shape<cute::Int<kTileN>, cute::Int<Cfg::kTileK>, cute::Int<Cfg::kStages>>{}));
  using SmemLayoutD = decltype(cute::tile_to_shape(typename Cfg::SmemAtomD{}, cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>>{}));
  static constexpr int kStageA = kTileM * Cfg::kTileK, kStageB = kTileN * Cfg::kTileK;  // elements a stage
  static constexpr uint32_t kStageBytes = static_cast<uint32_t>((kStageA + kStageB) * sizeof(Element));

  template <class T, class Stride>
  static auto gmem(T* ptr, int rows, int k, int l, Stride stride) {
    return cute::make_tensor(cute::make_gmem_ptr(ptr), cute::make_layout(cute::make_shape(rows, k, l), stride));
  }
  using TmaA = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem(static_cast<Element const*>(nullptr), 0, 0, 0, typename Cfg::StrideA{}),
                                            cute::take<0, 2>(SmemLayoutA{}), cute::Shape<cute::Int<kTileM>, cute::Int<Cfg::kTileK>>{},
                                            cute::_1{}));
  using TmaB = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem(static_cast<Element const*>(nullptr), 0, 0, 0, typename Cfg::StrideB{}),
                                            cute::take<0, 2>(SmemLayoutB{}), cute::Shape<cute::Int<kTileN>, cute::Int<Cfg::kTileK>>{},
                                            cute::_1{}));
  using TmaD = decltype(cute::make_tma_copy(cute::SM90_TMA_STORE{}, gmem(static_cast<ElementD*>(nullptr), 0, 0, 0, typename Cfg::StrideD{}),
                                            SmemLayoutD{}, cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>>{}, cute::_1{}));

  struct SharedStorage {
    alignas(1024) Element a[cute::cosize_v<SmemLayoutA>];
    alignas(1024) Element b[cute::cosize_v<SmemLayoutB>];
    alignas(1024) ElementD d[cute::cosize_v<SmemLayoutD>];
    napkin::device::StageRing<Cfg::kStages> ring;
    float row_part[kSums > 0 ? kSums : 1][kRowPartials];  // row sums: each thread's partials
    float rows[kRowsHeld][kSumSlots];  // row sums and what finish() derives: the tile's rows, for the epilogue
    alignas(16) float gather[Cfg::kConsumerWGs > 1 ? kTileM * kTileN : 1];  // two warpgroups: the second's accumulator
    int last;  // the split path: this CTA is its tile's last split
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage));
  static constexpr int kAccValues = kTileM * kTileN / Cfg::kWarpgroupThreads;  // a consumer thread's

  // What the generated entry fills (tiles, splits and workspace are run_prologue's).
  struct Params {
    const Element* a;
    typename Cfg::StrideA da;
    const Element* b;
    typename Cfg::StrideB db;
    ElementD* d;
    typename Cfg::StrideD dd;
    int m, n, k, l;
    int tiles_m, tiles_n;  // output tiles along M and N (per batch)
    int splits;            // K ranges per output tile (0: prologue_splits)
    float* partial;        // splits > 1: [tile][split][tile_m x tile_n + sums x tile_m] f32 partial sums
    int* arrivals;         // splits > 1: per output tile, zero between launches
    typename Output::Arguments epilogue;  // what the epilogue reads besides the accumulator
    typename RowSums::Arguments sums;     // what the row sums read and where they are stored
  };
  // f32 values of one split's partial sums: the tile's, then each row sum's.
  static constexpr int kPartialElems = kTileM * kTileN + kSums * kTileM;
  // The kernel's parameters: the above and the TMA descriptors.
  struct LaunchParams {
    Params p;
    TmaA tma_a;
    TmaB tma_b;
    TmaD tma_d;
    int units;    // tiles x splits
    int k_tiles;  // K tiles of a whole tile
  };
};

// One work unit of a persistent CTA: an output tile's split, its K tiles [first, first + count).
struct PrologueUnit {
  int m_tile, n_tile, split, batch, first, count;
};
// Unit order: M fastest, then N, then the split, then the batch (a split's CTAs run together).
template <class Params>
__device__ __forceinline__ PrologueUnit prologue_unit(Params const& p, int unit, int k_tiles) {
  PrologueUnit u;
  u.m_tile = unit % p.tiles_m;
  unit /= p.tiles_m;
  u.n_tile = unit % p.tiles_n;
  unit /= p.tiles_n;
  u.split = unit % p.splits;
  u.batch = unit / p.splits;
  const int per_split = (k_tiles + p.splits - 1) / p.splits;
  u.first = u.split * per_split;
  u.count = max(0, min(k_tiles, u.first + per_split) - u.first);
  return u;
}

// The kCount elements of one stage in shared memory through `f`, 8 a thread at a time (16-byte
// accesses, conflict-free). Elementwise, so the stage's swizzled layout does not matter. (A
// loop with a fixed trip count instead unrolls into every round's loads at once: 166-168
// registers a thread beside the row sums' pass, a CTA a SM fewer.)
template <class F, class T, int kThreads, int kCount>
__device__ __forceinline__ void transform_stage(T* stage, int thread) {
  CUTLASS_PRAGMA_UNROLL
  for (int i = thread * 8; i < kCount; i += kThreads * 8) {
    uint4 v = *reinterpret_cast<const uint4*>(stage + i);
    T* e = reinterpret_cast<T*>(&v);
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < 8; ++j) e[j] = F{}(e[j]);
    *reinterpret_cast<uint4*>(stage + i) = v;
  }
}

// Named barriers (0 is __syncthreads): of the first consumer warpgroup (split, epilogue, sums),
// of both (gather, gathered), and each warpgroup's own (transformed: 6 + its index).
constexpr int kPrologueSplitBarrier = 1;
constexpr int kPrologueEpilogueBarrier = 2;
constexpr int kPrologueSumsBarrier = 3;
constexpr int kPrologueGatherBarrier = 4;    // the gather buffer free
constexpr int kPrologueGatheredBarrier = 5;  // the gather buffer written
constexpr int kPrologueTransformedBarrier = 6;

template <class K>
__global__ void __launch_bounds__(K::Cfg_::kThreads, 1) prologue_gemm_kernel(const __grid_constant__ typename K::LaunchParams lp) {
  using namespace cute;
  using Cfg = typename K::Cfg_;
  using T = typename Cfg::Element;
  constexpr int kStages = Cfg::kStages, kConsumers = Cfg::kConsumerThreads, kWGs = Cfg::kConsumerWGs;
  constexpr int kWG = Cfg::kWarpgroupThreads;  // a warpgroup's threads; the first alone runs the epilogue
  extern __shared__ __align__(1024) char smem_raw[];
  auto& ss = *reinterpret_cast<typename K::SharedStorage*>(smem_raw);
  auto const& p = lp.p;
  const int thread = static_cast<int>(threadIdx.x);
  const int warp = cutlass::canonical_warp_idx_sync();
  const auto tile = typename Cfg::TileShape{};
  if (thread == 0) ss.ring.init(kWG / 32);  // each warp of the stage's warpgroup releases it
  cutlass::arch::fence_barrier_init();
  __syncthreads();
  Tensor sA = make_tensor(make_smem_ptr(ss.a), typename K::SmemLayoutA{});  // (BM, BK, stages)
  Tensor sB = make_tensor(make_smem_ptr(ss.b), typename K::SmemLayoutB{});  // (BN, BK, stages)
  Tensor sD = make_tensor(make_smem_ptr(ss.d), typename K::SmemLayoutD{});  // (BM, BN)

  if (warp == kConsumers / 32) {  // the producer
    if (cute::elect_one_sync()) {
      cute::prefetch_tma_descriptor(lp.tma_a.get_tma_descriptor());
      cute::prefetch_tma_descriptor(lp.tma_b.get_tma_descriptor());
      cute::prefetch_tma_descriptor(lp.tma_d.get_tma_descriptor());
      Tensor mA = lp.tma_a.get_tma_tensor(make_shape(p.m, p.k, p.l));
      Tensor mB = lp.tma_b.get_tma_tensor(make_shape(p.n, p.k, p.l));
      auto tma_a = lp.tma_a.get_slice(0);
      auto tma_b = lp.tma_b.get_slice(0);
      Tensor tAsA = tma_a.partition_D(sA);
      Tensor tBsB = tma_b.partition_D(sB);
      napkin::device::RingState<kStages> st;
      for (int unit = static_cast<int>(blockIdx.x); unit < lp.units; unit += static_cast<int>(gridDim.x)) {
        const PrologueUnit u = prologue_unit(p, unit, lp.k_tiles);
        Tensor tAgA = tma_a.partition_S(local_tile(mA(_, _, u.batch), select<0, 2>(tile), make_coord(u.m_tile, _)));
        Tensor tBgB = tma_b.partition_S(local_tile(mB(_, _, u.batch), select<1, 2>(tile), make_coord(u.n_tile, _)));
        for (int i = 0; i < u.count; ++i) {
          ss.ring.producer_acquire(st, K::kStageBytes);
          copy(lp.tma_a.with(ss.ring.full_barrier(st)), tAgA(_, _, _, u.first + i), tAsA(_, _, _, st.index));
          copy(lp.tma_b.with(ss.ring.full_barrier(st)), tBgB(_, _, _, u.first + i), tBsB(_, _, _, st.index));
          st.advance();
        }
      }
    }
    return;
  }

  // The consumer warpgroups: wg's thread wt. Both hold the same fragments of the whole tile.
  const int wg = __shfl_sync(0xffffffffu, thread / kWG, 0), wt = thread % kWG;  // wg warp-uniform to the compiler
  typename Cfg::TiledMma mma;
  auto thr_mma = mma.get_thread_slice(wt);
  Tensor tCsA = thr_mma.partition_A(sA);  // (MMA, MMA_M, MMA_K, stages)
  Tensor tCsB = thr_mma.partition_B(sB);
  Tensor tCrA = thr_mma.make_fragment_A(tCsA);  // shared-memory descriptors
  Tensor tCrB = thr_mma.make_fragment_B(tCsB);
  Tensor acc = partition_fragment_C(mma, take<0, 2>(tile));
  Tensor tCsD = thr_mma.partition_C(sD);  // this thread's accumulators' places in the output tile
  Tensor tCcD = thr_mma.partition_C(make_identity_tensor(take<0, 2>(tile)));  // and their (m, n) in the tile
  constexpr bool kTransformA = !std::is_same_v<typename K::PrologueA, cute::identity>;
  constexpr bool kTransformB = !std::is_same_v<typename K::PrologueB, cute::identity>;
  const bool releaser = thread % 32 == 0;
  napkin::device::RingState<kStages> st;
  using ElementD = typename Cfg::ElementD;
  typename K::Output epilogue;
  typename K::RowSums row_sums;
  constexpr int kSums = K::kSums;
  // Row sums of the stages a warpgroup reads, by its thread wt. K-major A: wt sums row
  // wt % kTileM over its run of K, from (wt / kTileM) x kRunK; its partial lands at
  // row_part[j][wg x kWGRowPartials + wt].
  constexpr int kRunK = Cfg::kTileK * K::kTileM / kWG;
  static_assert(kWG % K::kTileM == 0 && Cfg::kTileK % (kWG / K::kTileM) == 0, "whole runs of K a thread");
  const int sum_row = wt % K::kTileM, sum_k0 = wt / K::kTileM * kRunK;
  // M-major A: wt sums rows 8c..8c+7 (one 16-byte chunk, c = wt % kChunks) over kSegK k from
  // (wt / kChunks) x kSegK; its partials land at row_part[j][wg x kWGRowPartials + (wt / kChunks) x kTileM + 8c + r].
  constexpr int kChunks = K::kTileM / 8, kSegs = kWG / kChunks, kSegK = Cfg::kTileK / kSegs;
  static_assert(kSums == 0 || Cfg::kAKMajorIn || kSegs * K::kTileM == K::kWGRowPartials, "row_part holds every partial");
  static_assert(Cfg::kTileK % kSegs == 0, "whole runs of k a thread");
  const int sum_chunk = wt % kChunks, sum_seg = wt / kChunks;
  constexpr int kRowsAThread = Cfg::kAKMajorIn ? 1 : 8;
  float sums[kRowsAThread][kSums > 0 ? kSums : 1];
  // A thread's row-sum elements as 16-byte chunks (K-major: chunk i is k = sum_k0 + 8i ..
  // + 7 of its row; M-major: its 8 rows at k = sum_seg x kSegK + i), each at its offset in a
  // stage of A, taken once: the swizzle's arithmetic stays out of the K loop.
  constexpr int kSumChunks = Cfg::kAKMajorIn ? kRunK / 8 : kSegK;
  int u_batch = 0;  // the unit's batch, for the summands
  auto chunk_offset = [&](int i) {
    return Cfg::kAKMajorIn ? static_cast<int>(&sA(sum_row, sum_k0 + 8 * i, 0) - ss.a)
                           : static_cast<int>(&sA(sum_chunk * 8, sum_seg * kSegK + i, 0) - ss.a);
  };
  // Adds chunk i of the thread's row-sum elements (e: its 8 values as the WGMMAs read them) of
  // the K tile at k_tile; kChecked: the tile crosses K's edge, past which the stage holds the
  // prologue of TMA's zero fill, which the sums skip.
  auto chunk_k = [&](int i, int64_t k_tile) {  // the k of chunk i's first element
    return k_tile + (Cfg::kAKMajorIn ? sum_k0 + 8 * i : sum_seg * kSegK + i);
  };
  auto add_chunk = [&](const T* e, int i, int64_t k_tile, auto checked) {
    constexpr bool kChecked = decltype(checked)::value;
    if constexpr (Cfg::kAKMajorIn) {
      const int64_t k = chunk_k(i, k_tile);
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < 8; ++j)
        if (!kChecked || k + j < p.k) row_sums.add(sums[0], static_cast<float>(e[j]), k + j, u_batch, p.sums);
    } else {
      const int64_t k = chunk_k(i, k_tile);
      if (!kChecked || k < p.k) {
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < 8; ++r) row_sums.add(sums[r], static_cast<float>(e[r]), k, u_batch, p.sums);
      }
    }
  };
  // Row sums of an M-major A and its prologue in one pass: each thread transforms its own
  // row-sum elements (every element of the stage once; a warp's 16-byte accesses cover whole
  // 128-byte rows, conflict-free), stores them back and sums them as rounded for the WGMMAs.
  // (K-major: two passes, the sums after the WGMMAs are issued. One pass there measured 3.7 %
  // slower on the H100 with its chunks in turn, and unrolled it holds a chunk's summand leaves at
  // once: 145 registers, a CTA a SM fewer. bench/NOTES.md, 2026-11-27 eighth.)
  constexpr bool kSumsInTransform = kTransformA && kSums > 0 && !Cfg::kAKMajorIn;

  for (int unit = static_cast<int>(blockIdx.x); unit < lp.units; unit += static_cast<int>(gridDim.x)) {
    const PrologueUnit u = prologue_unit(p, unit, lp.k_tiles);
    u_batch = u.batch;
    clear(acc);
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRowsAThread; ++r)
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kSums; ++j) sums[r][j] = 0.f;
    napkin::device::RingState<kStages> previous;
    bool holds_previous = false;
    // Every warpgroup walks the unit's stages; warpgroup wg reads K tiles wg, wg + kWGs, ...
    for (int i = 0; i < u.count; ++i, st.advance()) {
      if (kWGs > 1 && i % kWGs != wg) continue;
      st = napkin::device::warp_uniform(st);
      ss.ring.consumer_wait(st);
      const int64_t k_tile = static_cast<int64_t>(u.first + i) * Cfg::kTileK;
      const bool whole_tile = k_tile + Cfg::kTileK <= p.k;
      if constexpr (kTransformA || kTransformB) {
        if constexpr (kSumsInTransform) {
          T* stage_a = ss.a + st.index * K::kStageA;
          auto chunk = [&](int c, auto checked) {
            T* at = stage_a + chunk_offset(c);
            uint4 v = *reinterpret_cast<const uint4*>(at);
            T* e = reinterpret_cast<T*>(&v);
            CUTLASS_PRAGMA_UNROLL
            for (int j = 0; j < 8; ++j) e[j] = typename K::PrologueA{}(e[j]);
            *reinterpret_cast<uint4*>(at) = v;
            add_chunk(e, c, k_tile, checked);
          };
          auto pass = [&](auto checked) {
            CUTLASS_PRAGMA_UNROLL
            for (int c = 0; c < kSumChunks; ++c) chunk(c, checked);
          };
          if (whole_tile) pass(std::false_type{});
          else pass(std::true_type{});
        } else if constexpr (kTransformA) {
          transform_stage<typename K::PrologueA, T, kWG, K::kStageA>(ss.a + st.index * K::kStageA, wt);
        }
        if constexpr (kTransformB) transform_stage<typename K::PrologueB, T, kWG, K::kStageB>(ss.b + st.index * K::kStageB, wt);
        cutlass::arch::fence_view_async_shared();  // the generic proxy's writes, before WGMMA reads them
        cutlass::arch::NamedBarrier::sync(kWG, kPrologueTransformedBarrier + (kWGs > 1 ? wg : 0));
      }
      warpgroup_fence_operand(acc);
      warpgroup_arrive();
      CUTE_UNROLL
      for (int kb = 0; kb < size<2>(tCrA); ++kb) cute::gemm(mma, tCrA(_, _, kb, st.index), tCrB(_, _, kb, st.index), acc);
      warpgroup_commit_batch();
      if constexpr (kSums > 0 && !kSumsInTransform) {  // while the WGMMAs run: both only read the stage
        const T* stage_a = ss.a + st.index * K::kStageA;
        auto pass = [&](auto checked) {
#pragma unroll 1
          for (int c = 0; c < kSumChunks; ++c) {
            if (decltype(checked)::value && chunk_k(c, k_tile) >= p.k) break;  // past the edge (k ascends with c)
            const uint4 v = *reinterpret_cast<const uint4*>(stage_a + chunk_offset(c));
            add_chunk(reinterpret_cast<const T*>(&v), c, k_tile, checked);
          }
        };
        if (whole_tile) pass(std::false_type{});
        else pass(std::true_type{});
      }
      if constexpr (kWGs == 1) {
        warpgroup_wait<1>();  // the previous stage's WGMMAs have retired
        warpgroup_fence_operand(acc);
        if (holds_previous && releaser) ss.ring.consumer_release(previous);
        previous = st;
        holds_previous = true;
      } else {
        warpgroup_wait<0>();  // the other warpgroup's turn runs meanwhile; the stage is free at once
        warpgroup_fence_operand(acc);
        if (releaser) ss.ring.consumer_release(st);
      }
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc);
    if (holds_previous && releaser) ss.ring.consumer_release(previous);
    auto store_row_partials = [&] {  // this warpgroup's row partials, for the first to sum
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kSums; ++j) {
        float* part = ss.row_part[j] + wg * K::kWGRowPartials;
        if constexpr (Cfg::kAKMajorIn) {
          part[wt] = sums[0][j];
        } else {
          CUTLASS_PRAGMA_UNROLL
          for (int r = 0; r < 8; ++r) part[sum_seg * K::kTileM + sum_chunk * 8 + r] = sums[r][j];
        }
      }
    };
    if (kSums > 0 && wg == 0) store_row_partials();
    if constexpr (kWGs > 1) {
      // The second warpgroup's accumulator added to the first's through shared memory (value i
      // of thread wt at i x kWG + wt) once the first has read the previous unit's, with its row
      // partials (the first has summed the previous unit's by then); then the second goes on to
      // the next unit. Both warpgroups run the same barrier instructions.
      cutlass::arch::NamedBarrier::sync(kConsumers, kPrologueGatherBarrier);  // the buffer free
      if (wg > 0) {
        if (kSums > 0) store_row_partials();
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < K::kAccValues; ++i) ss.gather[i * kWG + wt] = acc(i);
      }
      cutlass::arch::NamedBarrier::sync(kConsumers, kPrologueGatheredBarrier);
      if (wg == 0) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < K::kAccValues; ++i) acc(i) += ss.gather[i * kWG + wt];
      }
      if (wg > 0) continue;
    }
    // From here on the first warpgroup alone.
    if constexpr (kSums > 0) {  // each row's partials summed in a fixed order (segment by segment), into ss.rows
      // Partial (segment s, row m) at row_part[j][s x kTileM + m] (a warpgroup's segments after the
      // first's): K-major, thread wt holds segment wt / kTileM of row wt % kTileM; M-major, segment
      // wt / kChunks of rows 8 (wt % kChunks) + r.
      constexpr int kSegments = kWGs * (Cfg::kAKMajorIn ? kWG / K::kTileM : kSegs);
      cutlass::arch::NamedBarrier::sync(kWG, kPrologueSumsBarrier);
      if (thread < K::kTileM) {
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kSums; ++j) {
          float s = 0.f;
          for (int seg = 0; seg < kSegments; ++seg) s += ss.row_part[j][seg * K::kTileM + thread];
          ss.rows[thread][j] = s;
        }
      }
    }
    if (p.splits > 1) {
      // This split's partial sums, stored where the tile's last split reads them; that split sums
      // them in split order (the same result whichever arrives last).
      const int tile_id = (u.batch * p.tiles_n + u.n_tile) * p.tiles_m + u.m_tile;
      constexpr int kTileElems = K::kTileM * K::kTileN;
      float* mine = p.partial + (static_cast<int64_t>(tile_id) * p.splits + u.split) * K::kPartialElems;
      // In the accumulators' own order, four values a thread at a time (values 4j..4j+3 of
      // thread t at float4 j x kWG + t): every split holds the same fragment, so no coordinates
      // are needed, and each 16-byte store is coalesced.
      static_assert(decltype(size(acc))::value % 4 == 0 && K::kPartialElems % 4 == 0, "16-byte partials");
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(acc); i += 4)
        __stcg(reinterpret_cast<float4*>(mine) + i / 4 * kWG + thread, make_float4(acc(i), acc(i + 1), acc(i + 2), acc(i + 3)));
      if constexpr (kSums > 0)
        if (thread < K::kTileM)
          for (int j = 0; j < kSums; ++j) __stcg(mine + kTileElems + j * K::kTileM + thread, ss.rows[thread][j]);
      __threadfence();
      cutlass::arch::NamedBarrier::sync(kWG, kPrologueSplitBarrier);
      if (thread == 0) ss.last = atomicAdd(p.arrivals + tile_id, 1) == p.splits - 1;
      cutlass::arch::NamedBarrier::sync(kWG, kPrologueSplitBarrier);
      const bool last = ss.last;
      cutlass::arch::NamedBarrier::sync(kWG, kPrologueSplitBarrier);  // ss.last read before the next unit's write
      if (!last) continue;
      __threadfence();
      const float* all = p.partial + static_cast<int64_t>(tile_id) * p.splits * K::kPartialElems;
      clear(acc);
      auto partial = [&](int s, int i) { return __ldcg(reinterpret_cast<const float4*>(all + s * K::kPartialElems) + i / 4 * kWG + thread); };
      int s = 0;
      for (; s + 2 <= p.splits; s += 2) {  // two splits' loads in flight, added in split order
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(acc); i += 4) {
          const float4 x = partial(s, i), y = partial(s + 1, i);
          acc(i) = acc(i) + x.x + y.x, acc(i + 1) = acc(i + 1) + x.y + y.y;
          acc(i + 2) = acc(i + 2) + x.z + y.z, acc(i + 3) = acc(i + 3) + x.w + y.w;
        }
      }
      if (s < p.splits) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(acc); i += 4) {
          const float4 x = partial(s, i);
          acc(i) += x.x, acc(i + 1) += x.y, acc(i + 2) += x.z, acc(i + 3) += x.w;
        }
      }
      if constexpr (kSums > 0)
        if (thread < K::kTileM)
          for (int j = 0; j < kSums; ++j) {
            float v = 0.f;
            for (int s = 0; s < p.splits; ++s) v += __ldcg(all + s * K::kPartialElems + kTileElems + j * K::kTileM + thread);
            ss.rows[thread][j] = v;
          }
      if (thread == 0) p.arrivals[tile_id] = 0;
    }
    // The epilogue, two accumulator values at a time (a pair adjacent along N in WGMMA's C
    // layout), into the shared-memory tile; one thread stores it with TMA, which clips the rows
    // and columns past the tensor's edge.
    if constexpr (kSums > 0) {  // the finished row sums to memory, once per row (N tile 0)
      const int m = u.m_tile * K::kTileM + thread;
      if (thread < K::kTileM) row_sums.finish(ss.rows[thread]);
      if (u.n_tile == 0 && thread < K::kTileM && m < p.m) row_sums.store(ss.rows[thread], m, u.batch, p.sums);
    }
    if (thread == 0) tma_store_wait<0>();  // the previous unit's store has read sD
    cutlass::arch::NamedBarrier::sync(kWG, kPrologueEpilogueBarrier);  // also: ss.rows written
    static_assert(decltype(size(acc))::value % 2 == 0, "WGMMA's accumulators come in pairs");
    // kBatch values at a time, each batch's values before its stores (no store between: the
    // leaves' global loads issue together; 16 or more took gated_softplus from 128 registers a
    // thread to 152-168, a CTA a SM fewer).
    constexpr int kBatch = decltype(size(acc))::value < 8 ? decltype(size(acc))::value : 8;
    static_assert(decltype(size(acc))::value % kBatch == 0 && kBatch % 2 == 0, "whole batches of pairs");
    CUTLASS_PRAGMA_UNROLL
    for (int i0 = 0; i0 < size(acc); i0 += kBatch) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = i0; i < i0 + kBatch; ++i) {
        const int row = int(get<0>(tCcD(i)));
        const int m = min(u.m_tile * K::kTileM + row, p.m - 1);
        const int n = min(u.n_tile * K::kTileN + int(get<1>(tCcD(i))), p.n - 1);
        acc(i) = epilogue(acc(i), m, n, u.batch, p.epilogue, ss.rows[kSums > 0 ? row : 0]);
      }
      CUTLASS_PRAGMA_UNROLL
      for (int i = i0; i < i0 + kBatch; i += 2) {
        if constexpr (Cfg::kDNMajorOut) {  // the pair is adjacent in the tile's rows (within a 16-byte chunk)
          cutlass::Array<ElementD, 2> pair;
          pair[0] = ElementD(acc(i));
          pair[1] = ElementD(acc(i + 1));
          *reinterpret_cast<cutlass::Array<ElementD, 2>*>(&tCsD(i)) = pair;
        } else {
          tCsD(i) = ElementD(acc(i));
          tCsD(i + 1) = ElementD(acc(i + 1));
        }
      }
    }
    tma_store_fence();  // the generic proxy's writes, before the TMA store reads them
    cutlass::arch::NamedBarrier::sync(kWG, kPrologueEpilogueBarrier);  // also: ss.rows read before the next unit's
    if (thread == 0) {
      Tensor mD = lp.tma_d.get_tma_tensor(make_shape(p.m, p.n, p.l));
      auto tma_d = lp.tma_d.get_slice(0);
      copy(lp.tma_d, tma_d.partition_S(sD), tma_d.partition_D(local_tile(mD(_, _, u.batch), take<0, 2>(tile), make_coord(u.m_tile, u.n_tile))));
      tma_store_arrive();
    }
  }
  if (thread == 0) tma_store_wait<0>();  // shared memory outlives the last store's reads
}

// Resident CTAs of `kernel` a SM (its threads and shared memory), asked once per device.
template <class Kernel>
int prologue_residency(Kernel kernel, int threads, int smem_bytes, int device) {
  static std::atomic<int> counts[64] = {};
  const bool cached = device >= 0 && device < 64;
  int n = cached ? counts[device].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem_bytes) != cudaSuccess || n < 1) n = 1;
    if (cached) counts[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Runs the prologue GEMM over modes checked by Modes (each operand's contiguous mode unit-stride,
// 16-byte aligned, other strides multiples of 16 bytes: TMA's rules): "" or why not.
template <class K>
std::string run_prologue(typename K::Params p, cudaStream_t stream) {
  using namespace cute;
  using Cfg = typename K::Cfg_;
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return std::string("cudaGetDevice: ") + cudaGetErrorString(e);
  p.tiles_m = (p.m + K::kTileM - 1) / K::kTileM;
  p.tiles_n = (p.n + K::kTileN - 1) / K::kTileN;
  const int64_t tiles = static_cast<int64_t>(p.tiles_m) * p.tiles_n * p.l;
  const int k_tiles = (p.k + Cfg::kTileK - 1) / Cfg::kTileK;
  const int sms = sm_count(device);
  auto kernel = prologue_gemm_kernel<K>;
  if (K::kSmemBytes >= 48 * 1024)
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, K::kSmemBytes); e != cudaSuccess)
      return std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e);
  const int resident_per_sm = prologue_residency(kernel, Cfg::kThreads, K::kSmemBytes, device);
  if (p.splits <= 0) p.splits = prologue_splits(tiles, k_tiles, sms, resident_per_sm);
  if (tiles * p.splits > INT_MAX) return "the prologue GEMM has more tiles than one launch's grid takes";
  if (p.m == 0 || p.n == 0 || p.l == 0) return "";
  if (p.splits > 1) {
    if (cudaError_t e = napkin::host::split_workspace(stream, static_cast<size_t>(tiles) * p.splits * K::kPartialElems,
                                                    static_cast<size_t>(tiles), &p.partial, &p.arrivals);
        e != cudaSuccess)
      return std::string("the prologue GEMM's split workspace: ") + cudaGetErrorString(e);
  }
  typename K::LaunchParams lp{p,
                              make_tma_copy(SM90_TMA_LOAD{}, K::gmem(p.a, p.m, p.k, p.l, p.da), take<0, 2>(typename K::SmemLayoutA{}),
                                            Shape<Int<K::kTileM>, Int<Cfg::kTileK>>{}, _1{}),
                              make_tma_copy(SM90_TMA_LOAD{}, K::gmem(p.b, p.n, p.k, p.l, p.db), take<0, 2>(typename K::SmemLayoutB{}),
                                            Shape<Int<K::kTileN>, Int<Cfg::kTileK>>{}, _1{}),
                              make_tma_copy(SM90_TMA_STORE{}, K::gmem(p.d, p.m, p.n, p.l, p.dd), typename K::SmemLayoutD{},
                                            Shape<Int<K::kTileM>, Int<K::kTileN>>{}, _1{}),
                              static_cast<int>(tiles * p.splits), k_tiles};
  const int64_t resident = static_cast<int64_t>(sms) * resident_per_sm;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(lp.units, resident));
  kernel<<<grid, Cfg::kThreads, K::kSmemBytes, stream>>>(lp);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return std::string("CUDA error: ") + cudaGetErrorString(e);
  return "";
}

}  // namespace napkin::gemm
