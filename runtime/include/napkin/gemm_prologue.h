// SPDX-License-Identifier: Apache-2.0
// The prologue GEMM of the device library: a GEMM whose operands are elementwise functions of
// the tensors in memory, applied as each tile is loaded (src/emit/gemm_kernel.h writes the
// functions from the diagram):
//
//   D[m n l] = Epilogue( sum_k PrologueA(A[m k l]) PrologueB(B[n k l]) )    in f32, stored as ElementD
//
// A plan fuses an operand's elementwise producer here instead of materialising it, where the
// GEMM is memory-bound anyway (one of M, N or K small: linear attention's feature maps feeding
// its state and its output). The TMA/WGMMA mainloop has no place for such code (its operands go
// from shared memory to the tensor cores), and CUTLASS's multistage collective for mma.sync
// transforms each fragment in registers, once for every warp that reads it (measured slower:
// bench/NOTES.md, 2026-11-27). So the mainloop is this file's, over CuTe's atoms: cp.async into
// shared-memory stages, each stage's operand transformed there once (16 bytes a thread), then
// ldmatrix and mma.sync (SM80 atoms, which Hopper runs at about half its WGMMA rate). The grid,
// the split along K and the epilogue are this file's too.
//
// Contract of the prologues: stateless functors from the operand's element to the operand's
// element, whose value at 0 is finite. The mainloop zero-fills loads past the tensor's edge; a
// zero turned into f(0) multiplies the other operand's zero (along K) or lands in a row or
// column that is never stored (along M and N), so at most one operand may map 0 to other than 0
// (the plan fuses a prologue into one operand only).
//
// Split along K: where the output tiles are fewer than two per SM (a state of d x e per head
// reduced over a long sequence), each tile's K range is cut into splits; each split stores its
// partial sums to an f32 workspace, and the last split of a tile to arrive (a counter per tile)
// sums them in split order, zeroes the counter for the next launch, and runs the epilogue. The
// workspace belongs to the (device, stream) pair; its counters are zeroed when allocated.
#pragma once

#include "napkin/gemm_kernel.h"
#include "napkin/prologue_splits.h"

#include <cute/arch/copy_sm80.hpp>
#include <cute/atom/mma_atom.hpp>

#include <map>
#include <mutex>
#include <utility>

namespace napkin::gemm {

// One operand's loads for the cp.async mainloop: 16-bit elements, 64 of them along K per stage,
// by kThreads threads (a multiple of 64) 16 bytes each. K-major (K contiguous): rows of 64
// elements (128 bytes) swizzled for ldmatrix; MN-major: columns of 64 elements, read transposed
// (ldmatrix.trans).
template <class T, bool kKMajor, int kThreads>
struct Sm80Operand;
template <class T, int kThreads>
struct Sm80Operand<T, true, kThreads> {
  using SmemLayoutAtom = decltype(cute::composition(cute::Swizzle<3, 3, 3>{},
                                                    cute::Layout<cute::Shape<cute::_8, cute::_64>, cute::Stride<cute::_64, cute::_1>>{}));
  using SmemCopyAtom = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, T>;
  using GmemTiledCopy = decltype(cute::make_tiled_copy(
      cute::Copy_Atom<cute::SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, T>{},
      cute::Layout<cute::Shape<cute::Int<kThreads / 8>, cute::_8>, cute::Stride<cute::_8, cute::_1>>{},  // rows x 8 along K
      cute::Layout<cute::Shape<cute::_1, cute::_8>>{}));  // 8 elements (16 bytes) each
};
template <class T, int kThreads>
struct Sm80Operand<T, false, kThreads> {
  using SmemLayoutAtom = decltype(cute::composition(cute::Swizzle<3, 3, 3>{},
                                                    cute::Layout<cute::Shape<cute::_64, cute::_8>, cute::Stride<cute::_1, cute::_64>>{}));
  using SmemCopyAtom = cute::Copy_Atom<cute::SM75_U16x8_LDSM_T, T>;
  using GmemTiledCopy = decltype(cute::make_tiled_copy(
      cute::Copy_Atom<cute::SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, T>{},
      cute::Layout<cute::Shape<cute::_8, cute::Int<kThreads / 8>>, cute::Stride<cute::_1, cute::_8>>{},  // 8 along M x K
      cute::Layout<cute::Shape<cute::_8, cute::_1>>{}));  // 8 elements along M each
};

// The configuration: operand dtype (bf16 or f16), output dtype, each operand's major mode and the
// output's, the CTA tile (kTileM, kTileN multiples of 64; K tile 64), the stages, and the warps
// along M (of four).
template <class ElementAB, class ElementD_, bool kAKMajor, bool kBKMajor, bool kDNMajor, int kTileM, int kTileN, int kStages_,
          int kWarpsM = 2>
struct PrologueConfig {
  static_assert(kWarpsM == 1 || kWarpsM == 2 || kWarpsM == 4, "four warps, kWarpsM of them along M");
  static constexpr int kWarpsN = 4 / kWarpsM;
  static_assert(16 * kWarpsM <= kTileM && 16 * kWarpsN <= kTileN, "each warp at least 16 x 16 of the tile");
  static_assert(kTileM % 64 == 0 && kTileN % 64 == 0, "the prologue GEMM's tiles are multiples of 64");
  using Element = ElementAB;
  using ElementD = ElementD_;
  static constexpr int kTileK = 64;
  static constexpr int kStages = kStages_;
  static constexpr bool kDNMajorOut = kDNMajor;
  using TileShape = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Int<kTileK>>;
  // Strides in CUTLASS's modes (A (M, K, L), B (N, K, L), D (M, N, L)), the unit one static.
  using StrideA = std::conditional_t<kAKMajor, cute::Stride<int64_t, cute::_1, int64_t>, cute::Stride<cute::_1, int64_t, int64_t>>;
  using StrideB = std::conditional_t<kBKMajor, cute::Stride<int64_t, cute::_1, int64_t>, cute::Stride<cute::_1, int64_t, int64_t>>;
  using StrideD = std::conditional_t<kDNMajor, cute::Stride<int64_t, cute::_1, int64_t>, cute::Stride<cute::_1, int64_t, int64_t>>;
  using MmaAtom = std::conditional_t<std::is_same_v<ElementAB, cutlass::half_t>, cute::SM80_16x8x16_F32F16F16F32_TN,
                                     cute::SM80_16x8x16_F32BF16BF16F32_TN>;
  // Four warps, kWarpsM x kWarpsN over the tile, each warp 16 x 16 a step. A warp transforms
  // the operand fragments it loads: an operand split over fewer warps is transformed fewer times.
  using TiledMma = decltype(cute::make_tiled_mma(
      MmaAtom{}, cute::Layout<cute::Shape<cute::Int<kWarpsM>, cute::Int<kWarpsN>, cute::_1>>{},
      cute::Tile<cute::Int<16 * kWarpsM>, cute::Int<16 * kWarpsN>, cute::_16>{}));
  static constexpr int kThreads = 128;
  using OperandA = Sm80Operand<ElementAB, kAKMajor, kThreads>;
  using OperandB = Sm80Operand<ElementAB, kBKMajor, kThreads>;
};

template <class Cfg, class PrologueA_, class PrologueB_, template <class> class Epilogue>
struct PrologueKernel {
  using Cfg_ = Cfg;
  using PrologueA = PrologueA_;
  using PrologueB = PrologueB_;
  using Output = Epilogue<float>;
  using Element = typename Cfg::Element;
  using ElementD = typename Cfg::ElementD;
  using SmemLayoutA = decltype(cute::tile_to_shape(
      typename Cfg::OperandA::SmemLayoutAtom{},
      cute::make_shape(cute::size<0>(typename Cfg::TileShape{}), cute::size<2>(typename Cfg::TileShape{}), cute::Int<Cfg::kStages>{})));
  using SmemLayoutB = decltype(cute::tile_to_shape(
      typename Cfg::OperandB::SmemLayoutAtom{},
      cute::make_shape(cute::size<1>(typename Cfg::TileShape{}), cute::size<2>(typename Cfg::TileShape{}), cute::Int<Cfg::kStages>{})));
  static constexpr int kElemsA = cute::cosize_v<SmemLayoutA>, kElemsB = cute::cosize_v<SmemLayoutB>;
  static constexpr int kSmemBytes = (kElemsA + kElemsB) * static_cast<int>(sizeof(Element));

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
    float* partial;        // splits > 1: [tile][split][tile_m][tile_n] f32 partial sums
    int* arrivals;         // splits > 1: per output tile, zero between launches
  };
};

// `count` elements of one stage in shared memory through `f`, 8 a thread at a time (16-byte
// accesses, conflict-free). Elementwise, so the stage's swizzled layout does not matter.
template <class F, class T, int kThreads>
__device__ __forceinline__ void transform_stage(T* stage, int count, int thread) {
  for (int i = thread * 8; i < count; i += kThreads * 8) {
    uint4 v = *reinterpret_cast<const uint4*>(stage + i);
    T* e = reinterpret_cast<T*>(&v);
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < 8; ++j) e[j] = F{}(e[j]);
    *reinterpret_cast<uint4*>(stage + i) = v;
  }
}

// The mainloop: K tiles [first, first + count) of gA (BM, BK, k) and gB (BN, BK, k) into acc,
// through kStages shared-memory stages filled by cp.async (16 bytes a thread a copy; vectors past
// the tensor's edge in M, N or K written as zeros), each stage's operands transformed once in
// shared memory (not per warp that reads them), then ldmatrix and mma.sync.
template <class K, class Acc, class TA, class TB>
__device__ __forceinline__ void prologue_mainloop(Acc& acc, TA gA, TB gB, int first, int count, int m_left, int n_left,
                                                  int k_total, int thread, char* smem) {
  using namespace cute;
  using Cfg = typename K::Cfg_;
  using T = typename Cfg::Element;
  constexpr int kStages = Cfg::kStages, kThreads = Cfg::kThreads;
  constexpr int kTileK = Cfg::kTileK;
  constexpr int kStageA = decltype(size<0>(typename Cfg::TileShape{}))::value * kTileK;
  constexpr int kStageB = decltype(size<1>(typename Cfg::TileShape{}))::value * kTileK;
  T* smem_a = reinterpret_cast<T*>(smem);
  T* smem_b = smem_a + K::kElemsA;
  Tensor sA = make_tensor(make_smem_ptr(smem_a), typename K::SmemLayoutA{});  // (BM, BK, stages)
  Tensor sB = make_tensor(make_smem_ptr(smem_b), typename K::SmemLayoutB{});  // (BN, BK, stages)
  typename Cfg::OperandA::GmemTiledCopy copy_a;
  typename Cfg::OperandB::GmemTiledCopy copy_b;
  auto thr_a = copy_a.get_slice(thread);
  auto thr_b = copy_b.get_slice(thread);
  Tensor tAgA = thr_a.partition_S(gA);  // (vector, M, K, k tiles)
  Tensor tAsA = thr_a.partition_D(sA);  // (vector, M, K, stages)
  Tensor tBgB = thr_b.partition_S(gB);
  Tensor tBsB = thr_b.partition_D(sB);
  Tensor tAcA = thr_a.partition_S(make_identity_tensor(make_shape(size<0>(sA), size<1>(sA))));  // -> (m, k) in the tile
  Tensor tBcB = thr_b.partition_S(make_identity_tensor(make_shape(size<0>(sB), size<1>(sB))));
  // A vector is in or out as a whole: the contiguous extent is a multiple of 8 (checked at launch).
  auto load = [&](int k_tile, int stage) {
    const int k_left = k_total - k_tile * kTileK;
    CUTLASS_PRAGMA_UNROLL
    for (int m = 0; m < size<1>(tAsA); ++m)
      CUTLASS_PRAGMA_UNROLL
      for (int k = 0; k < size<2>(tAsA); ++k) {
        if (get<0>(tAcA(0, m, k)) < m_left && get<1>(tAcA(0, m, k)) < k_left) copy(copy_a, tAgA(_, m, k, k_tile), tAsA(_, m, k, stage));
        else clear(tAsA(_, m, k, stage));
      }
    CUTLASS_PRAGMA_UNROLL
    for (int n = 0; n < size<1>(tBsB); ++n)
      CUTLASS_PRAGMA_UNROLL
      for (int k = 0; k < size<2>(tBsB); ++k) {
        if (get<0>(tBcB(0, n, k)) < n_left && get<1>(tBcB(0, n, k)) < k_left) copy(copy_b, tBgB(_, n, k, k_tile), tBsB(_, n, k, stage));
        else clear(tBsB(_, n, k, stage));
      }
  };
  typename Cfg::TiledMma mma;
  auto thr_mma = mma.get_slice(thread);
  Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));  // (MMA, MMA_M, MMA_K)
  Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));
  auto s2r_a = make_tiled_copy_A(typename Cfg::OperandA::SmemCopyAtom{}, mma);
  auto s2r_b = make_tiled_copy_B(typename Cfg::OperandB::SmemCopyAtom{}, mma);
  Tensor tCsA = s2r_a.get_slice(thread).partition_S(sA);  // (vector, MMA_M, MMA_K, stages)
  Tensor tCsB = s2r_b.get_slice(thread).partition_S(sB);
  Tensor tCrA_view = s2r_a.get_slice(thread).retile_D(tCrA);
  Tensor tCrB_view = s2r_b.get_slice(thread).retile_D(tCrB);
  constexpr bool kTransformA = !std::is_same_v<typename K::PrologueA, cute::identity>;
  constexpr bool kTransformB = !std::is_same_v<typename K::PrologueB, cute::identity>;

  CUTLASS_PRAGMA_UNROLL
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) load(first + s, s);
    cp_async_fence();
  }
  for (int i = 0; i < count; ++i) {
    const int stage = i % kStages;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile i is in; every warp is done with the stage refilled below
    if constexpr (kTransformA || kTransformB) {
      if constexpr (kTransformA) transform_stage<typename K::PrologueA, T, kThreads>(smem_a + stage * kStageA, kStageA, thread);
      if constexpr (kTransformB) transform_stage<typename K::PrologueB, T, kThreads>(smem_b + stage * kStageB, kStageB, thread);
      __syncthreads();
    }
    if (i + kStages - 1 < count) load(first + i + kStages - 1, (i + kStages - 1) % kStages);
    cp_async_fence();
    CUTLASS_PRAGMA_UNROLL
    for (int kb = 0; kb < size<2>(tCrA); ++kb) {
      copy(s2r_a, tCsA(_, _, kb, stage), tCrA_view(_, _, kb));
      copy(s2r_b, tCsB(_, _, kb, stage), tCrB_view(_, _, kb));
      cute::gemm(mma, acc, tCrA(_, _, kb), tCrB(_, _, kb), acc);
    }
  }
  cp_async_wait<0>();
}

// (One CTA a SM in the launch bounds, as measured: ptxas then takes 119-122 registers; without it,
// 76-80, not yet measured: bench/NOTES.md.)
template <class K>
__global__ void __launch_bounds__(K::Cfg_::kThreads, 1) prologue_gemm_kernel(const typename K::Params p) {
  using namespace cute;
  using Cfg = typename K::Cfg_;
  extern __shared__ __align__(128) char smem[];
  const int thread = static_cast<int>(threadIdx.x);
  // Tile order: M fastest, then N, then the split, then the batch (a split's CTAs run together).
  int t = static_cast<int>(blockIdx.x);
  const int m_tile = t % p.tiles_m;
  t /= p.tiles_m;
  const int n_tile = t % p.tiles_n;
  t /= p.tiles_n;
  const int split = t % p.splits;
  const int batch = t / p.splits;
  const auto tile = typename Cfg::TileShape{};
  Tensor mA = make_tensor(make_gmem_ptr(p.a), make_shape(p.m, p.k, p.l), p.da);
  Tensor mB = make_tensor(make_gmem_ptr(p.b), make_shape(p.n, p.k, p.l), p.db);
  Tensor gA = local_tile(mA(_, _, batch), select<0, 2>(tile), make_coord(m_tile, _));  // (BM, BK, k tiles)
  Tensor gB = local_tile(mB(_, _, batch), select<1, 2>(tile), make_coord(n_tile, _));  // (BN, BK, k tiles)
  const int k_tiles = static_cast<int>(size<2>(gA));
  // This split's K tiles [first, first + count); the last K tile may be partial.
  const int per_split = (k_tiles + p.splits - 1) / p.splits;
  const int first = split * per_split;
  const int count = max(0, min(k_tiles, first + per_split) - first);
  const int m_left = p.m - m_tile * static_cast<int>(size<0>(gA));
  const int n_left = p.n - n_tile * static_cast<int>(size<0>(gB));

  typename Cfg::TiledMma mma;
  Tensor acc = partition_fragment_C(mma, take<0, 2>(tile));
  clear(acc);
  if (count > 0) prologue_mainloop<K>(acc, gA, gB, first, count, m_left, n_left, p.k, thread, smem);

  // This thread's accumulator coordinates within the tile.
  Tensor coord = mma.get_slice(thread).partition_C(make_identity_tensor(take<0, 2>(tile)));
  const int64_t m0 = static_cast<int64_t>(m_tile) * size<0>(gA), n0 = static_cast<int64_t>(n_tile) * size<0>(gB);
  if (p.splits > 1) {
    // This split's partial sums, stored where the tile's last split reads them; that split sums
    // them in split order (the same result whichever arrives last).
    const int tile_id = (batch * p.tiles_n + n_tile) * p.tiles_m + m_tile;
    constexpr int kTileElems = decltype(size<0>(tile) * size<1>(tile))::value;
    float* mine = p.partial + (static_cast<int64_t>(tile_id) * p.splits + split) * kTileElems;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); i += 2) {
      const int mm = get<0>(coord(i)), nn = get<1>(coord(i));
      __stcg(reinterpret_cast<float2*>(mine + mm * size<1>(tile) + nn), make_float2(acc(i), acc(i + 1)));
    }
    __threadfence();
    __syncthreads();
    __shared__ int last;
    if (thread == 0) last = atomicAdd(p.arrivals + tile_id, 1) == p.splits - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const float* all = p.partial + static_cast<int64_t>(tile_id) * p.splits * kTileElems;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc); i += 2) {
      const int at = get<0>(coord(i)) * size<1>(tile) + get<1>(coord(i));
      float2 sum = make_float2(0.f, 0.f);
      for (int k = 0; k < p.splits; ++k) {
        const float2 v = __ldcg(reinterpret_cast<const float2*>(all + k * kTileElems + at));
        sum.x += v.x;
        sum.y += v.y;
      }
      acc(i) = sum.x;
      acc(i + 1) = sum.y;
    }
    if (thread == 0) p.arrivals[tile_id] = 0;
  }
  // The epilogue, two accumulator values at a time (a pair of outputs adjacent along N in
  // mma.sync's C layout: one store where N is contiguous).
  using ElementD = typename Cfg::ElementD;
  typename K::Output epilogue;
  ElementD* out = p.d + static_cast<int64_t>(batch) * get<2>(p.dd);
  static_assert(decltype(size(acc))::value % 2 == 0, "mma.sync's accumulators come in pairs");
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < size(acc); i += 2) {
    cutlass::Array<float, 2> x;
    x[0] = acc(i);
    x[1] = acc(i + 1);
    const cutlass::Array<float, 2> y = epilogue(x);
    const int m_i = get<0>(coord(i)), n_i = get<1>(coord(i));
    const int m_j = get<0>(coord(i + 1)), n_j = get<1>(coord(i + 1));
    ElementD* at = out + (m0 + m_i) * get<0>(p.dd) + (n0 + n_i) * get<1>(p.dd);
    if (Cfg::kDNMajorOut && sizeof(ElementD) == 2 && m_j == m_i && n_j == n_i + 1 && m_i < m_left && n_j < n_left &&
        (reinterpret_cast<uintptr_t>(at) & 3) == 0) {
      cutlass::Array<ElementD, 2> pair;
      pair[0] = ElementD(y[0]);
      pair[1] = ElementD(y[1]);
      *reinterpret_cast<cutlass::Array<ElementD, 2>*>(at) = pair;
      continue;
    }
    if (m_i < m_left && n_i < n_left) *at = ElementD(y[0]);
    if (m_j < m_left && n_j < n_left) out[(m0 + m_j) * get<0>(p.dd) + (n0 + n_j) * get<1>(p.dd)] = ElementD(y[1]);
  }
}

// The split workspace of launches on `stream` (current device): at least `floats` partial sums
// and `counters` arrivals, the counters zero; grown on the stream when a launch needs more.
inline cudaError_t prologue_workspace(cudaStream_t stream, size_t floats, size_t counters, float** partial, int** arrivals) {
  static std::mutex lock;
  struct Slot {
    void* data = nullptr;
    size_t floats = 0, counters = 0;
  };
  static std::map<std::pair<int, cudaStream_t>, Slot> slots;
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> guard(lock);
  Slot& s = slots[{device, stream}];
  if (s.floats < floats || s.counters < counters) {
    if (s.data != nullptr) cudaFreeAsync(s.data, stream);
    s.floats = std::max(floats, s.floats);
    s.counters = std::max(counters, s.counters);
    const size_t bytes = s.floats * sizeof(float) + s.counters * sizeof(int);
    if (cudaError_t e = cudaMallocAsync(&s.data, bytes, stream); e != cudaSuccess) {
      s = Slot{};
      return e;
    }
    // The counters start at zero (each tile's last split zeroes its own again); the partial sums
    // are written before they are read.
    if (cudaError_t e = cudaMemsetAsync(static_cast<float*>(s.data) + s.floats, 0, s.counters * sizeof(int), stream);
        e != cudaSuccess)
      return e;
  }
  *partial = static_cast<float*>(s.data);
  *arrivals = reinterpret_cast<int*>(static_cast<float*>(s.data) + s.floats);
  return cudaSuccess;
}

// Runs the prologue GEMM over modes checked by Modes (each operand's contiguous mode unit-stride,
// 16-byte aligned, other strides multiples of 8 elements: cp.async's 16-byte loads): "" or why not.
template <class K>
std::string run_prologue(typename K::Params p, cudaStream_t stream) {
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return std::string("cudaGetDevice: ") + cudaGetErrorString(e);
  constexpr int kTileM = cute::size<0>(typename K::Cfg_::TileShape{}), kTileN = cute::size<1>(typename K::Cfg_::TileShape{});
  p.tiles_m = (p.m + kTileM - 1) / kTileM;
  p.tiles_n = (p.n + kTileN - 1) / kTileN;
  const int64_t tiles = static_cast<int64_t>(p.tiles_m) * p.tiles_n * p.l;
  if (p.splits <= 0) p.splits = prologue_splits(tiles, (p.k + K::Cfg_::kTileK - 1) / K::Cfg_::kTileK, sm_count(device));
  if (tiles * p.splits > INT_MAX) return "the prologue GEMM has more tiles than one launch's grid takes";
  if (p.m == 0 || p.n == 0 || p.l == 0) return "";
  if (p.splits > 1) {
    if (cudaError_t e = prologue_workspace(stream, static_cast<size_t>(tiles) * p.splits * kTileM * kTileN,
                                           static_cast<size_t>(tiles), &p.partial, &p.arrivals);
        e != cudaSuccess)
      return std::string("the prologue GEMM's split workspace: ") + cudaGetErrorString(e);
  }
  auto kernel = prologue_gemm_kernel<K>;
  if (K::kSmemBytes >= 48 * 1024)
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, K::kSmemBytes); e != cudaSuccess)
      return std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e);
  kernel<<<static_cast<unsigned>(tiles * p.splits), K::Cfg_::kThreads, K::kSmemBytes, stream>>>(p);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return std::string("CUDA error: ") + cudaGetErrorString(e);
  return "";
}

}  // namespace napkin::gemm
