// SPDX-License-Identifier: Apache-2.0
// The dual GEMM of the device library: two GEMMs that share their A operand, combined per
// element in the epilogue, in one kernel (the gate and up projections of a gated MLP):
//
//   D[m n l] = Combine( (A B0)[m n l], (A B1)[m n l] )      in f32, stored as ElementD
//
// Each CTA computes a tile of BLK_M x kHalf outputs with one WGMMA tile of BLK_M x 2 kHalf: its
// B tile in shared memory is the kHalf rows of B0 then the same kHalf rows of B1, loaded by one
// TMA descriptor whose N mode is (kHalf, 2, N / kHalf) : (n, B1 - B0, kHalf n). So A is read once
// for both products, the second product never goes through memory, and the mainloop, the
// pipeline and the persistent scheduler are CUTLASS's own (the problem is (M, 2N, K, L) to them).
// The kernel's contract: N % kHalf == 0; B0 and B1 have the same strides, 16-byte aligned, and
// the one at the higher address a multiple of 16 bytes past the other (any two allocations;
// Combine learns which accumulator is B0's). run_dual meets it for any operands: the columns
// past the last whole tile run once more from a zero-padded copy of both operands' tails, and
// operands one descriptor cannot read together (other strides, the same memory, too far apart)
// are first copied side by side into one buffer.
//
// The epilogue writes D from registers (no shared memory): each thread holds, for its columns,
// B0's accumulator in the first half of each WGMMA's values and B1's in the second (the WGMMA C
// layout, whose value mode is (2, 2, BLK_N / 8) with the column blocks outermost: asserted below).
#pragma once

#include "napkin/gemm_kernel.h"

#include <cutlass/epilogue/collective/detail.hpp>

#include <algorithm>
#include <vector>

namespace napkin::gemm {

// CUTLASS's Hopper mainloop (TMA, warp-specialised) with B0 and B1 stacked into one B tile.
template <class Base>
struct DualMainloop : Base {
  using typename Base::DispatchPolicy;
  using ClusterShape = typename DispatchPolicy::ClusterShape;
  using typename Base::ElementB;
  using typename Base::GmemTiledCopyB;
  using typename Base::InternalElementB;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::StrideB;
  using typename Base::TensorStorage;
  using typename Base::TileShape;
  static constexpr int kHalf = cute::size<1>(TileShape{}) / 2;  // output columns per tile

  // B0's layout with B1 stacked: N is (kHalf, which of the two, tile of kHalf).
  static auto stacked_b(int n, int k, int l, StrideB dB, int64_t second) {
    using namespace cute;
    const auto sn = get<0>(dB);
    return cute::make_layout(cute::make_shape(cute::make_shape(Int<kHalf>{}, _2{}, n / kHalf), k, l),
                             cute::make_stride(cute::make_stride(sn, second, sn * Int<kHalf>{}), get<1>(dB), get<2>(dB)));
  }
  using TmaStacked = decltype(cute::make_tma_copy_B_sm90(
      GmemTiledCopyB{}, cute::make_tensor(static_cast<InternalElementB const*>(nullptr), stacked_b(0, 0, 0, StrideB{}, 0)),
      SmemLayoutB{}(cute::_, cute::_, cute::Int<0>{}), TileShape{}, ClusterShape{}));

  // ptr_B: whichever of B0 and B1 is at the lower address; `second`: elements from it to the
  // other (>= 0, a multiple of 16 bytes).
  struct Arguments : Base::Arguments {
    int64_t second = 0;
  };
  struct Params : Base::Params {
    TmaStacked tma_load_stacked;
  };

  // problem_shape: (M, 2N, K, L), N the outputs' columns.
  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    auto [M, N2, K, L] = cute::append<4>(problem_shape, 1);
    Params p{};
    // The base's A descriptor and transaction bytes; its own B descriptor is built and never used.
    static_cast<typename Base::Params&>(p) = Base::to_underlying_arguments(problem_shape, args, workspace);
    auto ptr = reinterpret_cast<InternalElementB const*>(args.ptr_B);
    p.tma_load_stacked = cute::make_tma_copy_B_sm90(GmemTiledCopyB{}, cute::make_tensor(ptr, stacked_b(N2 / 2, K, L, args.dB, args.second)),
                                                    SmemLayoutB{}(cute::_, cute::_, cute::Int<0>{}), TileShape{}, ClusterShape{});
    return p;
  }

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N2, K, L] = cute::append<4>(problem_shape, 1);
    constexpr int64_t per16 = 16 / static_cast<int64_t>(sizeof(ElementB));
    return N2 % (2 * kHalf) == 0 && args.second > 0 && args.second % per16 == 0 &&
           Base::can_implement(cute::make_shape(M, N2 / 2, K, L), args);
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& p) {
    cute::prefetch_tma_descriptor(p.tma_load_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_load_stacked.get_tma_descriptor());
  }

  // (gA_mkl, gB_nkl) as the kernel layer expects them: gB's tile mode is (kHalf, 2).
  template <class ProblemShapeMNKL>
  CUTLASS_DEVICE auto load_init(ProblemShapeMNKL const& problem_shape_mnkl, Params const& p) const {
    using namespace cute;
    auto [M, N2, K, L] = problem_shape_mnkl;
    Tensor mA = p.tma_load_a.get_tma_tensor(make_shape(M, K, L));
    Tensor mB = p.tma_load_stacked.get_tma_tensor(make_shape(make_shape(Int<kHalf>{}, _2{}, N2 / (2 * kHalf)), K, L));
    Tensor gA = local_tile(mA, TileShape{}, make_coord(_, _, _), Step<_1, Underscore, _1>{});  // (BLK_M,BLK_K,m,k,l)
    Tensor gB = local_tile(mB, TileShape{}, make_coord(_, _, _), Step<Underscore, _1, _1>{});  // (BLK_N,BLK_K,n,k,l)
    return make_tuple(gA, gB);
  }

  // The producer: per k tile, A's tile and the stacked B tile into the next free stage.
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& p, MainloopPipeline pipeline, PipelineState write, cute::tuple<TensorA, TensorB> const& inputs,
                           BlockCoord const& blk_coord, KTileIterator k_tile_iter, int k_tile_count, int /*thread_idx*/,
                           uint32_t block_rank_in_cluster, TensorStorage& smem) {
    using namespace cute;
    static_assert(size(ClusterShape{}) == 1, "the dual GEMM runs without clusters (no multicast)");
    if (!cute::elect_one_sync()) return;
    (void)block_rank_in_cluster;
    Tensor sA = make_tensor(make_smem_ptr(smem.smem_A.data()), SmemLayoutA{});
    Tensor sB = make_tensor(make_smem_ptr(smem.smem_B.data()), SmemLayoutB{});
    auto [m, n, k, l] = blk_coord;
    auto tma_a = p.tma_load_a.get_slice(0);
    auto tma_b = p.tma_load_stacked.get_slice(0);
    Tensor tAgA = tma_a.partition_S(get<0>(inputs)(_, _, m, _, l));
    Tensor tAsA = tma_a.partition_D(sA);
    Tensor tBgB = tma_b.partition_S(get<1>(inputs)(_, _, n, _, l));
    Tensor tBsB = tma_b.partition_D(sB);
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count, ++k_tile_iter, ++write) {
      pipeline.producer_acquire(write);
      auto* barrier = pipeline.producer_get_barrier(write);
      const int stage = write.index();
      copy(p.tma_load_a.with(*barrier, 0), tAgA(_, _, _, *k_tile_iter), tAsA(_, _, _, stage));
      copy(p.tma_load_stacked.with(*barrier, 0), tBgB(_, _, _, *k_tile_iter), tBsB(_, _, _, stage));
    }
  }
};

// The epilogue: D[m n l] = Combine(acc0, acc1) per element, stored from registers (pairs of
// columns in one 4-byte store where D is contiguous along N). Combine::operator()(float acc0,
// float acc1, int64_t m, int64_t n, int64_t l, Arguments const&) is the diagram's code at the
// element's flat GEMM coordinates (the inputs it reads are indexed by them); `swapped` says the
// kernel's first accumulator is B1's.
template <class ElementD_, class StrideD_, class Combine>
struct DualEpilogueArguments {
  ElementD_* ptr_D = nullptr;
  StrideD_ dD{};
  bool swapped = false;
  typename Combine::Arguments combine{};
  int n_limit = INT_MAX;  // columns stored: n < min(N, n_limit)
  int64_t n_offset = 0;   // the launch's first column of the whole problem (the tails' launch)
};
template <class ElementD_, class StrideD_, class Combine>
class DualEpilogue : public RegisterEpilogue<DualEpilogueArguments<ElementD_, StrideD_, Combine>> {
  using Base = RegisterEpilogue<DualEpilogueArguments<ElementD_, StrideD_, Combine>>;

 public:
  using StrideC = StrideD_;
  using ElementD = ElementD_;
  using StrideD = StrideD_;
  using ThreadEpilogueOp = Combine;  // named by CUTLASS's device adapter; not used
  using typename Base::Arguments;
  using typename Base::Params;
  using typename Base::SharedStorage;

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) { return args.ptr_D != nullptr; }

  CUTLASS_HOST_DEVICE explicit DualEpilogue(Params const& p, SharedStorage const& = SharedStorage()) : p_(p) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout, class TiledMma, class Residue>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem, BlockShapeMNK blk, BlockCoordMNKL coord,
                                 cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, Residue, int thread_idx, char*) {
    using namespace cute;
    constexpr int kHalf = size<1>(BlockShapeMNK{}) / 2;
    // Per WGMMA along M (two where a warpgroup has 128 rows), the value mode is (2, 2, BLK_N / 8)
    // with the column blocks outermost, and one WGMMA spans the tile's N: so value v + kValues / 2
    // is value v's column plus kHalf.
    constexpr int kValues = size<0>(FrgLayout{});
    static_assert(rank(FrgLayout{}) == 3 && size<2>(FrgLayout{}) == 1, "one WGMMA along N per thread");
    static_assert(size<0, 2>(FrgLayout{}) == size<1>(BlockShapeMNK{}) / 8, "column blocks outermost in the value mode");
    const int M = get<0>(problem), N = cute::min(int(get<1>(problem)) / 2, p_.n_limit);
    const int m0 = get<0>(coord) * size<0>(BlockShapeMNK{}), n0 = get<1>(coord) * kHalf;
    const int64_t l = get<3>(coord);
    Tensor c = tiled_mma.get_thread_slice(thread_idx).partition_C(make_identity_tensor(take<0, 2>(BlockShapeMNK{})));
    const int64_t dm = get<0>(p_.dD), dn = get<1>(p_.dD), dl = get<2>(p_.dD);
    ElementD* const d = p_.ptr_D + l * dl;
    const Combine combine{};
    CUTLASS_PRAGMA_UNROLL
    for (int mi = 0; mi < size<1>(FrgLayout{}); ++mi) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kValues / 2; i += 2) {  // values i and i + 1: columns n and n + 1 of one row
        const int m = m0 + get<0>(c(i, mi, 0)), n = n0 + get<1>(c(i, mi, 0));
        if (m >= M) continue;
        float out[2] = {0.0f, 0.0f};
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < 2; ++j) {
          if (n + j >= N) continue;  // past the columns stored: Combine's inputs end there too
          const float x = acc(i + j, mi, 0), y = acc(i + j + kValues / 2, mi, 0);
          const int64_t column = p_.n_offset + n + j;
          out[j] = p_.swapped ? combine(y, x, m, column, l, p_.combine) : combine(x, y, m, column, l, p_.combine);
        }
        ElementD* const at = d + m * dm + n * dn;
        if (dn == 1 && n + 1 < N && (reinterpret_cast<uintptr_t>(at) % (2 * sizeof(ElementD))) == 0) {
          cutlass::Array<ElementD, 2> pair;
          pair[0] = static_cast<ElementD>(out[0]);
          pair[1] = static_cast<ElementD>(out[1]);
          *reinterpret_cast<cutlass::Array<ElementD, 2>*>(at) = pair;
        } else {
          if (n < N) at[0] = static_cast<ElementD>(out[0]);
          if (n + 1 < N) at[dn] = static_cast<ElementD>(out[1]);
        }
      }
    }
  }

 private:
  Params p_;
};

// The kernel: Cfg as for Kernel (its tile's N is both products': 2 x the output columns of a
// tile), Combine the diagram's code on the two accumulators.
template <class Cfg_, class Combine_>
struct DualKernel {
  using Cfg = Cfg_;
  using Combine = Combine_;
  static_assert(!Cfg::kStreamK, "the dual GEMM runs the persistent scheduler");
  static_assert(cute::size(typename Cfg::ClusterShape{}) == 1, "the dual GEMM runs without clusters");
  static constexpr int kAlignmentAB = 128 / cutlass::sizeof_bits<typename Cfg::Element>::value;
  using CollectiveEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
      DualEpilogue<typename Cfg::ElementD, typename Cfg::StrideD, Combine>>;
  using StageCount = std::conditional_t<(Cfg::kStageCount > 0),
                                        cutlass::gemm::collective::StageCount<(Cfg::kStageCount > 0 ? Cfg::kStageCount : 1)>,
                                        cutlass::gemm::collective::StageCountAutoCarveout<0>>;
  using BaseMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::Element, typename Cfg::LayoutA, kAlignmentAB,
      typename Cfg::Element, typename Cfg::LayoutB, kAlignmentAB, float, typename Cfg::TileShape, typename Cfg::ClusterShape,
      StageCount, typename Cfg::KernelSchedule>::CollectiveOp;
  using CollectiveMainloop = DualMainloop<BaseMainloop>;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using Arguments = typename Gemm::Arguments;
};

// Copies src[n k l] (strides sn, sk, sl) into dst (strides dn, dk, dl) for n < n_count, and
// zeros for n_count <= n < n_extent. The contiguous mode of dst runs fastest.
template <class T>
__global__ void gather_columns(T* dst, int64_t dn, int64_t dk, int64_t dl, const T* src, int64_t sn, int64_t sk, int64_t sl,
                               int64_t n_count, int64_t n_extent, int64_t k_extent, int64_t l_extent) {
  const int64_t total = n_extent * k_extent * l_extent;
  const bool k_inner = dk == 1;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t inner = k_inner ? k_extent : n_extent, rest = i / inner, l = rest / (k_inner ? n_extent : k_extent);
    const int64_t n = k_inner ? rest % n_extent : i % n_extent, k = k_inner ? i % k_extent : rest % k_extent;
    dst[n * dn + k * dk + l * dl] = n < n_count ? src[n * sn + k * sk + l * sl] : T(0.0f);
  }
}

// One dual GEMM call, its tensors as GEMM modes (Modes): A (M, K, L), B0 and B1 (N, K, L), D
// (M, N, L). Runs it on `stream` for any N and any B1 (see the file comment); "" or the reason
// it cannot. Scratch (the tails, a copied B1) comes from the stream's allocator.
template <class Kernel>
std::string run_dual(const void* a, const Mode& am, const Mode& ak, const Mode& al, const void* b0, const void* b1, const Mode& bn,
                     const Mode& bk, const Mode& bl, const Mode& b1n, const Mode& b1k, const Mode& b1l, void* d, const Mode& dm,
                     const Mode& dn, const Mode& dl, typename Kernel::Combine::Arguments const& combine, cudaStream_t stream,
                     int swizzle) {
  using Cfg = typename Kernel::Cfg;
  using T = typename Cfg::Element;
  constexpr int64_t kHalf = Kernel::CollectiveMainloop::kHalf;
  const int64_t N = bn.extent, K = bk.extent, L = bl.extent;
  const bool k_major = std::is_same_v<typename Cfg::LayoutB, cutlass::layout::ColumnMajor>;
  std::vector<void*> scratch;
  auto release = [&](std::string e) {
    for (void* p : scratch) cudaFreeAsync(p, stream);
    return e;
  };
  auto allocate = [&](int64_t elements) -> T* {
    void* p = nullptr;
    if (cudaMallocAsync(&p, static_cast<size_t>(elements) * sizeof(T), stream) != cudaSuccess) return nullptr;
    scratch.push_back(p);
    return static_cast<T*>(p);
  };
  auto gather = [&](T* dst, int64_t dn_, int64_t dk_, int64_t dl_, const void* src, const Mode& sn, const Mode& sk, const Mode& sl,
                    int64_t n0, int64_t count, int64_t extent) {
    const int64_t total = extent * K * L;
    const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 4096));
    gather_columns<<<blocks, 256, 0, stream>>>(dst, dn_, dk_, dl_, static_cast<const T*>(src) + n0 * sn.stride, sn.stride, sk.stride,
                                               sl.stride, count, extent, K, L);
    return cudaGetLastError() == cudaSuccess;
  };
  // B1 beside B0: the same strides and a reachable, 16-byte multiple distance; else both copied
  // into one buffer in B0's strides (each its footprint, the strides' span, rounded to 16 bytes).
  const T* t0 = static_cast<const T*>(b0);
  const T* t1 = static_cast<const T*>(b1);
  const int64_t distance = (t1 > t0 ? t1 - t0 : t0 - t1) * static_cast<int64_t>(sizeof(T));
  if (!(b1n.stride == bn.stride && b1k.stride == bk.stride && b1l.stride == bl.stride && distance > 0 && distance % 16 == 0 &&
        distance < (int64_t{1} << 40))) {
    constexpr int64_t per16 = 16 / static_cast<int64_t>(sizeof(T));
    const int64_t span = ((N - 1) * bn.stride + (K - 1) * bk.stride + (L - 1) * bl.stride + per16) / per16 * per16;
    T* both = allocate(2 * span);
    if (both == nullptr) return release("cudaMallocAsync: no memory for a copy of the B operands");
    if (!gather(both, bn.stride, bk.stride, bl.stride, b0, bn, bk, bl, 0, N, N) ||
        !gather(both + span, bn.stride, bk.stride, bl.stride, b1, b1n, b1k, b1l, 0, N, N))
      return release(std::string("gather_columns: ") + cudaGetErrorString(cudaGetLastError()));
    t0 = both;
    t1 = both + span;
  }
  auto launch = [&](const T* lo, const T* hi, const Mode& n, const Mode& k, const Mode& l, int64_t columns, void* out, int n_limit,
                    int64_t n_offset, bool swapped) {
    typename Kernel::CollectiveMainloop::Arguments mainloop{};
    mainloop.ptr_A = static_cast<const T*>(a);
    mainloop.dA = make_stride<typename Cfg::StrideA>(am, ak, al);
    mainloop.ptr_B = lo;
    mainloop.dB = make_stride<typename Cfg::StrideB>(n, k, l);
    mainloop.second = hi - lo;
    typename Kernel::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                    {int(am.extent), int(2 * columns), int(K), int(L)},
                                    mainloop,
                                    {static_cast<typename Cfg::ElementD*>(out), make_stride<typename Cfg::StrideD>(dm, dn, dl), swapped,
                                     combine, n_limit, n_offset}};
    return run<typename Kernel::Gemm>(args, stream, swizzle, Cfg::kRasterAlongN);
  };
  const int64_t whole = N - N % kHalf;
  if (whole > 0) {
    const bool swapped = t1 < t0;
    if (std::string e = launch(swapped ? t1 : t0, swapped ? t0 : t1, bn, bk, bl, whole, d, INT_MAX, 0, swapped); !e.empty())
      return release(e);
  }
  if (whole < N) {
    // The tails of both, zero-padded to a tile, stacked in one buffer: [B0 tail | B1 tail].
    const Mode tn{kHalf, k_major ? K : 1}, tk{K, k_major ? 1 : kHalf}, tl{L, L > 1 ? kHalf * K : 0};
    const int64_t one = kHalf * K * L;
    T* tails = allocate(2 * one);
    if (tails == nullptr) return release("cudaMallocAsync: no memory for the operands' last columns");
    if (!gather(tails, tn.stride, tk.stride, tl.stride, t0, bn, bk, bl, whole, N - whole, kHalf) ||
        !gather(tails + one, tn.stride, tk.stride, tl.stride, t1, bn, bk, bl, whole, N - whole, kHalf))
      return release(std::string("gather_columns: ") + cudaGetErrorString(cudaGetLastError()));
    void* out = static_cast<typename Cfg::ElementD*>(d) + whole * dn.stride;
    if (std::string e = launch(tails, tails + one, tn, tk, tl, kHalf, out, static_cast<int>(N - whole), whole, false); !e.empty())
      return release(e);
  }
  return release("");
}

}  // namespace napkin::gemm
