// SPDX-License-Identifier: Apache-2.0
// Device code for the elementwise part of a diagram: one C++ statement per node, in f32 with the
// reference interpreter's dtype rules (casts round to nearest even, max/min propagate NaN),
// shared by the row and GEMM kernel emitters. Leaves the caller knows (an accumulator, a value
// computed in an outer scope) are given by name; inputs read `napkin::rows::load(a.X + offset)`
// with offsets over `i_<axis>` and strides `a.s_<X>_<axis>`.
#pragma once

#include <map>
#include <set>
#include <string>

#include "ir/ir.h"

namespace napkin::emit::expression {

std::string literal(double v);  // a float literal ("0.5f", "INFINITY")
// An unnamed literal read as an int where it is an integer in int's range ("16777217"): exact,
// where converting its float literal would round past 2^24; "" otherwise.
std::string int_literal(const ir::Node& n);
// Every name a library built from `d` takes (its inputs, outputs and params), as the quoted
// elements of a C array that the caller closes with nullptr: `"Q", "K", "O", "w", `.
std::string library_names(const ir::Diagram& d);

// A tensor's element type in device code (napkin::rows::load and store take it), or null for a
// dtype kernels do not read (fp8, tf32); its dtype code of napkin/kernel_abi.h.
const char* memory_type(DType t);
const char* abi_dtype(DType t);

enum class CType { boolean, integer, real };
CType ctype_of(const ir::Node& n);
const char* ctype_name(CType t);

// Statements for the nodes under a value, in node order; `known` holds what is known already.
class Writer {
 public:
  Writer(const ir::Diagram& d, std::map<ir::NodeId, std::string> known) : d_(d), values_(std::move(known)) {}
  // The expression of `top`, after appending the statements it needs to `out` (each indented).
  std::string value(ir::NodeId top, std::string& out, const std::string& indent);
  // Divisions by `divisor` multiply by `reciprocal` (a name for 1 / divisor computed once in an
  // outer scope): within 1.5 ulp of f32 of the quotient, where a division costs ~10 instructions.
  void divide_by_reciprocal(ir::NodeId divisor, std::string reciprocal) { reciprocals_[divisor] = std::move(reciprocal); }
  // exp, log and division through the SFU's approximations (napkin::rows::fast_exp, __logf,
  // __fdividef: a few ulp of f32, 2 + 1.16|x| for exp; subnormal results flushed to zero, and a
  // quotient by a divisor past 2^126 taken as zero), for code whose value is rounded to bf16 or
  // f16 before it is stored or multiplied on the tensor cores: an f32 error of ~1e-5 relative
  // changes that rounding only within it of a rounding boundary. An IEEE division costs ~10
  // instructions and a call for its slow path, expf about ten.
  void approximate_transcendentals() { approximate_ = true; }

 private:
  void collect(ir::NodeId n, std::set<ir::NodeId>& need);
  // Whether integer node n is computed in 64 bits: arithmetic on indices and i32 inputs (a
  // product of two index differences passes 2^31; the reference interpreter's is exact), not
  // the leaves or comparisons.
  bool wide(ir::NodeId n) const;
  std::string as(ir::NodeId o, CType t);
  std::string expression(ir::NodeId n);
  const ir::Diagram& d_;
  std::map<ir::NodeId, std::string> values_;
  std::map<ir::NodeId, std::string> reciprocals_;
  bool approximate_ = false;
};

}  // namespace napkin::emit::expression
