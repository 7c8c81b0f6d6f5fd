// SPDX-License-Identifier: Apache-2.0
// Block summaries of the integer and bool tensors a mask reads by query row, by key, or by both
// (segment ids doc_q[b q], a key-padding mask keep[b k], a mask tensor allowed[b h q k]): the
// [min, max] of every run of elements, so that a mask's block bound (Fusion::block) can bound
// `doc_q == doc_k`, `keep` or `allowed` over a whole tile and skip blocks, or leave them
// unmasked, as it does for masks over indices alone.
//
// Along one axis (BlockSummary) a summary is a sparse table: level j holds [min, max] over 2^j
// consecutive groups of 2^shift elements, so any range is two reads. Groups are 16 elements
// (finer than any tile), coarser for sequences past 64k so that a row's table stays under ~4096
// groups. Over both axes (BlockSummary2D), each group of 64 query rows has such a table along
// the keys (groups of 64 keys), so a tile's block is two reads per group of its rows; groups
// grow past 64k or where the tables would pass 256 MB. A range is rounded out to whole groups,
// which only widens the bound (conservative). Built on the launch's stream by one small kernel
// per tensor before the attention kernel (stream-ordered memory, freed after).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "napkin/device/attention_fusion.h"
#include "napkin/kernel_host.h"
#include "napkin/tensor_binder.h"

namespace napkin {

namespace detail {

// [min, max] over groups [g0, g1] from one row's sparse table `t` ([level][group], `groups`
// entries a level): two reads at the level whose runs cover the range in two.
__device__ __forceinline__ int2 sparse_min_max(const int2* t, int groups, int g0, int g1) {
  const int level = 31 - __clz(g1 - g0 + 1);
  const int2* at = t + static_cast<int64_t>(level) * groups;
  const int2 x = __ldg(at + g0), y = __ldg(at + g1 - (1 << level) + 1);
  return make_int2(min(x.x, y.x), max(x.y, y.y));
}

// Levels 1.. of a sparse table whose level 0 the CTA has written: each from the one below it.
__device__ __forceinline__ void build_levels(int2* t, int groups, int levels) {
  for (int j = 1; j < levels; ++j) {
    __syncthreads();
    const int2* below = t + static_cast<int64_t>(j - 1) * groups;
    for (int i = threadIdx.x; i < groups; i += blockDim.x) {
      const int2 x = below[i], y = below[min(i + (1 << (j - 1)), groups - 1)];
      t[static_cast<int64_t>(j) * groups + i] = make_int2(min(x.x, y.x), max(x.y, y.y));
    }
  }
}

// The (b, query head) of table row `row` (rows in b, h, g order).
struct SummaryRow {
  int b, head;
  __device__ __forceinline__ SummaryRow(int row, int rows_h, int rows_g, int group) {
    const int g = row % rows_g, h = (row / rows_g) % rows_h;
    b = row / (rows_g * rows_h), head = h * group + g;
  }
};

}  // namespace detail

// The rows of a summary: one per (b, h, g) the tensor has; kRoles: its b, h, g roles.
template <unsigned kRoles>
struct SummaryRows {
  const int2* table = nullptr;
  int64_t sb = 0, sh = 0, sg = 0;  // row strides in entries
  int group = 1;
  __device__ __forceinline__ const int2* row(int b, int head) const {
    return table + batch_head_offset<kRoles>(b, head, group, sb, sh, sg);
  }
};

// The summary of one tensor along its q or k axis, as Fusion::block reads it: [row][level][group].
template <unsigned kRoles>
struct BlockSummary : SummaryRows<kRoles> {
  int groups = 1, shift = 4, length = 1;
  // [min, max] of the tensor over [lo, hi] of its summarised axis at (b, head): a superset's.
  __device__ __forceinline__ device::IntRange range(int b, int head, int lo, int hi) const {
    lo = lo < 0 ? 0 : lo;
    hi = hi >= length ? length - 1 : hi;
    if (lo > hi) lo = 0, hi = length - 1;
    const int2 r = detail::sparse_min_max(this->row(b, head), groups, lo >> shift, hi >> shift);
    return {r.x, r.y};
  }
  // A bool tensor over the range: true somewhere (max 1), true everywhere (min 1).
  __device__ __forceinline__ device::BlockVisibility visibility(int b, int head, int lo, int hi) const {
    const device::IntRange r = range(b, head, lo, hi);
    return {r.hi != 0, r.lo != 0};
  }
};

// The summary of a tensor indexed by query row and key: [row][q group][level][k group].
template <unsigned kRoles>
struct BlockSummary2D : SummaryRows<kRoles> {
  int q_groups = 1, k_groups = 1, levels = 1, q_shift = 6, k_shift = 6, q_length = 1, k_length = 1;
  __device__ __forceinline__ device::IntRange range(int b, int head, int q0, int q1, int k0, int k1) const {
    q0 = q0 < 0 ? 0 : q0, k0 = k0 < 0 ? 0 : k0;
    q1 = q1 >= q_length ? q_length - 1 : q1, k1 = k1 >= k_length ? k_length - 1 : k1;
    if (q0 > q1) q0 = 0, q1 = q_length - 1;
    if (k0 > k1) k0 = 0, k1 = k_length - 1;
    const int2* t = this->row(b, head);
    const int64_t per_q_group = static_cast<int64_t>(levels) * k_groups;
    int lo = 0x7fffffff, hi = -0x7fffffff - 1;
    for (int qg = q0 >> q_shift; qg <= (q1 >> q_shift); ++qg) {
      const int2 r = detail::sparse_min_max(t + qg * per_q_group, k_groups, k0 >> k_shift, k1 >> k_shift);
      lo = min(lo, r.x), hi = max(hi, r.y);
    }
    return {lo, hi};
  }
  __device__ __forceinline__ device::BlockVisibility visibility(int b, int head, int q0, int q1, int k0, int k1) const {
    const device::IntRange r = range(b, head, q0, q1, k0, k1);
    return {r.hi != 0, r.lo != 0};
  }
};

namespace detail {

// One CTA per row: level 0 from the tensor, then the levels above it.
template <class T, unsigned kRoles>
__global__ void build_block_summary(AuxView<T, kRoles> src, int2* table, int rows_h, int rows_g, int groups,
                                    int levels, int shift, int length, bool along_q) {
  const SummaryRow r(blockIdx.x, rows_h, rows_g, src.group);
  int2* t = table + static_cast<int64_t>(blockIdx.x) * levels * groups;
  for (int i = threadIdx.x; i < groups; i += blockDim.x) {
    int lo = 0x7fffffff, hi = -0x7fffffff - 1;
    const int end = min(length, (i + 1) << shift);
    for (int e = i << shift; e < end; ++e) {
      const int v = static_cast<int>(src.at(r.b, r.head, along_q ? e : 0, along_q ? 0 : e));
      lo = min(lo, v), hi = max(hi, v);
    }
    t[i] = make_int2(lo, hi);
  }
  build_levels(t, groups, levels);
}

// One CTA per (row, group of query rows): level 0 from the tensor, then the levels above it.
// Thread t folds its keys over the group's rows in registers (the rows' loads independent, so
// in flight together): one key, or with kVector 16 bytes of consecutive keys in one load (the
// tensor contiguous along k and 16-byte aligned; a bool mask then moves 16 keys a load, not
// one: measured 0.84 TB/s with one). The lanes of one group of keys then reduce by shuffles,
// and one of them updates shared memory: one update per group and pass, not per element.
template <class T, unsigned kRoles, bool kVector>
__global__ void build_block_summary_2d(AuxView<T, kRoles> src, int2* table, int rows_h, int rows_g, int q_groups,
                                       int k_groups, int levels, int q_shift, int k_shift, int q_length, int k_length) {
  constexpr int kKeys = kVector ? 16 / sizeof(T) : 1;  // keys per thread and load
  extern __shared__ int smem[];  // [2][k_groups]: min, max
  int* s_lo = smem;
  int* s_hi = smem + k_groups;
  const int qg = blockIdx.x % q_groups;
  const SummaryRow r(blockIdx.x / q_groups, rows_h, rows_g, src.group);
  for (int i = threadIdx.x; i < k_groups; i += blockDim.x) s_lo[i] = 0x7fffffff, s_hi[i] = -0x7fffffff - 1;
  __syncthreads();
  const int q_begin = qg << q_shift, q_end = min(q_length, (qg + 1) << q_shift);
  // Lanes whose keys share a group (a power of two: groups of >= 64 keys, kKeys <= 16).
  const int lanes_per_group = min(32, (1 << k_shift) / kKeys);
  for (int k0 = 0; k0 < k_length; k0 += blockDim.x * kKeys) {
    const int k = k0 + threadIdx.x * kKeys;
    int lo = 0x7fffffff, hi = -0x7fffffff - 1;
    if (k < k_length) {
#pragma unroll 8
      for (int q = q_begin; q < q_end; ++q) {
        if constexpr (kVector) {
          union {
            uint4 v;
            T e[kKeys];
          } u;
          u.v = __ldg(reinterpret_cast<const uint4*>(src.data + src.offset(r.b, r.head, q, k)));
#pragma unroll
          for (int i = 0; i < kKeys; ++i) lo = min(lo, static_cast<int>(u.e[i])), hi = max(hi, static_cast<int>(u.e[i]));
        } else {
          const int v = static_cast<int>(src.at(r.b, r.head, q, k));
          lo = min(lo, v), hi = max(hi, v);
        }
      }
    }
    for (int o = 1; o < lanes_per_group; o <<= 1) {
      lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
      hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    if ((threadIdx.x & (lanes_per_group - 1)) == 0 && k < k_length) {
      atomicMin(&s_lo[k >> k_shift], lo);
      atomicMax(&s_hi[k >> k_shift], hi);
    }
  }
  __syncthreads();
  int2* t = table + static_cast<int64_t>(blockIdx.x) * levels * k_groups;
  for (int i = threadIdx.x; i < k_groups; i += blockDim.x) t[i] = make_int2(s_lo[i], s_hi[i]);
  build_levels(t, k_groups, levels);
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
    const int64_t length = tb.size(axis);
    int shift = 4;
    while ((length >> shift) > 4096) ++shift;
    const int groups = static_cast<int>((length + (int64_t{1} << shift) - 1) >> shift);
    const int levels = levels_for(groups);
    const Rows rows = rows_of<kRoles>(tb);
    if (!allocate(v, tb, s, rows, int64_t{levels} * groups)) return s;
    s.groups = groups, s.shift = shift, s.length = static_cast<int>(length);
    detail::build_block_summary<T, kRoles><<<static_cast<unsigned>(rows.count()), 256, 0, stream_>>>(
        v, const_cast<int2*>(s.table), rows.h, rows.g, groups, levels, shift, static_cast<int>(length), axis == 'q');
    check_launch();
    return s;
  }
  // The summary of `v` (bound by tb) over its query rows and keys.
  template <class T, unsigned kRoles>
  BlockSummary2D<kRoles & (kAuxB | kAuxH | kAuxG)> of_rows_and_keys(const AuxView<T, kRoles>& v, const TensorBinder& tb) {
    BlockSummary2D<kRoles & (kAuxB | kAuxH | kAuxG)> s;
    const int64_t q_length = tb.size('q'), k_length = tb.size('k');
    const Rows rows = rows_of<kRoles>(tb);
    int q_shift = 6, k_shift = 6, q_groups = 0, k_groups = 0, levels = 0;
    auto per_row = [&] {
      q_groups = static_cast<int>((q_length + (int64_t{1} << q_shift) - 1) >> q_shift);
      k_groups = static_cast<int>((k_length + (int64_t{1} << k_shift) - 1) >> k_shift);
      levels = levels_for(k_groups);
      return int64_t{q_groups} * levels * k_groups;
    };
    while (rows.count() * per_row() * static_cast<int64_t>(sizeof(int2)) > (int64_t{256} << 20) || q_groups > 1024 ||
           k_groups > 1024) {
      if (q_groups >= k_groups) ++q_shift;
      else ++k_shift;
    }
    if (!allocate(v, tb, s, rows, per_row())) return s;
    s.q_groups = q_groups, s.k_groups = k_groups, s.levels = levels, s.q_shift = q_shift, s.k_shift = k_shift;
    s.q_length = static_cast<int>(q_length), s.k_length = static_cast<int>(k_length);
    // 16-byte loads where every row of keys starts 16-byte aligned and holds whole vectors.
    constexpr int64_t kKeys = 16 / sizeof(T);
    const bool vector = v.sk == 1 && reinterpret_cast<uintptr_t>(v.data) % 16 == 0 && k_length % kKeys == 0 &&
                        v.sq % kKeys == 0 && v.sb % kKeys == 0 && v.sh % kKeys == 0 && v.sg % kKeys == 0;
    auto launch = [&](auto kernel) {
      kernel<<<static_cast<unsigned>(rows.count() * q_groups), 256, 2 * k_groups * sizeof(int), stream_>>>(
          v, const_cast<int2*>(s.table), rows.h, rows.g, q_groups, k_groups, levels, q_shift, k_shift,
          static_cast<int>(q_length), static_cast<int>(k_length));
    };
    if (vector) launch(detail::build_block_summary_2d<T, kRoles, true>);
    else launch(detail::build_block_summary_2d<T, kRoles, false>);
    check_launch();
    return s;
  }
  const std::string& error() const { return error_; }

 private:
  struct Rows {
    int b, h, g;
    int64_t count() const { return int64_t{b} * h * g; }
  };
  template <unsigned kRoles>
  static Rows rows_of(const TensorBinder& tb) {
    return {(kRoles & kAuxB) ? static_cast<int>(tb.size('b')) : 1, (kRoles & kAuxH) ? static_cast<int>(tb.size('h')) : 1,
            (kRoles & kAuxG) ? static_cast<int>(tb.size('g')) : 1};
  }
  // Levels of a sparse table over `groups` groups: runs of 1, 2, 4, ... up to `groups`.
  static int levels_for(int groups) {
    int levels = 1;
    while ((1 << levels) <= groups) ++levels;
    return levels;
  }
  // The table of a summary: `per_row` entries for each of `rows`, and the row strides. False
  // (nothing to build) where the tensor is unbound or an error came before.
  template <class T, unsigned kRoles, unsigned kRowRoles>
  bool allocate(const AuxView<T, kRoles>& v, const TensorBinder& tb, SummaryRows<kRowRoles>& s, Rows rows,
                int64_t per_row) {
    if (v.data == nullptr || !error_.empty() || !tb.error().empty()) return false;
    host::keep_pool_memory();
    void* p = nullptr;
    const size_t bytes = static_cast<size_t>(rows.count() * per_row) * sizeof(int2);
    if (cudaError_t e = cudaMallocAsync(&p, bytes, stream_); e != cudaSuccess) {
      error_ = std::string("block summary: cudaMallocAsync: ") + cudaGetErrorString(e);
      return false;
    }
    buffers_.push_back(p);
    s.table = static_cast<const int2*>(p);
    s.sg = (kRowRoles & kAuxG) ? per_row : 0;
    s.sh = (kRowRoles & kAuxH) ? per_row * rows.g : 0;
    s.sb = (kRowRoles & kAuxB) ? per_row * rows.g * rows.h : 0;
    s.group = v.group;
    return true;
  }
  void check_launch() {
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      error_ = std::string("block summary: launch: ") + cudaGetErrorString(e);
  }

  cudaStream_t stream_;
  std::vector<void*> buffers_;
  std::string error_;
};

}  // namespace napkin
