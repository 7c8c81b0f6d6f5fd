// SPDX-License-Identifier: Apache-2.0
// The prologue GEMM of the device library: a GEMM whose operands are elementwise functions of
// the tensors in memory, applied as each tile is loaded (src/emit/gemm_kernel.h writes the
// functions from the diagram):
//
//   D[m n l] = Epilogue( sum_k PrologueA(A[m k l]) PrologueB(B[n k l]) )    in f32, stored as ElementD
//
// A plan fuses an operand's elementwise producer here instead of materialising it, where the
// GEMM is memory-bound anyway (one of M, N or K small: linear attention's feature maps feeding
// its state and its output). The mainloop is CUTLASS's multistage collective for cp.async and
// mma.sync (MainloopSm80CpAsync), which applies TransformA and TransformB to each operand
// fragment in registers after ldmatrix and before the MMA; the TMA/WGMMA mainloop has no such
// hook (its operands go from shared memory to the tensor cores). The grid, the split along K and
// the epilogue are this file's.
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

#include <cutlass/gemm/collective/collective_mma.hpp>

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
// output's, the CTA tile (kTileM, kTileN multiples of 64; K tile 64), the stages, the warps
// along M, the CTAs per SM the registers must allow (launch bounds), and the warps (4 or 8).
template <class ElementAB, class ElementD_, bool kAKMajor, bool kBKMajor, bool kDNMajor, int kTileM, int kTileN, int kStages_,
          int kWarpsM = 2, int kMinBlocks_ = 1, int kWarps = 4>
struct PrologueConfig {
  static_assert((kWarps == 4 || kWarps == 8) && kWarps % kWarpsM == 0, "four or eight warps, kWarpsM of them along M");
  static constexpr int kWarpsN = kWarps / kWarpsM;
  static_assert(16 * kWarpsM <= kTileM && 16 * kWarpsN <= kTileN, "each warp at least 16 x 16 of the tile");
  static constexpr int kMinBlocks = kMinBlocks_;  // CTAs resident per SM the registers must allow
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
  // kWarps warps, kWarpsM x kWarpsN over the tile, each warp 16 x 16 a step. A warp transforms
  // the operand fragments it loads: an operand split over fewer warps is transformed fewer times.
  using TiledMma = decltype(cute::make_tiled_mma(
      MmaAtom{}, cute::Layout<cute::Shape<cute::Int<kWarpsM>, cute::Int<kWarpsN>, cute::_1>>{},
      cute::Tile<cute::Int<16 * kWarpsM>, cute::Int<16 * kWarpsN>, cute::_16>{}));
  static constexpr int kThreads = 32 * kWarps;
  using OperandA = Sm80Operand<ElementAB, kAKMajor, kThreads>;
  using OperandB = Sm80Operand<ElementAB, kBKMajor, kThreads>;
};

template <class Cfg, class PrologueA, class PrologueB, template <class> class Epilogue>
struct PrologueKernel {
  using Cfg_ = Cfg;
  using Output = Epilogue<float>;
  using Element = typename Cfg::Element;
  using ElementD = typename Cfg::ElementD;
  using Mainloop = cutlass::gemm::collective::CollectiveMma<
      cutlass::gemm::MainloopSm80CpAsync<Cfg::kStages, cute::Shape<cute::_1, cute::_1, cute::_1>>, typename Cfg::TileShape,
      Element, typename Cfg::StrideA, Element, typename Cfg::StrideB, typename Cfg::TiledMma,
      typename Cfg::OperandA::GmemTiledCopy, typename Cfg::OperandA::SmemLayoutAtom, typename Cfg::OperandA::SmemCopyAtom,
      PrologueA, typename Cfg::OperandB::GmemTiledCopy, typename Cfg::OperandB::SmemLayoutAtom,
      typename Cfg::OperandB::SmemCopyAtom, PrologueB>;
  static constexpr int kSmemBytes = static_cast<int>(sizeof(typename Mainloop::SharedStorage));

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

// Splits of each output tile's K range: enough CTAs for two per SM (a memory-bound kernel needs
// several loads in flight on every SM), each split at least two K tiles, at most 32 (the cost
// model's count, search/kernel_solver.cpp).
inline int prologue_splits(int64_t tiles, int64_t k_tiles, int sms) {
  if (tiles >= sms || k_tiles < 4) return 1;
  const int64_t want = (2 * static_cast<int64_t>(sms) + tiles - 1) / tiles;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, k_tiles / 2, 32})));
}

template <class K>
__global__ void __launch_bounds__(K::Cfg_::kThreads, K::Cfg_::kMinBlocks) prologue_gemm_kernel(const typename K::Params p) {
  using namespace cute;
  using Cfg = typename K::Cfg_;
  extern __shared__ char smem[];
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
  // This split's K tiles [first, first + count); the residue (a partial first tile, CUTLASS's
  // convention: K - BK * k_tiles <= 0) belongs to split 0.
  const int per_split = (k_tiles + p.splits - 1) / p.splits;
  const int first = split * per_split;
  const int count = max(0, min(k_tiles, first + per_split) - first);
  const int k_residue = p.k - static_cast<int>(size<1>(gA)) * k_tiles;
  const int m_left = p.m - m_tile * static_cast<int>(size<0>(gA));
  const int n_left = p.n - n_tile * static_cast<int>(size<0>(gB));

  typename Cfg::TiledMma mma;
  Tensor acc = partition_fragment_C(mma, take<0, 2>(tile));
  clear(acc);
  if (count > 0) {
    typename K::Mainloop mainloop;
    if (split == 0) {
      mainloop(acc, gA, gB, acc, make_coord_iterator(first, k_tiles), count,
               make_tuple(m_left, n_left, k_residue), thread, smem);
    } else {  // whole K tiles, shifted as the residue shifts split 0's
      mainloop(acc, domain_offset(make_coord(0, k_residue, 0), gA), domain_offset(make_coord(0, k_residue, 0), gB), acc,
               make_coord_iterator(first, k_tiles), count, make_tuple(m_left, n_left, 0), thread,
               smem);
    }
  }

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

// The split workspace of launches on `stream` (current device): at least `floats` sums and
// `counters` arrivals, zero; grown (and zeroed) on the stream when a launch needs more.
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
    if (cudaError_t e = cudaMemsetAsync(s.data, 0, bytes, stream); e != cudaSuccess) return e;
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
