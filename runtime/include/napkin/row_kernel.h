// SPDX-License-Identifier: Apache-2.0
// The device library of row and elementwise kernels. src/emit/row_kernel.cpp writes the thin
// translation units that use it (golden files: tests/golden/kernels/rows_*.cu); docs/kernels.md,
// "Row and elementwise kernels", gives the contract.
//
// Row kernel. A row is kLength elements along the row axis, which is innermost and unit-stride
// in every tensor that has it. kThreads threads share a row (a power of two below 32, or a
// multiple of 32 up to 1024); a CTA holds kRows rows. Thread `lane` of a row owns the vectors
// lane, lane + kThreads, lane + 2 kThreads, ... of kVector elements each, so consecutive threads
// touch consecutive 16-byte words (coalesced), and a thread has all its loads in flight at once:
//
//   row (kLength elements) = [ vector 0 | vector 1 | ... ]        vector v: kVector elements
//   vector j is owned by lane j % kThreads, as its (j / kThreads)-th vector (RowThread::owns)
//
// The generated code keeps a thread's vectors in registers (`r` prefix) as they are in memory
// (Vector: two bf16 per register, widened on use), accumulates each reduction in f32 (or i32 for
// a max of integers) in element order, and completes it over the row with RowThread::reduce:
// warp shuffles, then one shared-memory step across the row's warps whose partials every thread
// combines in the same order (every thread of a row gets bit-identical statistics). Max is IEEE
// 754-2019 maximum: a NaN anywhere in the row gives NaN.
//
// Elementwise kernel: a grid-stride loop over vectors of the output's innermost axis (the host
// flattens tensors that are dense in the output's order into one row).
//
// Column kernel: a reduction over an axis that is not innermost, read as stored (ColumnShape,
// ColumnThread, launch_columns below).
//
// Host side: FastDiv (row index -> axis indices without a 64-bit division) and launch (a grid
// no larger than what is resident on the GPU at once; the kernels stride over their work).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "napkin/elementwise.h"
#include "napkin/kernel_abi.h"
#include "napkin/kernel_host.h"
#include "napkin/tensor_binder.h"

namespace napkin::rows {

// ---- Element types: a tensor's dtype in memory, its value in registers -------------------------

// The register type of an element: float for every floating dtype, int for i32, bool for bool
// (stored as one byte, 0 or 1).
template <class T> struct ComputeOf { using type = float; };
template <> struct ComputeOf<int32_t> { using type = int; };
template <> struct ComputeOf<uint8_t> { using type = bool; };
template <class T> using compute_t = typename ComputeOf<T>::type;

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float widen(double x) { return static_cast<float>(x); }
__device__ __forceinline__ int widen(int32_t x) { return x; }
__device__ __forceinline__ bool widen(uint8_t x) { return x != 0; }

// A register value stored in dtype T: floats round to nearest even, i32 rounds to nearest even
// and saturates (NaN gives 0), bool is x != 0 (the reference interpreter's round_to_dtype).
template <class T> __device__ __forceinline__ T narrow(float x);
template <> __device__ __forceinline__ float narrow<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half narrow<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ double narrow<double>(float x) { return x; }
template <> __device__ __forceinline__ int32_t narrow<int32_t>(float x) { return round_i32(x); }
template <> __device__ __forceinline__ uint8_t narrow<uint8_t>(float x) { return x != 0.0f; }
template <class T> __device__ __forceinline__ T narrow(int x) {
  if constexpr (std::is_same_v<T, int32_t>) return x;
  else if constexpr (std::is_same_v<T, uint8_t>) return x != 0;
  else return narrow<T>(static_cast<float>(x));
}
// A 64-bit integer (the row code's integer arithmetic, exact as the reference's) stored: an i32
// saturates, as the reference's stored i32 values do.
template <class T> __device__ __forceinline__ T narrow(long long x) {
  if constexpr (std::is_same_v<T, int32_t>) return static_cast<int32_t>(x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : x);
  else if constexpr (std::is_same_v<T, uint8_t>) return x != 0;
  else return narrow<T>(static_cast<float>(x));
}
template <class T> __device__ __forceinline__ T narrow(bool x) {
  if constexpr (std::is_same_v<T, uint8_t>) return x;
  else return narrow<T>(static_cast<int>(x));
}

// ---- Vectors: kV consecutive elements in one access (16 bytes, or two for 8-byte types) --------

// kV elements of T as they are in memory, in registers: packed in 32-bit words (two bf16 per
// register), widened to the register type on use. The row kernel keeps its rows this way.
template <class T, int kV>
struct Vector {
  static constexpr int kBytes = kV * static_cast<int>(sizeof(T));
  using Word = std::conditional_t<kBytes % 16 == 0, uint4,
               std::conditional_t<kBytes % 8 == 0, uint2, std::conditional_t<kBytes % 4 == 0, unsigned int, T>>>;
  static constexpr int kWords = kBytes / static_cast<int>(sizeof(Word));
  Word raw[kWords];

  // Reads the kV elements at `src` (aligned to kV * sizeof(T); read-only for the kernel's
  // lifetime: the non-coherent path).
  __device__ __forceinline__ void load(const T* src) {
#pragma unroll
    for (int i = 0; i < kWords; ++i) raw[i] = __ldg(reinterpret_cast<const Word*>(src) + i);
  }
  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < kWords; ++i) raw[i] = Word{};
  }
  // Element v in its register type (v a compile-time constant after unrolling).
  __device__ __forceinline__ compute_t<T> operator[](int v) const {
    if constexpr (sizeof(Word) < 4) {
      return widen(raw[v]);
    } else {
      const unsigned int* w = reinterpret_cast<const unsigned int*>(raw);
      if constexpr (std::is_same_v<T, float>) return __uint_as_float(w[v]);
      else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(v % 2 ? (w[v / 2] & 0xffff0000u) : (w[v / 2] << 16));
      else if constexpr (std::is_same_v<T, __half>)
        return __half2float(__ushort_as_half(static_cast<unsigned short>(w[v / 2] >> (16 * (v % 2)))));
      else if constexpr (std::is_same_v<T, double>)
        return static_cast<float>(__hiloint2double(static_cast<int>(w[2 * v + 1]), static_cast<int>(w[2 * v])));
      else if constexpr (std::is_same_v<T, int32_t>) return static_cast<int>(w[v]);
      else return ((w[v / 4] >> (8 * (v % 4))) & 0xffu) != 0;
    }
  }
};

// Writes kV register values to `dst` (aligned to kV * sizeof(T)) in dtype T.
template <int kV, class T, class S>
__device__ __forceinline__ void store_vector(T* dst, const S* src) {
  constexpr int kBytes = kV * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0 || kBytes == 8 || kBytes == 4) {
    using Word = std::conditional_t<kBytes % 16 == 0, uint4, std::conditional_t<kBytes == 8, uint2, unsigned int>>;
    constexpr int kWords = kBytes / static_cast<int>(sizeof(Word));
    Word raw[kWords];
    T* e = reinterpret_cast<T*>(raw);
#pragma unroll
    for (int v = 0; v < kV; ++v) e[v] = narrow<T>(src[v]);
#pragma unroll
    for (int i = 0; i < kWords; ++i) reinterpret_cast<Word*>(dst)[i] = raw[i];
  } else {
#pragma unroll
    for (int v = 0; v < kV; ++v) dst[v] = narrow<T>(src[v]);
  }
}
// One element, at any address.
template <class T> __device__ __forceinline__ compute_t<T> get(const T* p) { return widen(__ldg(p)); }
template <class T, class S> __device__ __forceinline__ void put(T* p, S v) { *p = narrow<T>(v); }

// ---- Reductions -------------------------------------------------------------------------------

struct Sum {
  __host__ __device__ static float identity(float) { return 0.0f; }
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
// IEEE 754-2019 maximum (NaN if either is NaN): one max.NaN instruction since sm_80.
struct Max {
  __host__ __device__ static float identity(float) { return -INFINITY; }
  __host__ __device__ static int identity(int) { return INT32_MIN; }
  __device__ __forceinline__ float operator()(float a, float b) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return nan_max(a, b);
#endif
  }
  __device__ __forceinline__ int operator()(int a, int b) const { return a > b ? a : b; }
};

// A running reduction of one thread's elements; RowThread::reduce completes it over the row.
template <class Op, class T = float>
struct Acc {
  T value = Op::identity(T{});
  __device__ __forceinline__ void add(T x) { value = Op{}(value, x); }
};

__device__ __forceinline__ uint32_t to_bits(float x) { return __float_as_uint(x); }
__device__ __forceinline__ uint32_t to_bits(int x) { return static_cast<uint32_t>(x); }
__device__ __forceinline__ void from_bits(uint32_t b, float& x) { x = __uint_as_float(b); }
__device__ __forceinline__ void from_bits(uint32_t b, int& x) { x = static_cast<int>(b); }

// ---- The row kernel's thread layout -------------------------------------------------------------

template <int kLength_, int kThreads_, int kRows_, int kVector_>
struct RowShape {
  static constexpr int kLength = kLength_;    // elements in a row (the row axis's size)
  static constexpr int kThreads = kThreads_;  // threads per row
  static constexpr int kRows = kRows_;        // rows per CTA
  static constexpr int kVector = kVector_;    // elements per access
  static_assert(kLength % kVector == 0, "a vector never straddles two rows");
  static_assert((kThreads < 32 && (32 % kThreads) == 0) || (kThreads % 32 == 0 && kThreads <= 1024),
                "threads per row: a power of two below 32 or a multiple of 32");
  static_assert((kThreads * kRows) % 32 == 0 && kThreads * kRows <= 1024, "whole warps, at most 1024 threads");
  static constexpr int kCtaThreads = kThreads * kRows;
  static constexpr int kVectorsPerRow = kLength / kVector;
  static constexpr int kVectors = (kVectorsPerRow + kThreads - 1) / kThreads;  // per thread
  static constexpr int kElements = kVectors * kVector;                          // per thread
  static constexpr bool kExact = kVectorsPerRow % kThreads == 0;                // every thread owns kVectors
  static constexpr int kWarps = kThreads > 32 ? kThreads / 32 : 1;             // warps per row
};

// One thread of a row kernel: its row within the CTA and its place in that row.
template <class Shape>
struct RowThread {
  int lane;  // thread within its row
  int row;   // row within the CTA
  __device__ __forceinline__ RowThread()
      : lane(static_cast<int>(threadIdx.x) % Shape::kThreads), row(static_cast<int>(threadIdx.x) / Shape::kThreads) {}

  // Whether this thread owns its k-th vector (the last ones, where kThreads does not divide
  // the row's vectors, belong to the first threads only).
  __device__ __forceinline__ bool owns(int k) const {
    return Shape::kExact || lane + k * Shape::kThreads < Shape::kVectorsPerRow;
  }
  // The element index along the row of the first element of this thread's k-th vector.
  __device__ __forceinline__ int element(int k) const { return (lane + k * Shape::kThreads) * Shape::kVector; }

  // This thread's vectors of a row that starts at `src` (unit stride): r[k] holds elements
  // element(k) ... element(k) + kVector - 1; vectors the thread does not own are zero.
  template <class T>
  __device__ __forceinline__ void load(Vector<T, Shape::kVector> (&r)[Shape::kVectors], const T* src) const {
#pragma unroll
    for (int k = 0; k < Shape::kVectors; ++k) {
      if (owns(k)) r[k].load(src + element(k));
      else r[k].clear();
    }
  }

  // Completes each accumulator over the row's threads; every thread of the row gets the same
  // values. The accumulators of one pass go together (one barrier for all of them).
  // `partials`: sizeof...(acc) * kRows * kWarps words of shared memory that no other reduction
  // uses until a barrier separates them (the generated code gives each pass its own).
  template <class... A>
  __device__ __forceinline__ void reduce(uint32_t* partials, A&... acc) const {
    (warp_reduce(acc), ...);
    if constexpr (Shape::kWarps > 1) {
      int slot = 0;
      (publish(partials, slot++, acc), ...);
      __syncthreads();
      slot = 0;
      (combine(partials, slot++, acc), ...);
    }
  }

 private:
  template <class Op, class T>
  __device__ __forceinline__ static void warp_reduce(Acc<Op, T>& acc) {
    constexpr int kWidth = Shape::kThreads < 32 ? Shape::kThreads : 32;
#pragma unroll
    for (int offset = kWidth / 2; offset > 0; offset /= 2)
      acc.value = Op{}(acc.value, __shfl_xor_sync(0xffffffffu, acc.value, offset));
  }
  template <class Op, class T>
  __device__ __forceinline__ void publish(uint32_t* partials, int slot, const Acc<Op, T>& acc) const {
    if (lane % 32 == 0) partials[(slot * Shape::kRows + row) * Shape::kWarps + lane / 32] = to_bits(acc.value);
  }
  template <class Op, class T>
  __device__ __forceinline__ void combine(const uint32_t* partials, int slot, Acc<Op, T>& acc) const {
    T total = Op::identity(T{});
#pragma unroll
    for (int w = 0; w < Shape::kWarps; ++w) {
      T part;
      from_bits(partials[(slot * Shape::kRows + row) * Shape::kWarps + w], part);
      total = Op{}(total, part);
    }
    acc.value = total;
  }
};

// ---- The column kernel's thread layout -----------------------------------------------------------

// A column kernel reduces over an axis r that is not innermost: its tensors are [outer, r, inner]
// and its columns are [outer, inner], numbered with the inner axes fastest. kLanes threads of a
// CTA take consecutive vectors of kVector columns (coalesced along the inner axes), kDepth
// threads walk r for each, and the grid's y dimension splits r:
//
//   CTA (x, y): columns [x kLanes kVector, (x + 1) kLanes kVector), r in split y
//   thread (lane, depth): its vector of columns, r = begin + depth, begin + depth + kDepth, ...
//
// Each thread accumulates kVector columns in element order; ColumnThread::reduce combines the
// depths in order, ColumnThread::finish the splits in order (the last CTA of a column tile to
// arrive sums the others' partials): every result is the same from run to run.
template <int kLanes_, int kDepth_, int kVector_>
struct ColumnShape {
  static constexpr int kLanes = kLanes_;
  static constexpr int kDepth = kDepth_;
  static constexpr int kVector = kVector_;
  static constexpr int kCtaThreads = kLanes * kDepth;
  static constexpr int kColumns = kLanes * kVector;  // per CTA
  static_assert(kCtaThreads % 32 == 0 && kCtaThreads <= 1024, "whole warps, at most 1024 threads");
};

template <class Shape>
struct ColumnThread {
  int lane;   // which vector of the CTA's columns
  int depth;  // which of the kDepth threads along r
  __device__ __forceinline__ ColumnThread()
      : lane(static_cast<int>(threadIdx.x) % Shape::kLanes), depth(static_cast<int>(threadIdx.x) / Shape::kLanes) {}

  // Combines each accumulator array (kVector columns) over the depths, in depth order; the
  // totals are in the depth-0 threads. Every thread of the CTA combines a share of the columns
  // (each over all depths), so no thread's chain is longer than kDepth loads a column.
  // `partials`: sizeof...(acc) * kCtaThreads * kVector words of shared memory.
  template <class... A>
  __device__ __forceinline__ void reduce(uint32_t* partials, A&... acc) const {
    int slot = 0;
    (publish(partials, slot++, acc), ...);
    __syncthreads();
    slot = 0;
    (combine(partials, slot++, acc), ...);
    __syncthreads();
    slot = 0;
    if (depth == 0) (gather(partials, slot++, acc), ...);
  }

  // Across the grid's splits of r: every split stores its depth-0 totals to `partial`
  // ([split][accumulator][column]), and the last CTA of the column tile to arrive combines them:
  // thread (lane, depth) sums splits depth, depth + kDepth, ... in order, then reduce() combines
  // the depths in order. True in the CTA that holds the final values (in its depth-0 threads):
  // every CTA when there is one split. `arrivals` (one per column tile, zero between launches) is
  // zeroed again by that CTA. `partials` as for reduce().
  template <class... A>
  __device__ __forceinline__ bool finish(uint32_t* partials, uint32_t* partial, int* arrivals, bool live, A&... acc) const {
    if (gridDim.y == 1) return true;
    __shared__ int last;
    const int64_t column = (int64_t(blockIdx.x) * Shape::kLanes + lane) * Shape::kVector;
    const int64_t stride = int64_t(gridDim.x) * Shape::kColumns;  // the words of one accumulator of one split
    constexpr int kAccs = sizeof...(A);
    if (depth == 0 && live) {
      int slot = 0;
      (store(partial + (int64_t(blockIdx.y) * kAccs + slot++) * stride + column, acc), ...);
    }
    __threadfence();
    __syncthreads();  // (also: every thread's reduce() has read `partials`)
    if (threadIdx.x == 0) last = atomicAdd(arrivals + blockIdx.x, 1) == static_cast<int>(gridDim.y) - 1;
    __syncthreads();
    if (!last) return false;
    __threadfence();
    int slot = 0;
    (sum_splits(partial, kAccs, slot++, stride, column, live, acc), ...);
    if (threadIdx.x == 0) arrivals[blockIdx.x] = 0;
    reduce(partials, acc...);
    return true;
  }

 private:
  template <class Op, class T>
  __device__ __forceinline__ void publish(uint32_t* partials, int slot, const Acc<Op, T> (&acc)[Shape::kVector]) const {
#pragma unroll
    for (int v = 0; v < Shape::kVector; ++v)
      partials[(slot * Shape::kDepth + depth) * Shape::kColumns + lane * Shape::kVector + v] = to_bits(acc[v].value);
  }
  // Column c of this slot, combined over the depths in order, into depth 0's word of c: thread t
  // takes columns t, t + kCtaThreads, ... (each column's words are read and written by one thread).
  template <class Op, class T>
  __device__ __forceinline__ static void combine(uint32_t* partials, int slot, const Acc<Op, T> (&)[Shape::kVector]) {
    uint32_t* words = partials + slot * Shape::kDepth * Shape::kColumns;
    for (int c = static_cast<int>(threadIdx.x); c < Shape::kColumns; c += Shape::kCtaThreads) {
      T t = Op::identity(T{});
#pragma unroll 8
      for (int d = 0; d < Shape::kDepth; ++d) {
        T part;
        from_bits(words[d * Shape::kColumns + c], part);
        t = Op{}(t, part);
      }
      words[c] = to_bits(t);
    }
  }
  template <class Op, class T>
  __device__ __forceinline__ void gather(const uint32_t* partials, int slot, Acc<Op, T> (&acc)[Shape::kVector]) const {
#pragma unroll
    for (int v = 0; v < Shape::kVector; ++v) from_bits(partials[slot * Shape::kDepth * Shape::kColumns + lane * Shape::kVector + v], acc[v].value);
  }
  template <class Op, class T>
  __device__ __forceinline__ static void store(uint32_t* dst, const Acc<Op, T> (&acc)[Shape::kVector]) {
#pragma unroll
    for (int v = 0; v < Shape::kVector; ++v) __stcg(dst + v, to_bits(acc[v].value));
  }
  // This thread's share of the splits (depth, depth + kDepth, ...), summed in order; 16-byte
  // loads where a vector of columns allows.
  template <class Op, class T>
  __device__ __forceinline__ void sum_splits(const uint32_t* partial, int accs, int slot, int64_t stride, int64_t column, bool live,
                                             Acc<Op, T> (&acc)[Shape::kVector]) const {
#pragma unroll
    for (int v = 0; v < Shape::kVector; ++v) acc[v].value = Op::identity(T{});
    if (!live) return;
    for (int s = depth; s < static_cast<int>(gridDim.y); s += Shape::kDepth) {
      const uint32_t* src = partial + (int64_t(s) * accs + slot) * stride + column;
      uint32_t bits[Shape::kVector];
      if constexpr (Shape::kVector % 4 == 0) {
#pragma unroll
        for (int w = 0; w < Shape::kVector / 4; ++w) reinterpret_cast<uint4*>(bits)[w] = __ldcg(reinterpret_cast<const uint4*>(src) + w);
      } else {
#pragma unroll
        for (int v = 0; v < Shape::kVector; ++v) bits[v] = __ldcg(src + v);
      }
#pragma unroll
      for (int v = 0; v < Shape::kVector; ++v) {
        T part;
        from_bits(bits[v], part);
        acc[v].value = Op{}(acc[v].value, part);
      }
    }
  }
};

// ---- Host side ----------------------------------------------------------------------------------

// n / d and n % d by a multiply-high for 0 <= n < 2^31 (Granlund and Montgomery, "Division by
// invariant integers using multiplication", 1994, figure 4.1, with N = 32 and n < 2^31 so that
// the sum cannot overflow); larger n divide plainly. Pre: 1 <= d <= 2^31.
struct FastDiv {
  int64_t d = 1;
  uint32_t multiplier = 1, shift = 0;
  FastDiv() = default;
  explicit FastDiv(int64_t divisor) : d(divisor) {
    while ((int64_t{1} << shift) < d) ++shift;
    multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - static_cast<uint64_t>(d))) /
                                           static_cast<uint64_t>(d) + 1);
  }
  __device__ __forceinline__ int64_t div(int64_t n) const {
    if (n < (int64_t{1} << 31)) {
      const uint32_t u = static_cast<uint32_t>(n);
      return static_cast<int64_t>((__umulhi(u, multiplier) + u) >> shift);
    }
    return n / d;
  }
  // Returns n % d and leaves n / d in n.
  __device__ __forceinline__ int64_t split(int64_t& n) const {
    const int64_t q = div(n);
    const int64_t r = n - q * d;
    n = q;
    return r;
  }
};

// Whether p is aligned for vectors of kV elements of its type.
template <class T>
inline bool aligned(const T* p, int vector) {
  return reinterpret_cast<uintptr_t>(p) % (static_cast<uintptr_t>(vector) * sizeof(T)) == 0;
}

// CTAs of kKernel (kCtaThreads threads, no dynamic shared memory) resident on the current GPU at
// once: its occupancy, asked once per kernel, times the SM count, asked per call.
template <auto kKernel, int kCtaThreads>
inline cudaError_t resident_ctas(int64_t* resident) {
  static const int per_sm = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, kCtaThreads, 0) != cudaSuccess || n < 1) n = 1;
    return n;
  }();
  int device = 0, sms = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) return e;
  *resident = static_cast<int64_t>(per_sm) * (sms > 0 ? sms : 1);
  return cudaSuccess;
}

// Launches kKernel(args) on `stream`: kCtaThreads threads per CTA and `ctas` CTAs, or as many as
// are resident on the GPU at once when that is fewer (the kernels stride over their work: rows
// past the grid go round again).
template <auto kKernel, int kCtaThreads, class Args>
inline cudaError_t launch(int64_t ctas, const Args& args, cudaStream_t stream) {
  int64_t resident = 1;
  if (cudaError_t e = resident_ctas<kKernel, kCtaThreads>(&resident); e != cudaSuccess) return e;
  const int64_t grid = ctas < 1 ? 1 : (ctas < resident ? ctas : resident);
  kKernel<<<static_cast<unsigned>(grid), kCtaThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

// Launches the column kernel kKernel(args) on `stream` over `ctas` column tiles (at most 2^31 - 1),
// r split so that the grid is at most one wave of the GPU's resident CTAs (a second wave of a few
// CTAs would double the time of the last ones), each thread still taking at least kMinSteps
// elements of r. Sets args.per_split_ (elements of r per split; the grid's y is the split count),
// and args.partial_ and args.arrivals_ (the split workspace) where it splits.
template <auto kKernel, class Shape, int kAccumulators, class Args>
inline cudaError_t launch_columns(int64_t ctas, int64_t length, Args& args, cudaStream_t stream) {
  constexpr int64_t kMinSteps = 4;  // half a step of the generated loop (8 loads in flight a thread)
  int64_t resident = 1;
  if (cudaError_t e = resident_ctas<kKernel, Shape::kCtaThreads>(&resident); e != cudaSuccess) return e;
  ctas = ctas < 1 ? 1 : ctas;
  const int64_t most = std::max<int64_t>(1, length / (Shape::kDepth * kMinSteps));
  int64_t splits = std::min<int64_t>({resident / ctas, most, 65535});
  splits = std::max<int64_t>(1, splits);
  args.per_split_ = (length + splits - 1) / splits;
  splits = length > 0 ? (length + args.per_split_ - 1) / args.per_split_ : 1;
  if (splits > 1) {
    const size_t words = static_cast<size_t>(splits) * kAccumulators * static_cast<size_t>(ctas) * Shape::kColumns;
    if (cudaError_t e = napkin::host::split_workspace(stream, words, static_cast<size_t>(ctas), &args.partial_, &args.arrivals_);
        e != cudaSuccess)
      return e;
  }
  kKernel<<<dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(splits)), Shape::kCtaThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

// The first error of a launch entry's checks, naming the tensor (TensorBinder keeps the first).
inline std::string stride_error(const char* tensor, const char* axis, int64_t stride) {
  return std::string("tensor '") + tensor + "': axis " + axis + " has stride " + std::to_string(stride) +
         ", expected 1 (the kernel reads and writes it as contiguous vectors)";
}

}  // namespace napkin::rows
