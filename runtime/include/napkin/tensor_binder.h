// SPDX-License-Identifier: Apache-2.0
// Binding the tensors of one call of a generated kernel (napkin/kernel_abi.h) to the roles the
// diagram gives their dims: by name, with dtype, rank and size checks across tensors; the first
// error is kept, naming the tensor. Shared by every kernel family (attention, GEMM, rows).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "napkin/kernel_abi.h"

namespace napkin {

// An auxiliary tensor as the fused code reads it: element strides along the roles b, h, g, q, k
// (after the second contraction, k's place is e's). kRoles (AuxRole bits) names the roles the
// tensor has, so the address arithmetic of the others is compiled out and what depends only
// on the row (or the head) is hoisted out of the loops over keys.
enum AuxRole : unsigned { kAuxB = 1, kAuxH = 2, kAuxG = 4, kAuxQ = 8, kAuxK = 16 };

// The offset of batch b and query head `head` (= KV head h * group + g) along the strides of
// the roles among b, h, g that kRoles has.
template <unsigned kRoles>
__device__ __forceinline__ int64_t batch_head_offset(int b, int head, int group, int64_t sb, int64_t sh, int64_t sg) {
  int64_t offset = 0;
  if constexpr ((kRoles & (kAuxH | kAuxG)) != 0) {
    const int h = head / group, g = head - h * group;
    if constexpr ((kRoles & kAuxH) != 0) offset += h * sh;
    if constexpr ((kRoles & kAuxG) != 0) offset += g * sg;
  }
  if constexpr ((kRoles & kAuxB) != 0) offset += b * sb;
  return offset;
}

// The row and key strides are 32-bit (TensorBinder::aux refuses larger ones), so the fused code's
// per-key offsets are one 32 x 32 -> 64-bit multiply each: with 64-bit strides every key read
// spent ~9 instructions on its address (bench/NOTES.md, 2026-11-26, fifth).
template <class T, unsigned kRoles>
struct AuxView {
  const T* data = nullptr;
  int64_t sb = 0, sh = 0, sg = 0;
  int32_t sq = 0, sk = 0;
  int64_t sq_wide = 0;  // sq again, 64-bit for the staged copies' row steps (staged_inputs.h:
                        // with sq there, relative_bias d128 measured 2-4 % slower; NOTES)
  int group = 1;
  __device__ __forceinline__ int64_t offset(int b, int head, int q, int k) const {
    int64_t offset = batch_head_offset<kRoles>(b, head, group, sb, sh, sg);
    if constexpr ((kRoles & kAuxQ) != 0) offset += static_cast<int64_t>(q) * sq;
    if constexpr ((kRoles & kAuxK) != 0) offset += static_cast<int64_t>(k) * sk;
    return offset;
  }
  __device__ __forceinline__ T at(int b, int head, int q, int k) const {
    return __ldg(data + offset(b, head, q, k));  // read-only for the kernel's lifetime: the non-coherent path
  }
};

// Binds the tensors of one call to the roles the diagram gives their dims, checking dtypes,
// ranks and sizes against each other; the first error is kept, naming the tensor.
class TensorBinder {
 public:
  TensorBinder(const napkin_tensor* tensors, int count) : tensors_(tensors), count_(count) {}

  const napkin_tensor* bind(const char* name, int dtype, const char* roles) {
    if (!error_.empty()) return nullptr;
    const napkin_tensor* t = nullptr;
    for (int i = 0; i < count_; ++i)
      if (tensors_[i].name != nullptr && std::strcmp(tensors_[i].name, name) == 0) t = &tensors_[i];
    const int rank = static_cast<int>(std::strlen(roles));
    if (t == nullptr) return fail(std::string("missing tensor '") + name + "'");
    if (t->dtype != dtype)
      return fail(std::string("tensor '") + name + "': dtype " + dtype_name(t->dtype) + ", expected " + dtype_name(dtype));
    if (t->rank != rank)
      return fail(std::string("tensor '") + name + "': " + std::to_string(t->rank) + " dims, expected " +
                  std::to_string(rank) + " [" + roles + "]");
    if (t->data == nullptr) return fail(std::string("tensor '") + name + "': null data pointer");
    for (int i = 0; i < rank; ++i) {
      const char r = roles[i];
      int64_t& known = size_[static_cast<unsigned char>(r)];
      if (t->shape[i] < 1) return fail(std::string("tensor '") + name + "': dim " + std::to_string(i) + " is empty");
      if (known == 0) known = t->shape[i];
      else if (known != t->shape[i])
        return fail(std::string("tensor '") + name + "': dim " + std::to_string(i) + " (" + role_name(r) + ") has size " +
                    std::to_string(t->shape[i]) + ", expected " + std::to_string(known) + " as in the tensors before it");
    }
    return t;
  }
  // The size bound to a role; 1 where no tensor has it.
  int64_t size(char role) const {
    const int64_t s = size_[static_cast<unsigned char>(role)];
    return s == 0 ? 1 : s;
  }
  // Element stride of `role` in t; 0 where t lacks it.
  static int64_t stride(const napkin_tensor* t, const char* roles, char role) {
    const char* at = std::strchr(roles, role);
    return at == nullptr ? 0 : t->strides[at - roles];
  }
  template <class T, unsigned kRoles>
  AuxView<T, kRoles> aux(const napkin_tensor* t, const char* roles) {
    AuxView<T, kRoles> v;
    if (t == nullptr) return v;
    v.data = static_cast<const T*>(t->data);
    v.sb = stride(t, roles, 'b'), v.sh = stride(t, roles, 'h'), v.sg = stride(t, roles, 'g');
    const int64_t sq = stride(t, roles, 'q'), sk = stride(t, roles, 'k') + stride(t, roles, 'e');
    for (const auto& [stride_of, role] : {std::pair{sq, "query"}, std::pair{sk, "key"}})
      if (stride_of >= (int64_t{1} << 31) || stride_of < -(int64_t{1} << 31))
        fail_with(std::string("tensor '") + t->name + "': its stride along the " + role + " axis is " +
                  std::to_string(stride_of) + " elements; the kernel reads auxiliary tensors with 32-bit row and key strides");
    v.sq = static_cast<int32_t>(sq), v.sk = static_cast<int32_t>(sk), v.sq_wide = sq;
    v.group = static_cast<int>(size('g'));
    return v;
  }
  // A param: a rank-0 f64 tensor whose data points to host memory; `fallback` where none is given.
  double param(const char* name, double fallback) {
    for (int i = 0; i < count_; ++i) {
      const napkin_tensor& t = tensors_[i];
      if (t.name == nullptr || std::strcmp(t.name, name) != 0) continue;
      if (t.rank != 0 || t.dtype != NAPKIN_F64 || t.data == nullptr) {
        fail_with(std::string("param '") + name + "': expected a rank-0 f64 value in host memory");
        return fallback;
      }
      return *static_cast<const double*>(t.data);
    }
    return fallback;
  }
  void fail_with(std::string message) {
    if (error_.empty()) error_ = std::move(message);
  }
  const std::string& error() const { return error_; }

  static const char* dtype_name(int dtype) {
    switch (dtype) {
      case NAPKIN_F32: return "f32";
      case NAPKIN_F16: return "f16";
      case NAPKIN_BF16: return "bf16";
      case NAPKIN_I32: return "i32";
      case NAPKIN_BOOL: return "bool";
      case NAPKIN_F64: return "f64";
      default: return "unknown";
    }
  }
  static const char* role_name(char r) {
    switch (r) {
      case 'b': return "batch";
      case 'h': return "KV head";
      case 'g': return "query heads per KV head";
      case 'q': return "query";
      case 'k': return "key";
      case 'd': return "head dim";
      case 'e': return "value head dim";
      case 'r': return "row axis";
      // GEMM kernels (napkin/gemm_kernel.h): the i-th axis of a GEMM mode takes its mode's i-th letter.
      case 'm': case 'M': case 'i': case 'I': return "GEMM M, output rows";
      case 'n': case 'N': case 'j': case 'J': return "GEMM N, output columns";
      case 'K': case 'c': case 'C': case 'u': return "GEMM K, contracted";
      case 'l': case 'L': case 'z': case 'Z': return "GEMM L, batch";
      default: return "axis";
    }
  }

 private:
  const napkin_tensor* fail(std::string message) {
    fail_with(std::move(message));
    return nullptr;
  }
  const napkin_tensor* tensors_;
  int count_;
  int64_t size_[256] = {};
  std::string error_;
};

}  // namespace napkin
