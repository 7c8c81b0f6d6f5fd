// SPDX-License-Identifier: Apache-2.0
// Block summaries of the integer and bool tensors a mask reads along the query or key axis
// (segment ids doc_q[b q], a key-padding mask keep[b k]): per row of the tensor, the [min, max]
// of every run of elements, so that a mask's block bound (Fusion::block) can bound
// `doc_q == doc_k` or `keep` over a whole tile and skip blocks, or leave them unmasked, as it does
// for masks over indices alone.
//
// A summary is a sparse table: level j holds [min, max] over 2^j consecutive groups of 2^shift
// elements, so any range is two reads. Groups are 16 elements (finer than any tile), coarser for
// sequences past 64k so that a row's table stays under ~4096 groups; a range is rounded out to
// whole groups, which only widens the bound (conservative). Built on the launch's stream by
// one small kernel per tensor before the attention kernel (stream-ordered memory, freed after).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "napkin/device/attention_fusion.h"
#include "napkin/kernel_host.h"
#include "napkin/tensor_binder.h"

namespace napkin {

// The summary of one tensor, as Fusion::block reads it; kRoles: the tensor's b, h, g roles
// (AuxRole bits; its q or k role is the summarised axis).
template <unsigned kRoles>
struct BlockSummary {
  const int2* table = nullptr;  // [row][level][group]: (min, max)
  int64_t sb = 0, sh = 0, sg = 0;  // row strides in entries
  int groups = 1, shift = 4, length = 1, group = 1;
  // [min, max] of the tensor over [lo, hi] of its summarised axis at (b, head): a superset's.
  __device__ __forceinline__ device::IntRange range(int b, int head, int lo, int hi) const {
    lo = lo < 0 ? 0 : lo;
    hi = hi >= length ? length - 1 : hi;
    if (lo > hi) lo = 0, hi = length - 1;
    int64_t row = 0;
    if constexpr ((kRoles & (kAuxH | kAuxG)) != 0) {
      const int h = head / group, g = head - h * group;
      if constexpr ((kRoles & kAuxH) != 0) row += h * sh;
      if constexpr ((kRoles & kAuxG) != 0) row += g * sg;
    }
    if constexpr ((kRoles & kAuxB) != 0) row += b * sb;
    const int g0 = lo >> shift, g1 = hi >> shift;
    const int level = 31 - __clz(g1 - g0 + 1);
    const int2* t = table + row + static_cast<int64_t>(level) * groups;
    const int2 x = __ldg(t + g0), y = __ldg(t + g1 - (1 << level) + 1);
    return {x.x < y.x ? x.x : y.x, x.y > y.y ? x.y : y.y};
  }
  // A bool tensor over the range: true somewhere (max 1), true everywhere (min 1).
  __device__ __forceinline__ device::BlockVisibility visibility(int b, int head, int lo, int hi) const {
    const device::IntRange r = range(b, head, lo, hi);
    return {r.hi != 0, r.lo != 0};
  }
};

namespace detail {

// One CTA per row: level 0 from the tensor, then each level from the one below it.
template <class T, unsigned kRoles>
__global__ void build_block_summary(AuxView<T, kRoles> src, int2* table, int rows_h, int rows_g, int groups,
                                    int levels, int shift, int length, bool along_q) {
  const int row = blockIdx.x;
  const int g = row % rows_g, h = (row / rows_g) % rows_h, b = row / (rows_g * rows_h);
  const int head = h * src.group + g;
  int2* t = table + static_cast<int64_t>(row) * levels * groups;
  for (int i = threadIdx.x; i < groups; i += blockDim.x) {
    int lo = 0x7fffffff, hi = -0x7fffffff - 1;
    const int end = min(length, (i + 1) << shift);
    for (int e = i << shift; e < end; ++e) {
      const int v = static_cast<int>(src.at(b, head, along_q ? e : 0, along_q ? 0 : e));
      lo = min(lo, v), hi = max(hi, v);
    }
    t[i] = make_int2(lo, hi);
  }
  for (int j = 1; j < levels; ++j) {
    __syncthreads();
    const int2* below = t + static_cast<int64_t>(j - 1) * groups;
    for (int i = threadIdx.x; i < groups; i += blockDim.x) {
      const int2 x = below[i], y = below[min(i + (1 << (j - 1)), groups - 1)];
      t[static_cast<int64_t>(j) * groups + i] = make_int2(min(x.x, y.x), max(x.y, y.y));
    }
  }
}

}  // namespace detail

// The summaries of one launch: built on `stream` as the fusion's arguments are bound, freed
// (stream-ordered) when it goes out of scope after the launch. The first error is kept.
class BlockSummaries {
 public:
  explicit BlockSummaries(cudaStream_t stream) : stream_(stream) {}
  BlockSummaries(const BlockSummaries&) = delete;
  BlockSummaries& operator=(const BlockSummaries&) = delete;
  ~BlockSummaries() {
    for (void* p : buffers_) cudaFreeAsync(p, stream_);
  }

  // The summary of `v` (bound by tb) along `axis`, 'q' or 'k'.
  template <class T, unsigned kRoles>
  BlockSummary<kRoles & (kAuxB | kAuxH | kAuxG)> of(const AuxView<T, kRoles>& v, const TensorBinder& tb, char axis) {
    BlockSummary<kRoles & (kAuxB | kAuxH | kAuxG)> s;
    if (v.data == nullptr || !error_.empty() || !tb.error().empty()) return s;
    const int64_t length = tb.size(axis);
    int shift = 4;
    while ((length >> shift) > 4096) ++shift;
    const int groups = static_cast<int>((length + (int64_t{1} << shift) - 1) >> shift);
    int levels = 1;
    while ((1 << levels) <= groups) ++levels;
    const int rows_b = (kRoles & kAuxB) ? static_cast<int>(tb.size('b')) : 1;
    const int rows_h = (kRoles & kAuxH) ? static_cast<int>(tb.size('h')) : 1;
    const int rows_g = (kRoles & kAuxG) ? static_cast<int>(tb.size('g')) : 1;
    const int64_t per_row = static_cast<int64_t>(levels) * groups;
    host::keep_pool_memory();
    void* p = nullptr;
    if (cudaError_t e = cudaMallocAsync(&p, static_cast<size_t>(rows_b) * rows_h * rows_g * per_row * sizeof(int2), stream_);
        e != cudaSuccess) {
      error_ = std::string("block summary: cudaMallocAsync: ") + cudaGetErrorString(e);
      return s;
    }
    buffers_.push_back(p);
    s.table = static_cast<const int2*>(p);
    s.sg = (kRoles & kAuxG) ? per_row : 0;
    s.sh = (kRoles & kAuxH) ? per_row * rows_g : 0;
    s.sb = (kRoles & kAuxB) ? per_row * rows_g * rows_h : 0;
    s.groups = groups, s.shift = shift, s.length = static_cast<int>(length), s.group = v.group;
    detail::build_block_summary<T, kRoles><<<rows_b * rows_h * rows_g, 256, 0, stream_>>>(
        v, static_cast<int2*>(p), rows_h, rows_g, groups, levels, shift, static_cast<int>(length), axis == 'q');
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      error_ = std::string("block summary: launch: ") + cudaGetErrorString(e);
    return s;
  }
  const std::string& error() const { return error_; }

 private:
  cudaStream_t stream_;
  std::vector<void*> buffers_;
  std::string error_;
};

}  // namespace napkin
