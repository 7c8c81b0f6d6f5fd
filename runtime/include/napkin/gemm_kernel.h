// SPDX-License-Identifier: Apache-2.0
// The device library of GEMM kernels (napkin/emit/gemm_kernel.h generates them): CUTLASS's
// Hopper GEMM (TMA, warp-specialised, persistent) assembled by the generated code through the
// collective builders with the diagram's epilogue as an epilogue visitor tree; this header holds
// the launch (workspace on the stream, CUTLASS's checks turned into messages) and the flattening
// of a tensor's axes into the GEMM's modes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

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

// One mode of the GEMM (M, N, K or L) as a tensor holds it: its axes (dims of the tensor, in
// storage order) flattened into one extent with one stride. The axes must be contiguous with
// each other (each one's stride the next one's stride times its size).
struct Mode {
  int64_t extent = 1, stride = 0;
};
inline std::string flatten(const napkin_tensor* t, const char* name, const int* dims, int n, Mode* m) {
  m->extent = 1;
  m->stride = 0;
  if (n == 0) return "";
  for (int i = 0; i < n; ++i) m->extent *= t->shape[dims[i]];
  m->stride = t->strides[dims[n - 1]];
  for (int i = n - 1; i > 0; --i)
    if (t->shape[dims[i]] > 1 && t->strides[dims[i - 1]] != t->strides[dims[i]] * t->shape[dims[i]])
      return std::string("tensor '") + name + "': dims " + std::to_string(dims[i - 1]) + " and " + std::to_string(dims[i]) +
             " are one mode of the GEMM and must be contiguous with each other";
  return "";
}

// Runs a CUTLASS GemmUniversalAdapter on `stream`: "" or the reason it cannot.
template <class Gemm>
std::string run(typename Gemm::Arguments const& args, cudaStream_t stream) {
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess)
    return "CUTLASS cannot run this problem (each tensor's contiguous dim needs 16-byte alignment: sizes a multiple of 8 "
           "for 16-bit data)";
  const size_t bytes = Gemm::get_workspace_size(args);
  void* workspace = nullptr;
  if (bytes > 0 && cudaMallocAsync(&workspace, bytes, stream) != cudaSuccess) return "cudaMallocAsync (GEMM workspace)";
  cutlass::Status st = gemm.initialize(args, workspace, stream);
  if (st == cutlass::Status::kSuccess) st = gemm.run(stream);
  if (workspace != nullptr) cudaFreeAsync(workspace, stream);
  if (st != cutlass::Status::kSuccess) return std::string("CUTLASS: ") + cutlassGetStatusString(st);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return std::string("CUDA error: ") + cudaGetErrorString(e);
  return "";
}

}  // namespace napkin::gemm
