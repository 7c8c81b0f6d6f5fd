// SPDX-License-Identifier: Apache-2.0
#include "emit/gemm_kernel.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include <fmt/format.h>

#include "emit/expression.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "plan/subgraph.h"

namespace napkin::emit {

using ir::AxisId;
using ir::axes_text;
using ir::Node;
using ir::NodeId;
using ir::OpClass;
using ir::OpKind;

namespace {

bool contains(const std::vector<AxisId>& v, AxisId a) { return std::find(v.begin(), v.end(), a) != v.end(); }

const char* cutlass_type(DType t) {
  switch (t) {
    case DType::bf16: return "cutlass::bfloat16_t";
    case DType::f16: return "cutlass::half_t";
    case DType::f32: return "float";
    case DType::f64: return "double";
    default: return nullptr;
  }
}
using expression::abi_dtype;

// The role letters of napkin::TensorBinder (runtime/include/napkin/tensor_binder.h names them):
// the i-th axis of a class, in its flattening order, takes the class's i-th letter.
constexpr int kMaxAxesPerMode = 4;
const char* const kRoleLetters[4] = {"mMiI", "nNjJ", "KcCu", "lLzZ"};  // M, N, K, L
enum Class { kM = 0, kN = 1, kK = 2, kL = 3, kNone = 4 };
const char* const kClassName[4] = {"M", "N", "K", "L"};

// The epilogue as one line of napkin-like text: `acc` for the accumulator, leaves and params
// by name; a named value used more than once is written by name and defined after "with".
class EpilogueText {
 public:
  // `products`: each contraction and its name in the text ("acc", or "acc0" and "acc1").
  EpilogueText(const ir::Diagram& d, std::map<NodeId, std::string> products, const std::set<NodeId>& cone)
      : d_(d), products_(std::move(products)) {
    for (NodeId n : cone)
      for (NodeId o : d.node(n).operands) ++uses_[o];
  }
  std::string text(NodeId top) {
    std::string s = render(top, 0, true);
    for (const auto& [n, def] : defs_) s += fmt::format("{} {} = {}", n == defs_.begin()->first ? " with" : ",", d_.node(n).name, def);
    return s;
  }

 private:
  static int precedence(const Node& x) {
    switch (x.op) {
      case OpKind::cast: return 0;
      case OpKind::logical_or: return 1;
      case OpKind::logical_and: return 2;
      case OpKind::lt: case OpKind::le: case OpKind::gt: case OpKind::ge: case OpKind::eq: case OpKind::ne: return 3;
      case OpKind::add: case OpKind::sub: return 4;
      case OpKind::mul: case OpKind::div: case OpKind::scale: return 5;
      case OpKind::neg: case OpKind::logical_not: return 6;
      default: return 7;
    }
  }
  // `n` in a context that binds at `outer`: parenthesised when it binds more loosely.
  std::string render(NodeId n, int outer, bool top = false) {
    const Node& x = d_.node(n);
    if (auto it = products_.find(n); it != products_.end()) return it->second;
    if (x.op == OpKind::input || (x.op == OpKind::constant && !x.name.empty())) return x.name;
    if (x.op == OpKind::iota) return d_.axis(x.axis).name;
    if (x.op == OpKind::constant) return ir::format_number(x.scalar);
    if (!top && !x.name.empty() && uses_[n] > 1) {
      if (!defs_.count(n)) {
        std::string def = render(n, 0, true);
        defs_[n] = def;
      }
      return x.name;
    }
    const int p = precedence(x);
    auto operand = [&](int i, int at) { return render(x.operands[static_cast<std::size_t>(i)], at); };
    std::string s;
    switch (ir::op_class(x.op)) {
      case OpClass::unary:
        if (x.op == OpKind::cast) s = fmt::format("{} as {}", operand(0, 1), dtype_name(x.dtype));
        else if (x.op == OpKind::neg || x.op == OpKind::logical_not) s = fmt::format("{}{}", ir::op_symbol(x.op), operand(0, 6));
        else if (x.op == OpKind::scale) s = fmt::format("{} * {}", operand(0, 5), ir::format_number(x.scalar));
        else if (x.op == OpKind::softcap) s = fmt::format("softcap({}, {})", operand(0, 0), ir::format_number(x.scalar));
        else s = fmt::format("{}({})", ir::op_name(x.op), operand(0, 0));
        break;
      case OpClass::binary:
        if (x.op == OpKind::max || x.op == OpKind::min) s = fmt::format("{}({}, {})", ir::op_name(x.op), operand(0, 0), operand(1, 0));
        else s = fmt::format("{} {} {}", operand(0, p), ir::op_symbol(x.op), operand(1, p + 1));
        break;
      case OpClass::ternary: s = fmt::format("select({}, {}, {})", operand(0, 0), operand(1, 0), operand(2, 0)); break;
      case OpClass::reduction: case OpClass::composite: {  // a folded GEMM's folds
        std::vector<std::string> over;
        for (AxisId a : x.over) over.push_back(d_.axis(a).name);
        s = fmt::format("{}({} over {})", ir::op_name(x.op), operand(0, 0), fmt::join(over, " "));
        break;
      }
      default: s = std::string(ir::op_name(x.op)); break;  // refused before: never printed
    }
    return p < outer ? "(" + s + ")" : s;
  }
  const ir::Diagram& d_;
  std::map<NodeId, std::string> products_;
  std::map<NodeId, int> uses_;
  std::map<NodeId, std::string> defs_;
};

class Recogniser {
 public:
  Recogniser(const ir::Diagram& d, const SourceText& src) : d_(d), src_(src) {}

  Result<GemmForm> run() {
    GemmForm f;
    std::vector<NodeId> contractions;
    for (NodeId n = 0; n < static_cast<NodeId>(d_.nodes.size()); ++n)
      if (d_.node(n).op == OpKind::contract) contractions.push_back(n);
    if (contractions.empty()) return refuse({}, "no contraction: a GEMM kernel has one");
    if (const plan::GemmReduction gr = plan::gemm_reduction(d_); gr.why.empty()) return run_folded(gr);
    // Row sums of A beside the GEMM (the prologue GEMM's mainloop computes them): the GEMM is
    // then the one contraction of the form.
    std::set<NodeId> sum_code;  // the row sums and their summands' code
    if (const plan::RowSums rs = plan::row_sums(d_); rs.why.empty() && !rs.sums.empty()) {
      contractions = {rs.contraction};
      std::set<NodeId> leaves;
      for (const plan::RowSum& r : rs.sums) {
        GemmRowSum g{r.node, r.factors, {}};
        for (const ir::Output& o : d_.outputs)
          if (o.node == r.node) g.out_axes = o.axes;
        f.row_sums.push_back(std::move(g));
        leaves.insert(r.leaves.begin(), r.leaves.end());
        sum_code.insert(r.nodes.begin(), r.nodes.end());
      }
      f.sum_leaves.assign(leaves.begin(), leaves.end());
    }
    if (contractions.size() > 2)
      return refuse(d_.node(contractions[2]).loc,
                    fmt::format("a third contraction ({} of them): a GEMM kernel has one, a dual GEMM two", contractions.size()));
    f.contraction = contractions[0];
    if (contractions.size() == 2) {
      const Node& c0 = d_.node(contractions[0]);
      const Node& c1 = d_.node(contractions[1]);
      if (c0.operands.size() != 2 || c1.operands.size() != 2 || c0.operands[0] != c1.operands[0])
        return refuse(c1.loc, "a second contraction that does not share the first's first operand: a GEMM kernel has one "
                              "contraction (a chain is two kernels); a dual GEMM's two share A, as contract(X, Wg) and "
                              "contract(X, Wu)");
      f.contraction1 = contractions[1];
      f.b1 = c1.operands[1];
      if (d_.node(f.b1).op != OpKind::input)
        return refuse(d_.node(f.b1).loc, fmt::format("the contraction's operand {} is computed in the kernel: TMA reads a "
                                                     "GEMM's operands as they are in memory (no prologue)", d_.label(f.b1)));
      if (f.b1 == c0.operands[1]) return refuse(c1.loc, "the two contractions are the same product");
      std::vector<AxisId> a0 = c0.axes, a1 = c1.axes;
      std::sort(a0.begin(), a0.end());
      std::sort(a1.begin(), a1.end());
      if (a0 != a1) return refuse(c1.loc, "the dual GEMM's two contractions are over different axes");
    }
    const Node& c = d_.node(f.contraction);
    if (c.operands.size() != 2)
      return refuse(c.loc, fmt::format("a contraction of {} operands: a GEMM contracts two", c.operands.size()));
    f.a = c.operands[0];
    f.b = c.operands[1];
    std::set<NodeId> code;  // the operands' prologue nodes
    plan::Prologue prologues[2];
    for (int i = 0; i < 2; ++i) {
      NodeId& o = i == 0 ? f.a : f.b;
      if (d_.node(o).op == OpKind::input) continue;
      if (f.b1 >= 0)
        return refuse(d_.node(o).loc, fmt::format("the contraction's operand {} is computed in the kernel: a dual GEMM reads "
                                                  "its operands as they are in memory (no prologue)", d_.label(o)));
      prologues[i] = plan::operand_prologue(d_, o);
      if (!prologues[i].why.empty()) return refuse(d_.node(o).loc, prologues[i].why);
      (i == 0 ? f.prologue_a : f.prologue_b) = o;
      code.insert(prologues[i].nodes.begin(), prologues[i].nodes.end());
      o = prologues[i].source;
    }
    if (std::string why = plan::prologue_pair_error(prologues[0], prologues[1]); !why.empty()) return refuse(c.loc, why);
    if (f.a == f.b) return refuse(c.loc, fmt::format("'{}' contracted with itself: a GEMM needs two operands", d_.node(f.a).name));
    const Node& A = d_.node(f.a);
    const Node& B = d_.node(f.b);
    if (A.dtype != B.dtype || (A.dtype != DType::bf16 && A.dtype != DType::f16))
      return refuse(c.loc, fmt::format("operands {} and {}: the GEMM kernel takes two bf16 or two f16 operands (fp8, tf32, "
                                       "f32 and f64 are not generated)",
                                       dtype_name(A.dtype), dtype_name(B.dtype)));
    f.element = A.dtype;
    if (f.b1 >= 0) {
      const Node& B1 = d_.node(f.b1);
      if (B1.dtype != B.dtype || B1.axes != B.axes)
        return refuse(B1.loc, fmt::format("'{}' {} {} and '{}' {} {}: a dual GEMM reads its two B operands through one TMA "
                                          "descriptor, so they share a dtype and a storage order",
                                          B.name, dtype_name(B.dtype), axes_text(d_, B.axes), B1.name, dtype_name(B1.dtype),
                                          axes_text(d_, B1.axes)));
    }
    for (NodeId o : {f.a, f.b, f.b1})
      for (NodeId user : o < 0 ? std::vector<NodeId>{} : d_.users(o))
        if (user != f.contraction && user != f.contraction1 && !code.count(user) && !(o == f.a && sum_code.count(user)))
          return refuse(d_.node(user).loc, fmt::format("'{}' is read by {} besides the contraction: the kernel reads a GEMM "
                                                       "operand only in its mainloop",
                                                       d_.node(o).name, d_.label(user)));
    std::vector<const ir::Output*> products;  // the outputs that are not row sums
    for (const ir::Output& o : d_.outputs)
      if (!is_row_sum(f, o.node)) products.push_back(&o);
    if (products.size() != 1)
      return refuse(products.size() > 1 ? products[1]->loc : SourceLoc{},
                    fmt::format("{} outputs: a GEMM kernel writes one (and its row sums)", products.size()));
    f.output = products[0]->node;
    f.out_axes = products[0]->axes;
    out_loc_ = products[0]->loc;
    if (auto r = classify_axes(f); !r.ok()) return r;
    if (auto r = walk_epilogue(f); !r.ok()) return r;
    if (auto r = check_layouts(f); !r.ok()) return r;
    for (const GemmRowSum& r : f.row_sums) {
      const Node& x = d_.node(r.node);
      if (r.out_axes.empty()) continue;
      if (x.dtype != DType::f32 && x.dtype != DType::bf16 && x.dtype != DType::f16)
        return refuse(x.loc, fmt::format("row sum '{}' is {}: the kernel stores f32, bf16 or f16", x.name, dtype_name(x.dtype)));
      if (auto e = layout_error(fmt::format("row sum '{}'", x.name), r.out_axes, {kM, kL}, ""); !e.empty()) return refuse(x.loc, e);
    }
    for (NodeId n : f.sum_leaves) {
      const Node& x = d_.node(n);
      if (cutlass_type(x.dtype) == nullptr)
        return refuse(x.loc, fmt::format("'{}' is {}: a row sum reads bf16, f16, f32 or f64 inputs", x.name, dtype_name(x.dtype)));
      if (x.axes.empty()) continue;
      if (auto e = layout_error(fmt::format("row sum input '{}'", x.name), x.axes, {kK, kL}, ""); !e.empty()) return refuse(x.loc, e);
    }
    const Node& Y = d_.node(f.output);
    if (Y.dtype != DType::bf16 && Y.dtype != DType::f16 && Y.dtype != DType::f32)
      return refuse(out_loc_, fmt::format("output '{}' is {}: a GEMM writes bf16, f16 or f32 (end the epilogue with `as bf16`)",
                                          Y.name, dtype_name(Y.dtype)));
    f.out_dtype = Y.dtype;
    f.a_text = axes_text(d_, A.axes);
    f.b_text = axes_text(d_, B.axes);
    f.out_text = axes_text(d_, f.out_axes);
    return f;
  }

 private:
  // The folded GEMM (plan::GemmReduction has checked its shape): classes, operands, the code's
  // inputs and outputs, and their element types.
  Result<GemmForm> run_folded(const plan::GemmReduction& gr) {
    GemmForm f;
    f.contraction = gr.contraction;
    const Node& c = d_.node(gr.contraction);
    f.a = c.operands[0];
    f.b = c.operands[1];
    const Node& A = d_.node(f.a);
    const Node& B = d_.node(f.b);
    for (AxisId x : A.axes) (gr.m.count(x) ? f.m : gr.k.count(x) ? f.k : f.l).push_back(x);
    for (AxisId x : B.axes)
      if (gr.n.count(x)) f.n.push_back(x);
    classes_ = {&f.m, &f.n, &f.k, &f.l};
    for (int k = 0; k < 4; ++k)
      if (classes_[k]->size() > kMaxAxesPerMode)
        return refuse(c.loc, fmt::format("{} axes of class {} {}: the kernel flattens at most {} into one mode", classes_[k]->size(),
                                         kClassName[k], axes_text(d_, *classes_[k]), kMaxAxesPerMode));
    if (A.dtype != B.dtype || (A.dtype != DType::bf16 && A.dtype != DType::f16))
      return refuse(c.loc, fmt::format("operands {} and {}: the GEMM kernel takes two bf16 or two f16 operands (fp8, tf32, "
                                       "f32 and f64 are not generated)",
                                       dtype_name(A.dtype), dtype_name(B.dtype)));
    f.element = A.dtype;
    const char* tma = "TMA needs unit stride along M, N or K";
    if (auto e = layout_error(fmt::format("A '{}'", A.name), A.axes, {kM, kK}, tma); !e.empty()) return refuse(A.loc, e);
    if (auto e = layout_error(fmt::format("B '{}'", B.name), B.axes, {kN, kK}, tma); !e.empty()) return refuse(B.loc, e);
    f.a_k_major = class_of(A.axes.back()) == kK;
    f.b_k_major = class_of(B.axes.back()) == kK;
    f.folds = gr.reductions;
    f.fold_inputs = gr.leaves;
    f.fold_outputs = d_.outputs;
    for (NodeId n : f.fold_inputs)
      if (expression::memory_type(d_.node(n).dtype) == nullptr)
        return refuse(d_.node(n).loc, fmt::format("input '{}' is {}: the epilogue reads bf16, f16, f32, f64, i32 and bool inputs",
                                                  d_.node(n).name, dtype_name(d_.node(n).dtype)));
    std::vector<std::string> outs, code;
    std::set<NodeId> all;
    for (NodeId n = 0; n < static_cast<NodeId>(d_.nodes.size()); ++n) {
      all.insert(n);
      if (d_.node(n).op == OpKind::constant && !d_.node(n).name.empty()) f.params.push_back(n);
    }
    EpilogueText text(d_, {{f.contraction, "acc"}}, all);
    for (const ir::Output& o : f.fold_outputs) {
      const Node& y = d_.node(o.node);
      if (expression::memory_type(y.dtype) == nullptr)
        return refuse(o.loc, fmt::format("output '{}' is {}: the kernel writes bf16, f16, f32, f64, i32 or bool", y.name,
                                         dtype_name(y.dtype)));
      outs.push_back(y.name + axes_text(d_, o.axes));
      code.push_back(y.name + " = " + text.text(o.node));
    }
    f.output = f.fold_outputs.front().node;
    f.out_axes = f.fold_outputs.front().axes;
    f.out_dtype = d_.node(f.output).dtype;
    f.out_n_major = false;
    f.a_text = axes_text(d_, A.axes);
    f.b_text = axes_text(d_, B.axes);
    f.out_text = fmt::format("{}", fmt::join(outs, ", "));
    f.epilogue_text = fmt::format("{}", fmt::join(code, "; "));
    return f;
  }

  Diagnostic error(SourceLoc loc, std::string message, std::string note = {}) const {
    if (note.empty())
      note = "the GEMM kernel fuses: Y = epilogue(contract(A, B over K)), A and B bf16 or f16 inputs, the epilogue "
             "elementwise code over the accumulator, constants, params, scalars, row and column vectors and tensors "
             "over Y's axes (docs/kernels.md, GEMM kernels)";
    if (loc.line == 0) {  // no line to show: the file, the message, the note under it
      Diagnostic d = plain_error((src_.name.empty() ? d_.source_name : src_.name) + ": " + message);
      d.note = std::move(note);
      return d;
    }
    return make_error(src_, loc, std::move(message), std::move(note));
  }
  Result<GemmForm> refuse(SourceLoc loc, std::string message, std::string note = {}) const {
    return error(loc, std::move(message), std::move(note));
  }

  static bool is_row_sum(const GemmForm& f, NodeId n) {
    return std::any_of(f.row_sums.begin(), f.row_sums.end(), [&](const GemmRowSum& r) { return r.node == n; });
  }

  Class class_of(AxisId a) const {
    for (int c = 0; c < 4; ++c)
      if (contains(*classes_[c], a)) return static_cast<Class>(c);
    return kNone;
  }

  Result<GemmForm> classify_axes(GemmForm& f) {
    const Node& A = d_.node(f.a);
    const Node& B = d_.node(f.b);
    const Node& c = d_.node(f.contraction);
    for (AxisId x : A.axes) {
      if (contains(B.axes, x)) (contains(c.axes, x) ? f.l : f.k).push_back(x);
      else if (contains(c.axes, x)) f.m.push_back(x);
      else return refuse(c.loc, fmt::format("axis {} is summed within '{}' alone: a GEMM contracts axes A and B share", d_.axis(x).name, A.name));
    }
    for (AxisId x : B.axes)
      if (!contains(A.axes, x)) {
        if (contains(c.axes, x)) f.n.push_back(x);
        else return refuse(c.loc, fmt::format("axis {} is summed within '{}' alone: a GEMM contracts axes A and B share", d_.axis(x).name, B.name));
      }
    classes_ = {&f.m, &f.n, &f.k, &f.l};
    if (f.k.empty()) return refuse(c.loc, "the contraction sums over no axis: an outer product, not a GEMM");
    if (f.m.empty() || f.n.empty())
      return refuse(c.loc, fmt::format("a GEMM needs an axis of A alone (M) and one of B alone (N); this contraction has {} and {}",
                                       f.m.empty() ? "no M" : "M", f.n.empty() ? "no N" : "N"));
    for (int k = 0; k < 4; ++k)
      if (classes_[k]->size() > kMaxAxesPerMode)
        return refuse(c.loc, fmt::format("{} axes of class {} {}: the kernel flattens at most {} into one mode", classes_[k]->size(),
                                         kClassName[k], axes_text(d_, *classes_[k]), kMaxAxesPerMode));
    std::vector<AxisId> want = c.axes, have = f.out_axes;
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    if (want != have)
      return refuse(out_loc_, fmt::format("the output is over {}, the contraction over {}: the epilogue may not add axes",
                                          axes_text(d_, f.out_axes), axes_text(d_, c.axes)));
    return GemmForm{};
  }

  // The epilogue: every node the output reads down to the contraction.
  Result<GemmForm> walk_epilogue(GemmForm& f) {
    std::vector<NodeId> stack{f.output};
    while (!stack.empty()) {
      const NodeId n = stack.back();
      stack.pop_back();
      if (!cone_.insert(n).second || n == f.contraction || n == f.contraction1) continue;
      if (is_row_sum(f, n)) continue;
      const Node& x = d_.node(n);
      switch (ir::op_class(x.op)) {
        case OpClass::leaf:
          if (x.op == OpKind::iota)
            return refuse(x.loc, fmt::format("axis index '{}' in the epilogue: the epilogue visitor tree has no index "
                                             "node (index-dependent code is a row or elementwise kernel)",
                                             d_.axis(x.axis).name));
          if (x.op == OpKind::constant && !x.name.empty()) f.params.push_back(n);
          if (x.op == OpKind::input) {
            if (auto r = add_leaf(f, n); !r.ok()) return r;
          }
          break;
        case OpClass::unary: case OpClass::binary: case OpClass::ternary:
          if (x.op == OpKind::cast && x.dtype != DType::bf16 && x.dtype != DType::f16 && x.dtype != DType::f32 &&
              x.dtype != DType::f64 && x.dtype != DType::i32 && x.dtype != DType::boolean)
            return refuse(x.loc, fmt::format("a cast to {} in the epilogue: only bf16, f16, f32, f64, i32 and bool "
                                             "rounding is generated",
                                             dtype_name(x.dtype)));
          break;
        default:
          return refuse(x.loc, fmt::format("{} ({}) in the epilogue: a GEMM's epilogue is elementwise code (a reduction or "
                                           "a normalisation is a row kernel of its own)",
                                           d_.label(n), ir::op_name(x.op)));
      }
      for (NodeId o : x.operands) stack.push_back(o);
    }
    if (!cone_.count(f.contraction) || (f.contraction1 >= 0 && !cone_.count(f.contraction1)))
      return refuse(out_loc_, fmt::format("{} does not read {}", output_label(f.output),
                                          f.contraction1 >= 0 ? "both contractions" : "the contraction"));
    std::sort(f.params.begin(), f.params.end());
    std::sort(f.leaves.begin(), f.leaves.end(), [](const GemmLeaf& x, const GemmLeaf& y) { return x.node < y.node; });
    std::map<NodeId, std::string> products{{f.contraction, "acc"}};
    if (f.contraction1 >= 0) products = {{f.contraction, "acc0"}, {f.contraction1, "acc1"}};
    for (const GemmRowSum& r : f.row_sums) products[r.node] = d_.node(r.node).name.empty() ? "rowsum" : d_.node(r.node).name;
    f.epilogue_text = EpilogueText(d_, products, cone_).text(f.output);
    for (const GemmRowSum& r : f.row_sums) {
      std::set<NodeId> code;
      for (NodeId n = 0; n <= r.node; ++n) code.insert(n);
      std::vector<std::string> factors;
      for (NodeId x : r.factors) factors.push_back(EpilogueText(d_, {{f.prologue_a >= 0 ? f.prologue_a : f.a, "A"}}, code).text(x));
      std::vector<std::string> over;
      for (AxisId a : f.k) over.push_back(d_.axis(a).name);
      f.row_sums_text += fmt::format("{}{} = sum({} over {})", f.row_sums_text.empty() ? "" : ", ", d_.node(r.node).name,
                                     fmt::join(factors, " * "), fmt::join(over, " "));
    }
    for (NodeId p : {f.prologue_a, f.prologue_b})
      if (p >= 0) {
        std::set<NodeId> code;
        for (NodeId n = 0; n <= p; ++n) code.insert(n);
        f.prologue_text += fmt::format("{}{} = {}", f.prologue_text.empty() ? "" : ", ", p == f.prologue_a ? "A" : "B",
                                       EpilogueText(d_, {}, code).text(p));
      }
    return GemmForm{};
  }

  Result<GemmForm> add_leaf(GemmForm& f, NodeId n) {
    const Node& x = d_.node(n);
    if (cutlass_type(x.dtype) == nullptr)
      return refuse(x.loc, fmt::format("epilogue input '{}' is {}: the epilogue reads bf16, f16, f32 or f64 inputs", x.name,
                                       dtype_name(x.dtype)));
    int count[5] = {};
    for (AxisId a : x.axes) ++count[class_of(a)];
    auto all_or_none = [&](int k) { return count[k] == 0 || count[k] == static_cast<int>(classes_[k]->size()); };
    GemmLeaf leaf{n, GemmLeaf::Kind::scalar};
    if (count[kK] > 0 || count[kNone] > 0)  // cannot happen in a verified diagram whose output passed classify_axes
      return refuse(x.loc, fmt::format("epilogue input '{}' has a contracted axis", x.name));
    if (!all_or_none(kL))
      return refuse(x.loc, fmt::format("epilogue input '{}' {} has some of the batch axes {}: it needs all or none of them",
                                       x.name, axes_text(d_, x.axes), axes_text(d_, f.l)));
    const bool m_all = count[kM] == static_cast<int>(f.m.size()), n_all = count[kN] == static_cast<int>(f.n.size());
    if (count[kM] == 0 && count[kN] == 0) leaf.kind = GemmLeaf::Kind::scalar;
    else if (count[kN] == 0 && m_all) leaf.kind = GemmLeaf::Kind::row_vector;
    else if (count[kM] == 0 && n_all) leaf.kind = GemmLeaf::Kind::col_vector;
    else if (m_all && n_all) leaf.kind = GemmLeaf::Kind::tensor;
    else
      return refuse(x.loc, fmt::format("epilogue input '{}' {} has part of the M axes {} or of the N axes {}: an epilogue "
                                       "input has all or none of each",
                                       x.name, axes_text(d_, x.axes), axes_text(d_, f.m), axes_text(d_, f.n)));
    // A TMA load would read one [m n] slice for every batch through a zero batch stride, which
    // the tensor map's strides are not documented to allow.
    if (leaf.kind == GemmLeaf::Kind::tensor && !f.l.empty() && count[kL] == 0)
      return refuse(x.loc, fmt::format("epilogue input '{}' {} is over M and N but not the batch axes {}: a tensor leaf is "
                                       "loaded by TMA over all of the output's axes",
                                       x.name, axes_text(d_, x.axes), axes_text(d_, f.l)));
    f.leaves.push_back(leaf);
    return GemmForm{};
  }

  // Every tensor's axes of one class are adjacent and in the class's order; its innermost
  // axis is of a class it may be contiguous along.
  std::string layout_error(const std::string& what, const std::vector<AxisId>& order, std::initializer_list<Class> inner_ok,
                           const char* inner_why) const {
    for (int k = 0; k < 4; ++k) {
      std::vector<AxisId> seen;
      std::vector<std::size_t> at;
      for (std::size_t i = 0; i < order.size(); ++i)
        if (class_of(order[i]) == k) seen.push_back(order[i]), at.push_back(i);
      if (seen.empty()) continue;
      if (at.back() - at.front() + 1 != at.size())
        return fmt::format("{} {}: its {} axes {} are not adjacent, so they cannot be one GEMM mode", what,
                           axes_text(d_, order), kClassName[k], axes_text(d_, seen));
      if (seen != *classes_[k])
        return fmt::format("{} {}: its {} axes are in the order {}, {} has {}; a GEMM mode flattens them in one order", what,
                           axes_text(d_, order), kClassName[k], axes_text(d_, seen), k == kN ? "B" : "A",
                           axes_text(d_, *classes_[k]));
    }
    const Class inner = class_of(order.back());
    if (std::find(inner_ok.begin(), inner_ok.end(), inner) == inner_ok.end())
      return fmt::format("{} {}: its innermost axis {} is of class {}; {}", what, axes_text(d_, order),
                         d_.axis(order.back()).name, inner == kNone ? "none" : kClassName[inner], inner_why);
    return "";
  }

  Result<GemmForm> check_layouts(GemmForm& f) {
    const Node& A = d_.node(f.a);
    const Node& B = d_.node(f.b);
    const char* tma = "TMA needs unit stride along M, N or K";
    if (auto e = layout_error(fmt::format("A '{}'", A.name), A.axes, {kM, kK}, tma); !e.empty()) return refuse(A.loc, e);
    if (auto e = layout_error(fmt::format("B '{}'", B.name), B.axes, {kN, kK}, tma); !e.empty()) return refuse(B.loc, e);
    if (auto e = layout_error(output_label(f.output), f.out_axes, {kM, kN}, tma); !e.empty())
      return refuse(out_loc_, e);
    f.a_k_major = class_of(A.axes.back()) == kK;
    f.b_k_major = class_of(B.axes.back()) == kK;
    f.out_n_major = class_of(f.out_axes.back()) == kN;
    for (const GemmLeaf& leaf : f.leaves) {
      const Node& x = d_.node(leaf.node);
      if (x.axes.empty()) continue;
      const std::string what = fmt::format("epilogue input '{}'", x.name);
      std::string e;
      switch (leaf.kind) {
        case GemmLeaf::Kind::scalar: e = layout_error(what, x.axes, {kL}, ""); break;
        case GemmLeaf::Kind::row_vector:
          e = layout_error(what, x.axes, {kM}, "a row vector is read with unit stride along M");
          break;
        case GemmLeaf::Kind::col_vector:
          e = layout_error(what, x.axes, {kN}, "a column vector is read with unit stride along N");
          break;
        case GemmLeaf::Kind::tensor: e = layout_error(what, x.axes, {kM, kN}, tma); break;
      }
      if (!e.empty()) return refuse(x.loc, e);
    }
    return GemmForm{};
  }

  // "the output 'C'", or "the output of the 'contract' at 5:5" for a value the source left unnamed.
  std::string output_label(NodeId out) const {
    const std::string label = d_.label(out);
    return label.rfind("the ", 0) == 0 ? "the output of " + label : "the output " + label;
  }

  const ir::Diagram& d_;
  const SourceText& src_;
  SourceLoc out_loc_;
  std::array<const std::vector<AxisId>*, 4> classes_{};
  std::set<NodeId> cone_;
};

// The role letters of `order`'s dims.
std::string roles(const GemmForm& f, const std::vector<AxisId>& order) {
  const std::vector<AxisId>* classes[4] = {&f.m, &f.n, &f.k, &f.l};
  std::string r;
  for (AxisId a : order)
    for (int k = 0; k < 4; ++k) {
      auto it = std::find(classes[k]->begin(), classes[k]->end(), a);
      if (it != classes[k]->end()) r += kRoleLetters[k][it - classes[k]->begin()];
    }
  return r;
}

// `{d0, d1}`: the dims of `order` in class `axes` (adjacent, outermost first).
std::string dims_of(const std::vector<AxisId>& order, const std::vector<AxisId>& axes) {
  std::vector<int> dims;
  for (std::size_t i = 0; i < order.size(); ++i)
    if (contains(axes, order[i])) dims.push_back(static_cast<int>(i));
  return fmt::format("{{{}}}", fmt::join(dims, ", "));
}

}  // namespace

Result<GemmForm> recognise_gemm(const ir::Diagram& d, const SourceText& src) { return Recogniser(d, src).run(); }

std::string describe_gemm(const GemmForm& f) {
  if (!f.folds.empty())
    return fmt::format("gemm {}x{} folded over N -> {}; {}; {} input{} besides A and B{}", f.a_text, f.b_text, f.out_text,
                       f.epilogue_text, f.fold_inputs.size(), f.fold_inputs.size() == 1 ? "" : "s",
                       f.params.empty() ? "" : fmt::format(", {} param{}", f.params.size(), f.params.size() == 1 ? "" : "s"));
  if (f.contraction1 >= 0)
    return fmt::format("dual gemm {}x{} for both B operands -> {}; epilogue: {}{}", f.a_text, f.b_text, f.out_text,
                       f.epilogue_text, f.params.empty() ? "" : fmt::format("; {} param{}", f.params.size(), f.params.size() == 1 ? "" : "s"));
  std::string inputs = f.leaves.empty() ? "no aux input" : fmt::format("{} aux input{}", f.leaves.size(), f.leaves.size() == 1 ? "" : "s");
  if (!f.params.empty()) inputs += fmt::format(", {} param{}", f.params.size(), f.params.size() == 1 ? "" : "s");
  std::string prologue = f.prologue_text.empty() ? "" : fmt::format("; prologue: {}", f.prologue_text);
  if (!f.row_sums_text.empty()) prologue += fmt::format("; row sums: {}", f.row_sums_text);
  return fmt::format("gemm {}x{} -> {}{}; epilogue: {}; {}", f.a_text, f.b_text, f.out_text, prologue, f.epilogue_text, inputs);
}

namespace {

// An epilogue whose value is stored as bf16 or f16 computes its exp, log and divisions by the
// SFU's approximations (expression::Writer::approximate_transcendentals says why that is exact
// enough).
bool rounded_to_half(DType out) { return out == DType::bf16 || out == DType::f16; }

// The unit's head: provenance, the include, the anonymous namespace, and a line naming the modes
// and each tensor's major mode (`b_names`: how the B operands are named in it).
std::string unit_head(const ir::Diagram& d, const GemmForm& f, const plan::GemmSchedule& s, const KernelProvenance& prov,
                      const char* header, const char* schedule_note, const std::string& b_names) {
  auto names = [&](const std::vector<AxisId>& v) {
    std::vector<std::string> n;
    for (AxisId a : v) n.push_back(d.axis(a).name);
    return v.empty() ? std::string("-") : fmt::format("{}", fmt::join(n, " "));
  };
  std::string out = fmt::format(
      "// SPDX-License-Identifier: Apache-2.0\n"
      "// Generated by napkin {} from {} ({}). Do not edit: `napkin build` writes it.\n"
      "// {}\n// {}\n// schedule: {}{}\n"
      "#include \"{}\"\n\nnamespace {{\n\n",
      prov.napkin_version, prov.source_name, prov.diagram_key, prov.derived, describe_gemm(f), plan::gemm_schedule_text(s),
      schedule_note, header);
  const std::string written = f.folds.empty() ? fmt::format("D {}{} {}-major", d.node(f.output).name, f.out_text, f.out_n_major ? "N" : "M")
                                              : "folded over N into " + f.out_text;
  out += fmt::format("// M = {}, N = {}, K = {}, L = {}: A {}{} {}-major, {}{} {}-major, {}.\n", names(f.m), names(f.n), names(f.k),
                     names(f.l), d.node(f.a).name, f.a_text, f.a_k_major ? "K" : "M", b_names, f.b_text, f.b_k_major ? "K" : "N",
                     written);
  return out;
}

// The diagram's params as a struct of kernel arguments (the diagram's values by default), and
// their binding in the entry (TensorBinder::param); "" without params.
std::string params_struct(const ir::Diagram& d, const GemmForm& f) {
  if (f.params.empty()) return "";
  std::string out = "// The diagram's params: kernel arguments, the diagram's values by default.\nstruct Params {\n";
  for (NodeId p : f.params) out += fmt::format("  float {} = {};\n", d.node(p).name, expression::literal(d.node(p).scalar));
  return out + "};\n\n";
}
std::string params_binding(const ir::Diagram& d, const GemmForm& f) {
  if (f.params.empty()) return "";
  std::string out = "  Params params;\n";
  for (NodeId p : f.params)
    out += fmt::format("  params.{0} = static_cast<float>(tb.param(\"{0}\", {1}));\n", d.node(p).name, ir::format_number(d.node(p).scalar));
  return out;
}

// The entry's alignment checks of A and B (TMA's rules, whole 16-byte rows).
std::string ab_checks(const GemmForm& f, const Node& A, const Node& B) {
  std::string out = fmt::format("  s.tma(A, \"{}\", {}, \"{}\", {{{}, al}}, true);\n", A.name, f.a_k_major ? "ak" : "am",
                                f.a_k_major ? "K" : "M", f.a_k_major ? "am" : "ak");
  return out + fmt::format("  s.tma(B, \"{}\", {}, \"{}\", {{{}, bl}}, true);\n", B.name, f.b_k_major ? "bk" : "bn",
                           f.b_k_major ? "K" : "N", f.b_k_major ? "bn" : "bk");
}

// The entry's alignment checks of A, B and D (TMA's rules):
// `d_whole_rows` where D's contiguous extent must be whole 16-byte rows too (a TMA store).
std::string operand_checks(const GemmForm& f, const Node& A, const Node& B, const Node& Y, bool d_whole_rows) {
  return ab_checks(f, A, B) + fmt::format("  s.tma(D, \"{}\", {}, \"{}\", {{{}, dl}}, {});\n", Y.name, f.out_n_major ? "dn" : "dm",
                           f.out_n_major ? "N" : "M", f.out_n_major ? "dm" : "dn", d_whole_rows);
}

// The entry's line binding tensor `x` (stored in `order`) as `var`, by name, dtype and role letters.
std::string bind_line(const GemmForm& f, const std::string& var, const Node& x, const std::vector<AxisId>& order) {
  return fmt::format("  const napkin_tensor* {} = tb.bind(\"{}\", {}, \"{}\");\n", var, x.name, abi_dtype(x.dtype), roles(f, order));
}

// The entry's lines binding the epilogue's leaves as X1, X2, ...
std::string leaf_bindings(const ir::Diagram& d, const GemmForm& f) {
  std::string out;
  for (std::size_t i = 0; i < f.leaves.size(); ++i) {
    const Node& x = d.node(f.leaves[i].node);
    out += bind_line(f, fmt::format("X{}", i + 1), x, x.axes);
  }
  return out;
}

// The entry's line flattening tensor `t`'s dims of class `cls` into the GEMM mode `var` (an
// absent mode where it has none of them).
std::string mode_line(const std::string& var, const char* t, const std::string& name, const std::vector<AxisId>& order,
                      const std::vector<AxisId>& cls, const char* cls_name) {
  if (!std::any_of(order.begin(), order.end(), [&](AxisId a) { return contains(cls, a); }))
    return fmt::format("  const napkin::gemm::Mode {};\n", var);
  return fmt::format("  const napkin::gemm::Mode {} = s.mode({}, \"{}\", \"{}\", {});\n", var, t, name, cls_name, dims_of(order, cls));
}

// mode_line for each class letter of `classes` ("mkl": M, K, L), named prefix + letter.
std::string mode_lines(const GemmForm& f, const std::string& prefix, const char* t, const Node& x, const std::vector<AxisId>& order,
                       const char* classes) {
  std::string out;
  for (const char* c = classes; *c != '\0'; ++c) {
    const std::vector<AxisId>& cls = *c == 'm' ? f.m : *c == 'n' ? f.n : *c == 'k' ? f.k : f.l;
    const char name[2] = {static_cast<char>(*c - 'a' + 'A'), '\0'};
    out += mode_line(prefix + *c, t, x.name, order, cls, name);
  }
  return out;
}

// Config's trailing scheduler arguments (kStreamK, kRasterAlongN), written only where set.
std::string scheduler_arguments(const plan::GemmSchedule& s) {
  return s.raster_along_n ? fmt::format(", {}, true", s.stream_k) : s.stream_k ? ", true" : "";
}

// The unit's `using Config = napkin::gemm::Config<...>` for the schedule, D's element and layout.
std::string config_line(const GemmForm& f, const plan::GemmSchedule& s, const char* element_d, bool d_n_major) {
  return fmt::format(
      "using Config = napkin::gemm::Config<{0}, {1}, cutlass::layout::{2}, cutlass::layout::{3}, cutlass::layout::{4},\n"
      "                                    {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}{13}>;\n",
      cutlass_type(f.element), element_d, f.a_k_major ? "RowMajor" : "ColumnMajor", f.b_k_major ? "ColumnMajor" : "RowMajor",
      d_n_major ? "RowMajor" : "ColumnMajor", s.tile_m, s.tile_n, s.tile_k, s.cluster_m, s.cluster_n, s.stages,
      s.pingpong ? "true" : "false", s.swizzle, scheduler_arguments(s));
}

// Fields of an Arguments struct for code over tensors through their strides (expression::Writer
// reads an input x as a.x[i_t * a.s_x_t + ...]): every M, N and L axis's extent, each tensor's
// pointer and strides in `order`, the params.
std::string strided_arguments(const ir::Diagram& d, const GemmForm& f, const std::vector<std::pair<NodeId, std::vector<AxisId>>>& tensors,
                              bool outputs_too) {
  std::string args = "  struct Arguments {\n";
  for (const std::vector<AxisId>* cls : {&f.m, &f.n, &f.l})
    for (AxisId a : *cls) args += fmt::format("    int64_t extent_{}_ = 1;\n", d.axis(a).name);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Node& x = d.node(tensors[i].first);
    const bool output = outputs_too && x.op != OpKind::input;
    args += fmt::format("    {}{}* {} = nullptr;  // {}{}\n", output ? "" : "const ", expression::memory_type(x.dtype), x.name, x.name,
                        axes_text(d, tensors[i].second));
    for (AxisId a : tensors[i].second) args += fmt::format("    int64_t s_{}_{} = 0;\n", x.name, d.axis(a).name);
  }
  for (NodeId p : f.params) args += fmt::format("    float {} = {};\n", d.node(p).name, expression::literal(d.node(p).scalar));
  return args + "  };\n";
}

// A class's flat index (`flat`) as the indices i_<axis> of its axes, outermost first (unused ones
// are dead code).
std::string class_indices(const ir::Diagram& d, const std::vector<AxisId>& cls, const char* flat) {
  std::string code;
  std::string rest = flat;
  for (std::size_t i = cls.size(); i-- > 0;) {
    const std::string name = d.axis(cls[i]).name;
    if (i == 0) code += fmt::format("    const int64_t i_{} = {};\n", name, rest);
    else code += fmt::format("    const int64_t i_{0} = {1} % a.extent_{0}_;\n", name, rest);
    rest = fmt::format("{} / a.extent_{}_", i == cls.size() - 1 ? std::string(flat) : "(" + rest + ")", name);
  }
  return code;
}

// The entry's lines filling `var`, a strided_arguments struct: each tensor bound by name, the
// params; then (after the binder's error check) the extents.
std::string strided_bindings(const ir::Diagram& d, const GemmForm& f, const std::string& var,
                             const std::vector<std::pair<NodeId, std::vector<AxisId>>>& tensors, bool outputs_too) {
  std::string out;
  for (const auto& [n, order] : tensors) {
    const Node& x = d.node(n);
    const bool output = outputs_too && x.op != OpKind::input;
    out += fmt::format("  if (const napkin_tensor* t = tb.bind(\"{}\", {}, \"{}\")) {{\n", x.name, abi_dtype(x.dtype), roles(f, order));
    out += fmt::format("    {}.{} = static_cast<{}{}*>(t->data);\n", var, x.name, output ? "" : "const ", expression::memory_type(x.dtype));
    for (std::size_t i = 0; i < order.size(); ++i) out += fmt::format("    {}.s_{}_{} = t->strides[{}];\n", var, x.name, d.axis(order[i]).name, i);
    out += "  }\n";
  }
  for (NodeId p : f.params)
    out += fmt::format("  {0}.{1} = static_cast<float>(tb.param(\"{1}\", {2}));\n", var, d.node(p).name, ir::format_number(d.node(p).scalar));
  return out;
}
std::string strided_extents(const ir::Diagram& d, const GemmForm& f, const std::string& var) {
  std::string out;
  const std::vector<AxisId>* classes[4] = {&f.m, &f.n, &f.k, &f.l};
  for (int k : {0, 1, 3})
    for (std::size_t i = 0; i < classes[k]->size(); ++i)
      out += fmt::format("  {}.extent_{}_ = tb.size('{}');\n", var, d.axis((*classes[k])[i]).name, kRoleLetters[k][i]);
  return out;
}

// The dual GEMM's translation unit: the diagram's epilogue as the Combine functor of
// napkin::gemm::DualKernel, and an entry that checks both B operands against each other.
std::string emit_dual_gemm_kernel(const ir::Diagram& d, const GemmForm& f, const plan::GemmSchedule& s,
                                  const KernelProvenance& prov, const std::string& entry_name) {
  const Node& A = d.node(f.a);
  const Node& B0 = d.node(f.b);
  const Node& B1 = d.node(f.b1);
  const Node& Y = d.node(f.output);
  std::string out = unit_head(d, f, s, prov, "napkin/gemm_dual.h", " (the tile's N per product)",
                              fmt::format("B0 {} and B1 {}", B0.name, B1.name));
  out += fmt::format(
      "// The WGMMA tile's N covers both products: {} columns of B0, then the same {} of B1.\n"
      "using Config = napkin::gemm::Config<{}, {}, cutlass::layout::{}, cutlass::layout::{}, cutlass::layout::{},\n"
      "                                    {}, {}, {}, 1, 1, {}, {}, {}{}>;\n\n",
      s.tile_n, s.tile_n, cutlass_type(f.element), cutlass_type(f.out_dtype), f.a_k_major ? "RowMajor" : "ColumnMajor",
      f.b_k_major ? "ColumnMajor" : "RowMajor", f.out_n_major ? "RowMajor" : "ColumnMajor", s.tile_m, 2 * s.tile_n, s.tile_k,
      s.stages, s.pingpong ? "true" : "false", s.swizzle, scheduler_arguments(s));
  std::vector<std::pair<NodeId, std::vector<AxisId>>> leaves;
  for (const GemmLeaf& leaf : f.leaves) leaves.emplace_back(leaf.node, d.node(leaf.node).axes);
  std::map<NodeId, std::string> known{{f.contraction, "acc0"}, {f.contraction1, "acc1"}};
  expression::Writer w(d, known);
  if (rounded_to_half(f.out_dtype)) w.approximate_transcendentals();
  std::string body;
  const std::string result = w.value(f.output, body, "    ");
  out += fmt::format("// The diagram's epilogue on the two products, in f32: acc0 = contract({}, {}), acc1 = contract({}, {}), at\n"
                     "// the element's flat GEMM coordinates (m, n, l), which index the inputs it reads.\n",
                     A.name, B0.name, A.name, B1.name);
  out += "struct Combine {\n" + strided_arguments(d, f, leaves, false);
  out += "  CUTLASS_DEVICE float operator()(float acc0, float acc1, int64_t m, int64_t n, int64_t l, Arguments const& a) const {\n";
  out += "    (void)m, (void)n, (void)l, (void)a;\n";
  out += class_indices(d, f.m, "m") + class_indices(d, f.n, "n") + class_indices(d, f.l, "l");
  out += body + fmt::format("    return {};\n  }}\n}};\n\n", result);
  out += "using Kernel = napkin::gemm::DualKernel<Config, Combine>;\n\n}  // namespace\n\n";

  out += fmt::format("extern \"C\" int32_t {}(const napkin_tensor* tensors, int32_t count, void* stream, char* err, int32_t err_len) {{\n",
                     entry_name);
  out += "  napkin::TensorBinder tb(tensors, count);\n";
  out += bind_line(f, "A", A, A.axes) + bind_line(f, "B0", B0, B0.axes) + bind_line(f, "B1", B1, B1.axes) +
         bind_line(f, "D", Y, f.out_axes);
  out += "  Combine::Arguments combine{};\n" + strided_bindings(d, f, "combine", leaves, false);
  out += "  if (!tb.error().empty()) return napkin::host::fail(tb.error(), err, err_len);\n";
  out += strided_extents(d, f, "combine");
  out += "  napkin::gemm::Modes s;  // each tensor's dims as GEMM modes; the first error\n";
  out += mode_lines(f, "a", "A", A, A.axes, "mkl") + mode_lines(f, "b0", "B0", B0, B0.axes, "nkl") +
         mode_lines(f, "b1", "B1", B1, B1.axes, "nkl") + mode_lines(f, "d", "D", Y, f.out_axes, "mnl");
  out += fmt::format("  s.tma(A, \"{}\", {}, \"{}\", {{{}, al}}, true);\n", A.name, f.a_k_major ? "ak" : "am", f.a_k_major ? "K" : "M",
                     f.a_k_major ? "am" : "ak");
  out += fmt::format("  s.tma(B0, \"{}\", {}, \"{}\", {{{}, b0l}}, true);\n", B0.name, f.b_k_major ? "b0k" : "b0n",
                     f.b_k_major ? "K" : "N", f.b_k_major ? "b0n" : "b0k");
  out += "  if (!s.error().empty()) return napkin::host::fail(s.error(), err, err_len);\n";
  out += fmt::format(
      "  // D is written from registers (any strides); any N and any {0} (napkin::gemm::run_dual: a copy where one descriptor cannot read it beside {1}).\n"
      "  const std::string e = napkin::gemm::run_dual<Kernel>(A->data, am, ak, al, B0->data, B1->data, b0n, b0k, b0l, b1n, b1k, b1l,\n"
      "                                                     D->data, dm, dn, dl, combine, static_cast<cudaStream_t>(stream),\n"
      "                                                     Config::kSwizzle);\n"
      "  return e.empty() ? 0 : napkin::host::fail(e, err, err_len);\n}}\n",
      B1.name, B0.name);
  return out;
}

// The diagram's epilogue as the functor Epilogue<T> over fragments of N accumulator values
// (`known`: how the accumulator and the leaves are named in it; `params_list`: its parameters).
std::string epilogue_functor(const ir::Diagram& d, const GemmForm& f, const std::map<NodeId, std::string>& known,
                             const std::string& params_list) {
  expression::Writer w(d, known);
  if (rounded_to_half(f.out_dtype)) w.approximate_transcendentals();
  std::string body;
  const std::string result = w.value(f.output, body, "      ");
  std::string out = "// The diagram's epilogue on fragments of the accumulator (acc) and the leaves (x1...), in f32.\n"
                    "template <class T>\nstruct Epilogue {\n";
  if (!f.params.empty()) out += "  using Arguments = Params;\n";
  out += fmt::format("  template <int N>\n  CUTLASS_DEVICE cutlass::Array<float, N> operator()({}) const {{\n"
                     "    cutlass::Array<float, N> out;\n    CUTLASS_PRAGMA_UNROLL\n    for (int i = 0; i < N; ++i) {{\n",
                     params_list);
  return out + body + fmt::format("      out[i] = {};\n    }}\n    return out;\n  }}\n}};\n\n", result);
}

// The operand's prologue functor: the diagram's code from the input's element `x` to the operand,
// in f32, rounded to the operand dtype for the tensor cores; cute::identity where it has none.
std::string prologue_functor(const ir::Diagram& d, const GemmForm& f, NodeId input, NodeId operand, const char* name) {
  if (operand < 0) return "";
  expression::Writer w(d, {{input, "x"}});
  w.approximate_transcendentals();  // rounded to the operand dtype below
  std::string body;
  const std::string result = w.value(operand, body, "    ");
  const char* t = cutlass_type(f.element);
  return fmt::format("// The operand {} computed from each element of {} as it loads, in f32 (exp and log by the SFU's\n"
                     "// approximations), rounded for the tensor cores.\n"
                     "struct {} {{\n"
                     "  CUTLASS_DEVICE {} operator()({} element) const {{\n    const float x = static_cast<float>(element);\n{}"
                     "    return {}({});\n  }}\n}};\n\n",
                     d.label(operand), d.node(input).name, name, t, t, body, t, result);
}

// The row sums the epilogue divides by, each with its reciprocal's slot in the row's values
// (after the sums): computed once a row by RowSums::finish, multiplied per element.
std::vector<std::pair<std::size_t, int>> reciprocal_slots(const ir::Diagram& d, const GemmForm& f) {
  std::vector<std::pair<std::size_t, int>> out;
  for (std::size_t j = 0; j < f.row_sums.size(); ++j)
    if (std::any_of(d.nodes.begin(), d.nodes.end(), [&](const Node& x) { return x.op == OpKind::div && x.operands[1] == f.row_sums[j].node; }))
      out.emplace_back(j, static_cast<int>(f.row_sums.size() + out.size()));
  return out;
}

// The prologue GEMM's epilogue (napkin/gemm_prologue.h): the diagram's code on one accumulator
// value at its output coordinates (m, n, l) and its row's row sums, its leaves read at them
// through their strides along the GEMM's modes (0 along a mode a leaf lacks: a bias, a row scale,
// a scalar), in f32.
std::string prologue_epilogue_functor(const ir::Diagram& d, const GemmForm& f) {
  std::map<NodeId, std::string> known{{f.contraction, "acc"}};
  for (std::size_t j = 0; j < f.row_sums.size(); ++j) known[f.row_sums[j].node] = fmt::format("rows[{}]", j);
  std::string args = "// What the epilogue reads besides the accumulator: each leaf, with its strides along M, N and L.\n";
  args += f.params.empty() ? "struct EpilogueArguments {\n" : "struct EpilogueArguments : Params {\n";
  std::string loads;
  for (std::size_t i = 0; i < f.leaves.size(); ++i) {
    const Node& x = d.node(f.leaves[i].node);
    const std::string v = fmt::format("x{}", i + 1);
    args += fmt::format("  const {}* {} = nullptr;\n  int64_t {}_m = 0, {}_n = 0, {}_l = 0;  // {}{}\n", cutlass_type(x.dtype), v, v, v, v,
                        x.name, axes_text(d, x.axes));
    loads += fmt::format("    const float {0} = static_cast<float>(a.{0}[m * a.{0}_m + n * a.{0}_n + l * a.{0}_l]);\n", v);
    known[f.leaves[i].node] = v;
  }
  args += "};\n\n";
  expression::Writer w(d, known);
  if (rounded_to_half(f.out_dtype)) w.approximate_transcendentals();
  for (auto [j, slot] : reciprocal_slots(d, f)) w.divide_by_reciprocal(f.row_sums[j].node, fmt::format("rows[{}]", slot));
  std::string body;
  const std::string result = w.value(f.output, body, "    ");
  return args + "// The diagram's epilogue on one accumulator value at output coordinates (m, n, l) and its row's\n"
                "// row sums (rows), in f32.\n"
                "template <class T>\nstruct Epilogue {\n  using Arguments = EpilogueArguments;\n"
                "  CUTLASS_DEVICE float operator()(float acc, int64_t m, int64_t n, int64_t l, Arguments const& a, const float* rows) const {\n" +
         (loads.empty() ? std::string("    (void)m, (void)n, (void)l, (void)a;\n") : loads) + (f.row_sums.empty() ? "    (void)rows;\n" : "") + body +
         fmt::format("    return {};\n  }}\n}};\n\n", result);
}

// The row sums of A' (napkin/gemm_prologue.h's RowSums): each summand in f32 from the element `a`
// at (k, l), its inputs read through their strides along K and L, and the stores of those that are
// outputs of the kernel. "" without row sums.
std::string row_sums_functor(const ir::Diagram& d, const GemmForm& f) {
  if (f.row_sums.empty()) return "";
  std::map<NodeId, std::string> known{{f.prologue_a >= 0 ? f.prologue_a : f.a, "a"}};
  std::string args = "  struct Arguments {\n", loads;
  for (std::size_t i = 0; i < f.sum_leaves.size(); ++i) {
    const Node& x = d.node(f.sum_leaves[i]);
    const std::string v = fmt::format("w{}", i + 1);
    args += fmt::format("    const {}* {} = nullptr;\n    int64_t {}_k = 0, {}_l = 0;  // {}{}\n", cutlass_type(x.dtype), v, v, v, x.name,
                        axes_text(d, x.axes));
    loads += fmt::format("    const float {0} = static_cast<float>(g.{0}[k * g.{0}_k + l * g.{0}_l]);\n", v);
    known[f.sum_leaves[i]] = v;
  }
  expression::Writer w(d, known);
  std::string body, adds, stores;
  for (std::size_t j = 0; j < f.row_sums.size(); ++j) {
    const GemmRowSum& r = f.row_sums[j];
    std::vector<std::string> factors;
    for (NodeId x : r.factors) factors.push_back(w.value(x, body, "    "));
    adds += fmt::format("    sums[{}] += {};  // {}\n", j, fmt::join(factors, " * "), d.label(r.node));
    if (r.out_axes.empty()) continue;
    const Node& x = d.node(r.node);
    const std::string v = fmt::format("r{}", j + 1);
    args += fmt::format("    {}* {} = nullptr;\n    int64_t {}_m = 0, {}_l = 0;  // {}{}\n", cutlass_type(x.dtype), v, v, v, x.name,
                        axes_text(d, r.out_axes));
    stores += fmt::format("    g.{0}[m * g.{0}_m + l * g.{0}_l] = {1}(sums[{2}]);\n", v, cutlass_type(x.dtype), j);
  }
  std::string finish;  // reciprocals of the sums the epilogue divides by (within 1.5 ulp of the quotient, then rounded)
  const auto slots = reciprocal_slots(d, f);
  for (auto [j, slot] : slots) finish += fmt::format("    rows[{}] = 1.0f / rows[{}];\n", slot, j);
  return fmt::format(
      "// The row sums of A as the WGMMAs read it (a): each summand in f32 at (k, l), the inputs it reads\n"
      "// through their strides along K and L; finish() adds the reciprocals the epilogue multiplies by;\n"
      "// store() writes the sums that are outputs of the kernel.\n"
      "struct RowSums {{\n  static constexpr int kCount = {}, kSlots = {};\n{}  }};\n"
      "  template <class Sums>\n"
      "  CUTLASS_DEVICE void add(Sums& sums, float a, int64_t k, int64_t l, Arguments const& g) const {{\n{}{}{}{}  }}\n"
      "  CUTLASS_DEVICE void finish(float* rows) const {{\n{}  }}\n"
      "  CUTLASS_DEVICE void store(const float* sums, int64_t m, int64_t l, Arguments const& g) const {{\n{}{}  }}\n}};\n\n",
      f.row_sums.size(), f.row_sums.size() + slots.size(), args, loads.empty() ? "    (void)k, (void)l, (void)g;\n" : "", loads, body,
      adds, finish.empty() ? "    (void)rows;\n" : finish, stores.empty() ? "    (void)sums, (void)m, (void)l, (void)g;\n" : "", stores);
}

// The prologue GEMM's translation unit (napkin/gemm_prologue.h): the operands' code as the
// mainloop's transforms, the epilogue over the accumulator and its leaves, and an entry that
// checks the operands and the output as TMA needs them.
std::string emit_prologue_gemm_kernel(const ir::Diagram& d, const GemmForm& f, const plan::GemmSchedule& s,
                                      const KernelProvenance& prov, const std::string& entry_name) {
  const Node& A = d.node(f.a);
  const Node& B = d.node(f.b);
  const Node& Y = d.node(f.output);
  std::string out = unit_head(d, f, s, prov, "napkin/gemm_prologue.h", "", "B " + B.name);
  out += fmt::format("using Config = napkin::gemm::PrologueConfig<{}, {}, {}, {}, {}, {}, {}, {}, {}>;\n\n", cutlass_type(f.element),
                     cutlass_type(f.out_dtype), f.a_k_major, f.b_k_major, f.out_n_major, s.tile_m, s.tile_n, s.stages, s.warpgroups);
  out += prologue_functor(d, f, f.a, f.prologue_a, "PrologueA") + prologue_functor(d, f, f.b, f.prologue_b, "PrologueB");
  out += params_struct(d, f) + prologue_epilogue_functor(d, f) + row_sums_functor(d, f);
  out += fmt::format("using Kernel = napkin::gemm::PrologueKernel<Config, {}, {}, Epilogue{}>;\n\n}}  // namespace\n\n",
                     f.prologue_a >= 0 ? "PrologueA" : "cute::identity", f.prologue_b >= 0 ? "PrologueB" : "cute::identity",
                     f.row_sums.empty() ? "" : ", RowSums");
  out += fmt::format("extern \"C\" int32_t {}(const napkin_tensor* tensors, int32_t count, void* stream, char* err, int32_t err_len) {{\n",
                     entry_name);
  out += "  napkin::TensorBinder tb(tensors, count);\n";
  out += bind_line(f, "A", A, A.axes) + bind_line(f, "B", B, B.axes) + bind_line(f, "D", Y, f.out_axes);
  out += leaf_bindings(d, f);
  for (std::size_t i = 0; i < f.sum_leaves.size(); ++i)
    out += bind_line(f, fmt::format("W{}", i + 1), d.node(f.sum_leaves[i]), d.node(f.sum_leaves[i]).axes);
  for (std::size_t j = 0; j < f.row_sums.size(); ++j)
    if (!f.row_sums[j].out_axes.empty()) out += bind_line(f, fmt::format("R{}", j + 1), d.node(f.row_sums[j].node), f.row_sums[j].out_axes);
  out += params_binding(d, f);
  out += "  if (!tb.error().empty()) return napkin::host::fail(tb.error(), err, err_len);\n";
  out += "  napkin::gemm::Modes s;  // each tensor's dims as GEMM modes; the first error\n";
  out += mode_lines(f, "a", "A", A, A.axes, "mkl") + mode_lines(f, "b", "B", B, B.axes, "nkl") +
         mode_lines(f, "d", "D", Y, f.out_axes, "mnl");
  std::string sums = f.row_sums.empty() ? "" : "  Kernel::RowSums::Arguments sums{};\n";
  for (std::size_t i = 0; i < f.sum_leaves.size(); ++i) {
    const Node& x = d.node(f.sum_leaves[i]);
    const std::string t = fmt::format("W{}", i + 1), v = fmt::format("w{}", i + 1);
    out += mode_lines(f, v, t.c_str(), x, x.axes, "kl");
    sums += fmt::format("  sums.{0} = static_cast<const {1}*>({2}->data);\n  sums.{0}_k = {0}k.stride, sums.{0}_l = {0}l.stride;\n", v,
                        cutlass_type(x.dtype), t);
  }
  for (std::size_t j = 0; j < f.row_sums.size(); ++j) {
    const GemmRowSum& r = f.row_sums[j];
    if (r.out_axes.empty()) continue;
    const Node& x = d.node(r.node);
    const std::string t = fmt::format("R{}", j + 1), v = fmt::format("r{}", j + 1);
    out += mode_lines(f, v, t.c_str(), x, r.out_axes, "ml");
    sums += fmt::format("  sums.{0} = static_cast<{1}*>({2}->data);\n  sums.{0}_m = {0}m.stride, sums.{0}_l = {0}l.stride;\n", v,
                        cutlass_type(x.dtype), t);
  }
  std::string epilogue = f.params.empty() ? "  Kernel::Output::Arguments epilogue{};\n" : "  Kernel::Output::Arguments epilogue{params};\n";
  for (std::size_t i = 0; i < f.leaves.size(); ++i) {
    const Node& x = d.node(f.leaves[i].node);
    const std::string t = fmt::format("X{}", i + 1), v = fmt::format("x{}", i + 1);
    out += mode_lines(f, v, t.c_str(), x, x.axes, "mnl");
    epilogue += fmt::format("  epilogue.{0} = static_cast<const {1}*>({2}->data);\n"
                            "  epilogue.{0}_m = {0}m.stride, epilogue.{0}_n = {0}n.stride, epilogue.{0}_l = {0}l.stride;\n",
                            v, cutlass_type(x.dtype), t);
  }
  out += "  // TMA reads the operands and writes the output (clipped at its edges).\n";
  out += operand_checks(f, A, B, Y, false);
  out += "  if (!s.error().empty()) return napkin::host::fail(s.error(), err, err_len);\n";
  out += epilogue + sums;
  out += fmt::format(
      "  const Kernel::Params p{{static_cast<const Config::Element*>(A->data), napkin::gemm::make_stride<Config::StrideA>(am, ak, al),\n"
      "                         static_cast<const Config::Element*>(B->data), napkin::gemm::make_stride<Config::StrideB>(bn, bk, bl),\n"
      "                         static_cast<Config::ElementD*>(D->data), napkin::gemm::make_stride<Config::StrideD>(dm, dn, dl),\n"
      "                         int(am.extent), int(bn.extent), int(ak.extent), int(al.extent),\n"
      "                         0, 0, 0, nullptr, nullptr, epilogue{}}};  // tiles, splits and workspace: run_prologue's\n",
      f.row_sums.empty() ? ", {}" : ", sums");
  out += "  const std::string e = napkin::gemm::run_prologue<Kernel>(p, static_cast<cudaStream_t>(stream));\n"
         "  return e.empty() ? 0 : napkin::host::fail(e, err, err_len);\n}\n";
  return out;
}

}  // namespace

// The folded GEMM's translation unit (napkin/gemm_reduction.h): the summands of its folds at a
// product element, the code after them at a row, both over the diagram's inputs through their
// strides and its indices; an entry that binds every tensor and checks A and B as TMA reads them.
std::string emit_folded_gemm_kernel(const ir::Diagram& d, const GemmForm& f, const plan::GemmSchedule& s,
                                    const KernelProvenance& prov, const std::string& entry_name) {
  const Node& A = d.node(f.a);
  const Node& B = d.node(f.b);
  std::string out = unit_head(d, f, s, prov, "napkin/gemm_reduction.h", "", "B " + B.name);
  out += config_line(f, s, "float", true) + "\n";
  std::vector<std::pair<NodeId, std::vector<AxisId>>> tensors;
  for (NodeId n : f.fold_inputs) tensors.emplace_back(n, d.node(n).axes);
  for (const ir::Output& o : f.fold_outputs) tensors.emplace_back(o.node, o.axes);
  const std::string args = strided_arguments(d, f, tensors, true);
  auto indices = [&](const std::vector<AxisId>& cls, const char* flat) { return class_indices(d, cls, flat); };
  std::map<NodeId, std::string> known{{f.contraction, "acc"}};
  expression::Writer summands(d, known);
  std::string body, folds, assigns;
  for (std::size_t j = 0; j < f.folds.size(); ++j) {
    const Node& r = d.node(f.folds[j]);
    const char* kind = r.op == OpKind::logsumexp ? "lse" : r.op == OpKind::reduce_max ? "max" : "sum";
    folds += fmt::format("{}napkin::gemm::Fold::{}", j == 0 ? "" : ", ", kind);
    assigns += fmt::format("    v[{}] = {};  // {}\n", j, summands.value(r.operands[0], body, "    "), d.label(f.folds[j]));
  }
  out += "// The folds of the product over N, and the code after them (in f32, the reference interpreter's rules).\n";
  out += "struct Rows {\n";
  out += fmt::format("  static constexpr int kFolds = {};\n", f.folds.size());
  out += fmt::format("  CUTLASS_HOST_DEVICE static constexpr napkin::gemm::Fold fold(int j) {{\n"
                     "    constexpr napkin::gemm::Fold kinds[] = {{{}}};\n    return kinds[j];\n  }}\n", folds);
  out += args;
  out += "  // The summands at product element (m, n, l): v[j] is fold j's.\n";
  out += "  CUTLASS_DEVICE void summands(float acc, int64_t m, int64_t n, int64_t l, Arguments const& a, float* v) const {\n";
  out += "    (void)acc, (void)m, (void)n, (void)l, (void)a;\n";
  out += indices(f.m, "m") + indices(f.n, "n") + indices(f.l, "l") + body + assigns + "  }\n";
  std::map<NodeId, std::string> folded;
  for (std::size_t j = 0; j < f.folds.size(); ++j) folded[f.folds[j]] = fmt::format("r[{}]", j);
  expression::Writer after(d, folded);
  std::string after_body, stores;
  for (const ir::Output& o : f.fold_outputs) {
    const Node& y = d.node(o.node);
    std::string offset;
    for (AxisId ax : o.axes) offset += fmt::format(" + i_{0} * a.s_{1}_{0}", d.axis(ax).name, y.name);
    stores += fmt::format("    napkin::rows::store(a.{} + (0{}), {});\n", y.name, offset, after.value(o.node, after_body, "    "));
  }
  out += "  // The row's outputs from its folded values r[j], at row (m, l).\n";
  out += "  CUTLASS_DEVICE void finish(const float* r, int64_t m, int64_t l, Arguments const& a) const {\n";
  out += "    (void)r, (void)m, (void)l;\n";
  out += indices(f.m, "m") + indices(f.l, "l") + after_body + stores + "  }\n};\n\n";
  out += "using Kernel = napkin::gemm::FoldedKernel<Config, Rows>;\n\n}  // namespace\n\n";

  // The entry: bind, flatten and check, run.
  out += fmt::format("extern \"C\" int32_t {}(const napkin_tensor* tensors, int32_t count, void* stream, char* err, int32_t err_len) {{\n",
                     entry_name);
  out += "  napkin::TensorBinder tb(tensors, count);\n";
  out += bind_line(f, "A", A, A.axes) + bind_line(f, "B", B, B.axes);
  out += "  Rows::Arguments rows{};\n" + strided_bindings(d, f, "rows", tensors, true);
  out += "  if (!tb.error().empty()) return napkin::host::fail(tb.error(), err, err_len);\n";
  out += strided_extents(d, f, "rows");
  out += "  napkin::gemm::Modes s;  // each tensor's dims as GEMM modes; the first error\n";
  out += mode_lines(f, "a", "A", A, A.axes, "mkl") + mode_lines(f, "b", "B", B, B.axes, "nkl") + ab_checks(f, A, B);
  out += "  if (!s.error().empty()) return napkin::host::fail(s.error(), err, err_len);\n";
  out += "  const std::string e = napkin::gemm::run_folded<Kernel>(A->data, am, ak, al, B->data, bn, bk, bl, rows,\n"
         "                                                      static_cast<cudaStream_t>(stream), Config::kSwizzle);\n"
         "  return e.empty() ? 0 : napkin::host::fail(e, err, err_len);\n}\n";
  return out;
}

std::string emit_gemm_kernel(const ir::Diagram& d, const GemmForm& f, const plan::GemmSchedule& s, const KernelProvenance& prov,
                             const std::string& entry_name) {
  if (!f.folds.empty()) return emit_folded_gemm_kernel(d, f, s, prov, entry_name);
  if (f.contraction1 >= 0) return emit_dual_gemm_kernel(d, f, s, prov, entry_name);
  if (f.prologue_a >= 0 || f.prologue_b >= 0 || !f.row_sums.empty()) return emit_prologue_gemm_kernel(d, f, s, prov, entry_name);
  const Node& A = d.node(f.a);
  const Node& B = d.node(f.b);
  const Node& Y = d.node(f.output);
  std::string out = unit_head(d, f, s, prov, "napkin/gemm_kernel.h", "", "B " + B.name);
  out += config_line(f, s, cutlass_type(f.out_dtype), f.out_n_major);
  std::map<NodeId, std::string> known{{f.contraction, "acc[i]"}};
  std::string leaf_types, params_list = "cutlass::Array<float, N> const& acc";
  for (std::size_t i = 0; i < f.leaves.size(); ++i) {
    const Node& x = d.node(f.leaves[i].node);
    const char* t = cutlass_type(x.dtype);
    std::string type;
    switch (f.leaves[i].kind) {
      case GemmLeaf::Kind::scalar: type = fmt::format("Config::Scalar<{}>", t); break;
      case GemmLeaf::Kind::row_vector: type = fmt::format("Config::RowVector<{}>", t); break;
      case GemmLeaf::Kind::col_vector: type = fmt::format("Config::ColVector<{}>", t); break;
      case GemmLeaf::Kind::tensor: {
        const bool n_major = contains(f.n, x.axes.back());
        type = fmt::format("Config::Tensor<{}, cutlass::layout::{}>", t, n_major ? "RowMajor" : "ColumnMajor");
        break;
      }
    }
    out += fmt::format("using Leaf{} = {};  // {}{}\n", i + 1, type, x.name, axes_text(d, x.axes));
    leaf_types += fmt::format(", Leaf{}", i + 1);
    known[f.leaves[i].node] = fmt::format("x{}[i]", i + 1);
    params_list += fmt::format(", cutlass::Array<float, N> const& x{}", i + 1);
  }
  out += "\n";
  out += params_struct(d, f);
  if (!f.params.empty()) params_list += ", Params const& a";

  out += epilogue_functor(d, f, known, params_list);
  out += fmt::format("using Kernel = napkin::gemm::Kernel<Config, Epilogue{}>;\n\n}}  // namespace\n\n", leaf_types);

  // The entry: bind, flatten and check, run.
  out += fmt::format("extern \"C\" int32_t {}(const napkin_tensor* tensors, int32_t count, void* stream, char* err, int32_t err_len) {{\n",
                     entry_name);
  out += "  napkin::TensorBinder tb(tensors, count);\n";
  out += bind_line(f, "A", A, A.axes) + bind_line(f, "B", B, B.axes) + bind_line(f, "D", Y, f.out_axes);
  out += leaf_bindings(d, f);
  out += params_binding(d, f);
  out += "  if (!tb.error().empty()) return napkin::host::fail(tb.error(), err, err_len);\n";
  out += "  napkin::gemm::Modes s;  // each tensor's dims as GEMM modes; the first error\n";
  out += mode_lines(f, "a", "A", A, A.axes, "mkl") + mode_lines(f, "b", "B", B, B.axes, "nkl") +
         mode_lines(f, "d", "D", Y, f.out_axes, "mnl");
  std::vector<std::string> leaf_checks, leaf_args;
  for (std::size_t i = 0; i < f.leaves.size(); ++i) {
    const Node& x = d.node(f.leaves[i].node);
    const std::string t = fmt::format("X{}", i + 1), v = fmt::format("x{}", i + 1);
    out += mode_lines(f, v, t.c_str(), x, x.axes, "l");
    switch (f.leaves[i].kind) {
      case GemmLeaf::Kind::scalar:
        leaf_args.push_back(fmt::format("napkin::gemm::scalar<Leaf{}>({}, {}l)", i + 1, t, v));
        break;
      case GemmLeaf::Kind::row_vector:
        out += mode_lines(f, v, t.c_str(), x, x.axes, "m");
        leaf_checks.push_back(fmt::format("  s.vector({}, \"{}\", {}m, \"M\");\n", t, x.name, v));
        leaf_args.push_back(fmt::format("napkin::gemm::row_vector<Leaf{}>({}, {}l)", i + 1, t, v));
        break;
      case GemmLeaf::Kind::col_vector:
        out += mode_lines(f, v, t.c_str(), x, x.axes, "n");
        leaf_checks.push_back(fmt::format("  s.vector({}, \"{}\", {}n, \"N\");\n", t, x.name, v));
        leaf_args.push_back(fmt::format("napkin::gemm::col_vector<Leaf{}>({}, {}l)", i + 1, t, v));
        break;
      case GemmLeaf::Kind::tensor: {
        out += mode_lines(f, v, t.c_str(), x, x.axes, "mn");
        const bool n_major = contains(f.n, x.axes.back());
        leaf_checks.push_back(fmt::format("  s.tma({0}, \"{1}\", {2}{3}, \"{4}\", {{{2}{5}, {2}l}}, false);\n", t, x.name, v,
                                          n_major ? "n" : "m", n_major ? "N" : "M", n_major ? "m" : "n"));
        leaf_args.push_back(fmt::format("napkin::gemm::tensor<Leaf{0}>({1}, {2}m, {2}n, {2}l)", i + 1, t, v));
        break;
      }
    }
  }
  out += operand_checks(f, A, B, Y, true);
  for (const std::string& c : leaf_checks) out += c;
  out += "  if (!s.error().empty()) return napkin::host::fail(s.error(), err, err_len);\n";
  std::string fusion = "{}";
  for (const std::string& a : leaf_args) fusion += ",\n       " + a;
  fusion += f.params.empty() ? ", {}" : ", params";
  out += fmt::format(
      "  const Kernel::Arguments args{{\n"
      "      cutlass::gemm::GemmUniversalMode::kGemm,\n"
      "      {{int(am.extent), int(bn.extent), int(ak.extent), int(al.extent)}},\n"
      "      {{static_cast<const Config::Element*>(A->data), napkin::gemm::make_stride<Config::StrideA>(am, ak, al),\n"
      "       static_cast<const Config::Element*>(B->data), napkin::gemm::make_stride<Config::StrideB>(bn, bk, bl)}},\n"
      "      {{{{{}}},\n"
      "       nullptr, {{}}, static_cast<Config::ElementD*>(D->data), napkin::gemm::make_stride<Config::StrideD>(dm, dn, dl)}}}};\n",
      fusion);
  out += "  const std::string e =\n"
         "      napkin::gemm::run<Kernel::Gemm>(args, static_cast<cudaStream_t>(stream), Config::kSwizzle, Config::kRasterAlongN);\n"
         "  return e.empty() ? 0 : napkin::host::fail(e, err, err_len);\n}\n";
  return out;
}

}  // namespace napkin::emit
