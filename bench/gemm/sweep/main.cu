// SPDX-License-Identifier: Apache-2.0
// The GEMM configuration sweep: every registered configuration of napkin's device library, at
// every persistent-scheduler swizzle and raster order, timed beside cuBLAS on the same random
// inputs in one process (CUDA events, L2 flushed before each call, median). Each configuration
// is validated against cuBLAS's result first (relative L2 of the bf16 outputs). Prints a table
// per shape and writes JSON lines (argv[1], default sweep.jsonl).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "sweep.h"

namespace sweep {
std::vector<Entry>& registry() {
  static std::vector<Entry> r;
  return r;
}
}  // namespace sweep

#define CHECK_CUDA(x)                                                                              \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)
#define CHECK_CUBLAS(x)                                                                       \
  do {                                                                                        \
    cublasStatus_t s_ = (x);                                                                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
      std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, int(s_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

__global__ void fill_random(__nv_bfloat16* x, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 40503u;
    h ^= h >> 16; h *= 0x7feb352d; h ^= h >> 15; h *= 0x846ca68b; h ^= h >> 16;
    x[i] = __float2bfloat16((float(h) / 4294967296.0f * 2.0f - 1.0f) * scale);
  }
}
__global__ void diff_norms(const __nv_bfloat16* x, const __nv_bfloat16* ref, size_t n, double* out) {
  double d = 0, r = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const double a = __bfloat162float(x[i]), b = __bfloat162float(ref[i]);
    d += (a - b) * (a - b) + (isnan(a) ? 1e30 : 0.0);
    r += b * b;
  }
  atomicAdd(out, d);
  atomicAdd(out + 1, r);
}

struct Shape {
  std::string name;
  int m, n, k;
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : "sweep.jsonl";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 15;
  std::vector<Shape> shapes = {{"gemm_4096", 4096, 4096, 4096}, {"gemm_8192", 8192, 8192, 8192}};
  const std::pair<const char*, std::pair<int, int>> llama[] = {
      {"qkv", {4096, 6144}}, {"o", {4096, 4096}}, {"gate_up", {4096, 14336}}, {"down", {14336, 4096}}};
  for (int tokens : {1024, 4096, 16384})
    for (const auto& [proj, kn] : llama)
      shapes.push_back({"llama3_" + std::string(proj) + "_" + std::to_string(tokens), tokens, kn.second, kn.first});
  // SWEEP_SHAPES="name:m:n:k,...": these shapes instead.
  if (const char* env = std::getenv("SWEEP_SHAPES")) {
    shapes.clear();
    std::string list = env;
    for (size_t at = 0; at < list.size();) {
      const size_t end = std::min(list.find(',', at), list.size());
      char name[64];
      int m = 0, n = 0, k = 0;
      if (std::sscanf(list.substr(at, end - at).c_str(), "%63[^:]:%d:%d:%d", name, &m, &n, &k) == 4)
        shapes.push_back({name, m, n, k});
      at = end + 1;
    }
  }

  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  std::printf("device %s, %d SMs, max clock %d MHz, %zu configurations\n", prop.name, prop.multiProcessorCount,
              clock_khz / 1000, sweep::registry().size());
  FILE* out = std::fopen(out_path, "w");

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));
  CHECK_CUBLAS(cublasSetStream(handle, stream));
  void* cublas_ws;
  CHECK_CUDA(cudaMalloc(&cublas_ws, 32 << 20));
  CHECK_CUBLAS(cublasSetWorkspace(handle, cublas_ws, 32 << 20));
  const size_t flush_bytes = 256u << 20;
  void* flush;
  CHECK_CUDA(cudaMalloc(&flush, flush_bytes));
  double* norms;
  CHECK_CUDA(cudaMalloc(&norms, 2 * sizeof(double)));
  cudaEvent_t t0, t1;
  CHECK_CUDA(cudaEventCreate(&t0));
  CHECK_CUDA(cudaEventCreate(&t1));

  // Host time of one call of each configuration's runner (no GPU wait), and of its parts.
  if (argc > 3 && std::string(argv[3]) == "host") {
    const int m = 1024, n = 4096, k = 4096;
    __nv_bfloat16 *a, *b, *c;
    CHECK_CUDA(cudaMalloc(&a, size_t(m) * k * 2));
    CHECK_CUDA(cudaMalloc(&b, size_t(k) * n * 2));
    CHECK_CUDA(cudaMalloc(&c, size_t(m) * n * 2));
    auto host_us = [&](auto&& call, int iters) {
      call();
      CHECK_CUDA(cudaDeviceSynchronize());
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) call();
      const auto t1 = std::chrono::steady_clock::now();
      CHECK_CUDA(cudaDeviceSynchronize());
      return std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
    };
    for (const auto& e : sweep::registry()) {
      sweep::Problem p{a, b, c, m, n, k, 1, 0};
      std::printf("host: %s run() %.1f us per call\n", e.name.c_str(), host_us([&] { e.run(p, stream); }, 200));
    }
    std::printf("host: cudaGetDriverEntryPointByVersion %.2f us\n", host_us([&] {
      void* pfn = nullptr;
      cudaDriverEntryPointQueryResult q;
      cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pfn, 12000, cudaEnableDefault, &q);
    }, 1000));
    std::printf("host: cublasGemmEx %.2f us\n", host_us([&] {
      const float one = 1, zero = 0;
      cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_16BF, n, a, CUDA_R_16BF, k, &zero, c,
                   CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }, 200));
    return 0;
  }
  for (const Shape& s : shapes) {
    const size_t na = size_t(s.m) * s.k, nb = size_t(s.k) * s.n, nc = size_t(s.m) * s.n;
    __nv_bfloat16 *a, *b, *c, *ref;
    CHECK_CUDA(cudaMalloc(&a, na * 2));
    CHECK_CUDA(cudaMalloc(&b, nb * 2));
    CHECK_CUDA(cudaMalloc(&c, nc * 2));
    CHECK_CUDA(cudaMalloc(&ref, nc * 2));
    fill_random<<<1024, 256, 0, stream>>>(a, na, 17u, 1.0f);
    fill_random<<<1024, 256, 0, stream>>>(b, nb, 91u, 1.0f / std::sqrt(float(s.k)));
    const float one = 1, zero = 0;
    auto cublas = [&]() {
      // Row-major C = A B is column-major C^T = B^T A^T.
      CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.n, s.m, s.k, &one, b, CUDA_R_16BF, s.n, a, CUDA_R_16BF,
                                s.k, &zero, ref, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto time_it = [&](auto&& call) {
      for (int i = 0; i < 3; ++i) call();
      std::vector<float> ms;
      for (int i = 0; i < reps; ++i) {
        CHECK_CUDA(cudaMemsetAsync(flush, i & 0xff, flush_bytes, stream));
        CHECK_CUDA(cudaEventRecord(t0, stream));
        call();
        CHECK_CUDA(cudaEventRecord(t1, stream));
        CHECK_CUDA(cudaEventSynchronize(t1));
        float x = 0;
        CHECK_CUDA(cudaEventElapsedTime(&x, t0, t1));
        ms.push_back(x);
      }
      return median(ms);
    };
    cublas();
    const double flop = 2.0 * s.m * s.n * s.k;
    const float cublas_ms = time_it(cublas);
    std::printf("\n%s (m=%d n=%d k=%d): cuBLAS %.1f us, %.0f TFLOP/s\n", s.name.c_str(), s.m, s.n, s.k, cublas_ms * 1e3,
                flop / cublas_ms / 1e9);
    float best_ratio = 0;
    std::string best;
    for (const auto& e : sweep::registry()) {
      CHECK_CUDA(cudaMemsetAsync(c, 0xff, nc * 2, stream));  // NaN-poisoned
      sweep::Problem p{a, b, c, s.m, s.n, s.k, 1, 0};
      std::string err = e.run(p, stream);
      CHECK_CUDA(cudaStreamSynchronize(stream));
      if (!err.empty()) {
        std::printf("  %-22s cannot run: %s\n", e.name.c_str(), err.c_str());
        continue;
      }
      CHECK_CUDA(cudaMemsetAsync(norms, 0, 16, stream));
      diff_norms<<<512, 256, 0, stream>>>(c, ref, nc, norms);
      double h[2];
      CHECK_CUDA(cudaMemcpyAsync(h, norms, 16, cudaMemcpyDeviceToHost, stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      const double rel = std::sqrt(h[0] / h[1]);
      if (!(rel < 1e-2)) {
        std::printf("  %-22s INVALID: relative L2 %.3g against cuBLAS\n", e.name.c_str(), rel);
        continue;
      }
      float cfg_best = 1e30f, default_ms = 0;
      std::string cfg_best_opts;
      for (int swz : {1, 2, 4, 8})
        for (int raster : {0, 1, 2}) {
          p.swizzle = swz;
          p.raster = raster;
          const float ms = time_it([&] { e.run(p, stream); });
          std::fprintf(out,
                       "{\"gpu\": \"%s\", \"shape\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"config\": \"%s\", "
                       "\"swizzle\": %d, \"raster\": %d, \"ms\": %.5f, \"cublas_ms\": %.5f, \"rel_l2\": %.3g}\n",
                       prop.name, s.name.c_str(), s.m, s.n, s.k, e.name.c_str(), swz, raster, ms, cublas_ms, rel);
          if (swz == 1 && raster == 0) default_ms = ms;
          if (ms < cfg_best) {
            cfg_best = ms;
            cfg_best_opts = "swz " + std::to_string(swz) + " " + (raster == 0 ? "heur" : raster == 1 ? "alongM" : "alongN");
          }
        }
      const float r = cublas_ms / cfg_best;
      std::printf("  %-22s %7.1f us  %4.0f TFLOP/s  x%.3f cuBLAS  (%s; swz1 heur %.3f)  rel %.1e\n", e.name.c_str(),
                  cfg_best * 1e3, flop / cfg_best / 1e9, r, cfg_best_opts.c_str(),
                  cublas_ms / default_ms, rel);
      if (r > best_ratio) best_ratio = r, best = e.name + " " + cfg_best_opts;
    }
    const float cublas_again = time_it(cublas);
    std::printf("  best: %s x%.3f (cuBLAS again %.1f us)\n", best.c_str(), best_ratio, cublas_again * 1e3);
    std::fflush(out);
    cudaFree(a); cudaFree(b); cudaFree(c); cudaFree(ref);
  }
  std::fclose(out);
  return 0;
}
