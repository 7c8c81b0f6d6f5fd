// SPDX-License-Identifier: Apache-2.0
// Auxiliary inputs staged through shared memory for the attention kernel's fused score code
// (fmha_fwd.h): score-shaped ones (roles q and k: a bias table, a score-sized mask) per consumer
// warp, and key-indexed ones (role k without q) in key rows beside K (below).
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
#include <cute/arch/copy_sm90_tma.hpp>

#include <cutlass/arch/barrier.h>

#include "napkin/tensor_binder.h"

namespace napkin::device {

// A floating-point element as f32 (the fused code computes in f32).
__device__ __forceinline__ float to_real(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_real(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_real(float x) { return x; }
__device__ __forceinline__ float to_real(double x) { return static_cast<float>(x); }

// A key-indexed input read through its strides, from global memory (KeyRowReads, below, reads it
// from the chunk's key rows instead).
struct GlobalKeyReads {
  template <int kOffset, int kOrdinal, class View>
  __device__ __forceinline__ auto key(View const& v, int b, int h, int q, int k) const {
    return v.at(b, h, q, k);
  }
};

// Every input read through its strides, from global memory: at() the element, real() it as f32.
struct DirectReads : GlobalKeyReads {
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
struct StagedReads : GlobalKeyReads {
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

// Key-indexed inputs (role k without q: segment ids, a key-padding mask, a per-key bias) in key
// rows beside the K ring: the producer copies each chunk's keys of every such input when it
// loads the chunk's K (one bulk copy on the K slot's barrier, fill_key_row), so the fused code
// reads them from shared memory at an immediate offset from one base a chunk. Read from global
// memory in the accumulator's layout, each key cost its own load and address arithmetic, on
// every masked chunk of document_mask (bench/NOTES.md).
//
// A chunk's key rows: input after input, the input of ordinal o at byte offset kOffset of a key
// (the bytes of the inputs before it) taking kBlockN elements and 16 bytes, so that its element
// i lies at key_row_offset + shift + i * sizeof(T), where shift (key_row_shift, under 16) puts
// it at the same address modulo 16 as in global memory: the bulk copy needs both ends 16-byte
// aligned. The key rows use 2 x kStages slots, one per K slot and lap (FwdConfig's
// SharedStorage::key_rows_of): the producer refills a slot only after every consumer warp
// released the K slot of the step after the slot's previous chunk, by which time that warp has
// fused the previous chunk's scores.
template <int kBlockN, int kOffset, int kOrdinal>
__host__ __device__ constexpr int key_row_offset() { return kOffset * kBlockN + 16 * kOrdinal; }

// Where a (batch, head)'s keys of input v start in its key row, modulo 16 bytes: their offset in
// global memory modulo 16 where the keys are contiguous (a chunk's first key is then at the same
// offset, kBlockN * sizeof(T) being a multiple of 16), 0 where they are strided.
template <class T, unsigned kRoles>
__device__ __forceinline__ int key_row_shift(AuxView<T, kRoles> const& v, int b, int head) {
  if (v.sk != 1) return 0;
  return static_cast<int>(reinterpret_cast<uintptr_t>(v.data + v.offset(b, head, 0, 0)) & 15);
}

// Writes elements [i0, i1) of a key row (element i at byte shift + i * sizeof(T) of `row`, the
// value elem(i)) as whole 32-bit words, by shared-memory atomics: compute-sanitizer's racecheck
// does not see the order the K slot's mbarrier gives these writes and the consumers' reads (as
// for StageRing's tag). The words' bytes outside the elements are the row's padding, or lie
// at a 16-byte boundary with the bulk copy's part (fill_key_row).
template <class T, class Elem>
__device__ __forceinline__ void store_key_words(char* row, int shift, int i0, int i1, Elem&& elem) {
  constexpr int kSize = static_cast<int>(sizeof(T));
  if constexpr (kSize % 4 == 0) {
    for (int i = i0; i < i1; ++i) {
      const T x = elem(i);
      unsigned words[kSize / 4];
      memcpy(words, &x, kSize);
      for (int c = 0; c < kSize / 4; ++c) atomicExch(reinterpret_cast<unsigned*>(row + shift + i * kSize) + c, words[c]);
    }
  } else {
    const int byte0 = (shift + i0 * kSize) & ~3, byte1 = (shift + i1 * kSize + 3) & ~3;
    for (int w = byte0; w < byte1; w += 4) {
      unsigned char bytes[4] = {};
      for (int c = 0; c < 4; ++c) {
        const int at = w + c - shift;  // the byte's place among the elements' bytes
        if (at < i0 * kSize || at >= i1 * kSize) continue;
        const T x = elem(at / kSize);
        unsigned char xb[kSize];
        memcpy(xb, &x, kSize);
        bytes[c] = xb[at % kSize];
      }
      unsigned word;
      memcpy(&word, bytes, 4);
      atomicExch(reinterpret_cast<unsigned*>(row + w), word);
    }
  }
}

// Copies keys [key0, key0 + kBlockN) of input v for (b, head) into its key row at `row` (16-byte
// aligned, kBlockN * sizeof(T) + 16 bytes): the 16-byte-aligned middle with one bulk copy that
// completes on `bar` (its bytes added to the barrier's transaction count), the ends and strided
// keys by store_key_words. Keys past seqlen_k take the last key's value, as the fused code's
// clamped reads do. One thread, after the slot is free and before its arrival on `bar`
// (StageRing's fill), which publishes the stores.
template <int kBlockN, class T, unsigned kRoles>
__device__ __forceinline__ void fill_key_row(AuxView<T, kRoles> const& v, char* row, int b, int head, int key0,
                                             int seqlen_k, uint64_t* bar) {
  static_assert((kRoles & kAuxQ) == 0 && (kRoles & kAuxK) != 0, "key rows hold key-indexed inputs");
  static_assert(kBlockN * sizeof(T) % 16 == 0, "a chunk's keys are whole 16-byte groups");
  constexpr int kSize = static_cast<int>(sizeof(T));
  const int shift = key_row_shift(v, b, head);
  const int len = min(kBlockN, seqlen_k - key0);
  int bulk0 = kBlockN, bulk1 = kBlockN;  // [bulk0, bulk1): the elements of the bulk copy
  if (v.sk == 1) {
    bulk0 = min(len, (16 - shift) % 16 / kSize);
    bulk1 = bulk0 + (len - bulk0) * kSize / 16 * 16 / kSize;
    if (bulk1 == bulk0) bulk0 = bulk1 = kBlockN;
  }
  if (bulk1 > bulk0) {
    const uint32_t bytes = static_cast<uint32_t>((bulk1 - bulk0) * kSize);
    cutlass::arch::ClusterTransactionBarrier::expect_transaction(bar, bytes);
    cute::SM90_BULK_COPY_G2S::copy(v.data + v.offset(b, head, 0, key0 + bulk0), bar, row + shift + bulk0 * kSize,
                                   static_cast<int32_t>(bytes));
  }
  auto elem = [&](int i) { return v.at(b, head, 0, key0 + min(i, len - 1)); };
  store_key_words<T>(row, shift, 0, bulk0 < bulk1 ? bulk0 : kBlockN, elem);
  if (bulk0 < bulk1) store_key_words<T>(row, shift, bulk1, kBlockN, elem);
}

// A reader (DirectReads or StagedReads) that reads key-indexed inputs from a chunk's key rows:
// `rows` the slot, `shift` each input's key_row_shift for the tile, `col` the column (within
// the chunk) of the score being fused.
template <class Base, int kBlockN>
struct KeyRowReads : Base {
  const char* rows;
  const int* shift;
  int col;
  template <int kOffset, int kOrdinal, class View>
  __device__ __forceinline__ auto key(View const&, int, int, int, int) const {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(View::data)>>;
    // (Aligned to sizeof(T): the shift is the element's address in global memory modulo 16.)
    return *reinterpret_cast<const T*>(rows + key_row_offset<kBlockN, kOffset, kOrdinal>() + shift[kOrdinal] + col * int(sizeof(T)));
  }
};

// The copies of this warp landed and are visible to its lanes.
__device__ __forceinline__ void staged_wait() {
  cute::cp_async_wait<0>();
  __syncwarp();
}

}  // namespace napkin::device
