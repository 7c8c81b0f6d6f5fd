// SPDX-License-Identifier: Apache-2.0
// GEMM kernels: a kernel of a plan that is one contraction of two inputs and elementwise code
// after it, written as a CUDA translation unit that assembles CUTLASS's Hopper GEMM (TMA,
// warp-specialised, persistent; cooperative or ping-pong) through the collective builders, with
// the diagram's epilogue as an epilogue visitor tree: the accumulator and the epilogue's inputs
// (row vectors along M, column vectors along N) feed one compute node whose functor is the
// diagram's elementwise code (runtime/include/napkin/gemm_kernel.h). CUDA-free: it writes text.
//
// Axis classes: M = in A and the output, not B; N = in B and the output, not A; K = in A and B,
// not the output (one axis); L (batch) = in all three. Several axes of a class are one mode,
// contiguous in memory (checked at launch).
#pragma once

#include <string>
#include <vector>

#include "emit/attention_kernel.h"
#include "ir/ir.h"
#include "plan/plan.h"
#include "support/diagnostic.h"

namespace napkin::emit {

struct GemmForm {
  ir::NodeId a = -1, b = -1;       // the operands (inputs)
  ir::NodeId contraction = -1;
  ir::NodeId output = -1;
  std::vector<ir::AxisId> m, n, k, l;  // axis classes, each in diagram order
  std::vector<ir::NodeId> row_vectors;  // epilogue inputs along M (and L): one value per row
  std::vector<ir::NodeId> col_vectors;  // epilogue inputs along N (and L): one value per column
  DType element = DType::bf16;     // A's and B's
};

// The GEMM form of `d`, or the reason it has none, located at the op that breaks it.
Result<GemmForm> recognise_gemm(const ir::Diagram& d, const SourceText& src);

// The translation unit, exporting `entry_name` (the C interface of napkin/kernel_abi.h).
std::string emit_gemm_kernel(const ir::Diagram& d, const GemmForm& f, const plan::GemmSchedule& s,
                             const KernelProvenance& prov, const std::string& entry_name);

std::string describe_gemm(const ir::Diagram& d, const GemmForm& f);

}  // namespace napkin::emit
