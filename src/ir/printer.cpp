// SPDX-License-Identifier: Apache-2.0
#include "ir/printer.h"

#include <cmath>
#include <map>

#include <fmt/format.h>

#include "ir/builder.h"

namespace napkin::ir {

std::string format_number(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "nan";
  return fmt::format("{}", v);  // fmt prints the shortest round-tripping representation
}

std::uint64_t stable_hash(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

namespace {

// Binding strength of the printed form of each node, for minimal parentheses.
enum Prec { kCast = 0, kOr = 1, kAnd = 2, kCmp = 3, kAdd = 4, kMul = 5, kUnary = 6, kAtom = 7 };

// Binary ops printed as infix operators use their symbol (ir::op_symbol); the others are calls.
std::string_view infix(OpKind k) {
  return k == OpKind::max || k == OpKind::min ? std::string_view{} : op_symbol(k);
}

int infix_prec(OpKind k) {
  switch (k) {
    case OpKind::logical_or: return kOr;
    case OpKind::logical_and: return kAnd;
    case OpKind::add: case OpKind::sub: return kAdd;
    case OpKind::mul: case OpKind::div: return kMul;
    default: return kCmp;
  }
}

class Printer {
 public:
  explicit Printer(const Diagram& d) : d_(d), uses_(d.nodes.size(), 0) {
    for (const Node& n : d.nodes)
      for (NodeId o : n.operands) ++uses_[static_cast<std::size_t>(o)];
    for (const Output& o : d.outputs) ++uses_[static_cast<std::size_t>(o.node)];
    // Unnamed nodes used more than once (possible from the builder) get printed names.
    int counter = 0;
    for (std::size_t i = 0; i < d.nodes.size(); ++i) {
      const Node& n = d.nodes[i];
      if (!n.name.empty()) {
        names_[static_cast<NodeId>(i)] = n.name;
      } else if (uses_[i] > 1 && !is_leaf_literal(n)) {
        std::string name;
        do name = fmt::format("_t{}", ++counter);
        while (d.find_node(name) || d.find_axis(name));
        names_[static_cast<NodeId>(i)] = name;
      }
    }
  }

  std::string run() {
    std::string out;
    if (!d_.axes.empty()) {
      out += "axes";
      for (const Axis& a : d_.axes) out += fmt::format(" {}={}", a.name, a.size);
      out += "\n";
    }
    for (std::size_t i = 0; i < d_.nodes.size(); ++i) {
      const Node& n = d_.nodes[i];
      if (n.op == OpKind::constant && !n.name.empty())
        out += fmt::format("param {} = {}\n", n.name, format_number(n.scalar));
    }
    for (std::size_t i = 0; i < d_.nodes.size(); ++i) {
      const Node& n = d_.nodes[i];
      if (n.op == OpKind::input)
        out += fmt::format("in {}{} {}\n", n.name, axes_text(d_, n.axes), dtype_name(n.dtype));
    }
    for (std::size_t i = 0; i < d_.nodes.size(); ++i) {
      const auto id = static_cast<NodeId>(i);
      const Node& n = d_.nodes[i];
      if (n.op == OpKind::input || n.op == OpKind::constant || !names_.count(id)) continue;
      out += fmt::format("{}{} = {}\n", names_.at(id), axes_text(d_, n.axes), expr(id, kCast, true));
    }
    for (const Output& o : d_.outputs) {
      out += "out " + names_.at(o.node);
      if (o.axes != d_.node(o.node).axes) out += axes_text(d_, o.axes);
      out += "\n";
    }
    return out;
  }

 private:
  static bool is_leaf_literal(const Node& n) {
    return (n.op == OpKind::constant || n.op == OpKind::iota) && n.name.empty();
  }

  std::string over_text(const Node& n) const {
    std::string s = " over";
    for (AxisId a : n.over) s += " " + d_.axis(a).name;
    return s;
  }

  std::string operand(NodeId id, int min_prec) const { return expr(id, min_prec, false); }

  // Prints node `id` as an expression needing at least `min_prec` binding strength. At the
  // top of a definition (`top`), the node itself is printed even if it has a name.
  std::string expr(NodeId id, int min_prec, bool top) const {
    const Node& n = d_.node(id);
    if (!top) {
      if (auto it = names_.find(id); it != names_.end()) return it->second;
    }
    int prec = kAtom;
    std::string s;
    auto arg = [&](int i) { return operand(n.operands.at(static_cast<std::size_t>(i)), kCast); };
    switch (op_class(n.op)) {
      case OpClass::leaf:
        if (n.op == OpKind::iota) s = d_.axis(n.axis).name;
        else {
          s = format_number(n.scalar);
          if (n.scalar < 0) prec = kUnary;
        }
        break;
      case OpClass::unary:
        if (n.op == OpKind::neg) {
          s = "-" + operand(n.operands[0], kUnary);
          prec = kUnary;
        } else if (n.op == OpKind::logical_not) {
          s = "!" + operand(n.operands[0], kUnary);
          prec = kUnary;
        } else if (n.op == OpKind::cast) {
          s = operand(n.operands[0], kOr) + " as " + std::string(dtype_name(n.dtype));
          prec = kCast;
        } else if (n.op == OpKind::scale || n.op == OpKind::softcap) {
          s = fmt::format("{}({}, {})", op_name(n.op), arg(0), format_number(n.scalar));
        } else {
          s = fmt::format("{}({})", op_name(n.op), arg(0));
        }
        break;
      case OpClass::binary:
        if (auto sym = infix(n.op); !sym.empty()) {
          prec = infix_prec(n.op);
          // Left-associative: the right operand binds one level tighter; comparisons don't chain.
          const int left = prec == kCmp ? kCmp + 1 : prec;
          s = fmt::format("{} {} {}", operand(n.operands[0], left), sym,
                          operand(n.operands[1], prec + 1));
        } else {
          s = fmt::format("{}({}, {})", op_name(n.op), arg(0), arg(1));
        }
        break;
      case OpClass::ternary:
        s = fmt::format("select({}, {}, {})", arg(0), arg(1), arg(2));
        break;
      case OpClass::reduction:
      case OpClass::composite: {
        s = fmt::format("{}({}{}", op_name(n.op), arg(0), over_text(n));
        if (n.op == OpKind::rmsnorm || n.op == OpKind::layernorm)
          s += ", eps=" + format_number(n.scalar);
        s += ")";
        break;
      }
      case OpClass::contraction: {
        s = "contract(";
        for (std::size_t i = 0; i < n.operands.size(); ++i)
          s += (i ? ", " : "") + arg(static_cast<int>(i));
        s += over_text(n) + ")";
        break;
      }
    }
    return prec < min_prec ? "(" + s + ")" : s;
  }

  const Diagram& d_;
  std::vector<int> uses_;
  std::map<NodeId, std::string> names_;
};

}  // namespace

std::string print_diagram(const Diagram& d) { return Printer(d).run(); }

std::string diagram_key(const Diagram& d) {
  std::string s;
  for (const Axis& a : d.axes) s += fmt::format("{}={} ", a.name, a.size);
  return s + fmt::format("#{:08x}", static_cast<std::uint32_t>(stable_hash(print_diagram(d))));
}

}  // namespace napkin::ir
