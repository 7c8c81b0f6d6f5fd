// SPDX-License-Identifier: Apache-2.0
// napkin build: a diagram becomes a kernel (DIR/kernel.cu, DIR/libkernel.so, DIR/manifest.json).
// napkin run: build, validate against the reference interpreter, time, compare with the estimate.
// The core stays CUDA-free: nvcc is run as a program and the library is loaded with dlopen.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "driver/driver.h"
#include "reference/tensor.h"
#include "support/dtype.h"

namespace napkin::launch {
using driver::CommandOutput;
using driver::DiagramArgs;

struct BuildOptions {
  std::string machine;
  std::string out_dir;
  bool compile = true;   // false: write kernel.cu and manifest.json only
  bool json = false;
};
CommandOutput build(const DiagramArgs& args, const BuildOptions& options);

struct RunOptions {
  std::string machine;
  std::string out_dir;                  // where the kernel is built (default: out/kernels/<diagram>)
  std::vector<std::string> check_sets;  // sizes of the validation against the reference
  std::uint64_t seed = 0;
  int iters = 30;                       // timed launches at full size (median); 0: no timing
  std::string library;                  // a library built before (napkin build): run it, build nothing
  bool json = false;
};
CommandOutput run(const DiagramArgs& args, const RunOptions& options);

// A tensor as napkin run hands it to a kernel, in host memory: to_host rounds each element to
// `dtype` (as the reference interpreter rounds its inputs, so the kernel and the reference see
// the same values) and stores it in that dtype's bytes; host_value reads element i back.
struct HostTensor {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> bytes;
};
HostTensor to_host(const std::string& name, DType dtype, const reference::Tensor& x);
double host_value(const HostTensor& h, std::size_t i);

// Where the generated kernels find the device library and the CuTe headers, nvcc, and the
// build cache: NAPKIN_RUNTIME_INCLUDE, NAPKIN_CUTLASS_INCLUDE, NAPKIN_NVCC, NAPKIN_CACHE
// override the paths found at configure time (docs/kernels.md).
struct ToolPaths {
  std::string runtime_include, cutlass_include, nvcc, cache_dir;
};
ToolPaths tool_paths();

}  // namespace napkin::launch
