// SPDX-License-Identifier: Apache-2.0
// The folded GEMM of the device library: a GEMM whose product is reduced over all of N in its
// epilogue and never stored (a fused linear cross-entropy: the logsumexp of X W over the
// vocabulary without the logits in memory):
//
//   R_j[m l] = fold_j over n of Rows::summands(acc[m n l], m, n, l)[j]      fold: sum, max, logsumexp
//   outputs  = Rows::finish(R[m l], m, l)
//
// The mainloop and the persistent scheduler are CUTLASS's (TMA, warp-specialised, cooperative or
// ping-pong). The epilogue works in registers: each thread folds the values of its rows (WGMMA's
// C layout: a quad of lanes shares a row), the quad combines them with shuffles, and its first
// lane writes the row's partial state for this N tile to scratch. A logsumexp takes two passes
// over the registers (the tile's row max, then the sum of exp(x - max)), so that the partial is
// (max, sum) as FlashAttention keeps it. A second launch (one warp a row) folds a row's partials
// across the N tiles in a fixed order and runs the code after the folds.
//
// Rows (generated) provides: kFolds, fold(j), Arguments, summands(acc, m, n, l, a, v) and
// finish(r, m, l, a), with m, n and l the flat indices of the M, N and L modes.
#pragma once

#include "napkin/elementwise.h"
#include "napkin/gemm_kernel.h"

#include <cutlass/epilogue/collective/detail.hpp>

namespace napkin::gemm {

enum class Fold : int { sum, max, lse };

// A row's partial state: one float a sum or a max, two (max, sum) a logsumexp.
CUTLASS_HOST_DEVICE constexpr int fold_states(Fold f) { return f == Fold::lse ? 2 : 1; }
template <class Rows>
CUTLASS_HOST_DEVICE constexpr int fold_offset(int j) {
  int offset = 0;
  for (int i = 0; i < j; ++i) offset += fold_states(Rows::fold(i));
  return offset;
}
template <class Rows>
inline constexpr int kFoldStates = fold_offset<Rows>(Rows::kFolds);
// Whether a fold is a logsumexp (the epilogue then takes a second pass over its registers).
template <class Rows>
CUTLASS_HOST_DEVICE constexpr bool has_lse() {
  for (int j = 0; j < Rows::kFolds; ++j)
    if (Rows::fold(j) == Fold::lse) return true;
  return false;
}

// The identity of each fold: 0, -inf, (-inf, 0).
template <class Rows>
CUTLASS_DEVICE void fold_init(float* st) {
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < Rows::kFolds; ++j) {
    float* s = st + fold_offset<Rows>(j);
    if (Rows::fold(j) == Fold::sum) s[0] = 0.0f;
    else s[0] = -INFINITY;
    if (Rows::fold(j) == Fold::lse) s[1] = 0.0f;
  }
}

// exp(x - max) where the max is -inf for a row of -inf alone (every term then 0).
CUTLASS_DEVICE float safe_max(float m) { return m == -INFINITY ? 0.0f : m; }

// Folds the state `other` into `st` (both complete partials: a logsumexp's sum relative to its max).
template <class Rows>
CUTLASS_DEVICE void fold_merge(float* st, const float* other) {
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < Rows::kFolds; ++j) {
    float* s = st + fold_offset<Rows>(j);
    const float* o = other + fold_offset<Rows>(j);
    if (Rows::fold(j) == Fold::sum) {
      s[0] += o[0];
    } else if (Rows::fold(j) == Fold::max) {
      s[0] = rows::nan_max(s[0], o[0]);
    } else {
      const float m = rows::nan_max(s[0], o[0]), m0 = safe_max(m);
      s[1] = s[1] * expf(s[0] - m0) + o[1] * expf(o[0] - m0);
      s[0] = m;
    }
  }
}

// The folded values of a complete state: a logsumexp is max + log(sum), -inf over -inf alone.
template <class Rows>
CUTLASS_DEVICE void fold_values(const float* st, float* r) {
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < Rows::kFolds; ++j) {
    const float* s = st + fold_offset<Rows>(j);
    r[j] = Rows::fold(j) == Fold::lse ? safe_max(s[0]) + logf(s[1]) : s[0];
  }
}

// The epilogue: folds the tile's columns into a partial state per row, written to
// partials[((l M + m) tiles_n + tile) kFoldStates + s].
template <class Rows>
struct FoldEpilogueArguments {
  float* partials = nullptr;
  int64_t tiles_n = 0;
  typename Rows::Arguments rows{};
};
template <class Rows>
class FoldEpilogue : public RegisterEpilogue<FoldEpilogueArguments<Rows>> {
  using Base = RegisterEpilogue<FoldEpilogueArguments<Rows>>;

 public:
  using StrideC = cute::Stride<int64_t, cute::_1, int64_t>;
  using ElementD = float;
  using StrideD = StrideC;
  using ThreadEpilogueOp = Rows;  // named by CUTLASS's device adapter; not used
  using typename Base::Arguments;
  using typename Base::Params;
  using typename Base::SharedStorage;
  static constexpr int kStates = kFoldStates<Rows>;

  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) { return args.partials != nullptr; }

  CUTLASS_HOST_DEVICE explicit FoldEpilogue(Params const& p, SharedStorage const& = SharedStorage()) : p_(p) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout, class TiledMma, class Residue>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem, BlockShapeMNK blk, BlockCoordMNKL coord,
                                 cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, Residue, int thread_idx, char*) {
    using namespace cute;
    // Per WGMMA along M the value mode is (2, 2, BLK_N / 8): two columns, two rows eight apart,
    // the column blocks outermost; one WGMMA spans the tile's N.
    static_assert(rank(FrgLayout{}) == 3 && size<2>(FrgLayout{}) == 1, "one WGMMA along N per thread");
    static_assert(size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2, "WGMMA's C layout: pairs of columns, two rows");
    static_assert(size<0, 2>(FrgLayout{}) == size<1>(BlockShapeMNK{}) / 8, "column blocks outermost in the value mode");
    constexpr int kBlocks = size<0, 2>(FrgLayout{});
    const int64_t M = get<0>(problem), N = get<1>(problem);
    const int64_t m0 = int64_t(get<0>(coord)) * size<0>(BlockShapeMNK{}), n0 = int64_t(get<1>(coord)) * size<1>(BlockShapeMNK{});
    // The scheduler rounds the tile grid up to whole swizzle bands: a tile past N holds nothing
    // (and its partial would land in the next row's).
    if (n0 >= N) return;
    const int columns = static_cast<int>(cute::min(N - n0, int64_t(size<1>(BlockShapeMNK{}))));  // of this tile, in 32 bits
    const int64_t l = get<3>(coord);
    Tensor c = tiled_mma.get_thread_slice(thread_idx).partition_C(make_identity_tensor(take<0, 2>(BlockShapeMNK{})));
    const Rows code{};
    CUTLASS_PRAGMA_UNROLL
    for (int mi = 0; mi < size<1>(FrgLayout{}); ++mi) {
      CUTLASS_PRAGMA_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int64_t m = m0 + get<0>(c(2 * h, mi, 0));
        const bool row = m < M;
        // The summands of each of this thread's values of the row, to `visit`.
        auto each_value = [&](auto&& visit) {
          CUTLASS_PRAGMA_UNROLL
          for (int b = 0; b < kBlocks; ++b) {
            CUTLASS_PRAGMA_UNROLL
            for (int x = 0; x < 2; ++x) {
              const int i = x + 2 * h + 4 * b;
              const int col = get<1>(c(i, mi, 0));
              if (!row || col >= columns) continue;
              float v[Rows::kFolds];
              code.summands(acc(i, mi, 0), m, n0 + col, l, p_.rows, v);
              visit(v);
            }
          }
        };
        float st[kStates];
        fold_init<Rows>(st);
        // Pass 1: sums, maxima, and each logsumexp's max.
        each_value([&](const float* v) {
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < Rows::kFolds; ++j) {
            float* s = st + fold_offset<Rows>(j);
            if (Rows::fold(j) == Fold::sum) s[0] += v[j];
            else s[0] = rows::nan_max(s[0], v[j]);
          }
        });
        // The quad's lanes hold the row's other columns.
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < Rows::kFolds; ++j) {
          float* s = st + fold_offset<Rows>(j);
          CUTLASS_PRAGMA_UNROLL
          for (int lane = 1; lane < 4; lane *= 2) {
            const float o = __shfl_xor_sync(0xffffffffu, s[0], lane);
            s[0] = Rows::fold(j) == Fold::sum ? s[0] + o : rows::nan_max(s[0], o);
          }
        }
        // Pass 2: each logsumexp's sum of exp(x - max), relative to the row's max in this tile.
        if constexpr (has_lse<Rows>()) {
          each_value([&](const float* v) {
            CUTLASS_PRAGMA_UNROLL
            for (int j = 0; j < Rows::kFolds; ++j)
              if (Rows::fold(j) == Fold::lse) {
                float* s = st + fold_offset<Rows>(j);
                s[1] += rows::fast_exp(v[j] - safe_max(s[0]));
              }
          });
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < Rows::kFolds; ++j)
            if (Rows::fold(j) == Fold::lse) {
              float* s = st + fold_offset<Rows>(j);
              CUTLASS_PRAGMA_UNROLL
              for (int lane = 1; lane < 4; lane *= 2) s[1] += __shfl_xor_sync(0xffffffffu, s[1], lane);
            }
        }
        if (row && (thread_idx % 4) == 0) {
          float* out = p_.partials + ((l * M + m) * p_.tiles_n + get<1>(coord)) * kStates;
          CUTLASS_PRAGMA_UNROLL
          for (int s = 0; s < kStates; ++s) out[s] = st[s];
        }
      }
    }
  }

 private:
  Params p_;
};

// The second launch: one warp a row (l M + m) folds the row's tiles_n partials, lanes striding
// over them and combining in a fixed order, then runs the code after the folds.
template <class Rows>
__global__ void fold_rows(const float* partials, int64_t rows, int64_t M, int64_t tiles_n, typename Rows::Arguments a) {
  constexpr int kStates = kFoldStates<Rows>;
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  float st[kStates];
  fold_init<Rows>(st);
  for (int64_t t = lane; t < tiles_n; t += 32) fold_merge<Rows>(st, partials + (row * tiles_n + t) * kStates);
  CUTLASS_PRAGMA_UNROLL
  for (int lanes = 16; lanes >= 1; lanes /= 2) {
    float other[kStates];
    CUTLASS_PRAGMA_UNROLL
    for (int s = 0; s < kStates; ++s) other[s] = __shfl_down_sync(0xffffffffu, st[s], lanes);
    if (lane < lanes) fold_merge<Rows>(st, other);
  }
  if (lane != 0) return;
  float r[Rows::kFolds > 0 ? Rows::kFolds : 1];
  fold_values<Rows>(st, r);
  Rows{}.finish(r, row % M, row / M, a);
}

// The kernel: Cfg as for Kernel (ElementD unused: nothing of the product is stored).
template <class Cfg_, class Rows_>
struct FoldedKernel {
  using Cfg = Cfg_;
  using Rows = Rows_;
  static_assert(!Cfg::kStreamK, "the folded GEMM runs the persistent scheduler");
  static_assert(cute::size(typename Cfg::ClusterShape{}) == 1, "the folded GEMM runs without clusters");
  static constexpr int kAlignmentAB = 128 / cutlass::sizeof_bits<typename Cfg::Element>::value;
  using Epilogue = FoldEpilogue<Rows>;
  using CollectiveEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue>;
  using StageCount = std::conditional_t<(Cfg::kStageCount > 0),
                                        cutlass::gemm::collective::StageCount<(Cfg::kStageCount > 0 ? Cfg::kStageCount : 1)>,
                                        cutlass::gemm::collective::StageCountAutoCarveout<0>>;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::Element, typename Cfg::LayoutA, kAlignmentAB,
      typename Cfg::Element, typename Cfg::LayoutB, kAlignmentAB, float, typename Cfg::TileShape, typename Cfg::ClusterShape,
      StageCount, typename Cfg::KernelSchedule>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using Arguments = typename Gemm::Arguments;
};

// One folded GEMM call, its operands as GEMM modes (Modes): A (M, K, L), B (N, K, L). The
// partials (L M x tiles_n states, f32) come from the stream's allocator; "" or the reason it
// cannot run.
template <class Kernel>
std::string run_folded(const void* a, const Mode& am, const Mode& ak, const Mode& al, const void* b, const Mode& bn, const Mode& bk,
                       const Mode& bl, typename Kernel::Rows::Arguments const& rows, cudaStream_t stream, int swizzle) {
  using Cfg = typename Kernel::Cfg;
  using T = typename Cfg::Element;
  constexpr int64_t kTileN = cute::size<1>(typename Cfg::TileShape{});
  constexpr int kStates = kFoldStates<typename Kernel::Rows>;
  const int64_t M = am.extent, N = bn.extent, K = ak.extent, L = al.extent;
  const int64_t tiles_n = (N + kTileN - 1) / kTileN;
  void* partials = nullptr;
  const size_t bytes = static_cast<size_t>(L * M * tiles_n * kStates) * sizeof(float);
  if (cudaError_t e = cudaMallocAsync(&partials, bytes > 0 ? bytes : sizeof(float), stream); e != cudaSuccess)
    return std::string("cudaMallocAsync (the folds' partials): ") + cudaGetErrorString(e);
  typename Kernel::CollectiveMainloop::Arguments mainloop{static_cast<const T*>(a), make_stride<typename Cfg::StrideA>(am, ak, al),
                                                          static_cast<const T*>(b), make_stride<typename Cfg::StrideB>(bn, bk, bl)};
  typename Kernel::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {int(M), int(N), int(K), int(L)},
                                  mainloop,
                                  {static_cast<float*>(partials), tiles_n, rows}};
  std::string e = run<typename Kernel::Gemm>(args, stream, swizzle, Cfg::kRasterAlongN);
  if (e.empty()) {
    constexpr int kWarps = 8;
    const int64_t blocks = (L * M + kWarps - 1) / kWarps;
    fold_rows<typename Kernel::Rows><<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(static_cast<const float*>(partials), L * M, M,
                                                                                               tiles_n, rows);
    if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) e = std::string("fold_rows: ") + cudaGetErrorString(err);
  }
  cudaFreeAsync(partials, stream);
  return e;
}

}  // namespace napkin::gemm
