// SPDX-License-Identifier: Apache-2.0
// A kernel plan as one library (napkin build of a diagram that is more than one kernel): the
// plan's kernels, each a translation unit with its own entry of the C interface
// (napkin/kernel_abi.h), run in order on one stream; the intermediates they materialise are
// allocated on that stream (cudaMallocAsync, freed after the last kernel that reads them),
// contiguous in the order the plan stores them. Sizes come from the caller's tensors by axis name.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "napkin/kernel_abi.h"
#include "napkin/kernel_host.h"

namespace napkin {

// A tensor of the plan: its name, dtype and axes (storage order).
struct PlanTensor {
  const char* name;
  int dtype;
  int rank;
  const char* axes[NAPKIN_MAX_RANK];
};

// One kernel of the plan: its entry and the tensors it reads and writes, by name.
struct PlanKernel {
  napkin_kernel_launch_fn launch;
  const char* name;
  int count;
  const char* tensors[32];
};

// Axes the plan's kernels take as one (plan::AxisMerge): `name` stands for the `count` axes
// `parts`, adjacent in every tensor that has them; the kernels get views of the caller's tensors.
struct PlanMerge {
  const char* name;
  int count;
  const char* parts[NAPKIN_MAX_RANK];
};

// An axis of the caller's the plan's kernels take as two (plan::AxisCut): `name` as `outer` x
// `inner`, `inner` of `inner_size` indices; a call whose `name` is not a multiple of it is refused.
struct PlanCut {
  const char* name;
  const char* outer;
  const char* inner;
  int64_t inner_size;
};

// An axis whose size the plan's kernels hold as a number (plan::Plan::sized_axes: a norm written
// as its statistics divides by its count of elements): a call at another size is refused.
struct PlanSize {
  const char* name;
  int64_t size;
};

struct PlanSpec {
  const PlanTensor* io;              // the diagram's inputs and outputs
  int io_count;
  const PlanTensor* intermediates;   // materialised between kernels
  int intermediate_count;
  const PlanKernel* kernels;
  int kernel_count;
  const char* const* names;          // the io's names and the params', null-terminated (others are refused)
  const PlanMerge* merges;
  int merge_count;
  const PlanSize* sized;
  int sized_count;
  const PlanCut* cuts;               // applied to the caller's tensors before the merges
  int cut_count;
};

// Whether `t` is a param (kernel_abi.h): rank 0 and none of the diagram's inputs and outputs (a
// scalar output, a loss, is device memory like any tensor).
inline bool is_plan_param(const PlanSpec& p, const napkin_tensor& t) {
  if (t.rank != 0) return false;
  for (int i = 0; i < p.io_count; ++i)
    if (t.name != nullptr && std::strcmp(t.name, p.io[i].name) == 0) return false;
  return true;
}

// `t` (over `axes`, the caller's) with each cut axis as its outer and inner dims (`axes` too).
// "" or the reason.
inline std::string cut_view(napkin_tensor& t, std::vector<const char*>& axes, const PlanSpec& p) {
  for (int c = 0; c < p.cut_count; ++c) {
    const PlanCut& cut = p.cuts[c];
    for (int i = 0; i < t.rank; ++i) {
      if (std::strcmp(axes[static_cast<size_t>(i)], cut.name) != 0) continue;
      if (t.rank >= NAPKIN_MAX_RANK)
        return std::string("tensor '") + t.name + "': the plan takes its axis " + cut.name + " as two, past " +
               std::to_string(NAPKIN_MAX_RANK) + " dims";
      for (int j = t.rank; j > i + 1; --j) t.shape[j] = t.shape[j - 1], t.strides[j] = t.strides[j - 1];
      t.shape[i + 1] = cut.inner_size;
      t.strides[i + 1] = t.strides[i];
      t.shape[i] /= cut.inner_size;
      t.strides[i] *= cut.inner_size;
      ++t.rank;
      axes[static_cast<size_t>(i)] = cut.outer;
      axes.insert(axes.begin() + i + 1, cut.inner);
      break;
    }
  }
  return "";
}

// `t` (over `axes`, the caller's) with each merge's parts as one dim, where it has them; the
// parts' dims must be contiguous with one another. "" or the reason.
inline std::string merged_view(napkin_tensor& t, std::vector<const char*> axes, const PlanSpec& p) {
  for (int m = 0; m < p.merge_count; ++m) {
    const PlanMerge& mg = p.merges[m];
    int at = -1;
    for (int i = 0; i < t.rank; ++i)
      if (std::strcmp(axes[static_cast<size_t>(i)], mg.parts[0]) == 0) at = i;
    if (at < 0) continue;
    // Parts of size 1 address nothing: the others must be contiguous with one another, and the
    // merged dim steps at the innermost of them.
    int64_t size = 1, stride = 1, inner = -1;  // inner: the last part of size > 1 seen, as its dim
    for (int j = mg.count - 1; j >= 0; --j) {
      const int d = at + j;
      if (d >= t.rank || std::strcmp(axes[static_cast<size_t>(d)], mg.parts[j]) != 0)
        return std::string("tensor '") + t.name + "': the plan takes its axes as one axis " + mg.name + " but they are not adjacent";
      if (t.shape[d] == 1) continue;
      if (inner < 0) stride = t.strides[d];
      else if (t.strides[d] != t.strides[inner] * t.shape[inner])
        return std::string("tensor '") + t.name + "': dims " + std::to_string(at) + ".." + std::to_string(at + mg.count - 1) +
               " (axes " + mg.parts[0] + ".." + mg.parts[mg.count - 1] +
               ") must be contiguous with one another (stride of each = the next's stride x size): the kernels reduce over them as one axis";
      inner = d;
      size *= t.shape[d];
    }
    t.shape[at] = size;
    t.strides[at] = stride;
    for (int i = at + 1; i + mg.count - 1 < t.rank; ++i) {
      t.shape[i] = t.shape[i + mg.count - 1];
      t.strides[i] = t.strides[i + mg.count - 1];
    }
    t.rank -= mg.count - 1;
    axes.erase(axes.begin() + at + 1, axes.begin() + at + mg.count);
    axes[static_cast<size_t>(at)] = mg.name;
  }
  return "";
}

inline int32_t launch_plan(const PlanSpec& p, const napkin_tensor* tensors, int32_t count, void* stream, char* err,
                           int32_t err_len) {
  auto fail = [&](const std::string& m) { return host::fail(m, err, err_len); };
  if (std::string e = host::unknown_tensor(tensors, count, p.names); !e.empty()) return fail(e);
  std::map<std::string, const napkin_tensor*> by_name;
  for (int i = 0; i < count; ++i)
    if (tensors[i].name != nullptr) by_name[tensors[i].name] = &tensors[i];
  std::map<std::string, int64_t> size;  // axis name -> size, from the caller's tensors
  for (int i = 0; i < p.io_count; ++i) {
    const PlanTensor& t = p.io[i];
    auto it = by_name.find(t.name);
    if (it == by_name.end()) return fail(std::string("missing tensor '") + t.name + "'");
    if (it->second->rank != t.rank)
      return fail(std::string("tensor '") + t.name + "': " + std::to_string(it->second->rank) + " dims, expected " +
                  std::to_string(t.rank));
    for (int a = 0; a < t.rank; ++a) {
      int64_t& s = size[t.axes[a]];
      if (s == 0) s = it->second->shape[a];
      else if (s != it->second->shape[a])
        return fail(std::string("tensor '") + t.name + "': axis " + t.axes[a] + " has size " +
                    std::to_string(it->second->shape[a]) + ", expected " + std::to_string(s) + " as in the tensors before it");
    }
  }
  // Cut axes: their parts' sizes, where the caller's size is a multiple of the inner one.
  for (int c = 0; c < p.cut_count; ++c) {
    const PlanCut& cut = p.cuts[c];
    auto it = size.find(cut.name);
    if (it == size.end()) continue;
    if (it->second % cut.inner_size != 0)
      return fail(std::string("axis ") + cut.name + " has size " + std::to_string(it->second) + "; the plan takes it as " + cut.outer +
                  " x " + cut.inner + " with " + cut.inner + " = " + std::to_string(cut.inner_size) +
                  " (to fill the GPU): a multiple of " + std::to_string(cut.inner_size) + " expected, or build the plan at this size");
    size[cut.outer] = it->second / cut.inner_size;
    size[cut.inner] = cut.inner_size;
  }
  for (int i = 0; i < p.sized_count; ++i) {
    auto it = size.find(p.sized[i].name);
    if (it != size.end() && it->second != p.sized[i].size)
      return fail(std::string("axis ") + p.sized[i].name + " has size " + std::to_string(it->second) + "; the plan was built for " +
                  std::to_string(p.sized[i].size) + " (a norm written as its statistics divides by its count): build it at this size");
  }
  // The kernels' views of the caller's tensors where axes are cut or merge (the merged axes'
  // sizes too).
  std::vector<napkin_tensor> views(static_cast<size_t>(p.merge_count > 0 || p.cut_count > 0 ? p.io_count : 0));
  for (size_t i = 0; i < views.size(); ++i) {
    const PlanTensor& t = p.io[i];
    views[i] = *by_name[t.name];
    std::vector<const char*> axes(t.axes, t.axes + t.rank);
    if (std::string e = cut_view(views[i], axes, p); !e.empty()) return fail(e);
    if (std::string e = merged_view(views[i], axes, p); !e.empty()) return fail(e);
    by_name[t.name] = &views[i];
  }
  for (int m = 0; m < p.merge_count; ++m) {
    int64_t product = 1;
    bool known = true;
    for (int j = 0; j < p.merges[m].count; ++j) {
      auto it = size.find(p.merges[m].parts[j]);
      known = known && it != size.end();
      if (known) product *= it->second;
    }
    if (known) size[p.merges[m].name] = product;
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p.intermediate_count > 0) host::keep_pool_memory();
  std::vector<napkin_tensor> inter(static_cast<size_t>(p.intermediate_count));
  std::vector<void*> buffers;
  auto release = [&] {
    for (void* b : buffers) cudaFreeAsync(b, s);
  };
  for (int i = 0; i < p.intermediate_count; ++i) {
    const PlanTensor& t = p.intermediates[i];
    napkin_tensor& x = inter[static_cast<size_t>(i)];
    std::memset(&x, 0, sizeof(x));
    x.name = t.name;
    x.dtype = t.dtype;
    x.rank = t.rank;
    int64_t elements = 1;
    for (int a = t.rank - 1; a >= 0; --a) {
      auto it = size.find(t.axes[a]);
      if (it == size.end()) {
        release();
        return fail(std::string("intermediate '") + t.name + "': no tensor gives the size of axis " + t.axes[a]);
      }
      x.shape[a] = it->second;
      x.strides[a] = elements;
      elements *= it->second;
    }
    void* data = nullptr;
    if (cudaError_t e = cudaMallocAsync(&data, static_cast<size_t>(elements) * host::dtype_bytes(t.dtype), s); e != cudaSuccess) {
      release();
      return fail(std::string("cudaMallocAsync for '") + t.name + "': " + cudaGetErrorString(e));
    }
    buffers.push_back(data);
    x.data = data;
    by_name[t.name] = &x;
  }
  std::vector<napkin_tensor> args;
  for (int k = 0; k < p.kernel_count; ++k) {
    const PlanKernel& kernel = p.kernels[k];
    args.clear();
    for (int i = 0; i < kernel.count; ++i) {
      auto it = by_name.find(kernel.tensors[i]);
      if (it == by_name.end()) {
        release();
        return fail(std::string("kernel ") + kernel.name + ": missing tensor '" + kernel.tensors[i] + "'");
      }
      args.push_back(*it->second);
    }
    for (int i = 0; i < count; ++i)
      if (is_plan_param(p, tensors[i])) args.push_back(tensors[i]);  // params reach every kernel
    char inner[512] = {0};
    if (kernel.launch(args.data(), static_cast<int32_t>(args.size()), stream, inner, sizeof(inner)) != 0) {
      release();
      std::string why = std::string("kernel ") + kernel.name + ": " + inner;
      for (int m = 0; m < p.merge_count; ++m)  // a merged axis named by the kernel, as the caller's axes
        if (std::strstr(inner, (std::string("axis ") + p.merges[m].name + " ").c_str()) != nullptr) {
          why += std::string(" (") + p.merges[m].name + ": the axes";
          for (int j = 0; j < p.merges[m].count; ++j) why += std::string(" ") + p.merges[m].parts[j];
          why += " taken as one)";
        }
      for (int c = 0; c < p.cut_count; ++c)  // a cut axis's part named by the kernel, as the caller's axis
        for (const char* part : {p.cuts[c].outer, p.cuts[c].inner})
          if (std::strstr(inner, (std::string("axis ") + part + " ").c_str()) != nullptr)
            why += std::string(" (") + part + ": a part of the axis " + p.cuts[c].name + ", taken as " + p.cuts[c].outer + " x " +
                   p.cuts[c].inner + " with " + p.cuts[c].inner + " = " + std::to_string(p.cuts[c].inner_size) + ")";
      return fail(why);
    }
  }
  release();
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return fail(std::string("CUDA error: ") + cudaGetErrorString(e));
  return 0;
}

}  // namespace napkin

// The exported entries of a plan's library over its PlanSpec and manifest.
#define NAPKIN_GENERATED_PLAN(spec, manifest)                                                                  \
  extern "C" int32_t napkin_kernel_abi_version() { return NAPKIN_KERNEL_ABI_VERSION; }                        \
  extern "C" const char* napkin_kernel_manifest() { return manifest; }                                        \
  extern "C" int32_t napkin_kernel_launch(const napkin_tensor* tensors, int32_t count, void* stream, char* err, \
                                          int32_t err_len) {                                                  \
    return napkin::launch_plan(spec, tensors, count, stream, err, err_len);                                   \
  }                                                                                                           \
  NAPKIN_DEFINE_HOST_ENTRIES([](const napkin_tensor& t) { return napkin::is_plan_param(spec, t); })
