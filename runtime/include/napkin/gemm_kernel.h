// SPDX-License-Identifier: Apache-2.0
// The device library of GEMM kernels (src/emit/gemm_kernel.h generates the translation units
// that include it): CUTLASS's Hopper GEMM (TMA loads, warp-specialised, persistent; cooperative
// or ping-pong) assembled through the sm90 collective builders, with the diagram's elementwise
// epilogue as an epilogue visitor tree (EVT) of one compute node over leaves:
//
//   D[m n l] = Epilogue( acc[m n l], leaf_1, ..., leaf_k ; params )    in f32, stored as ElementD
//
// The leaves a generated kernel may use (Config<...>):
//   Config::RowVector<T>     one value per row (along M, and per batch): CUTLASS's column broadcast
//   Config::ColVector<T>     one value per column (along N, and per batch): CUTLASS's row broadcast
//   Config::Scalar<T>        one value (per batch) read from device memory
//   Config::Tensor<T, Tag>   a tensor over the output's axes, loaded by TMA (Tag: its major mode)
// Params (named constants of the diagram) are the compute functor's Arguments.
//
// Host side: the modes (M, N, K, L) of each tensor flattened from its dims and checked (Modes),
// the CUTLASS strides (make_stride), the leaves' arguments and the launch (run).
// Modes: A is (M, K, L), B is (N, K, L), D and epilogue tensors are (M, N, L), as in CUTLASS.
#pragma once

// CUTLASS's device-side asserts are function calls inside the WGMMA pipeline, and ptxas
// serialises the WGMMAs around a call (warning C7510, a 25-30 % loss, which `napkin build`
// refuses): GEMM translation units compile without them, so this header comes first in them.
// The host-side checks they would make (TMA alignment) are Modes's, with messages.
#ifndef NDEBUG
#define NDEBUG
#endif

#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "napkin/elementwise.h"
#include "napkin/kernel_abi.h"
#include "napkin/kernel_host.h"
#include "napkin/tensor_binder.h"

namespace napkin::gemm {

// ---------------------------------------------------------------------------------------------
// Compile time: the kernel's configuration and the leaves of its epilogue.

// One GEMM kernel's types. ElementAB: the operands' dtype (bf16 or f16); LayoutA/B/D: CUTLASS's
// layout tags (A RowMajor = K-major, B ColumnMajor = K-major, D RowMajor = N-major); the tile,
// cluster and stage count (0: as many as fit beside the epilogue) and the kernel schedule come
// from the plan's GemmSchedule, and so do the persistent scheduler's raster (along M in bands of
// kSwizzle tiles along N, or along N: see run) and the stream-K scheduler (cooperative only: the
// tiles past the last full wave split along K over every SM).
template <class ElementAB, class ElementD_, class LayoutA_, class LayoutB_, class LayoutD_, int kTileM, int kTileN, int kTileK,
          int kClusterM, int kClusterN, int kStages, bool kPingpong, int kSwizzle_ = 1, bool kStreamK_ = false,
          bool kRasterAlongN_ = false>
struct Config {
  static constexpr int kSwizzle = kSwizzle_;
  static constexpr bool kRasterAlongN = kRasterAlongN_;
  static constexpr bool kStreamK = kStreamK_;
  static_assert(!kStreamK || !kPingpong, "CUTLASS's stream-K scheduler runs the cooperative kernel only");
  using Element = ElementAB;
  using ElementD = ElementD_;
  using LayoutA = LayoutA_;
  using LayoutB = LayoutB_;
  using LayoutD = LayoutD_;
  using StrideA = cutlass::detail::TagToStrideA_t<LayoutA>;  // (M, K, L)
  using StrideB = cutlass::detail::TagToStrideB_t<LayoutB>;  // (N, K, L)
  using StrideD = cutlass::detail::TagToStrideC_t<LayoutD>;  // (M, N, L)
  using TileShape = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Int<kTileK>>;
  using ClusterShape = cute::Shape<cute::Int<kClusterM>, cute::Int<kClusterN>, cute::_1>;
  static constexpr int kStageCount = kStages;
  using KernelSchedule = std::conditional_t<kPingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                            cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule =
      std::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized, cutlass::epilogue::TmaWarpSpecializedCooperative>;
  // The epilogue tile and store pipeline the builder picks for this configuration (no C source:
  // ElementC is void), so that a Tensor leaf's TMA loads run on the same pipeline stages.
  using EpilogueDescriptor = cutlass::epilogue::collective::detail::EpilogueDescriptor<
      TileShape, cutlass::epilogue::collective::EpilogueTileAuto, void, ElementD, EpilogueSchedule>;

  // Leaves of the epilogue visitor tree; each yields fragments the compute node converts to f32.
  // Vectors are read once per tile, element by element under the tile's residue (alignment 1:
  // any base address and any M or N).
  template <class T>
  using RowVector =  // v[m, l]: stride (1, 0, l)
      cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, T, float, cute::Stride<cute::_1, cute::_0, int64_t>, 1>;
  template <class T>
  using ColVector =  // v[n, l]: stride (0, 1, l)
      cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, T, float, cute::Stride<cute::_0, cute::_1, int64_t>, 1>;
  template <class T>
  using Scalar = cutlass::epilogue::fusion::Sm90ScalarBroadcast<T, cute::Stride<cute::_0, cute::_0, int64_t>>;
  template <class T, class Tag>  // Tag: cutlass::layout::RowMajor (N-major) or ColumnMajor (M-major)
  using Tensor = cutlass::epilogue::fusion::Sm90AuxLoad<
      cutlass::epilogue::collective::detail::AuxLoadDescriptor<EpilogueDescriptor, Tag, T>::Stages,
      typename EpilogueDescriptor::EpilogueTile, T,
      typename cutlass::epilogue::collective::detail::AuxLoadDescriptor<EpilogueDescriptor, Tag, T>::Stride,
      typename cutlass::epilogue::collective::detail::AuxLoadDescriptor<EpilogueDescriptor, Tag, T>::SmemLayoutAtom,
      typename cutlass::epilogue::collective::detail::AuxLoadDescriptor<EpilogueDescriptor, Tag, T>::CopyOpS2R>;
};

// The kernel: D = Epilogue(acc, Leaves...) stored as ElementD, rounded to nearest even.
// Epilogue<T> is the generated functor: Epilogue<Array<float, N>>()(acc, leaf..., [params])
// returns Array<float, N>; a functor with params defines Arguments (CUTLASS's Sm90Compute passes
// them last).
template <class Cfg, template <class> class Epilogue, class... Leaves>
struct Kernel {
  using EVT = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<Epilogue, typename Cfg::ElementD, float, cutlass::FloatRoundStyle::round_to_nearest>,
      cutlass::epilogue::fusion::Sm90AccFetch, Leaves...>;
  static constexpr int kAlignmentAB = 128 / cutlass::sizeof_bits<typename Cfg::Element>::value;
  static constexpr int kAlignmentD = 128 / cutlass::sizeof_bits<typename Cfg::ElementD>::value;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::TileShape, typename Cfg::ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, typename Cfg::LayoutD, kAlignmentD,
      typename Cfg::ElementD, typename Cfg::LayoutD, kAlignmentD, typename Cfg::EpilogueSchedule, EVT>::CollectiveOp;
  using StageCount = std::conditional_t<
      (Cfg::kStageCount > 0), cutlass::gemm::collective::StageCount<(Cfg::kStageCount > 0 ? Cfg::kStageCount : 1)>,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>>;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::Element, typename Cfg::LayoutA, kAlignmentAB,
      typename Cfg::Element, typename Cfg::LayoutB, kAlignmentAB, float, typename Cfg::TileShape, typename Cfg::ClusterShape,
      StageCount, typename Cfg::KernelSchedule>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                                          std::conditional_t<Cfg::kStreamK, cutlass::gemm::StreamKScheduler, void>>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using Arguments = typename Gemm::Arguments;
};

// What CUTLASS's Sm90TmaWarpSpecializedAdapter asks of an epilogue that works in registers alone
// (no shared memory, no workspace, no source C; napkin/gemm_dual.h, napkin/gemm_reduction.h): its
// Params are its Arguments. The epilogue adds ElementD, StrideC/D, ThreadEpilogueOp,
// can_implement, its constructor and operator().
template <class Arguments_>
struct RegisterEpilogue {
  using ElementC = void;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  struct SharedStorage {};
  using Arguments = Arguments_;
  using Params = Arguments;

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) { return args; }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) { return 0; }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  CUTLASS_DEVICE bool is_source_needed() { return false; }
};

// ---------------------------------------------------------------------------------------------
// Host: modes, strides, leaf arguments, checks and the launch.

// One mode of the GEMM (M, N, K or L) as one tensor holds it: its dims flattened into one extent
// with one element stride (0 where the extent is 1: the stride is never used, and CUTLASS's
// batch convention).
struct Mode {
  int64_t extent = 1;
  int64_t stride = 0;
};

// The CUTLASS stride of a tensor whose modes are (x, y, l), given which of x and y is
// contiguous: the static unit stride in its place, as TagToStride* declares it.
template <class Stride>
Stride make_stride(const Mode& x, const Mode& y, const Mode& l) {
  Stride s{};
  if constexpr (cute::is_static<cute::remove_cvref_t<decltype(cute::get<0>(s))>>::value) cute::get<1>(s) = y.stride;
  else cute::get<0>(s) = x.stride;
  cute::get<2>(s) = l.stride;
  return s;
}

// The arguments of each kind of leaf for one call, from its tensor and its modes.
template <class Leaf>  // Config::RowVector<T>
typename Leaf::Arguments row_vector(const napkin_tensor* t, const Mode& l) {
  typename Leaf::Arguments a{};
  a.ptr_col = static_cast<decltype(a.ptr_col)>(t->data);
  cute::get<2>(a.dCol) = l.stride;
  return a;
}
template <class Leaf>  // Config::ColVector<T>
typename Leaf::Arguments col_vector(const napkin_tensor* t, const Mode& l) {
  typename Leaf::Arguments a{};
  a.ptr_row = static_cast<decltype(a.ptr_row)>(t->data);
  cute::get<2>(a.dRow) = l.stride;
  return a;
}
template <class Leaf>  // Config::Tensor<T, Tag>: modes (m, n, l)
typename Leaf::Arguments tensor(const napkin_tensor* t, const Mode& m, const Mode& n, const Mode& l) {
  typename Leaf::Arguments a{};
  a.ptr_aux = static_cast<decltype(a.ptr_aux)>(t->data);
  a.dAux = make_stride<decltype(a.dAux)>(m, n, l);
  return a;
}
// Config::Scalar<T>. A scalar in device memory is read by the kernel (per batch with a batch
// stride); one in host memory (a rank-0 value the caller kept on the host) is read here, once.
template <class Leaf>
typename Leaf::Arguments scalar(const napkin_tensor* t, const Mode& l) {
  typename Leaf::Arguments a{};
  using T = std::remove_cv_t<std::remove_reference_t<decltype(a.scalars[0])>>;
  cudaPointerAttributes attributes{};
  const bool host = cudaPointerGetAttributes(&attributes, t->data) != cudaSuccess ||
                    attributes.type == cudaMemoryTypeUnregistered || attributes.type == cudaMemoryTypeHost;
  (void)cudaGetLastError();  // an unregistered pointer may leave an error behind
  if (host && l.extent == 1) {
    a.scalars[0] = *static_cast<const T*>(t->data);
  } else {
    a.scalar_ptrs[0] = static_cast<const T*>(t->data);
    cute::get<2>(a.dScalar[0]) = l.stride;
  }
  return a;
}

// The checks of one call: each tensor's dims flattened into modes, the TMA operands' alignment
// and the vectors' unit strides. Keeps the first error, naming the tensor and what was expected.
class Modes {
 public:
  // The dims `dims` of `t` (in storage order, outermost first) as one mode. The dims must be
  // contiguous with each other (each one's stride the next one's stride times its size; dims of
  // size 1 do not count). No dims: the mode is absent (extent 1).
  Mode mode(const napkin_tensor* t, const char* name, const char* mode, std::initializer_list<int> dims) {
    Mode m;
    if (t == nullptr || !error_.empty()) return m;
    int inner = -1;  // the innermost dim of size > 1 seen so far (walking outwards)
    for (auto it = std::rbegin(dims); it != std::rend(dims); ++it) {
      const int d = *it;
      const int64_t size = t->shape[d];
      if (size == 1) continue;
      if (inner >= 0 && t->strides[d] != t->strides[inner] * t->shape[inner]) {
        fail(std::string("tensor '") + name + "': dims " + std::to_string(d) + " and " + std::to_string(inner) +
             " are one GEMM mode (" + mode + ") and must be contiguous with each other: dim " + std::to_string(d) +
             " has stride " + std::to_string(t->strides[d]) + ", expected " +
             std::to_string(t->strides[inner] * t->shape[inner]));
        return m;
      }
      if (inner < 0) m.stride = t->strides[d];
      inner = d;
      m.extent *= size;
    }
    if (m.extent == 1) m.stride = 0;
    if (m.extent > INT_MAX) fail(std::string("tensor '") + name + "': GEMM mode " + mode + " has " + std::to_string(m.extent) +
                                 " elements, more than the kernel's 32-bit problem size");
    return m;
  }

  // A tensor read or written by TMA: a 16-byte aligned base, unit stride along its contiguous
  // mode `inner`, and every other stride a multiple of 16 bytes. With `whole_rows` (A, B and D,
  // as CUTLASS's can_implement asks) the contiguous extent is a multiple of 16 bytes too.
  void tma(const napkin_tensor* t, const char* name, const Mode& inner, const char* inner_mode,
           std::initializer_list<Mode> others, bool whole_rows) {
    if (t == nullptr || !error_.empty()) return;
    const int64_t bytes = static_cast<int64_t>(host::dtype_bytes(t->dtype));
    const int64_t per16 = 16 / bytes;
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0)
      return fail(std::string("tensor '") + name + "': its data must be 16-byte aligned (TMA)");
    if (inner.extent > 1 && inner.stride != 1)
      return fail(std::string("tensor '") + name + "': its innermost GEMM mode " + inner_mode + " needs unit stride, found " +
                  std::to_string(inner.stride));
    if (whole_rows && inner.extent % per16 != 0)
      return fail(std::string("tensor '") + name + "': GEMM mode " + inner_mode + " has size " + std::to_string(inner.extent) +
                  ", expected a multiple of " + std::to_string(per16) + " (16 bytes, TMA)");
    for (const Mode& m : others)
      if (m.stride % per16 != 0)
        return fail(std::string("tensor '") + name + "': stride " + std::to_string(m.stride) + " is not a multiple of " +
                    std::to_string(per16) + " elements (16 bytes, TMA)");
  }

  // A vector read element by element along its mode `inner` (a bias, a row scale): unit stride.
  void vector(const napkin_tensor* t, const char* name, const Mode& inner, const char* inner_mode) {
    if (t == nullptr || !error_.empty()) return;
    if (inner.extent > 1 && inner.stride != 1)
      fail(std::string("tensor '") + name + "': a vector along GEMM mode " + inner_mode + " needs unit stride, found " +
           std::to_string(inner.stride));
  }

  const std::string& error() const { return error_; }

 private:
  void fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
  }
  std::string error_;
};

// Multiprocessors of `device`, asked once per device (the persistent grid's size).
inline int sm_count(int device) {
  static std::atomic<int> counts[64] = {};
  if (device < 0 || device >= 64) return cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  int n = counts[device].load(std::memory_order_relaxed);
  if (n == 0) {
    n = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
    counts[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

// Runs the GEMM on `stream` as `args` say (workspace, if any, from the stream's allocator): "" or
// the reason it cannot.
template <class Gemm>
std::string launch(typename Gemm::Arguments args, cudaStream_t stream) {
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return std::string("cudaGetDevice: ") + cudaGetErrorString(e);
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count(device);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess)
    return "CUTLASS cannot run this problem (can_implement): a size or stride breaks TMA's 16-byte alignment";
  const size_t bytes = Gemm::get_workspace_size(args);
  void* workspace = nullptr;
  if (bytes > 0)
    if (cudaError_t e = cudaMallocAsync(&workspace, bytes, stream); e != cudaSuccess)
      return std::string("cudaMallocAsync (GEMM workspace): ") + cudaGetErrorString(e);
  cutlass::Status st = gemm.initialize(args, workspace, stream);
  if (st == cutlass::Status::kSuccess) st = gemm.run(stream);
  if (workspace != nullptr) cudaFreeAsync(workspace, stream);
  if (st != cutlass::Status::kSuccess) return std::string("CUTLASS: ") + cutlassGetStatusString(st);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return std::string("CUDA error: ") + cudaGetErrorString(e);
  return "";
}

// launch with the plan's raster: the persistent tiles walk M in bands of `swizzle` tiles along N
// (a wave's operand panels then fit in L2 together), or N first where `along_n`.
template <class Gemm>
std::string run(typename Gemm::Arguments args, cudaStream_t stream, int swizzle = 1, bool along_n = false) {
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.max_swizzle_size = swizzle;
  args.scheduler.raster_order = along_n ? Raster::AlongN : Raster::AlongM;
  return launch<Gemm>(args, stream);
}

}  // namespace napkin::gemm
