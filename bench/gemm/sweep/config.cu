// SPDX-License-Identifier: Apache-2.0
// One configuration of the sweep, chosen by -D SWEEP_TM, SWEEP_TN, SWEEP_TK, SWEEP_CM, SWEEP_CN,
// SWEEP_PINGPONG: the same Config and Kernel that a generated unit of examples/matmul.napkin
// instantiates (an identity bf16 epilogue), launched through napkin::gemm::run.
#include "napkin/gemm_kernel.h"

#include "sweep.h"

namespace {

using Config = napkin::gemm::Config<cutlass::bfloat16_t, cutlass::bfloat16_t, cutlass::layout::RowMajor,
                                    cutlass::layout::RowMajor, cutlass::layout::RowMajor, SWEEP_TM, SWEEP_TN, SWEEP_TK,
                                    SWEEP_CM, SWEEP_CN, 0, SWEEP_PINGPONG>;

template <class T>
struct Epilogue {
  template <int N>
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& acc) const {
    return acc;
  }
};
using Kernel = napkin::gemm::Kernel<Config, Epilogue>;

std::string run(const sweep::Problem& p, cudaStream_t stream) {
  using napkin::gemm::Mode;
  const Mode am{p.m, p.k}, ak{p.k, 1}, bn{p.n, 1}, bk{p.k, p.n}, dm{p.m, p.n}, dn{p.n, 1}, l{};
  Kernel::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {p.m, p.n, p.k, 1},
      {reinterpret_cast<const Config::Element*>(p.a), napkin::gemm::make_stride<Config::StrideA>(am, ak, l),
       reinterpret_cast<const Config::Element*>(p.b), napkin::gemm::make_stride<Config::StrideB>(bn, bk, l)},
      {{{}, {}}, nullptr, {}, reinterpret_cast<Config::ElementD*>(p.c), napkin::gemm::make_stride<Config::StrideD>(dm, dn, l)}};
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.max_swizzle_size = p.swizzle;
  args.scheduler.raster_order = p.raster == 1 ? Raster::AlongM : p.raster == 2 ? Raster::AlongN : Raster::Heuristic;
  return napkin::gemm::launch<Kernel::Gemm>(args, stream);
}

#define SWEEP_STR2(x) #x
#define SWEEP_STR(x) SWEEP_STR2(x)
const sweep::Register kRegister(SWEEP_PINGPONG ? SWEEP_STR(SWEEP_TM) "x" SWEEP_STR(SWEEP_TN) "x" SWEEP_STR(SWEEP_TK) " c" SWEEP_STR(SWEEP_CM) "x" SWEEP_STR(SWEEP_CN) " pp"
                                               : SWEEP_STR(SWEEP_TM) "x" SWEEP_STR(SWEEP_TN) "x" SWEEP_STR(SWEEP_TK) " c" SWEEP_STR(SWEEP_CM) "x" SWEEP_STR(SWEEP_CN) " co",
                                run);

}  // namespace
