// SPDX-License-Identifier: Apache-2.0
// The GEMM configuration sweep (bench/gemm/sweep): one translation unit per configuration of
// napkin's device library (napkin/gemm_kernel.h, the template every generated GEMM unit
// instantiates), each registering a runner of C[m n] = A[m k] B[k n] in bf16 (both operands
// row-major, as examples/matmul.napkin stores them); main.cu times them beside cuBLAS.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace sweep {

struct Problem {
  const __nv_bfloat16* a;  // [m k]
  const __nv_bfloat16* b;  // [k n]
  __nv_bfloat16* c;        // [m n]
  int m, n, k;
  int swizzle;  // the persistent scheduler's max swizzle (1, 2, 4, 8)
  int raster;   // 0 heuristic, 1 along M, 2 along N
};

// "" or the reason the configuration cannot run the problem.
using Runner = std::string (*)(const Problem&, cudaStream_t);

struct Entry {
  std::string name;
  Runner run;
};
std::vector<Entry>& registry();

struct Register {
  Register(const char* name, Runner run) { registry().push_back({name, run}); }
};

}  // namespace sweep
