// SPDX-License-Identifier: Apache-2.0
// Host-memory entry points every generated kernel library exports beside napkin_kernel_launch,
// so that napkin's CUDA-free core (`napkin run`, through dlopen) can validate and time a kernel
// without linking CUDA itself:
//   napkin_kernel_run_host   copies host tensors to the device, launches once, copies every
//                            tensor back (outputs are the tensors the launch writes)
//   napkin_kernel_time       the same tensors on the device, `iters` timed launches after a
//                            warm-up, each after an L2 flush; the median in milliseconds
// Both return 0, or 1 with the reason in err.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "napkin/kernel_abi.h"

namespace napkin::host {

// The split workspace of launches on `stream` (current device), for kernels whose CTAs split a
// reduction and combine their partial sums in a fixed order: at least `words` 32-bit partials and
// `counters` arrival counters, the counters zero (the last CTA to arrive at one zeroes it again);
// grown on the stream when a launch needs more. The partials are written before they are read.
template <class Word>
inline cudaError_t split_workspace(cudaStream_t stream, size_t words, size_t counters, Word** partial, int** arrivals) {
  static_assert(sizeof(Word) == 4, "32-bit partials");
  static std::mutex lock;
  struct Slot {
    void* data = nullptr;
    size_t words = 0, counters = 0;
  };
  static std::map<std::pair<int, cudaStream_t>, Slot> slots;
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> guard(lock);
  Slot& s = slots[{device, stream}];
  if (s.words < words || s.counters < counters) {
    if (s.data != nullptr) cudaFreeAsync(s.data, stream);
    s.words = std::max(words, s.words);
    s.counters = std::max(counters, s.counters);
    if (cudaError_t e = cudaMallocAsync(&s.data, (s.words + s.counters) * 4, stream); e != cudaSuccess) {
      s = Slot{};
      return e;
    }
    if (cudaError_t e = cudaMemsetAsync(static_cast<char*>(s.data) + s.words * 4, 0, s.counters * sizeof(int), stream);
        e != cudaSuccess)
      return e;
  }
  *partial = static_cast<Word*>(s.data);
  *arrivals = reinterpret_cast<int*>(static_cast<char*>(s.data) + s.words * 4);
  return cudaSuccess;
}

// Plan intermediates and block summaries come from the current device's default memory pool.
// Its default release threshold (0) hands freed memory back at every synchronisation, so the
// next call would map its buffers afresh (a host-side cost of the order of the kernels
// themselves): napkin keeps what it frees in the pool, once per device per process.
inline void keep_pool_memory() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return;
  static bool done[64] = {};
  if (done[device]) return;
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  (void)cudaGetLastError();
  done[device] = true;
}


inline size_t dtype_bytes(int dtype) {
  switch (dtype) {
    case NAPKIN_F16: case NAPKIN_BF16: return 2;
    case NAPKIN_BOOL: return 1;
    case NAPKIN_F64: return 8;
    default: return 4;
  }
}
// Elements a tensor's strides span (its allocation).
inline size_t span_elements(const napkin_tensor& t) {
  size_t span = 1;
  for (int i = 0; i < t.rank; ++i) span += static_cast<size_t>(t.shape[i] - 1) * static_cast<size_t>(t.strides[i]);
  return span;
}

// Device copies of host tensors, freed on destruction.
struct DeviceTensors {
  std::vector<napkin_tensor> tensors;
  std::vector<void*> buffers;
  ~DeviceTensors() {
    for (void* p : buffers) cudaFree(p);
  }
  // is_param(t): a param, which stays in host memory (kernel_abi.h); every other tensor, rank 0
  // (a scalar output: a loss) included, is copied to the device.
  template <class IsParam>
  std::string upload(const napkin_tensor* host, int count, IsParam is_param) {
    for (int i = 0; i < count; ++i) {
      napkin_tensor t = host[i];
      if (is_param(t)) {
        tensors.push_back(t);
        continue;
      }
      const size_t bytes = span_elements(t) * dtype_bytes(t.dtype);
      void* p = nullptr;
      if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) return std::string("cudaMalloc: ") + cudaGetErrorString(e);
      buffers.push_back(p);
      if (cudaError_t e = cudaMemcpy(p, t.data, bytes, cudaMemcpyHostToDevice); e != cudaSuccess)
        return std::string("cudaMemcpy: ") + cudaGetErrorString(e);
      t.data = p;
      tensors.push_back(t);
    }
    return "";
  }
};

// The first tensor of a call that is none of `known` (null-terminated: the library's inputs,
// outputs and params), as a message; "" where there is none. A misspelt param would otherwise
// keep the diagram's value silently.
inline std::string unknown_tensor(const napkin_tensor* tensors, int32_t count, const char* const* known) {
  for (int32_t i = 0; i < count; ++i) {
    const char* name = tensors[i].name;
    if (name == nullptr) return "tensor " + std::to_string(i) + " has no name";
    bool found = false;
    for (const char* const* k = known; *k != nullptr && !found; ++k) found = std::strcmp(name, *k) == 0;
    if (found) continue;
    std::string names;
    for (const char* const* k = known; *k != nullptr; ++k) names += (names.empty() ? "" : ", ") + std::string(*k);
    return std::string("tensor '") + name + "': the kernel has no input, output or param of that name (it takes " + names + ")";
  }
  return "";
}

inline int32_t fail(const std::string& message, char* err, int32_t err_len) {
  if (err != nullptr && err_len > 0) std::snprintf(err, static_cast<size_t>(err_len), "%s", message.c_str());
  return 1;
}

}  // namespace napkin::host

// Defines the two host entries over this library's napkin_kernel_launch; is_param(const
// napkin_tensor&) tells the params (host memory) from the tensors.
#define NAPKIN_DEFINE_HOST_ENTRIES(is_param)                                                                  \
  extern "C" int32_t napkin_kernel_run_host(napkin_tensor* tensors, int32_t count, char* err, int32_t err_len) { \
    napkin::host::DeviceTensors dev;                                                                          \
    if (std::string e = dev.upload(tensors, count, is_param); !e.empty()) return napkin::host::fail(e, err, err_len); \
    if (napkin_kernel_launch(dev.tensors.data(), count, nullptr, err, err_len) != 0) return 1;                \
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)                                            \
      return napkin::host::fail(std::string("kernel: ") + cudaGetErrorString(e), err, err_len);               \
    for (int i = 0; i < count; ++i) {                                                                         \
      if (is_param(tensors[i])) continue;                                                                     \
      const size_t bytes = napkin::host::span_elements(tensors[i]) * napkin::host::dtype_bytes(tensors[i].dtype); \
      if (cudaError_t e = cudaMemcpy(tensors[i].data, dev.tensors[i].data, bytes, cudaMemcpyDeviceToHost);    \
          e != cudaSuccess)                                                                                   \
        return napkin::host::fail(std::string("cudaMemcpy: ") + cudaGetErrorString(e), err, err_len);        \
    }                                                                                                         \
    return 0;                                                                                                 \
  }                                                                                                           \
  extern "C" int32_t napkin_kernel_time(const napkin_tensor* tensors, int32_t count, int32_t iters, double* median_ms, \
                                        char* err, int32_t err_len) {                                         \
    napkin::host::DeviceTensors dev;                                                                          \
    if (std::string e = dev.upload(tensors, count, is_param); !e.empty()) return napkin::host::fail(e, err, err_len); \
    void* flush = nullptr;                                                                                    \
    const size_t flush_bytes = 256u << 20;                                                                    \
    if (cudaMalloc(&flush, flush_bytes) != cudaSuccess) return napkin::host::fail("cudaMalloc (L2 flush)", err, err_len); \
    cudaEvent_t start, stop;                                                                                  \
    cudaEventCreate(&start);                                                                                  \
    cudaEventCreate(&stop);                                                                                   \
    std::vector<float> ms;                                                                                    \
    for (int i = -3; i < iters; ++i) {                                                                        \
      cudaMemsetAsync(flush, i & 0xff, flush_bytes);                                                          \
      cudaEventRecord(start);                                                                                 \
      if (napkin_kernel_launch(dev.tensors.data(), count, nullptr, err, err_len) != 0) break;                 \
      cudaEventRecord(stop);                                                                                  \
      cudaEventSynchronize(stop);                                                                             \
      float t = 0;                                                                                            \
      cudaEventElapsedTime(&t, start, stop);                                                                  \
      if (i >= 0) ms.push_back(t);                                                                            \
    }                                                                                                         \
    cudaEventDestroy(start);                                                                                  \
    cudaEventDestroy(stop);                                                                                   \
    cudaFree(flush);                                                                                          \
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)                                            \
      return napkin::host::fail(std::string("kernel: ") + cudaGetErrorString(e), err, err_len);               \
    if (static_cast<int>(ms.size()) != iters || iters <= 0) return iters <= 0 ? napkin::host::fail("iters must be >= 1", err, err_len) : 1; \
    std::sort(ms.begin(), ms.end());                                                                          \
    *median_ms = ms[ms.size() / 2];                                                                           \
    return 0;                                                                                                 \
  }
