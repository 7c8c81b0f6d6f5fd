// SPDX-License-Identifier: Apache-2.0
#include "ir/builder.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "ir/recognise.h"
#include "ir/verifier.h"

namespace napkin::ir {

std::string axes_text(const Diagram& d, const std::vector<AxisId>& axes) {
  std::string out = "[";
  for (std::size_t i = 0; i < axes.size(); ++i) out += (i ? " " : "") + d.axis(axes[i]).name;
  return out + "]";
}

namespace {

bool has_axis(const std::vector<AxisId>& axes, AxisId a) {
  return std::find(axes.begin(), axes.end(), a) != axes.end();
}

// Union of the operands' axes in diagram (id) order.
std::vector<AxisId> axes_union(const Diagram& d, const Node& n) {
  std::set<AxisId> all;
  for (NodeId o : n.operands) all.insert(d.node(o).axes.begin(), d.node(o).axes.end());
  return {all.begin(), all.end()};
}

// A compile-time scalar, which takes the other operand's dtype: a literal, a param (a literal
// with a name), arithmetic on them alone (`1 / temp`, `-0.5 * w`), or a select between them
// (the additive mask `select(q >= k, 0, -inf)`, which has axes). `C = 2` is a value, a cast
// node, and takes part.
bool weak_constant(const Diagram& d, const Node& n) {
  if (n.op == OpKind::constant) return true;
  if (n.op == OpKind::select)
    return weak_constant(d, d.node(n.operands[1])) && weak_constant(d, d.node(n.operands[2]));
  const bool arithmetic = n.op == OpKind::add || n.op == OpKind::sub || n.op == OpKind::mul || n.op == OpKind::div ||
                          n.op == OpKind::max || n.op == OpKind::min || n.op == OpKind::neg || n.op == OpKind::abs ||
                          n.op == OpKind::exp || n.op == OpKind::exp2 || n.op == OpKind::log || n.op == OpKind::tanh ||
                          n.op == OpKind::scale;
  if (!arithmetic || !n.name.empty()) return false;
  return std::all_of(n.operands.begin(), n.operands.end(), [&](NodeId o) { return weak_constant(d, d.node(o)); });
}

// Result dtype of arithmetic on the operands: floats promote, weak constants (literals and
// params) do not take part, i32 stays i32 unless a weak constant may be fractional (a literal
// that is not a whole number, a param, arithmetic on them: 0.5 * |q - k| is f32, q - 1 stays
// i32), bool is refused.
std::variant<DType, std::string> arithmetic_dtype(const Diagram& d, const Node& n,
                                                  const std::vector<NodeId>& operands) {
  std::optional<DType> result;
  bool all_weak = true, fractional = false;
  for (NodeId o : operands) {
    const Node& x = d.node(o);
    if (x.dtype == DType::boolean)
      return fmt::format("'{}' expects numbers, but {} is bool (use select(cond, a, b))",
                         op_symbol(n.op), d.label(o));
    if (weak_constant(d, x)) {
      const bool whole = x.op == OpKind::constant && x.name.empty() && std::isfinite(x.scalar) &&
                         x.scalar == std::floor(x.scalar) && std::abs(x.scalar) < 2147483648.0;
      fractional = fractional || !whole;
      continue;
    }
    all_weak = false;
    if (!result) result = x.dtype;
    else if (*result == DType::i32) result = x.dtype;
    else if (x.dtype != DType::i32) result = promote_float(*result, x.dtype);
  }
  if (all_weak) return DType::f64;
  if (*result == DType::i32 && fractional) return DType::f32;
  return *result;
}

// Accumulating ops (sums, normalisations) work in at least f32.
DType accumulator_dtype(DType t) {
  if (t == DType::f64) return DType::f64;
  return DType::f32;
}

std::string check_over(const Diagram& d, const Node& n, const std::vector<AxisId>& operand_axes,
                       std::string_view what) {
  if (n.over.empty()) return fmt::format("{} needs at least one axis after 'over'", op_name(n.op));
  for (std::size_t i = 0; i < n.over.size(); ++i) {
    if (std::count(n.over.begin(), n.over.end(), n.over[i]) > 1)
      return fmt::format("axis '{}' appears twice after 'over'", d.axis(n.over[i]).name);
    if (!has_axis(operand_axes, n.over[i]))
      return fmt::format("{} over '{}', but {} has no axis '{}' (its axes are {})", op_name(n.op),
                         d.axis(n.over[i]).name, what, d.axis(n.over[i]).name,
                         axes_text(d, operand_axes));
  }
  return {};
}

}  // namespace

std::variant<InferredType, std::string> infer_type(const Diagram& d, const Node& n) {
  for (NodeId o : n.operands)
    if (o < 0 || static_cast<std::size_t>(o) >= d.nodes.size())
      return fmt::format("operand #{} does not exist", o);
  auto operand = [&](int i) -> const Node& { return d.node(n.operands.at(i)); };
  const std::size_t arity = n.operands.size();
  auto want_arity = [&](std::size_t k) -> std::string {
    if (arity == k) return {};
    return fmt::format("{} takes {} operand{}, found {}", op_name(n.op), k, k == 1 ? "" : "s",
                       arity);
  };
  InferredType t{axes_union(d, n), DType::f64};
  switch (op_class(n.op)) {
    case OpClass::leaf:
      if (arity != 0) return fmt::format("{} takes no operands", op_name(n.op));
      if (n.op == OpKind::input) return InferredType{n.axes, n.dtype};
      if (n.op == OpKind::constant) return InferredType{{}, DType::f64};
      if (n.axis < 0 || static_cast<std::size_t>(n.axis) >= d.axes.size())
        return std::string("index of an undeclared axis");
      return InferredType{{n.axis}, DType::i32};
    case OpClass::unary: {
      if (auto e = want_arity(1); !e.empty()) return e;
      const DType x = operand(0).dtype;
      if (n.op == OpKind::cast) { t.dtype = n.dtype; return t; }
      if (n.op == OpKind::logical_not) {
        if (x != DType::boolean)
          return fmt::format("'!' expects bool, but {} is {}", d.label(n.operands[0]),
                             dtype_name(x));
        t.dtype = DType::boolean;
        return t;
      }
      if (x == DType::boolean)
        return fmt::format("'{}' expects a number, but {} is bool", op_symbol(n.op),
                           d.label(n.operands[0]));
      if (n.op == OpKind::neg || n.op == OpKind::abs || n.op == OpKind::floor) { t.dtype = x; return t; }
      if (n.op == OpKind::softcap && !(n.scalar > 0))
        return fmt::format("softcap's cap must be positive, found {}", n.scalar);
      t.dtype = x == DType::i32 ? DType::f32 : x;
      return t;
    }
    case OpClass::binary: {
      if (auto e = want_arity(2); !e.empty()) return e;
      const bool logical = n.op == OpKind::logical_and || n.op == OpKind::logical_or;
      const bool compare = n.op == OpKind::lt || n.op == OpKind::le || n.op == OpKind::gt ||
                           n.op == OpKind::ge || n.op == OpKind::eq || n.op == OpKind::ne;
      if (logical) {
        for (int i = 0; i < 2; ++i)
          if (operand(i).dtype != DType::boolean)
            return fmt::format("'{}' expects bool operands, but {} is {}",
                               n.op == OpKind::logical_and ? "&&" : "||",
                               d.label(n.operands[i]), dtype_name(operand(i).dtype));
        t.dtype = DType::boolean;
        return t;
      }
      auto dt = arithmetic_dtype(d, n, n.operands);
      if (auto* e = std::get_if<std::string>(&dt)) return *e;
      t.dtype = compare ? DType::boolean : std::get<DType>(dt);
      if (n.op == OpKind::div && t.dtype == DType::i32) t.dtype = DType::f32;
      return t;
    }
    case OpClass::ternary: {
      if (auto e = want_arity(3); !e.empty()) return e;
      if (operand(0).dtype != DType::boolean)
        return fmt::format("select's condition must be bool, but {} is {}",
                           d.label(n.operands[0]), dtype_name(operand(0).dtype));
      auto dt = arithmetic_dtype(d, n, {n.operands[1], n.operands[2]});
      if (auto* e = std::get_if<std::string>(&dt)) return *e;
      t.dtype = std::get<DType>(dt);
      return t;
    }
    case OpClass::reduction:
    case OpClass::composite: {
      if (auto e = want_arity(1); !e.empty()) return e;
      const Node& x = operand(0);
      if (auto e = check_over(d, n, x.axes, d.label(n.operands[0])); !e.empty()) return e;
      if (!is_float(x.dtype) && !(n.op == OpKind::reduce_max && x.dtype == DType::i32))
        return fmt::format("{} expects a floating-point operand, but {} is {}", op_name(n.op),
                           d.label(n.operands[0]), dtype_name(x.dtype));
      if (n.op == OpKind::reduce_max) t.dtype = x.dtype;
      else t.dtype = accumulator_dtype(x.dtype);
      if (op_class(n.op) == OpClass::reduction || n.op == OpKind::logsumexp)
        std::erase_if(t.axes, [&](AxisId a) { return has_axis(n.over, a); });
      if ((n.op == OpKind::rmsnorm || n.op == OpKind::layernorm) && !(n.scalar >= 0))
        return fmt::format("{}'s eps must be non-negative, found {}", op_name(n.op), n.scalar);
      return t;
    }
    case OpClass::contraction: {
      if (arity < 2) return fmt::format("contract takes at least 2 operands, found {}", arity);
      // Tensor cores multiply two operands of one input format; an f32/f64 operand (say a
      // softmax output) is converted to the other's format, but two different narrow formats
      // (bf16 with fp8e4m3, say) have no common instruction.
      std::optional<NodeId> narrow;
      bool all_f64 = true;
      for (std::size_t i = 0; i < arity; ++i) {
        const Node& x = d.node(n.operands[i]);
        if (!is_float(x.dtype))
          return fmt::format("contract expects floating-point operands, but {} is {}",
                             d.label(n.operands[i]), dtype_name(x.dtype));
        all_f64 = all_f64 && x.dtype == DType::f64;
        if (x.dtype == DType::f32 || x.dtype == DType::f64) continue;
        if (narrow && d.node(*narrow).dtype != x.dtype)
          return fmt::format(
              "contract operands have different input formats: {} is {}, but {} is {} (cast one "
              "with 'as')",
              d.label(*narrow), dtype_name(d.node(*narrow).dtype), d.label(n.operands[i]),
              dtype_name(x.dtype));
        narrow = n.operands[i];
      }
      if (n.over.empty()) return std::string("contract needs at least one axis after 'over'");
      for (AxisId a : n.over) {
        if (std::count(n.over.begin(), n.over.end(), a) > 1)
          return fmt::format("axis '{}' appears twice after 'over'", d.axis(a).name);
        int holders = 0;
        for (NodeId o : n.operands) holders += has_axis(d.node(o).axes, a);
        if (holders == 0)
          return fmt::format("contract over '{}', but no operand has axis '{}'", d.axis(a).name,
                             d.axis(a).name);
      }
      std::erase_if(t.axes, [&](AxisId a) { return has_axis(n.over, a); });
      t.dtype = all_f64 ? DType::f64 : DType::f32;
      return t;
    }
  }
  return std::string("unknown op");
}

// ---- Builder ----

Builder::Builder(std::string source_name, const SourceText* source)
    : fallback_source_{source_name, {}}, source_(source ? source : &fallback_source_) {
  d_.source_name = std::move(source_name);
}

Value Builder::fail(SourceLoc loc, std::string message, std::string note) {
  if (!error_) error_ = make_error(*source_, loc, std::move(message), std::move(note));
  return {};
}

bool Builder::usable(std::initializer_list<Value> vs) const {
  if (error_) return false;
  for (const Value& v : vs)
    if (!v.valid()) return false;
  return true;
}

bool Builder::check_name_free(const std::string& name, SourceLoc loc) {
  // Names must read back through the parser: identifiers that are not keywords.
  const bool identifier =
      !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
      std::all_of(name.begin(), name.end(),
                  [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  if (!identifier) {
    fail(loc, fmt::format("'{}' is not a valid name (expected letters, digits and '_', not "
                          "starting with a digit)", name));
    return false;
  }
  for (std::string_view kw : {"axes", "param", "in", "out", "over", "as", "inf"})
    if (name == kw) {
      fail(loc, fmt::format("'{}' is a keyword and cannot be used as a name", name));
      return false;
    }
  if (const auto a = d_.find_axis(name)) {
    fail(loc, fmt::format("'{}' is already defined as an axis", name),
         d_.axis(*a).loc.line ? fmt::format("the axis is declared at line {}", d_.axis(*a).loc.line)
                              : std::string{});
    return false;
  }
  if (const auto it = node_names_.find(name); it != node_names_.end()) {
    const SourceLoc prev = d_.node(it->second).loc;
    fail(loc, fmt::format("'{}' is defined twice", name),
         prev.line ? fmt::format("the first definition is at line {}, column {}", prev.line,
                                 prev.column)
                   : std::string{});
    return false;
  }
  return true;
}

Value Builder::add_node(Node n) {
  if (error_) return {};
  auto inferred = infer_type(d_, n);
  if (auto* e = std::get_if<std::string>(&inferred)) return fail(n.loc, *e);
  auto& t = std::get<InferredType>(inferred);
  // Guard later arithmetic on sizes: every tensor's element count must fit in 63 bits.
  std::int64_t count = 1;
  for (AxisId a : t.axes) {
    if (__builtin_mul_overflow(count, d_.axis(a).size, &count))
      return fail(n.loc, fmt::format("a tensor over {} would have more than 2^63 elements",
                                     axes_text(d_, t.axes)));
  }
  n.axes = std::move(t.axes);
  n.dtype = t.dtype;
  if (!n.name.empty()) node_names_[n.name] = static_cast<NodeId>(d_.nodes.size());
  d_.nodes.push_back(std::move(n));
  return {this, static_cast<NodeId>(d_.nodes.size() - 1)};
}

AxisId Builder::axis(const std::string& name, std::int64_t size, SourceLoc loc) {
  if (error_) return -1;
  if (!check_name_free(name, loc)) return -1;
  if (size <= 0) {
    fail(loc, fmt::format("axis '{}' must have a positive size, found {}", name, size));
    return -1;
  }
  d_.axes.push_back({name, size, loc});
  return static_cast<AxisId>(d_.axes.size() - 1);
}

Value Builder::input(const std::string& name, const std::vector<AxisId>& axes, DType dtype,
                     SourceLoc loc) {
  if (error_ || !check_name_free(name, loc)) return {};
  for (AxisId a : axes) {
    if (a < 0 || static_cast<std::size_t>(a) >= d_.axes.size())
      return fail(loc, fmt::format("input '{}' names an undeclared axis", name));
    if (std::count(axes.begin(), axes.end(), a) > 1)
      return fail(loc, fmt::format("input '{}' lists axis '{}' twice", name, d_.axis(a).name));
  }
  Node n;
  n.op = OpKind::input;
  n.axes = axes;
  n.dtype = dtype;
  n.name = name;
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::constant(double value, SourceLoc loc) {
  Node n;
  n.op = OpKind::constant;
  n.scalar = value;
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::param(const std::string& name, double value, SourceLoc loc) {
  if (error_ || !check_name_free(name, loc)) return {};
  Node n;
  n.op = OpKind::constant;
  n.scalar = value;
  n.name = name;
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::index(AxisId axis, SourceLoc loc) {
  Node n;
  n.op = OpKind::iota;
  n.axis = axis;
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::unary(OpKind op, Value x, SourceLoc loc) {
  if (!usable({x})) return {};
  NAPKIN_CHECK(op_class(op) == OpClass::unary, "unary() needs a unary op");
  Node n;
  n.op = op;
  n.operands = {x.id};
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::cast(Value x, DType dtype, SourceLoc loc) {
  if (!usable({x})) return {};
  Node n;
  n.op = OpKind::cast;
  n.operands = {x.id};
  n.dtype = dtype;
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::scale(Value x, double factor, SourceLoc loc) {
  if (!usable({x})) return {};
  Node n;
  n.op = OpKind::scale;
  n.operands = {x.id};
  n.scalar = factor;
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::softcap(Value x, double cap, SourceLoc loc) {
  if (!usable({x})) return {};
  Node n;
  n.op = OpKind::softcap;
  n.operands = {x.id};
  n.scalar = cap;
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::binary(OpKind op, Value a, Value b, SourceLoc loc) {
  if (!usable({a, b})) return {};
  NAPKIN_CHECK(op_class(op) == OpClass::binary, "binary() needs a binary op");
  Node n;
  n.op = op;
  n.operands = {a.id, b.id};
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::select(Value cond, Value if_true, Value if_false, SourceLoc loc) {
  if (!usable({cond, if_true, if_false})) return {};
  Node n;
  n.op = OpKind::select;
  n.operands = {cond.id, if_true.id, if_false.id};
  n.loc = loc;
  return add_node(std::move(n));
}

static std::vector<AxisId> in_diagram_order(std::vector<AxisId> v) {
  std::stable_sort(v.begin(), v.end());
  return v;
}

Value Builder::reduce(OpKind op, Value x, const std::vector<AxisId>& over, SourceLoc loc) {
  if (!usable({x})) return {};
  NAPKIN_CHECK(op_class(op) == OpClass::reduction, "reduce() needs sum or max");
  Node n;
  n.op = op;
  n.operands = {x.id};
  n.over = in_diagram_order(over);
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::contract(const std::vector<Value>& operands, const std::vector<AxisId>& over,
                        SourceLoc loc) {
  if (error_) return {};
  Node n;
  n.op = OpKind::contract;
  for (const Value& v : operands) {
    if (!v.valid()) return {};
    n.operands.push_back(v.id);
  }
  n.over = in_diagram_order(over);
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::composite(OpKind op, Value x, const std::vector<AxisId>& over, double eps,
                         SourceLoc loc) {
  if (!usable({x})) return {};
  NAPKIN_CHECK(op_class(op) == OpClass::composite, "composite() needs a composite op");
  Node n;
  n.op = op;
  n.operands = {x.id};
  n.over = in_diagram_order(over);
  n.scalar = eps;
  n.loc = loc;
  return add_node(std::move(n));
}

Value Builder::named(const std::string& name, Value v, SourceLoc loc) {
  if (!usable({v})) return {};
  Node& n = d_.nodes[static_cast<std::size_t>(v.id)];
  if (!n.name.empty() || n.op == OpKind::iota || n.op == OpKind::constant) {
    // Already named, an axis index or a literal: name a copy, so that both names exist and a
    // defined constant stays a definition (only `param` declares a named constant).
    if (!check_name_free(name, loc)) return {};
    Value copy = cast(v, n.dtype, loc);
    if (!copy.valid()) return {};
    d_.nodes[static_cast<std::size_t>(copy.id)].name = name;
    node_names_[name] = copy.id;
    return copy;
  }
  if (!check_name_free(name, loc)) return {};
  n.name = name;
  node_names_[name] = v.id;
  if (loc.line) n.loc = loc;
  return v;
}

void Builder::output(Value v, std::optional<std::vector<AxisId>> order, SourceLoc loc) {
  if (!usable({v})) return;
  const Node& n = d_.node(v.id);
  if (n.name.empty()) {
    fail(loc, "an output must be a named value");
    return;
  }
  for (const Output& o : d_.outputs)
    if (o.node == v.id) {
      fail(loc, fmt::format("'{}' is declared as an output twice", n.name));
      return;
    }
  std::vector<AxisId> axes = order ? *order : n.axes;
  if (order && std::is_permutation(axes.begin(), axes.end(), n.axes.begin(), n.axes.end()) ==
                   false) {
    fail(loc, fmt::format("output '{}' is written as {}, but its axes are {}", n.name,
                          axes_text(d_, axes), axes_text(d_, n.axes)),
         "an output's axes must be a reordering of the value's axes");
    return;
  }
  d_.outputs.push_back({v.id, std::move(axes), loc});
}

Result<Diagram> Builder::finish() {
  if (error_) return *error_;
  auto verified = verify(d_, source_);
  if (!verified) return verified.error();
  warnings_ = std::move(verified.value());
  return hoist_masks(pull_factors_out_of_contractions(recognise_composites(d_)));
}

// ---- operators ----

Value operator+(Value a, Value b) { return a.builder ? a.builder->binary(OpKind::add, a, b) : a; }
Value operator-(Value a, Value b) { return a.builder ? a.builder->binary(OpKind::sub, a, b) : a; }
Value operator*(Value a, Value b) { return a.builder ? a.builder->binary(OpKind::mul, a, b) : a; }
Value operator/(Value a, Value b) { return a.builder ? a.builder->binary(OpKind::div, a, b) : a; }
Value operator*(Value a, double c) {
  return a.builder ? a.builder->binary(OpKind::mul, a, a.builder->constant(c)) : a;
}
Value operator-(Value a) { return a.builder ? a.builder->unary(OpKind::neg, a) : a; }

}  // namespace napkin::ir
