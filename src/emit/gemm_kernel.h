// SPDX-License-Identifier: Apache-2.0
// The GEMM family: a kernel of a plan that is one contraction of two inputs followed by
// elementwise code, recognised in its diagram and written as a CUDA translation unit over the
// device library runtime/include/napkin/gemm_kernel.h (CUTLASS's Hopper GEMM through the sm90
// collective builders, the epilogue an epilogue visitor tree). CUDA-free: it writes text.
//
// The family:   Y = epilogue( contract(A, B over K), leaves, params )
//   A, B        two inputs of the diagram, both bf16 or both f16, read only by the contraction
//   epilogue    elementwise code over the accumulator (f32), constants, params and leaves
//   leaves      the other inputs the epilogue reads, each one of
//                 scalar      axes within L (none: one value; all of L: one per batch)
//                 row vector  all of M (and all of L, or none): one value per output row
//                 col vector  all of N (and all of L, or none): one value per output column
//                 tensor      all of M and N (and all of L, or none): loaded by TMA
//   Y           the one output, bf16, f16 or f32, over exactly M, N and L
//
// The prologue GEMM:  Y = epilogue( contract(f(A), g(B) over K) )
//   f, g        elementwise code of one input each, applied to each loaded stage in shared
//               memory before WGMMA reads it (napkin/gemm_prologue.h), and rounded to the
//               operand dtype; constants only, finite at 0, and at most one of them nonzero at 0
//               (loads past the edge are zero-filled); the epilogue reads the accumulator, the
//               leaves above (each at its output coordinates, through its strides) and params
//   row sums    R[m l] = sum over K of elementwise code of f(A) and leaves over K and L (a
//               weight w[k]): sum(f(A) over K) or contract(f(A), w over K), computed from the
//               same loads (plan::RowSum); the epilogue reads them as row values, and a row sum
//               that is an output of the kernel is written (f32, bf16 or f16)
//
// The dual GEMM:  Y = epilogue( contract(A, B0 over K), contract(A, B1 over K), params )
//   B0, B1      two inputs of one dtype and storage order (read through one TMA descriptor);
//               the epilogue reads the two products, constants and params (a gated MLP's gate)
//
// The folded GEMM:  outputs = g( fold_j( f_j(contract(A, B over K), ...) over N ) )
//   fold_j      sum, max or logsumexp over exactly the N axes (plan::GemmReduction): each tile
//               folds its columns in registers into a partial state per row, and a second launch
//               folds a row's tiles (napkin/gemm_reduction.h); the product is never stored
//   f_j, g      elementwise code; f_j over the product, g over the folds, both over inputs of M,
//               N and L axes (read element by element through their strides), indices, params
//   outputs     over exactly M and L, any order and dtype but fp8 and tf32
//
// Axis classes, by set membership: M = in A and Y, not B; N = in B and Y, not A; K = in A and
// B, not Y (contracted); L (batch) = in A, B and Y. The axes of one class are one GEMM mode: in
// every tensor that has them they are adjacent in storage order and in the same relative order
// (flattened at launch, which checks that their strides make them contiguous). A tensor's
// innermost axis decides its major mode: A is K- or M-major, B K- or N-major, Y and tensor
// leaves M- or N-major; vectors have their M (N) axes innermost; L is never innermost.
//
// Semantics are the reference interpreter's (docs/language.md, Dtypes): the contraction
// accumulates in f32, the epilogue runs in f32, every `as bf16`/`as f16` rounds to nearest even,
// and the store rounds to the output's dtype.
//
// Anything else is refused with the op, its location and the reason.
#pragma once

#include <string>
#include <vector>

#include "emit/attention_kernel.h"
#include "ir/ir.h"
#include "plan/plan.h"
#include "support/diagnostic.h"

namespace napkin::emit {

// An input the epilogue reads besides A and B: one leaf of the epilogue visitor tree.
struct GemmLeaf {
  enum class Kind { scalar, row_vector, col_vector, tensor };
  ir::NodeId node = -1;
  Kind kind = Kind::scalar;
  bool operator==(const GemmLeaf&) const = default;
};

// A row sum of A' computed in the prologue GEMM's mainloop (plan::RowSum): read by the epilogue
// as the row's value, and written where it is an output of the kernel.
struct GemmRowSum {
  ir::NodeId node = -1;
  std::vector<ir::NodeId> factors;   // multiplied to give the summand
  std::vector<ir::AxisId> out_axes;  // the order it is written in; empty where it is not an output
  bool operator==(const GemmRowSum&) const = default;
};

struct GemmForm {
  ir::NodeId a = -1, b = -1;             // the operands (inputs)
  ir::NodeId contraction = -1;           // contract(A, B over K)
  // A dual GEMM (napkin/gemm_dual.h): a second contraction contract(A, B1 over K), B1 stored as
  // B is; the epilogue combines the two products (acc0, acc1) and reads its leaves at each
  // element's coordinates through their strides (napkin/gemm_dual.h). -1: one GEMM.
  ir::NodeId b1 = -1, contraction1 = -1;
  // Operands computed from A's or B's input as the GEMM loads them (the prologue GEMM,
  // napkin/gemm_prologue.h): the node the contraction reads, its code elementwise over the
  // input alone. -1: the operand is the input itself.
  ir::NodeId prologue_a = -1, prologue_b = -1;
  ir::NodeId output = -1;                // the output node (the epilogue's top)
  std::vector<GemmRowSum> row_sums;      // in node order (the prologue GEMM only)
  std::vector<ir::NodeId> sum_leaves;    // the inputs the row sums' summands read, in node order
  // Axis classes, each in its flattening order (outermost first): M, K and L as A stores
  // them, N as B does.
  std::vector<ir::AxisId> m, n, k, l;
  std::vector<ir::AxisId> out_axes;      // the order the output is written in
  std::vector<GemmLeaf> leaves;          // in node order
  std::vector<ir::NodeId> params;        // named constants the epilogue reads, in node order
  DType element = DType::bf16;           // A's and B's
  DType out_dtype = DType::bf16;         // the output's
  bool a_k_major = true;                 // else M-major
  bool b_k_major = true;                 // else N-major
  bool out_n_major = true;               // else M-major
  // For describe_gemm: "[t e]", "[e f]", "[t f]" and the epilogue as an expression of `acc`
  // (the accumulator), the leaves' and params' names and constants.
  std::string a_text, b_text, out_text, epilogue_text;
  std::string prologue_text;             // "A = exp(Q)", or "" without a prologue
  // A folded GEMM (napkin/gemm_reduction.h): the folds in node order, the inputs the code reads
  // besides A and B, and the outputs; `output` is the first of them. Empty: the product is stored.
  std::vector<ir::NodeId> folds, fold_inputs;
  std::vector<ir::Output> fold_outputs;
  std::string row_sums_text;             // "Z = sum(A * z over d)", or "" without row sums
};

// The GEMM form of `d`, or the reason it has none, located at the op that breaks it (`src` is
// the diagram's text, for the caret).
Result<GemmForm> recognise_gemm(const ir::Diagram& d, const SourceText& src);

// The translation unit exporting `entry_name` (napkin_kernel_launch_fn of napkin/kernel_abi.h):
// binds the inputs and the output by their diagram names, checks dtypes, ranks, sizes, strides
// and alignment (errors name the tensor and what was expected), and runs the GEMM on the stream.
// M, N, K and L are runtime sizes; the schedule `s` is compiled in. Pre: `f` is
// recognise_gemm(d, ...)'s. Deterministic.
std::string emit_gemm_kernel(const ir::Diagram& d, const GemmForm& f, const plan::GemmSchedule& s,
                             const KernelProvenance& prov, const std::string& entry_name);

// One line: "gemm [t e]x[e f] -> [t f]; epilogue: acc + b as bf16; 1 aux input".
std::string describe_gemm(const GemmForm& f);

}  // namespace napkin::emit
