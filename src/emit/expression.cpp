// SPDX-License-Identifier: Apache-2.0
#include "emit/expression.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>

namespace napkin::emit::expression {

using ir::AxisId;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

std::string literal(double v) {
  if (std::isnan(v)) return "NAN";
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "-INFINITY";
  // A finite double past f32's range stays finite (the reference interpreter computes in f64:
  // a -1e300 mask fill leaves a row it masks whole uniform there, not NaN or zero), at 2^123:
  // headroom for the scaling a kernel applies after the diagram's code (the attention kernel's
  // log2 e and a temperature; at f32's largest it overflowed to -inf and the masked rows came
  // out NaN on the H100), and a power of two, so that the exponent s c - fl(m c) of a row whose
  // every score is that fill is exactly 0 (at f32's largest / 16, all ones in its mantissa, the
  // product's rounding left ~1e30 there and such a row came out empty at d = 128).
  const double largest = std::ldexp(1.0, 123);
  const float f = static_cast<float>(std::clamp(v, -largest, largest));
  std::string s = fmt::format("{:.9g}", f);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

std::string library_names(const ir::Diagram& d) {
  std::string out;
  for (ir::NodeId n : d.inputs()) out += "\"" + d.node(n).name + "\", ";
  for (const ir::Output& o : d.outputs) out += "\"" + (d.node(o.node).name.empty() ? "O" : d.node(o.node).name) + "\", ";
  for (const ir::Node& n : d.nodes)
    if (n.op == ir::OpKind::constant && !n.name.empty()) out += "\"" + n.name + "\", ";
  return out;
}

const char* memory_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::bf16: return "__nv_bfloat16";
    case DType::f16: return "__half";
    case DType::f64: return "double";
    case DType::i32: return "int32_t";
    case DType::boolean: return "uint8_t";
    default: return nullptr;
  }
}
const char* abi_dtype(DType t) {
  switch (t) {
    case DType::f32: return "NAPKIN_F32";
    case DType::bf16: return "NAPKIN_BF16";
    case DType::f16: return "NAPKIN_F16";
    case DType::f64: return "NAPKIN_F64";
    case DType::i32: return "NAPKIN_I32";
    default: return "NAPKIN_BOOL";
  }
}

CType ctype_of(const Node& n) {
  if (n.dtype == DType::boolean) return CType::boolean;
  if (n.dtype == DType::i32 && n.op != OpKind::div) return CType::integer;
  return CType::real;
}
const char* ctype_name(CType t) { return t == CType::boolean ? "bool" : t == CType::integer ? "int" : "float"; }


std::string Writer::value(NodeId top, std::string& out, const std::string& indent) {
    std::set<NodeId> need;
    collect(top, need);
    for (NodeId n : need) {
      if (values_.count(n)) continue;
      const Node& x = d_.node(n);
      const std::string e = expression(n);
      if (x.op == OpKind::constant || x.op == OpKind::iota) {
        values_[n] = e;
        continue;
      }
      const std::string name = fmt::format("v{}", n);
      out += fmt::format("{}const {} {} = {};{}\n", indent, wide(n) ? "long long" : ctype_name(ctype_of(x)), name, e,
                         x.name.empty() ? "" : "  // " + x.name);
      values_[n] = name;
    }
    return values_.at(top);
  }

void Writer::collect(NodeId n, std::set<NodeId>& need) {
    if (values_.count(n) || !need.insert(n).second) return;
    for (NodeId o : d_.node(n).operands) collect(o, need);
  }
std::string int_literal(const ir::Node& n) {
  if (n.op != OpKind::constant || !n.name.empty() || n.scalar != std::floor(n.scalar) || n.scalar < -2147483648.0 ||
      n.scalar > 2147483647.0)
    return "";
  return fmt::format("{}", static_cast<long long>(n.scalar));
}

bool Writer::wide(NodeId n) const {
  const Node& x = d_.node(n);
  if (ctype_of(x) != CType::integer) return false;
  switch (x.op) {
    case OpKind::add: case OpKind::sub: case OpKind::mul: case OpKind::neg: return true;
    case OpKind::abs: case OpKind::min: case OpKind::max: case OpKind::select: case OpKind::floor:
      return std::any_of(x.operands.begin(), x.operands.end(), [&](NodeId o) { return wide(o); });
    default: return false;
  }
}

std::string Writer::as(NodeId o, CType t) {
    const std::string& v = values_.at(o);
    const CType from = ctype_of(d_.node(o));
    if (from == t) return v;
    if (t == CType::integer)
      if (std::string i = int_literal(d_.node(o)); !i.empty()) return i;
    if (t == CType::boolean) return "(" + v + " != 0)";
    return fmt::format("static_cast<{}>({})", ctype_name(t), v);
  }
std::string Writer::expression(NodeId n) {
    const Node& x = d_.node(n);
    const CType t = ctype_of(x);
    auto op = [&](int i) { return as(x.operands[static_cast<std::size_t>(i)], t); };
    auto opf = [&](int i) { return as(x.operands[static_cast<std::size_t>(i)], CType::real); };
    // An operand of a 64-bit result, converted first (so that the operation is done in 64 bits).
    auto widened = [&](int i) { return wide(n) ? "static_cast<long long>(" + op(i) + ")" : op(i); };
    auto cmp = [&](const char* sym) {
      const bool ints = ctype_of(d_.node(x.operands[0])) != CType::real && ctype_of(d_.node(x.operands[1])) != CType::real;
      const CType ct = ints ? CType::integer : CType::real;
      return fmt::format("{} {} {}", as(x.operands[0], ct), sym, as(x.operands[1], ct));
    };
    switch (x.op) {
      case OpKind::constant:
        if (!x.name.empty()) return t == CType::integer ? "static_cast<int>(a." + x.name + ")" : "static_cast<float>(a." + x.name + ")";
        return t == CType::integer ? fmt::format("{}", static_cast<long long>(x.scalar)) : literal(x.scalar);
      case OpKind::iota: return fmt::format("static_cast<int>(i_{})", d_.axis(x.axis).name);
      case OpKind::input: {
        std::string off;
        for (AxisId a : x.axes) off += fmt::format(" + i_{0} * a.s_{1}_{0}", d_.axis(a).name, x.name);
        return fmt::format("napkin::rows::load(a.{} + (0{}))", x.name, off);
      }
      case OpKind::exp: return (approximate_ ? "napkin::rows::fast_exp(" : "expf(") + opf(0) + ")";
      case OpKind::exp2: return "exp2f(" + opf(0) + ")";
      case OpKind::log: return (approximate_ ? "__logf(" : "logf(") + opf(0) + ")";
      case OpKind::tanh: return "tanhf(" + opf(0) + ")";
      case OpKind::floor: return t == CType::integer ? op(0) : "floorf(" + op(0) + ")";
      case OpKind::neg: return wide(n) ? "-static_cast<long long>(" + op(0) + ")" : "-" + op(0);
      case OpKind::abs: return t != CType::integer ? "fabsf(" + op(0) + ")" : wide(n) ? "llabs(" + op(0) + ")" : "abs(" + op(0) + ")";
      case OpKind::logical_not: return "!" + as(x.operands[0], CType::boolean);
      case OpKind::cast:
        switch (x.dtype) {
          case DType::bf16: return "napkin::rows::round_bf16(" + opf(0) + ")";
          case DType::f16: return "napkin::rows::round_f16(" + opf(0) + ")";
          case DType::i32: return "napkin::rows::round_i32(" + opf(0) + ")";
          case DType::boolean: return "(" + values_.at(x.operands[0]) + " != 0)";
          default: return opf(0);
        }
      case OpKind::scale: return op(0) + " * " + literal(x.scalar);
      case OpKind::softcap: return fmt::format("{} * tanhf({} * {})", literal(x.scalar), opf(0), literal(1.0 / x.scalar));
      case OpKind::add: return widened(0) + " + " + op(1);
      case OpKind::sub: return widened(0) + " - " + op(1);
      case OpKind::mul: return widened(0) + " * " + op(1);
      case OpKind::div:
        if (t == CType::integer) return op(0) + " / " + op(1);
        if (const auto r = reciprocals_.find(x.operands[1]); r != reciprocals_.end()) return opf(0) + " * " + r->second;
        return approximate_ ? "__fdividef(" + opf(0) + ", " + opf(1) + ")" : opf(0) + " / " + opf(1);
      case OpKind::max: return t == CType::integer ? "max(" + widened(0) + ", " + widened(1) + ")" : "napkin::rows::nan_max(" + op(0) + ", " + op(1) + ")";
      case OpKind::min: return t == CType::integer ? "min(" + widened(0) + ", " + widened(1) + ")" : "napkin::rows::nan_min(" + op(0) + ", " + op(1) + ")";
      case OpKind::lt: return cmp("<");
      case OpKind::le: return cmp("<=");
      case OpKind::gt: return cmp(">");
      case OpKind::ge: return cmp(">=");
      case OpKind::eq: return cmp("==");
      case OpKind::ne: return cmp("!=");
      case OpKind::logical_and: return as(x.operands[0], CType::boolean) + " && " + as(x.operands[1], CType::boolean);
      case OpKind::logical_or: return as(x.operands[0], CType::boolean) + " || " + as(x.operands[1], CType::boolean);
      case OpKind::select: return fmt::format("{} ? {} : {}", as(x.operands[0], CType::boolean), widened(1), widened(2));
      default: return "0 /* refused by recognise_rows */";
    }
  }


}  // namespace napkin::emit::expression
