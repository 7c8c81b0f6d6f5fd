// SPDX-License-Identifier: Apache-2.0
// The C++ builder API: the one way diagrams are constructed (the parser uses it too, so a
// .napkin file and the equivalent C++ produce the same IR).
//
//   ir::Builder b;
//   auto q = b.axis("q", 1024), k = b.axis("k", 1024), d = b.axis("d", 64);
//   auto Q = b.input("Q", {q, d}, DType::bf16), K = b.input("K", {k, d}, DType::bf16);
//   auto S = b.named("S", b.contract({Q, K}, {d}) * 0.125);
//   b.output(b.named("P", b.softmax(S, {k})));
//   Result<ir::Diagram> diagram = b.finish();
//
// Contract: the first type error is recorded with its location and returned by finish();
// after an error every further call returns an invalid Value and records nothing new.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/ir.h"

namespace napkin::ir {

class Builder;

// A handle to a node under construction; arithmetic operators build woven elementwise ops.
struct Value {
  Builder* builder = nullptr;
  NodeId id = -1;
  bool valid() const { return builder != nullptr && id >= 0; }
};

Value operator+(Value a, Value b);
Value operator-(Value a, Value b);
Value operator*(Value a, Value b);
Value operator/(Value a, Value b);
Value operator*(Value a, double c);  // builds `mul` by an unnamed constant
Value operator-(Value a);

class Builder {
 public:
  // `source` (optional) is the text locations refer to; it must outlive the builder.
  explicit Builder(std::string source_name = "<builder>", const SourceText* source = nullptr);

  AxisId axis(const std::string& name, std::int64_t size, SourceLoc loc = {});
  Value input(const std::string& name, const std::vector<AxisId>& axes, DType dtype,
              SourceLoc loc = {});
  Value constant(double value, SourceLoc loc = {});
  Value param(const std::string& name, double value, SourceLoc loc = {});
  Value index(AxisId axis, SourceLoc loc = {});
  Value unary(OpKind op, Value x, SourceLoc loc = {});
  Value cast(Value x, DType dtype, SourceLoc loc = {});
  Value scale(Value x, double factor, SourceLoc loc = {});
  Value softcap(Value x, double cap, SourceLoc loc = {});
  Value binary(OpKind op, Value a, Value b, SourceLoc loc = {});
  Value select(Value cond, Value if_true, Value if_false, SourceLoc loc = {});
  Value reduce(OpKind op, Value x, const std::vector<AxisId>& over, SourceLoc loc = {});
  Value contract(const std::vector<Value>& operands, const std::vector<AxisId>& over,
                 SourceLoc loc = {});
  // softmax / logsumexp / rmsnorm / layernorm; eps is used by the norms only.
  Value composite(OpKind op, Value x, const std::vector<AxisId>& over, double eps = 0.0,
                  SourceLoc loc = {});
  Value softmax(Value x, const std::vector<AxisId>& over, SourceLoc loc = {}) {
    return composite(OpKind::softmax, x, over, 0.0, loc);
  }

  // Gives v a name (an unnamed temporary becomes a named value). Names are unique across
  // axes and values.
  Value named(const std::string& name, Value v, SourceLoc loc = {});
  // Marks v as an output, written with `order` (default: v's own axis order).
  void output(Value v, std::optional<std::vector<AxisId>> order = std::nullopt,
              SourceLoc loc = {});

  bool failed() const { return error_.has_value(); }
  // Verifies and returns the diagram, or the first error; composites written out by hand
  // come back as composites and masks at the reductions they feed (ir/recognise.h). Warnings (unused inputs, unused values, as
  // written) are available from warnings() afterwards.
  Result<Diagram> finish();
  const std::vector<Diagnostic>& warnings() const { return warnings_; }

  // Records a user error at loc (first one wins) and returns an invalid Value.
  Value fail(SourceLoc loc, std::string message, std::string note = {});
  const Diagram& diagram() const { return d_; }

 private:
  Value add_node(Node n);
  bool usable(std::initializer_list<Value> vs) const;
  bool check_name_free(const std::string& name, SourceLoc loc);

  Diagram d_;
  std::unordered_map<std::string, NodeId> node_names_;  // named nodes, for O(1) lookups
  SourceText fallback_source_;
  const SourceText* source_;
  std::optional<Diagnostic> error_;
  std::vector<Diagnostic> warnings_;
};

// Infers node `n`'s result axes and dtype from its operands in `d` (operands must already be
// in d). Used by the builder and re-checked by the verifier. Returns the error message
// (without location) on a type error.
struct InferredType {
  std::vector<AxisId> axes;
  DType dtype;
};
std::variant<InferredType, std::string> infer_type(const Diagram& d, const Node& n);

// "[b h q d]": the axes' names in brackets.
std::string axes_text(const Diagram& d, const std::vector<AxisId>& axes);

}  // namespace napkin::ir
