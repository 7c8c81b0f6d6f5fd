// SPDX-License-Identifier: Apache-2.0
// Score-shaped auxiliary inputs (roles q and k: a bias table, a score-sized mask) staged through
// shared memory for the attention kernel's fused score code (fmha_fwd.h).
//
// Read straight from global memory in the accumulator's layout, a warp's loads of such a tensor
// use 8 bytes of each 32-byte sector, and each waits on memory inside the softmax's critical
// path (ncu on relative_bias: 75 % of sectors excess, 39.5 % of stalls on L1TEX; bench/NOTES.md).
// Staged, each consumer warp copies its own 16 rows of the next key chunk with coalesced 16-byte
// cp.async while the current chunk's GEMMs and softmax run, and the fused code reads the chunk
// from shared memory. A warp reads only what it copied: a __syncwarp orders the two.
//
// The emitter (src/emit/attention_kernel.cpp) marks such inputs: the Fusion's stage() visits
// each with its byte offset among them (kStagedBytes: a score's bytes over all of them), and the
// fused code reads each through `rd.template at<offset>(view, b, h, q, k)` (or real<offset>, as
// f32, for a floating-point input), where rd is
// DirectReads (global memory) or StagedReads (the warp's tile) as the kernel's schedule allows.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/arch/copy_sm80.hpp>

#include "napkin/tensor_binder.h"

namespace napkin::device {

// A floating-point element as f32 (the fused code computes in f32).
__device__ __forceinline__ float to_real(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_real(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_real(float x) { return x; }
__device__ __forceinline__ float to_real(double x) { return static_cast<float>(x); }

// Every input read through its strides, from global memory: at() the element, real() it as f32.
struct DirectReads {
  template <int kOffset, class View>
  __device__ __forceinline__ auto at(View const& v, int b, int h, int q, int k) const {
    return v.at(b, h, q, k);
  }
  template <int kOffset, class View>
  __device__ __forceinline__ float real(View const& v, int b, int h, int q, int k) const {
    return to_real(v.at(b, h, q, k));
  }
};

// One consumer warp's staged tile: its 16 query rows x kBlockN keys of each staged input, input
// after input (an input at byte offset kOffset of a score starts at kOffset * 16 * kBlockN). A
// row's 16-byte groups are XOR-swizzled by row % 8 where a row has a multiple of 8 groups, so
// the accumulator-layout reads (8 rows x 4 lanes a load) fall in distinct banks.
template <int kBlockN>
struct WarpStagedTile {
  static constexpr int kRows = 16;
  template <int kOffset, int kBytes>
  __device__ __forceinline__ static int offset(int row, int col) {
    constexpr int kRowBytes = kBlockN * kBytes, kGroups = kRowBytes / 16;
    const int byte = col * kBytes;
    int group = byte / 16;
    if constexpr (kGroups % 8 == 0) group ^= row % 8;
    return kOffset * kRows * kBlockN + row * kRowBytes + group * 16 + byte % 16;
  }
};

// The staged inputs at two adjacent keys of one row (an accumulator's column pair col, col + 1;
// col even), loaded from the warp's tile with one shared-memory load per input: `bytes` holds
// input by input, at twice its byte offset, its two elements. (Held in registers once unrolled.)
template <int kBlockN, int kStagedBytes>
struct StagedPair {
  char bytes[kStagedBytes > 0 ? 2 * kStagedBytes : 1];
  template <class Fusion, class Args>
  __device__ __forceinline__ void load(Args const& a, const char* tile, int row, int col) {
    Fusion::stage(a, [&](auto offset, auto const& view) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(view.data)>>;
      constexpr int kOffset = decltype(offset)::value;
      struct alignas(2 * sizeof(T)) Two {
        T v[2];
      };
      const Two two = *reinterpret_cast<const Two*>(tile + WarpStagedTile<kBlockN>::template offset<kOffset, int(sizeof(T))>(row, col));
      memcpy(bytes + 2 * kOffset, &two, sizeof(Two));
    });
  }
};

// Reads a staged input from a loaded pair: its element `odd` (0 or 1).
template <int kBlockN, int kStagedBytes>
struct StagedReads {
  StagedPair<kBlockN, kStagedBytes> const& pair;
  int odd;
  template <int kOffset, class View>
  __device__ __forceinline__ auto at(View const& v, int, int, int, int) const {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(v.data)>>;
    T x;
    memcpy(&x, pair.bytes + 2 * kOffset + odd * int(sizeof(T)), sizeof(T));
    return x;
  }
  template <int kOffset, class View>
  __device__ __forceinline__ float real(View const& v, int b, int h, int q, int k) const {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(v.data)>>;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      // A bf16 is the high half of its f32: one shift or mask of the pair's word each.
      uint32_t word;
      memcpy(&word, pair.bytes + 2 * kOffset, 4);
      return __uint_as_float(odd ? word & 0xffff0000u : word << 16);
    } else {
      return to_real(at<kOffset>(v, b, h, q, k));
    }
  }
};

// Copies query rows [row_first, row_first + 16) x keys [key0, key0 + kBlockN) of one input into
// the warp's tile (`lane` of 32) with 16-byte cp.async (L2 only), where the tile lies inside the
// tensor and its rows are contiguous and 16-byte aligned (checked once, uniform over the warp);
// otherwise group by group, element by element where a group is not whole. Rows and keys past
// the ends read the last one, as the fused code's clamped indices do (Fusion::kReadsRowsOrKeys).
template <int kBlockN, int kOffset, class T, unsigned kRoles>
__device__ __forceinline__ void stage_input(AuxView<T, kRoles> const& v, char* tile, int lane, int b, int head,
                                            int row_first, int seqlen_q, int key0, int seqlen_k) {
  static_assert((kRoles & kAuxQ) != 0 && (kRoles & kAuxK) != 0, "only score-shaped inputs are staged");
  static_assert(kBlockN * sizeof(T) % 16 == 0, "a staged row is whole 16-byte groups");
  using Tile = WarpStagedTile<kBlockN>;
  constexpr int kPerGroup = 16 / int(sizeof(T)), kGroups = kBlockN * int(sizeof(T)) / 16;
  constexpr int kTileGroups = Tile::kRows * kGroups;
  auto copy16 = [](char* dst, const T* src) {
    cute::SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>::copy(*reinterpret_cast<const cute::uint128_t*>(src),
                                                           *reinterpret_cast<cute::uint128_t*>(dst));
  };
  const T* first = v.data + v.offset(b, head, min(row_first, seqlen_q - 1), key0);
  const bool whole = v.sk == 1 && (v.sq * int64_t(sizeof(T))) % 16 == 0 && (reinterpret_cast<uintptr_t>(first) & 15) == 0 &&
                     key0 + kBlockN <= seqlen_k && row_first + Tile::kRows <= seqlen_q;
  if (whole) {
#pragma unroll
    for (int i = lane; i < kTileGroups; i += 32) {
      const int r = i / kGroups, g = i - r * kGroups;
      copy16(tile + Tile::template offset<kOffset, int(sizeof(T))>(r, g * kPerGroup), first + r * v.sq_wide + g * kPerGroup);
    }
  } else {
#pragma unroll 1
    for (int i = lane; i < kTileGroups; i += 32) {
      const int r = i / kGroups, g = i - r * kGroups;
      const int row = min(row_first + r, seqlen_q - 1), key = key0 + g * kPerGroup;
      char* dst = tile + Tile::template offset<kOffset, int(sizeof(T))>(r, g * kPerGroup);
      const T* src = v.data + v.offset(b, head, row, key);
      if (v.sk == 1 && key + kPerGroup <= seqlen_k && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
        copy16(dst, src);
      } else {
#pragma unroll
        for (int e = 0; e < kPerGroup; ++e) reinterpret_cast<T*>(dst)[e] = v.at(b, head, row, min(key + e, seqlen_k - 1));
      }
    }
  }
  cute::cp_async_fence();
}

// The copies of this warp landed and are visible to its lanes.
__device__ __forceinline__ void staged_wait() {
  cute::cp_async_wait<0>();
  __syncwarp();
}

}  // namespace napkin::device
