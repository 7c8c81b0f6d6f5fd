// SPDX-License-Identifier: Apache-2.0
#include "emit/row_kernel.h"

#include <algorithm>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "emit/expression.h"
#include "ir/normalise.h"
#include "ir/printer.h"

namespace napkin::emit {

using ir::AxisId;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

namespace {

// The register type of an output's elements before they are stored: integers in 64 bits (the
// code's integer arithmetic is, as the reference's is exact), saturated to i32 by the store.
const char* stored_ctype(const ir::Node& n) {
  return expression::ctype_of(n) == expression::CType::integer ? "long long" : expression::ctype_name(expression::ctype_of(n));
}

}  // namespace

namespace {

using expression::CType;
using expression::ctype_name;
using expression::ctype_of;
using expression::Writer;

// A thread keeps at least this many vectors in flight (4 x 16 bytes: as Apex's LayerNorm
// kernels, whose tuned configurations issue 4 LDG.128 per thread for rows of 1-8k).
constexpr int kMinVectorsPerThread = 4;
// Rows longer than this are refused (element indices are 32-bit, vectors per row too).
constexpr std::int64_t kMaxRowLength = std::int64_t{1} << 30;

using expression::abi_dtype;
using expression::memory_type;

bool contains(const std::vector<AxisId>& axes, AxisId a) { return std::find(axes.begin(), axes.end(), a) != axes.end(); }

std::string names_of(const ir::Diagram& d, const std::vector<AxisId>& axes) {
  std::vector<std::string> n;
  for (AxisId a : axes) n.push_back(d.axis(a).name);
  return fmt::format("{}", fmt::join(n, " "));
}

const char* kFamilyNote =
    "a row kernel runs elementwise code, sums and maxes over one axis (innermost in every input that has it) and "
    "elementwise code after them; an elementwise kernel has no reduction (docs/kernels.md, \"Row and elementwise kernels\")";

// ---- Recognition ----------------------------------------------------------------------------

class Recogniser {
 public:
  Recogniser(const ir::Diagram& d, const SourceText& src) : d_(d), src_(src) {}

  Result<RowForm> run() {
    ir::Normalised n = ir::normalise_with_origin(d_);
    f_.normalised = std::move(n.diagram);
    f_.origin = std::move(n.origin);
    merge_duplicates();
    const ir::Diagram& nd = f_.normalised;
    if (nd.outputs.empty()) return plain_error(d_.source_name + ": no output: nothing for a row kernel to write");
    for (NodeId id = 0; id < static_cast<NodeId>(nd.nodes.size()); ++id) {
      const Node& x = nd.node(id);
      NAPKIN_CHECK(ir::op_class(x.op) != ir::OpClass::composite, "normalise leaves no composite");
      if (x.op == OpKind::contract)
        return refuse(id, fmt::format("{} is a contraction: a row kernel has none", label(id)), "a GEMM or attention kernel runs it");
      if (x.op == OpKind::input && memory_type(x.dtype) == nullptr)
        return refuse(id, fmt::format("input '{}' is {}: row kernels read f32, bf16, f16, f64, i32 or bool", x.name, dtype_name(x.dtype)));
      if (ir::op_class(x.op) != ir::OpClass::reduction) continue;
      if (x.over.size() != 1)
        return refuse(id, fmt::format("{} reduces over {} axes ({}): a row kernel reduces over one", label(id), x.over.size(),
                                      names_of(nd, x.over)));
      if (ctype_of(x) == CType::boolean || ctype_of(nd.node(x.operands[0])) == CType::boolean)
        return refuse(id, fmt::format("{} reduces bool values: a row kernel sums and maxes numbers", label(id)));
      if (f_.reduces && x.over[0] != f_.row_axis)
        return refuse(id, fmt::format("{} reduces over {} where {} reduces over {}: a row kernel reduces along one axis", label(id),
                                      nd.axis(x.over[0]).name, label(f_.reductions.front()), nd.axis(f_.row_axis).name),
                      "reductions over two axes need two kernels");
      f_.reduces = true;
      f_.row_axis = x.over[0];
      f_.reductions.push_back(id);
    }
    for (const ir::Output& o : nd.outputs)
      if (memory_type(nd.node(o.node).dtype) == nullptr)
        return refuse_output(o, fmt::format("output {} is {}: row kernels write f32, bf16, f16, f64, i32 or bool", nd.label(o.node),
                                            dtype_name(nd.node(o.node).dtype)));
    if (auto r = f_.reduces ? rows() : elementwise(); !r.ok()) return r;
    if (f_.row_axes.size() + 1 > 8)
      return refuse_output(nd.outputs.front(), fmt::format("{} axes: a kernel's tensors have at most 8 (NAPKIN_MAX_RANK)",
                                                           f_.row_axes.size() + 1));
    f_.row_length = nd.axis(f_.row_axis).size;
    return f_;
  }

 private:
  // The node of the given diagram a node comes from, and the composite it is part of.
  std::string label(NodeId n) const {
    const NodeId o = f_.origin.at(static_cast<std::size_t>(n));
    const Node& x = d_.node(o);
    const bool composite = ir::op_class(x.op) == ir::OpClass::composite;
    return d_.label(o) + (composite && !x.name.empty() ? fmt::format(" (a {})", ir::op_name(x.op)) : "");
  }
  SourceLoc where(NodeId n) const { return d_.node(f_.origin.at(static_cast<std::size_t>(n))).loc; }
  Diagnostic error(SourceLoc loc, std::string message, std::string note) const {
    if (note.empty()) note = kFamilyNote;
    if (loc.line == 0) {  // no line to show: the file, the message, the note under it
      Diagnostic d = plain_error(d_.source_name + ": " + message);
      d.note = std::move(note);
      return d;
    }
    return make_error(src_, loc, std::move(message), std::move(note));
  }
  Diagnostic refuse(NodeId n, std::string message, std::string note = {}) const {
    return error(where(n), std::move(message), std::move(note));
  }
  Diagnostic refuse_output(const ir::Output& o, std::string message, std::string note = {}) const {
    return error(o.loc.line > 0 ? o.loc : where(o.node), std::move(message), std::move(note));
  }

  bool has_row(const Node& x) const { return contains(x.axes, f_.row_axis); }
  const std::string& ax(AxisId a) const { return f_.normalised.axis(a).name; }

  // Structurally equal nodes become one (a softmax and a logsumexp of one value expand to the
  // same max, exponentials and sum: one pass each, not two). Inputs and outputs stay as they are.
  void merge_duplicates() {
    ir::Diagram& nd = f_.normalised;
    std::set<NodeId> outputs;
    for (const ir::Output& o : nd.outputs) outputs.insert(o.node);
    std::vector<NodeId> remap(nd.nodes.size(), -1), origin;
    std::vector<Node> kept;
    std::map<std::string, NodeId> seen;
    for (NodeId id = 0; id < static_cast<NodeId>(nd.nodes.size()); ++id) {
      Node x = nd.node(id);
      for (NodeId& o : x.operands) o = remap[static_cast<std::size_t>(o)];
      const std::string key = fmt::format("{} {} [{}] [{}] [{}] {} {:a} {} {}", static_cast<int>(x.op), static_cast<int>(x.dtype),
                                          fmt::join(x.operands, ","), fmt::join(x.axes, ","), fmt::join(x.over, ","), x.axis, x.scalar,
                                          x.op == OpKind::constant ? x.name : "", x.op == OpKind::input ? x.name : "");
      if (!outputs.count(id))
        if (auto it = seen.find(key); it != seen.end()) {
          remap[static_cast<std::size_t>(id)] = it->second;
          continue;
        }
      remap[static_cast<std::size_t>(id)] = static_cast<NodeId>(kept.size());
      seen.emplace(key, static_cast<NodeId>(kept.size()));
      kept.push_back(std::move(x));
      origin.push_back(f_.origin[static_cast<std::size_t>(id)]);
    }
    nd.nodes = std::move(kept);
    for (ir::Output& o : nd.outputs) o.node = remap[static_cast<std::size_t>(o.node)];
    f_.origin = std::move(origin);
  }

  // A row kernel: every input with the row axis has it innermost; the row axes are every other
  // axis; each output is over the row axes, with or without the row axis.
  Result<RowForm> rows() {
    const ir::Diagram& nd = f_.normalised;
    const AxisId r = f_.row_axis;
    std::set<AxisId> others;
    for (const Node& x : nd.nodes)
      for (AxisId a : x.axes)
        if (a != r) others.insert(a);
    for (NodeId id : nd.inputs()) {
      const Node& x = nd.node(id);
      if (has_row(x) && x.axes.back() != r) return columns(id);
    }
    if (nd.axis(r).size > kMaxRowLength)
      return refuse(f_.reductions.front(), fmt::format("rows of {} elements along {}: a row kernel takes at most 2^30",
                                                       nd.axis(r).size, nd.axis(r).name));
    // The order rows are numbered in: a full input's storage order, else the first output's.
    auto full = [&](const std::vector<AxisId>& axes) {
      std::vector<AxisId> rest;
      for (AxisId a : axes)
        if (a != r) rest.push_back(a);
      return rest.size() == others.size() ? rest : std::vector<AxisId>{};
    };
    for (NodeId id : nd.inputs())
      if (f_.row_axes.empty()) f_.row_axes = full(nd.node(id).axes);
    for (const ir::Output& o : nd.outputs)
      if (f_.row_axes.empty()) f_.row_axes = full(o.axes);
    if (f_.row_axes.empty()) f_.row_axes.assign(others.begin(), others.end());
    for (std::size_t i = 0; i < nd.outputs.size(); ++i) {
      const ir::Output& o = nd.outputs[i];
      const std::set<AxisId> axes(o.axes.begin(), o.axes.end());
      std::set<AxisId> along = others;
      along.insert(r);
      if (axes == along) {
        f_.outputs.push_back({i, o.axes.back() == r ? RowWrite::vectors : RowWrite::strided});
      } else if (axes == others) {
        f_.outputs.push_back({i, RowWrite::per_row});
      } else {
        return refuse_output(o, fmt::format("output '{}' is over [{}]: a row kernel writes over the row axes [{}], with or without "
                                            "the row axis {}", nd.node(o.node).name, names_of(nd, o.axes),
                                            names_of(nd, f_.row_axes), nd.axis(r).name));
      }
    }
    for (NodeId id : nd.inputs()) {
      const Node& x = nd.node(id);
      RowRead read = RowRead::scalar;
      if (has_row(x)) read = x.axes.size() > 1 ? RowRead::rows : RowRead::along;
      else if (!x.axes.empty()) read = RowRead::per_row;
      f_.inputs.push_back({id, read});
    }
    // Passes: a reduction is accumulated in the pass after every reduction it reads.
    std::vector<int> ready(nd.nodes.size(), 0);  // passes done before a node's value is known
    for (NodeId id = 0; id < static_cast<NodeId>(nd.nodes.size()); ++id) {
      int p = 0;
      for (NodeId o : nd.node(id).operands) p = std::max(p, ready[static_cast<std::size_t>(o)]);
      if (ir::op_class(nd.node(id).op) == ir::OpClass::reduction) {
        f_.pass.push_back(p);
        f_.passes = std::max(f_.passes, p + 1);
        ++p;
      }
      ready[static_cast<std::size_t>(id)] = p;
    }
    return f_;
  }

  // A column kernel (row_kernel.h): `first` is an input with r not innermost; its order numbers
  // the columns.
  Result<RowForm> columns(NodeId first) {
    const ir::Diagram& nd = f_.normalised;
    const AxisId r = f_.row_axis;
    const Node& p = nd.node(first);
    auto after_r = [&](const Node& x) {
      return std::vector<AxisId>(std::find(x.axes.begin(), x.axes.end(), r) + 1, x.axes.end());
    };
    const std::vector<AxisId> inner = after_r(p);
    const std::string note = fmt::format("a column kernel reads every input that has {} as [outer, {}, inner] with the same inner "
                                         "axes; or let the plan materialise it with {} innermost", ax(r), ax(r), ax(r));
    for (AxisId a : p.axes)
      if (a != r) f_.row_axes.push_back(a);
    const std::set<AxisId> cols(f_.row_axes.begin(), f_.row_axes.end());
    for (NodeId id = 0; id < static_cast<NodeId>(nd.nodes.size()); ++id) {
      const Node& x = nd.node(id);
      std::vector<AxisId> axes = x.axes;
      if (x.op == OpKind::iota) axes.push_back(x.axis);
      for (AxisId a : axes)
        if (a != r && !cols.count(a))
          return refuse(id, fmt::format("{} is over {}, which input '{}' [{}] does not have: a column kernel's columns are that "
                                        "input's axes but {}", label(id), ax(a), p.name, names_of(nd, p.axes), ax(r)), note);
      if (x.op == OpKind::input) {
        RowRead read = RowRead::scalar;
        if (has_row(x)) {
          // (None of the inner axes: one value per step of r for all of a thread's columns, a mask
          // m[b t] beside X[b t e].)
          const bool lacks_inner = std::none_of(inner.begin(), inner.end(), [&](AxisId a) { return contains(x.axes, a); });
          if (x.axes.size() == 1 || lacks_inner) read = RowRead::along;
          else if (after_r(x) == inner) read = RowRead::rows;
          else
            return refuse(id, fmt::format("input '{}' stores [{}] and '{}' [{}]: a column kernel reads the inputs that have {} along "
                                          "the same inner axes after it", x.name, names_of(nd, x.axes), p.name,
                                          names_of(nd, p.axes), ax(r)), note);
        } else if (!x.axes.empty()) {
          read = RowRead::per_row;
        }
        f_.inputs.push_back({id, read});
      }
    }
    for (std::size_t i = 0; i < nd.outputs.size(); ++i) {
      const ir::Output& o = nd.outputs[i];
      if (std::set<AxisId>(o.axes.begin(), o.axes.end()) != cols)
        return refuse_output(o, fmt::format("output '{}' is over [{}]: a column kernel writes one value per column [{}]",
                                            nd.node(o.node).name, names_of(nd, o.axes), names_of(nd, f_.row_axes)), note);
      f_.outputs.push_back({i, RowWrite::per_row});
    }
    // One pass over r: no reduction reads another.
    std::vector<bool> reduced(nd.nodes.size(), false);
    for (NodeId id = 0; id < static_cast<NodeId>(nd.nodes.size()); ++id) {
      const Node& x = nd.node(id);
      bool reads = false;
      for (NodeId o : x.operands) reads = reads || reduced[static_cast<std::size_t>(o)];
      if (reads && ir::op_class(x.op) == ir::OpClass::reduction)
        return refuse(id, fmt::format("{} reads another reduction over {}: a column kernel makes one pass over {}", label(id), ax(r),
                                      ax(r)), "two column kernels run it (the plan materialises the first reduction)");
      reduced[static_cast<std::size_t>(id)] = reads || ir::op_class(x.op) == ir::OpClass::reduction;
    }
    f_.pass.assign(f_.reductions.size(), 0);
    f_.passes = 1;
    f_.columns = true;
    f_.inner = p.axes.back();
    return f_;
  }

  // An elementwise kernel: every output over the same axes; the first output's innermost axis is
  // the row axis (read as vectors where it is innermost, else element by element).
  Result<RowForm> elementwise() {
    const ir::Diagram& nd = f_.normalised;
    const ir::Output& first = nd.outputs.front();
    if (first.axes.empty())
      return refuse_output(first, fmt::format("output '{}' has no axes: an elementwise kernel runs over an output's elements",
                                              nd.node(first.node).name));
    const std::set<AxisId> axes(first.axes.begin(), first.axes.end());
    f_.row_axis = first.axes.back();
    for (AxisId a : first.axes)
      if (a != f_.row_axis) f_.row_axes.push_back(a);
    for (std::size_t i = 0; i < nd.outputs.size(); ++i) {
      const ir::Output& o = nd.outputs[i];
      if (std::set<AxisId>(o.axes.begin(), o.axes.end()) != axes)
        return refuse_output(o, fmt::format("output '{}' is over [{}] and '{}' over [{}]: the outputs of an elementwise kernel share "
                                            "their axes", nd.node(o.node).name, names_of(nd, o.axes), nd.node(first.node).name,
                                            names_of(nd, first.axes)));
      f_.outputs.push_back({i, o.axes.back() == f_.row_axis ? RowWrite::vectors : RowWrite::strided});
    }
    for (NodeId id : nd.inputs()) {
      const Node& x = nd.node(id);
      RowRead read = RowRead::scalar;
      if (has_row(x)) read = x.axes.back() != f_.row_axis ? RowRead::gather : x.axes.size() > 1 ? RowRead::rows : RowRead::along;
      else if (!x.axes.empty()) read = RowRead::per_row;
      f_.inputs.push_back({id, read});
    }
    return f_;
  }

  const ir::Diagram& d_;
  const SourceText& src_;
  RowForm f_;
};

// ---- Launch shape ---------------------------------------------------------------------------

// Threads per row as the device library takes them: a power of two below 32, a multiple of 32
// from there (rounded down), 1 to 1024.
int threads_down(std::int64_t t) {
  t = std::clamp<std::int64_t>(t, 1, 1024);
  if (t >= 32) return static_cast<int>(t - t % 32);
  int p = 1;
  while (p * 2 <= t) p *= 2;
  return p;
}
int threads_up(int t) { return t < 32 ? t * 2 : std::min(1024, t * 2); }

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

bool vectorised(RowRead r) { return r == RowRead::rows || r == RowRead::along; }

}  // namespace

Result<RowForm> recognise_rows(const ir::Diagram& d, const SourceText& src) { return Recogniser(d, src).run(); }

// Column kernels: 16-byte vectors of the narrowest input read along the inner axes, halved until
// they divide the innermost; lanes enough for the inner axes' vectors, at most a warp and at most
// an eighth of them while that leaves 8 lanes (128-byte rows a warp): the last CTA of each column
// tile sums its splits' partials, and 8 column tiles or more spread that over 8 SMs or more (a
// column variance of X[32768 512] ran 1.06x faster with 8 column tiles than with 2, H100,
// bench/NOTES.md 2026-11-27 seventh). The rest of a 256-thread CTA along r.
RowLaunch column_launch(const RowForm& f) {
  const ir::Diagram& nd = f.normalised;
  RowLaunch l;
  int narrowest = 4;
  for (const RowInput& in : f.inputs)
    if (in.read == RowRead::rows) narrowest = std::min(narrowest, dtype_bytes(nd.node(in.node).dtype));
  l.vector = 16 / narrowest;
  while (nd.axis(f.inner).size % l.vector != 0) l.vector /= 2;
  const ir::Node& first = nd.node(
      std::find_if(f.inputs.begin(), f.inputs.end(), [](const RowInput& in) { return in.read == RowRead::rows; })->node);
  std::int64_t inner = 1;  // elements of the inner axes
  for (auto it = std::find(first.axes.begin(), first.axes.end(), f.row_axis) + 1; it != first.axes.end(); ++it)
    inner *= nd.axis(*it).size;
  l.lanes = 1;
  while (l.lanes < 32 && l.lanes * l.vector < inner && (l.lanes < 8 || 2 * l.lanes * l.vector * 8 <= inner)) l.lanes *= 2;
  l.depth = 256 / l.lanes;
  l.cta_threads = l.lanes * l.depth;
  l.text = fmt::format("columns -> CTAs of {} threads: {} across the columns (a vector of {} each), {} along {}, {} split across "
                       "CTAs to fill the GPU", l.cta_threads, l.lanes, l.vector, l.depth, nd.axis(f.row_axis).name,
                       nd.axis(f.row_axis).name);
  return l;
}

RowLaunch row_launch(const RowForm& f, const plan::RowSchedule& s) {
  if (f.columns) return column_launch(f);
  const ir::Diagram& nd = f.normalised;
  RowLaunch l;
  int narrowest = 0;
  for (const RowInput& in : f.inputs)
    if (vectorised(in.read)) narrowest = narrowest == 0 ? dtype_bytes(nd.node(in.node).dtype) : std::min(narrowest, dtype_bytes(nd.node(in.node).dtype));
  for (const RowOutput& o : f.outputs)
    if (o.write == RowWrite::vectors) {
      const int b = dtype_bytes(nd.node(nd.outputs[o.index].node).dtype);
      narrowest = narrowest == 0 ? b : std::min(narrowest, b);
    }
  l.vector = 16 / (narrowest == 0 ? 4 : narrowest);
  const std::int64_t schedule_cta = std::clamp<std::int64_t>(s.rows_per_cta * std::max(1, s.threads_per_row), 32, 1024);  // elementwise
  const std::string schedule = search::row_schedule_text(s);
  if (!f.reduces) {
    l.cta_threads = static_cast<int>(std::max<std::int64_t>(128, schedule_cta - schedule_cta % 32));
    l.threads_per_row = l.cta_threads;
    l.text = fmt::format("{} -> CTAs of {} threads, a vector of {} per thread and step (grid-stride)", schedule, l.cta_threads, l.vector);
    return l;
  }
  const std::int64_t n = f.row_length;
  while (n % l.vector != 0) l.vector /= 2;
  const std::int64_t vectors = n / l.vector;
  // Inputs the outputs read (an unused input is bound, never loaded).
  std::vector<bool> used(nd.nodes.size(), false);
  for (const ir::Output& o : nd.outputs) used[static_cast<std::size_t>(o.node)] = true;
  for (NodeId id = static_cast<NodeId>(nd.nodes.size()); id-- > 0;)
    if (used[static_cast<std::size_t>(id)])
      for (NodeId o : nd.node(id).operands) used[static_cast<std::size_t>(o)] = true;
  int rows_in = 0, along = 0;  // bytes per element of the inputs kept
  for (const RowInput& in : f.inputs) {
    if (!used[static_cast<std::size_t>(in.node)]) continue;
    rows_in += in.read == RowRead::rows ? dtype_bytes(nd.node(in.node).dtype) : 0;
    along += in.read == RowRead::along ? dtype_bytes(nd.node(in.node).dtype) : 0;
  }
  int t = threads_down(s.threads_per_row);
  std::vector<std::string> why;
  if (const int fewer = threads_down(std::max<std::int64_t>(1, vectors / kMinVectorsPerThread)); fewer < t) {
    t = fewer;
    why.push_back(fmt::format("fewer threads per row: {} vectors in flight per thread", kMinVectorsPerThread));
  }
  auto elements = [&](int threads) { return ceil_div(vectors, threads) * l.vector; };
  // What a thread may keep at `threads` a row (a CTA of them, search::row_register_bytes); past
  // it, threads per row grow, then the rows are re-read from L1/L2 in every pass.
  const auto budget = search::row_register_bytes;
  if (rows_in * elements(t) > budget(t) && t < search::kMaxRowThreads) {
    while (rows_in * elements(t) > budget(t) && t < search::kMaxRowThreads) t = threads_up(t);
    why.push_back(fmt::format("more threads per row: the row in at most {} bytes of registers per thread", budget(t)));
  }
  l.threads_per_row = t;
  l.in_registers = rows_in * elements(t) <= budget(t);
  l.hoisted = l.in_registers && (rows_in + along) * elements(t) <= budget(t);
  l.unrolled = (rows_in > 0 && l.in_registers) || (along > 0 && l.hoisted);
  if (!l.in_registers) why.push_back("rows re-read from L1/L2 in every pass: too long for registers");
  // The schedule's rows per CTA, more where its row is shorter than 4 warps: a CTA of at least
  // 128 threads, whole warps, at most 1024.
  std::int64_t r = std::max<std::int64_t>({1, s.rows_per_cta, ceil_div(128, t)});
  if (t < 32) r = ceil_div(r, 32 / t) * (32 / t);
  r = std::min<std::int64_t>(r, 1024 / t);
  l.rows_per_cta = static_cast<int>(r);
  l.cta_threads = l.threads_per_row * l.rows_per_cta;
  l.vectors_per_thread = static_cast<int>(ceil_div(vectors, t));
  std::string along_text;
  if (along > 0) along_text = l.hoisted ? ", inputs along the row loaded once per thread" : ", inputs along the row loaded per pass";
  auto count = [](std::int64_t n, const char* what) { return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s"); };
  const char* kept = rows_in > 0 && l.in_registers ? ", the row in registers" : "";
  l.text = fmt::format("{} -> {} of {} per CTA, {} of {} per thread{}{}{}", schedule, count(l.rows_per_cta, "row"),
                       count(l.threads_per_row, "thread"), count(l.vectors_per_thread, "vector"), l.vector, kept, along_text,
                       why.empty() ? "" : " (" + fmt::format("{}", fmt::join(why, "; ")) + ")");
  return l;
}

std::string describe_rows(const RowForm& f) {
  const ir::Diagram& nd = f.normalised;
  std::vector<std::string> outs;
  for (const ir::Output& o : nd.outputs) outs.push_back(fmt::format("{}[{}]", nd.node(o.node).name, names_of(nd, o.axes)));
  if (!f.reduces) {
    std::vector<AxisId> all = f.row_axes;
    all.push_back(f.row_axis);
    return fmt::format("elementwise [{}]; outputs {}", names_of(nd, all), fmt::join(outs, " "));
  }
  std::vector<std::string> ops;
  for (NodeId r : f.reductions) ops.emplace_back(ir::op_name(nd.node(r).op));
  if (f.columns)
    return fmt::format("columns [{}] x {}; {} reduction{} ({}); outputs {}", names_of(nd, f.row_axes), nd.axis(f.row_axis).name,
                       f.reductions.size(), f.reductions.size() == 1 ? "" : "s", fmt::join(ops, ", "), fmt::join(outs, " "));
  return fmt::format("rows [{}] x {}={}; {} reduction{} ({}); outputs {}", names_of(nd, f.row_axes), nd.axis(f.row_axis).name,
                     f.row_length, f.reductions.size(), f.reductions.size() == 1 ? "" : "s", fmt::join(ops, ", "), fmt::join(outs, " "));
}

namespace {

// ---- Emission -------------------------------------------------------------------------------

class Emitter {
 public:
  Emitter(const ir::Diagram& d, const RowForm& f, const RowLaunch& l) : d_(d), f_(f), nd_(f.normalised), l_(l) {
    rn_ = nd_.axis(f_.row_axis).name;
    for (NodeId id = 0; id < static_cast<NodeId>(nd_.nodes.size()); ++id) {
      const Node& x = nd_.node(id);
      if (x.op != OpKind::constant) continue;
      // Constants as the shared writer spells them; negative literals in parentheses ("- -1.0f").
      const bool integer = ctype_of(x) == CType::integer;
      std::string v = !x.name.empty() ? fmt::format("static_cast<{}>(a.{})", integer ? "int" : "float", x.name)
                      : integer       ? fmt::format("{}", static_cast<long long>(x.scalar))
                                      : expression::literal(x.scalar);
      if (v.front() == '-') v = "(" + v + ")";
      row_known_[id] = v;
      if (!x.name.empty() && std::none_of(params_.begin(), params_.end(), [&](NodeId p) { return nd_.node(p).name == x.name; }))
        params_.push_back(id);
    }
    // What the outputs need: an unused input is bound (and checked) but never read.
    std::function<void(NodeId)> mark = [&](NodeId n) {
      if (!used_.insert(n).second) return;
      for (NodeId o : nd_.node(n).operands) mark(o);
    };
    for (const ir::Output& o : nd_.outputs) mark(o.node);
    for (const RowInput& in : f_.inputs) {
      std::string r = "r" + nd_.node(in.node).name, g = "g" + nd_.node(in.node).name;
      fragment_[in.node] = safe(r);
      pointer_[in.node] = safe(g);
    }
    for (const ir::Output& o : nd_.outputs) {
      out_vector_[o.node] = safe("o" + nd_.node(o.node).name);
      pointer_[o.node] = safe("g" + nd_.node(o.node).name);
    }
  }

  std::string unit(const KernelProvenance& prov, const plan::RowSchedule& /*s*/, const std::string& entry) {
    std::string out = fmt::format(
        "// SPDX-License-Identifier: Apache-2.0\n"
        "// Generated by napkin {} from {} ({}). Do not edit: `napkin build` writes it.\n"
        "// {}\n// {}\n// launch: {}\n#include \"napkin/row_kernel.h\"\n\nnamespace {{\n\n",
        prov.napkin_version, prov.source_name, prov.diagram_key, prov.derived, describe_rows(f_), l_.text);
    if (f_.columns) out += column_constants() + column_args() + column_kernel() + "}  // namespace\n\n" + column_entry(entry);
    else out += constants() + args() + (f_.reduces ? row_kernel() : elementwise_kernel()) + "}  // namespace\n\n" + entry_point(entry);
    return out;
  }

 private:
  // ---- names ----
  static std::string safe(std::string name) {
    static const std::set<std::string> kTaken = {"a", "g", "k", "v", "row", "first", "live", "vec", "vectors", "rest", "Shape", "sPartials"};
    static const std::regex kGenerated(R"((acc|r|v|o)[0-9]+|i_.*)");
    while (kTaken.count(name) || std::regex_match(name, kGenerated)) name += "_";
    return name;
  }
  const std::string& ax(AxisId a) const { return nd_.axis(a).name; }
  bool has_row(NodeId n) const {
    const Node& x = nd_.node(n);
    return contains(x.axes, f_.row_axis) || (x.op == OpKind::iota && x.axis == f_.row_axis);
  }
  // Element offset of a tensor's row: the sum over the row axes it has.
  std::string row_offset(const std::string& name, const std::vector<AxisId>& axes) const {
    std::vector<std::string> terms;
    for (AxisId a : axes)
      if (a != f_.row_axis) terms.push_back(fmt::format("i_{0} * a.s_{1}_{0}", ax(a), name));
    return terms.empty() ? "0" : fmt::format("{}", fmt::join(terms, " + "));
  }
  std::string origin_label(NodeId n) const { return d_.label(f_.origin.at(static_cast<std::size_t>(n))); }
  std::vector<AxisId> axes_of_output(NodeId n) const {
    for (const ir::Output& o : nd_.outputs)
      if (o.node == n) return o.axes;
    return {};
  }

  // ---- the unit's parts ----
  std::string constants() const {
    std::string s;
    if (f_.reduces) {
      s += fmt::format("constexpr int kRowLength = {};  // {}: fixed when the kernel was built\n", f_.row_length, rn_);
      s += fmt::format("constexpr int kThreadsPerRow = {};\nconstexpr int kRowsPerCta = {};\n", l_.threads_per_row, l_.rows_per_cta);
      s += "constexpr int kCtaThreads = kThreadsPerRow * kRowsPerCta;\n";
    } else {
      s += fmt::format("constexpr int kCtaThreads = {};\n", l_.cta_threads);
    }
    s += fmt::format("constexpr int kVector = {};  // elements per access: 16 bytes of the narrowest tensor along {}\n\n", l_.vector, rn_);
    return s;
  }

  std::string args() const {
    std::string s = "struct Args {\n";
    s += fmt::format("  int64_t rows_;  // rows: [{}]\n", names_of(nd_, f_.row_axes));
    if (!f_.reduces) {
      s += fmt::format("  int64_t length_;  // elements per row along {} (all of them when the tensors are flattened)\n", rn_);
      s += "  napkin::rows::FastDiv per_row_;  // vectors per row\n";
    }
    for (std::size_t i = 1; i < f_.row_axes.size(); ++i) s += fmt::format("  napkin::rows::FastDiv div_{}_;  // its size\n", ax(f_.row_axes[i]));
    for (const RowInput& in : f_.inputs) s += tensor_field(in.node, nd_.node(in.node).axes, false, in.read == RowRead::gather);
    for (const RowOutput& o : f_.outputs) {
      const ir::Output& out = nd_.outputs[o.index];
      s += tensor_field(out.node, out.axes, true, o.write == RowWrite::strided);
    }
    for (NodeId p : params_) s += fmt::format("  double {};  // param\n", nd_.node(p).name);
    return s + "};\n\n";
  }

  // The row index decomposed into the row axes' indices (innermost first); `row` is consumed.
  std::string decompose(const std::string& indent) const {
    std::string s;
    for (std::size_t i = f_.row_axes.size(); i-- > 1;)
      s += fmt::format("{}const int64_t i_{} = a.div_{}_.split(row);\n", indent, ax(f_.row_axes[i]), ax(f_.row_axes[i]));
    if (!f_.row_axes.empty()) s += fmt::format("{}const int64_t i_{} = row;\n", indent, ax(f_.row_axes.front()));
    return s;
  }

  // Row-scope statements for the values without the row axis that the element code of `tops`
  // reads (statistics of the row, per-row inputs, params); they join row_known_.
  void row_values(const std::vector<NodeId>& tops, std::string& out, const std::string& indent) {
    std::set<NodeId> seen, need;
    std::function<void(NodeId)> walk = [&](NodeId n) {
      if (row_known_.count(n) || !seen.insert(n).second) return;
      if (!has_row(n)) {
        NAPKIN_CHECK(ir::op_class(nd_.node(n).op) != ir::OpClass::reduction, "a reduction is read before its pass");
        need.insert(n);
      }
      for (NodeId o : nd_.node(n).operands) walk(o);
    };
    for (NodeId t : tops) walk(t);
    Writer w(nd_, row_known_);
    for (NodeId n : need) row_known_[n] = w.value(n, out, indent);  // in id order: operands first
  }

  struct Sink {
    NodeId node;
    std::string statement;  // with {} for the value
  };
  // The loop over a thread's vectors of its row and their elements, running `sinks`.
  std::string element_loop(const std::vector<Sink>& sinks, const std::vector<NodeId>& stores, const std::string& indent) {
    std::vector<NodeId> tops;
    for (const Sink& s : sinks) tops.push_back(s.node);
    std::string pre;
    row_values(tops, pre, indent);
    // The fragments this loop reads.
    std::set<NodeId> cone;
    std::function<void(NodeId)> walk = [&](NodeId n) {
      if (row_known_.count(n) || !cone.insert(n).second) return;
      for (NodeId o : nd_.node(n).operands) walk(o);
    };
    for (NodeId t : tops) walk(t);
    std::map<NodeId, std::string> known = row_known_;
    std::string chunk;  // loads at the top of each vector
    const std::string in = indent + "  ", in2 = indent + "    ";
    for (const RowInput& input : f_.inputs) {
      if (!cone.count(input.node) || !vectorised(input.read)) continue;
      const Node& x = nd_.node(input.node);
      const std::string& r = fragment_.at(input.node);
      const bool kept = input.read == RowRead::rows ? l_.in_registers : l_.hoisted;
      if (kept) {
        known[input.node] = r + "[k][v]";
      } else {
        known[input.node] = r + "[v]";
        const std::string src = input.read == RowRead::rows ? pointer_.at(input.node) : "a." + x.name;
        chunk += fmt::format("{}napkin::rows::Vector<{}, kV> {};\n{}{}.load({} + g.element(k));\n", in, memory_type(x.dtype), r, in, r, src);
      }
    }
    for (NodeId o : stores) chunk += fmt::format("{}{} {}[kV];\n", in, stored_ctype(nd_.node(o)), out_vector_.at(o));
    Writer w(nd_, known);
    // A division by a value of the row (a norm's deviation) multiplies by its reciprocal, taken
    // once per row.
    for (NodeId n : cone) {
      const Node& x = nd_.node(n);
      if (x.op != OpKind::div || ctype_of(x) != CType::real) continue;
      const NodeId divisor = x.operands[1];
      const auto known_divisor = row_known_.find(divisor);
      if (known_divisor == row_known_.end() || nd_.node(divisor).op == OpKind::constant) continue;
      if (!reciprocals_.count(divisor)) {
        reciprocals_[divisor] = fmt::format("inv{}", divisor);
        const std::string v = ctype_of(nd_.node(divisor)) == CType::real ? known_divisor->second
                                                                          : "static_cast<float>(" + known_divisor->second + ")";
        pre += fmt::format("{}const float {} = 1.0f / {};\n", indent, reciprocals_.at(divisor), v);
      }
      w.divide_by_reciprocal(divisor, reciprocals_.at(divisor));
    }
    std::string body;
    for (const Sink& s : sinks) {
      const std::string v = w.value(s.node, body, in2);
      body += in2 + fmt::format(fmt::runtime(s.statement), v) + "\n";
    }
    if (std::regex_search(body, std::regex("\\bi_" + rn_ + "\\b")))
      body = fmt::format("{}const int i_{} = g.element(k) + v;\n", in2, rn_) + body;
    std::string after;
    for (NodeId o : stores)
      after += fmt::format("{}if (live) napkin::rows::store_vector<kV>({} + g.element(k), {});\n", in, pointer_.at(o), out_vector_.at(o));
    return pre + fmt::format("{}#pragma unroll{}\n{}for (int k = 0; k < Shape::kVectors; ++k) {{\n{}if (!g.owns(k)) continue;\n", indent,
                             l_.unrolled ? "" : " 4", indent, in) +
           chunk + fmt::format("{0}#pragma unroll\n{0}for (int v = 0; v < kV; ++v) {{\n", in) + body + in + "}\n" + after + indent + "}\n";
  }

  // The field of tensor `n` (stored in `axes`) in Args: its pointer and its strides (along r too
  // where `row_stride`).
  std::string tensor_field(NodeId n, const std::vector<AxisId>& axes, bool output, bool row_stride) const {
    const Node& x = nd_.node(n);
    std::string line = fmt::format("  {}{}* {};", output ? "" : "const ", memory_type(x.dtype), x.name);
    for (AxisId a : axes)
      if (a != f_.row_axis || row_stride) line += fmt::format(" int64_t s_{}_{};", x.name, ax(a));
    return line + fmt::format("  // {}[{}]\n", x.name, names_of(nd_, axes));
  }
  // Reduction i's accumulator `acc<i><extent>` (a sum or a max, in f32 or i32), declared.
  std::string accumulator(std::size_t i, const std::string& extent) const {
    const Node& x = nd_.node(f_.reductions[i]);
    return fmt::format("napkin::rows::Acc<napkin::rows::{}{}> acc{}{};  // {} over {}: {}", x.op == OpKind::reduce_max ? "Max" : "Sum",
                       ctype_of(x) == CType::integer ? ", int" : "", i, extent, ir::op_name(x.op), rn_, origin_label(f_.reductions[i]));
  }
  // The statement adding an element ({} for its value) to reduction i's accumulator `acc`.
  std::string accumulate(std::size_t i, const std::string& acc) const {
    const Node& x = nd_.node(f_.reductions[i]);
    const CType t = ctype_of(x);
    const bool cast = ctype_of(nd_.node(x.operands[0])) != t;
    return fmt::format("{}.add({});", acc, cast ? fmt::format("static_cast<{}>({{}})", ctype_name(t)) : "{}");
  }

  std::string row_kernel() {
    std::string s = "template <int kV>\n__global__ void __launch_bounds__(kCtaThreads) row_kernel(const Args a) {\n";
    s += "  using Shape = napkin::rows::RowShape<kRowLength, kThreadsPerRow, kRowsPerCta, kV>;\n";
    s += "  const napkin::rows::RowThread<Shape> g;  // this thread's row in the CTA and place in the row\n";
    std::vector<int> per_pass(static_cast<std::size_t>(f_.passes), 0);
    for (int p : f_.pass) ++per_pass[static_cast<std::size_t>(p)];
    const int widest = *std::max_element(per_pass.begin(), per_pass.end());
    s += fmt::format("  __shared__ uint32_t sPartials[{}][Shape::kRows * Shape::kWarps * {}];  // per pass: [reduction][row][warp]\n",
                     f_.passes, widest);
    for (const RowInput& in : f_.inputs)
      if (in.read == RowRead::along && l_.hoisted && used_.count(in.node)) {
        const Node& x = nd_.node(in.node);
        s += fmt::format("  napkin::rows::Vector<{}, kV> {}[Shape::kVectors];  // {}[{}]: the same in every row, loaded once\n",
                         memory_type(x.dtype), fragment_.at(in.node), x.name, rn_);
        s += fmt::format("  g.load({}, a.{});\n", fragment_.at(in.node), x.name);
      }
    std::vector<NodeId> rows_read;  // inputs over the rows themselves (X[t e])
    for (const RowInput& in : f_.inputs)
      if (in.read == RowRead::rows && used_.count(in.node)) rows_read.push_back(in.node);
    // Rows kept in registers are loaded one row ahead: the next row's loads are in flight while
    // this row reduces and writes, so a CTA always has memory traffic outstanding.
    const bool ahead = l_.in_registers && !rows_read.empty();
    if (ahead) {
      std::string loads;
      for (NodeId n : rows_read) {
        const Node& x = nd_.node(n);
        s += fmt::format("  napkin::rows::Vector<{}, kV> next_{}[Shape::kVectors];  // {}[{}] of the next row\n", memory_type(x.dtype),
                         fragment_.at(n), x.name, names_of(nd_, x.axes));
        loads += fmt::format("    g.load(next_{}, a.{} + ({}));\n", fragment_.at(n), x.name, row_offset(x.name, x.axes));
      }
      s += "  auto load_ahead = [&](int64_t first) {\n    int64_t row = first + g.row < a.rows_ ? first + g.row : a.rows_ - 1;\n";
      s += decompose("    ") + loads + "  };\n";
      s += "  if (int64_t(blockIdx.x) * kRowsPerCta < a.rows_) load_ahead(int64_t(blockIdx.x) * kRowsPerCta);\n";
    }
    s += "  for (int64_t first = int64_t(blockIdx.x) * kRowsPerCta; first < a.rows_; first += int64_t(gridDim.x) * kRowsPerCta) {\n";
    s += "    const bool live = first + g.row < a.rows_;\n";
    s += "    int64_t row = live ? first + g.row : a.rows_ - 1;  // a row past the end redoes the last one and writes nothing\n";
    s += decompose("    ");
    for (NodeId n : rows_read) {
      const Node& x = nd_.node(n);
      if (l_.in_registers)
        s += fmt::format("    napkin::rows::Vector<{}, kV> {}[Shape::kVectors];  // {}[{}]\n"
                         "    #pragma unroll\n    for (int k = 0; k < Shape::kVectors; ++k) {}[k] = next_{}[k];\n",
                         memory_type(x.dtype), fragment_.at(n), x.name, names_of(nd_, x.axes), fragment_.at(n), fragment_.at(n));
      else
        s += fmt::format("    const {}* const {} = a.{} + ({});  // {}[{}], re-read in every pass\n", memory_type(x.dtype), pointer_.at(n),
                         x.name, row_offset(x.name, x.axes), x.name, names_of(nd_, x.axes));
    }
    if (ahead)
      s += "    if (first + int64_t(gridDim.x) * kRowsPerCta < a.rows_) load_ahead(first + int64_t(gridDim.x) * kRowsPerCta);\n";
    for (const RowOutput& o : f_.outputs) {
      if (o.write == RowWrite::per_row) continue;
      const ir::Output& out = nd_.outputs[o.index];
      const Node& x = nd_.node(out.node);
      s += fmt::format("    {}* const {} = a.{} + ({});  // {}[{}]\n", memory_type(x.dtype), pointer_.at(out.node), x.name,
                       row_offset(x.name, out.axes), x.name, names_of(nd_, out.axes));
    }
    // The passes: each accumulates the reductions whose inputs are known, then reduces them over the row.
    for (int p = 0; p < f_.passes; ++p) {
      std::vector<Sink> sinks;
      std::vector<std::string> accs;
      s += fmt::format("    // Pass {} over the row\n", p + 1);
      for (std::size_t i = 0; i < f_.reductions.size(); ++i) {
        if (f_.pass[i] != p) continue;
        s += "    " + accumulator(i, "") + "\n";
        sinks.push_back({nd_.node(f_.reductions[i]).operands[0], accumulate(i, "acc" + std::to_string(i))});
        accs.push_back(fmt::format("acc{}", i));
      }
      s += element_loop(sinks, {}, "    ");
      s += fmt::format("    g.reduce(sPartials[{}], {});\n", p, fmt::join(accs, ", "));
      for (std::size_t i = 0; i < f_.reductions.size(); ++i) {
        if (f_.pass[i] != p) continue;
        s += fmt::format("    const {} r{} = acc{}.value;\n", ctype_name(ctype_of(nd_.node(f_.reductions[i]))), i, i);
        row_known_[f_.reductions[i]] = fmt::format("r{}", i);
      }
    }
    // The outputs along the row, then those of the row alone.
    std::vector<Sink> sinks;
    std::vector<NodeId> stores;
    for (const RowOutput& o : f_.outputs) {
      const ir::Output& out = nd_.outputs[o.index];
      const Node& x = nd_.node(out.node);
      if (o.write == RowWrite::vectors) {
        sinks.push_back({out.node, out_vector_.at(out.node) + "[v] = {};"});
        stores.push_back(out.node);
      } else if (o.write == RowWrite::strided) {
        sinks.push_back({out.node, fmt::format("if (live) napkin::rows::put({} + int64_t(i_{}) * a.s_{}_{}, {{}});", pointer_.at(out.node),
                                               rn_, x.name, rn_)});
      }
    }
    if (!sinks.empty()) {
      s += fmt::format("    // The outputs along the row\n");
      s += element_loop(sinks, stores, "    ");
    }
    for (const RowOutput& o : f_.outputs) {
      if (o.write != RowWrite::per_row) continue;
      const ir::Output& out = nd_.outputs[o.index];
      const Node& x = nd_.node(out.node);
      std::string pre;
      row_values({out.node}, pre, "    ");
      s += pre + fmt::format("    if (live && g.lane == 0) napkin::rows::put(a.{} + ({}), {});  // {}[{}]\n", x.name,
                             row_offset(x.name, out.axes), row_known_.at(out.node), x.name, names_of(nd_, out.axes));
    }
    if (f_.passes == 1)
      s += "    if constexpr (Shape::kWarps > 1) __syncthreads();  // the next row's pass 1 writes sPartials[0] again\n";
    return s + "  }\n}\n\n";
  }

  std::string elementwise_kernel() {
    std::string s = "template <int kV>\n__global__ void __launch_bounds__(kCtaThreads) elementwise_kernel(const Args a) {\n";
    s += "  const int64_t vectors = a.rows_ * (a.length_ / kV);\n";
    s += "  for (int64_t vec = int64_t(blockIdx.x) * kCtaThreads + threadIdx.x; vec < vectors; vec += int64_t(gridDim.x) * kCtaThreads) {\n";
    s += fmt::format("    int64_t row = 0, first = vec * kV;  // the vector's row and its first element along {}\n", rn_);
    s += "    if (a.rows_ > 1) {\n      row = vec;\n      first = a.per_row_.split(row) * kV;\n    }\n";
    s += decompose("    ");
    const std::string ind = "    ", in2 = "      ";
    std::map<NodeId, std::string>& known = row_known_;
    std::string loads;
    std::map<NodeId, std::string> element_known;
    for (const RowInput& in : f_.inputs) {
      if (!vectorised(in.read) || !used_.count(in.node)) continue;
      const Node& x = nd_.node(in.node);
      const std::string& r = fragment_.at(in.node);
      loads += fmt::format("{}napkin::rows::Vector<{}, kV> {};  // {}[{}]\n{}{}.load(a.{} + ({}) + first);\n", ind, memory_type(x.dtype), r,
                           x.name, names_of(nd_, x.axes), ind, r, x.name, row_offset(x.name, x.axes));
      element_known[in.node] = r + "[v]";
    }
    s += loads;
    std::vector<NodeId> tops;
    for (const ir::Output& o : nd_.outputs) tops.push_back(o.node);
    std::string pre;
    row_values(tops, pre, ind);
    s += pre;
    std::map<NodeId, std::string> all = known;
    all.insert(element_known.begin(), element_known.end());
    Writer w(nd_, all);
    std::string body, after;
    for (const RowOutput& o : f_.outputs) {
      const ir::Output& out = nd_.outputs[o.index];
      const Node& x = nd_.node(out.node);
      const std::string v = w.value(out.node, body, in2);
      if (o.write == RowWrite::vectors) {
        s += fmt::format("{}{} {}[kV];\n", ind, stored_ctype(x), out_vector_.at(out.node));
        body += fmt::format("{}{}[v] = {};\n", in2, out_vector_.at(out.node), v);
        after += fmt::format("{}napkin::rows::store_vector<kV>(a.{} + ({}) + first, {});\n", ind, x.name, row_offset(x.name, out.axes),
                             out_vector_.at(out.node));
      } else {
        body += fmt::format("{}napkin::rows::put(a.{} + ({}) + i_{} * a.s_{}_{}, {});\n", in2, x.name, row_offset(x.name, out.axes), rn_,
                            x.name, rn_, v);
      }
    }
    if (std::regex_search(body, std::regex("\\bi_" + rn_ + "\\b")))
      body = fmt::format("{}const int64_t i_{} = first + v;\n", in2, rn_) + body;
    s += fmt::format("{0}#pragma unroll\n{0}for (int v = 0; v < kV; ++v) {{\n", ind) + body + ind + "}\n" + after;
    return s + "  }\n}\n\n";
  }

  // The entry's checks that each axis split by FastDiv has at most 2^31 elements (`n_<axis>`).
  std::string fast_div_limits(const std::vector<AxisId>& axes) const {
    std::string s;
    for (AxisId a : axes)
      s += fmt::format("  if (n_{0} > (int64_t{{1}} << 31))\n    return napkin::host::fail(\"axis {0} has size \" + std::to_string(n_{0}) + "
                       "\", expected at most 2^31\", err, err_len);\n", ax(a));
    return s;
  }

  // ---- column kernels ----
  // The name of a column axis's index in the kernel: the innermost's is the thread's first
  // column there (c_), its element v's i_ = c_ + v.
  std::string column_index(AxisId a) const { return (a == f_.inner ? "c_" : "i_") + ax(a); }
  // A tensor's element offset at the thread's first column (r excluded).
  std::string column_offset(const std::string& name, const std::vector<AxisId>& axes) const {
    std::vector<std::string> terms;
    for (AxisId a : axes)
      if (a != f_.row_axis) terms.push_back(fmt::format("{} * a.s_{}_{}", column_index(a), name, ax(a)));
    return terms.empty() ? "0" : fmt::format("{}", fmt::join(terms, " + "));
  }
  bool column_code_reads_inner(const std::string& body) const { return std::regex_search(body, std::regex("\\bi_" + ax(f_.inner) + "\\b")); }

  std::string column_constants() const {
    return fmt::format("constexpr int kLanes = {};  // threads across the columns, a vector of columns each\n"
                       "constexpr int kDepth = {};  // threads along {}\nconstexpr int kCtaThreads = kLanes * kDepth;\n"
                       "constexpr int kVector = {};  // columns per vector: 16 bytes of the narrowest input along {}\n"
                       "constexpr int kAccumulators = {};\n\n",
                       l_.lanes, l_.depth, rn_, l_.vector, ax(f_.inner), f_.reductions.size());
  }

  std::string column_args() const {
    std::string s = "struct Args {\n";
    s += fmt::format("  int64_t columns_;  // columns: [{}]\n", names_of(nd_, f_.row_axes));
    s += fmt::format("  int64_t length_;  // elements along {}\n  int64_t per_split_;  // elements of {} a split (launch_columns)\n", rn_, rn_);
    for (std::size_t i = 1; i < f_.row_axes.size(); ++i) s += fmt::format("  napkin::rows::FastDiv div_{}_;  // its size\n", ax(f_.row_axes[i]));
    for (const RowInput& in : f_.inputs) s += tensor_field(in.node, nd_.node(in.node).axes, false, true);
    for (const RowOutput& o : f_.outputs) s += tensor_field(nd_.outputs[o.index].node, nd_.outputs[o.index].axes, true, true);
    for (NodeId p : params_) s += fmt::format("  double {};  // param\n", nd_.node(p).name);
    s += "  uint32_t* partial_;  // the split workspace: [split][accumulator][column]\n  int* arrivals_;  // per column tile\n";
    return s + "};\n\n";
  }

  std::string column_kernel() {
    constexpr int kUnroll = 8;  // steps of r whose loads a thread has in flight at once (8: 6 % faster than 4 on
                                // the variance of X[32768 512], the same elsewhere; bench/NOTES.md)
    std::string s = "template <int kV>\n__global__ void __launch_bounds__(kCtaThreads) column_kernel(const Args a) {\n";
    s += "  using Shape = napkin::rows::ColumnShape<kLanes, kDepth, kV>;\n";
    s += "  const napkin::rows::ColumnThread<Shape> g;  // this thread's vector of columns and place along r\n";
    s += "  __shared__ uint32_t sPartials[kAccumulators * Shape::kCtaThreads * kV];  // [accumulator][depth][column]\n";
    s += "  const int64_t first = (int64_t(blockIdx.x) * kLanes + g.lane) * kV;  // this thread's first column\n";
    s += "  const bool live = first < a.columns_;\n";
    s += "  int64_t row = live ? first : 0;\n";
    for (std::size_t i = f_.row_axes.size(); i-- > 1;)
      s += fmt::format("  const int64_t {} = a.div_{}_.split(row);\n", column_index(f_.row_axes[i]), ax(f_.row_axes[i]));
    if (!f_.row_axes.empty()) s += fmt::format("  const int64_t {} = row;\n", column_index(f_.row_axes.front()));
    const std::string inner = ax(f_.inner);
    std::map<NodeId, std::string> known = row_known_;
    // Inputs of a column alone: kV values each, loaded once.
    for (const RowInput& in : f_.inputs) {
      if (in.read != RowRead::per_row || !used_.count(in.node)) continue;
      const Node& x = nd_.node(in.node);
      const std::string c = fragment_.at(in.node);
      s += fmt::format("  napkin::rows::compute_t<{}> {}[kV];  // {}[{}]\n", memory_type(x.dtype), c, x.name, names_of(nd_, x.axes));
      s += fmt::format("  #pragma unroll\n  for (int v = 0; v < kV; ++v) {}[v] = live ? napkin::rows::get(a.{} + ({}){}) : 0;\n", c, x.name,
                       column_offset(x.name, x.axes), contains(x.axes, f_.inner) ? fmt::format(" + v * a.s_{}_{}", x.name, inner) : "");
      known[in.node] = c + "[v]";
    }
    // The accumulators and the loop over this split's r.
    std::vector<std::string> accs;
    std::vector<std::pair<NodeId, std::string>> sinks;
    for (std::size_t i = 0; i < f_.reductions.size(); ++i) {
      s += "  " + accumulator(i, "[kV]") + "\n";
      sinks.push_back({nd_.node(f_.reductions[i]).operands[0], accumulate(i, fmt::format("acc{}[v]", i))});
      accs.push_back(fmt::format("acc{}", i));
    }
    std::string loads, along;
    for (const RowInput& in : f_.inputs) {
      if (!used_.count(in.node)) continue;
      const Node& x = nd_.node(in.node);
      const std::string& r = fragment_.at(in.node);
      if (in.read == RowRead::rows) {
        s += fmt::format("  const {}* const {} = a.{} + ({});  // {}[{}] at this thread's columns\n", memory_type(x.dtype), pointer_.at(in.node),
                         x.name, column_offset(x.name, x.axes), x.name, names_of(nd_, x.axes));
        s += fmt::format("  napkin::rows::Vector<{}, kV> {}[{}];\n", memory_type(x.dtype), r, kUnroll);
        loads += fmt::format("        if (step + u * kDepth < end) {}[u].load({} + (step + u * kDepth) * a.s_{}_{});\n", r, pointer_.at(in.node),
                             x.name, rn_);
        known[in.node] = r + "[u][v]";
      } else if (in.read == RowRead::along) {
        // One value a step (its other axes, outer columns, at the thread's columns), loaded with
        // the vectors of the step, not where it is used (a load's latency a step otherwise).
        const std::string columns = column_offset(x.name, x.axes);
        s += fmt::format("  napkin::rows::compute_t<{}> {}[{}];  // {}[{}]\n", memory_type(x.dtype), r, kUnroll, x.name,
                         names_of(nd_, x.axes));
        loads += fmt::format("        if (step + u * kDepth < end) {}[u] = napkin::rows::get(a.{}{} + (step + u * kDepth) * a.s_{}_{});\n", r,
                             x.name, columns == "0" ? "" : " + (" + columns + ")", x.name, rn_);
        known[in.node] = r + "[u]";
      }
    }
    Writer w(nd_, known);
    std::string body;
    for (const auto& [node, statement] : sinks) {
      const std::string v = w.value(node, body, "          ");
      body += "          " + fmt::format(fmt::runtime(statement), v) + "\n";
    }
    if (column_code_reads_inner(body)) body = fmt::format("          const int64_t i_{0} = c_{0} + v;\n", inner) + body;
    s += fmt::format("  const int64_t begin = int64_t(blockIdx.y) * a.per_split_;\n"
                     "  const int64_t end = begin + a.per_split_ < a.length_ ? begin + a.per_split_ : a.length_;\n"
                     "  if (live)\n"
                     "    for (int64_t step = begin + g.depth; step < end; step += {0} * kDepth) {{\n"
                     "      #pragma unroll\n      for (int u = 0; u < {0}; ++u) {{\n{1}      }}\n"
                     "      #pragma unroll\n      for (int u = 0; u < {0}; ++u) {{\n"
                     "        const int64_t i_{2} = step + u * kDepth;\n        if (i_{2} >= end) break;\n{3}"
                     "        #pragma unroll\n        for (int v = 0; v < kV; ++v) {{\n{4}        }}\n      }}\n    }}\n",
                     kUnroll, loads, rn_, along, body);
    s += fmt::format("  g.reduce(sPartials, {});\n", fmt::join(accs, ", "));
    s += fmt::format("  if (!g.finish(sPartials, a.partial_, a.arrivals_, live, {})) return;  // another CTA completes these columns\n",
                     fmt::join(accs, ", "));
    s += "  if (g.depth != 0 || !live) return;\n";
    // The outputs, one value per column.
    std::map<NodeId, std::string> after = known;
    for (std::size_t i = 0; i < f_.reductions.size(); ++i) after[f_.reductions[i]] = fmt::format("acc{}[v].value", i);
    Writer out(nd_, after);
    std::string epilogue;
    for (const RowOutput& o : f_.outputs) {
      const ir::Output& put = nd_.outputs[o.index];
      const Node& x = nd_.node(put.node);
      const std::string v = out.value(put.node, epilogue, "    ");
      epilogue += fmt::format("    napkin::rows::put(a.{} + ({}) + v * a.s_{}_{}, {});  // {}[{}]\n", x.name, column_offset(x.name, put.axes),
                              x.name, inner, v, x.name, names_of(nd_, put.axes));
    }
    if (column_code_reads_inner(epilogue)) epilogue = fmt::format("    const int64_t i_{0} = c_{0} + v;\n", inner) + epilogue;
    s += "  #pragma unroll\n  for (int v = 0; v < kV; ++v) {\n" + epilogue + "  }\n";
    return s + "}\n\n";
  }

  std::string column_entry(const std::string& entry) const {
    std::string s = fmt::format(
        "extern \"C\" int32_t {}(const napkin_tensor* tensors, int32_t count, void* stream, char* err, int32_t err_len) {{\n", entry);
    s += "  napkin::TensorBinder tb(tensors, count);\n  Args a{};\n";
    s += "  bool aligned = true;  // every vector access aligned: else the instantiation of one column per access\n";
    const std::string inner = ax(f_.inner);
    auto bind = [&](NodeId n, const std::vector<AxisId>& axes, bool output, bool vectors) {
      const Node& x = nd_.node(n);
      std::string roles;
      for (AxisId a : axes) roles += role(a);
      s += fmt::format("  if (const napkin_tensor* t = tb.bind(\"{}\", {}, \"{}\")) {{\n", x.name, abi_dtype(x.dtype), roles);
      s += fmt::format("    a.{} = static_cast<{}{}*>(t->data);\n", x.name, output ? "" : "const ", memory_type(x.dtype));
      std::vector<std::string> other;
      for (std::size_t i = 0; i < axes.size(); ++i) {
        s += fmt::format("    a.s_{}_{} = t->strides[{}];\n", x.name, ax(axes[i]), i);
        if (axes[i] != f_.inner) other.push_back(fmt::format(" && a.s_{}_{} % kVector == 0", x.name, ax(axes[i])));
      }
      if (vectors)
        s += fmt::format("    aligned = aligned && a.s_{0}_{1} == 1 && napkin::rows::aligned(a.{0}, kVector){2};\n", x.name, inner,
                         fmt::join(other, ""));
      s += "  }\n";
    };
    for (const RowInput& in : f_.inputs) bind(in.node, nd_.node(in.node).axes, false, in.read == RowRead::rows);
    for (const RowOutput& o : f_.outputs) bind(nd_.outputs[o.index].node, nd_.outputs[o.index].axes, true, false);
    for (NodeId p : params_)
      s += fmt::format("  a.{0} = tb.param(\"{0}\", {1});\n", nd_.node(p).name, ir::format_number(nd_.node(p).scalar));
    s += "  if (!tb.error().empty()) return napkin::host::fail(tb.error(), err, err_len);\n";
    std::vector<AxisId> all = f_.row_axes;
    all.push_back(f_.row_axis);
    for (AxisId a : all) s += fmt::format("  const int64_t n_{} = tb.size('{}');\n", ax(a), role(a));
    s += fast_div_limits(std::vector<AxisId>(f_.row_axes.begin() + (f_.row_axes.empty() ? 0 : 1), f_.row_axes.end()));
    std::vector<std::string> terms;
    for (AxisId a : f_.row_axes) terms.push_back("n_" + ax(a));
    s += fmt::format("  a.columns_ = {};\n  a.length_ = n_{};\n", fmt::join(terms, " * "), rn_);
    for (std::size_t i = 1; i < f_.row_axes.size(); ++i) s += fmt::format("  a.div_{0}_ = napkin::rows::FastDiv(n_{0});\n", ax(f_.row_axes[i]));
    s += fmt::format("  aligned = aligned && n_{} % kVector == 0;\n", inner);
    s += "  if (a.columns_ == 0) return 0;\n  const cudaStream_t s = static_cast<cudaStream_t>(stream);\n";
    s += "  const int64_t vectors = aligned ? a.columns_ / kVector : a.columns_;\n";
    s += "  if ((vectors + kLanes - 1) / kLanes > INT32_MAX) return napkin::host::fail(\"more columns than one launch's grid takes\", err, err_len);\n";
    s += l_.vector > 1
             ? "  const cudaError_t e = aligned\n"
               "      ? napkin::rows::launch_columns<column_kernel<kVector>, napkin::rows::ColumnShape<kLanes, kDepth, kVector>, kAccumulators>((vectors + kLanes - 1) / kLanes, a.length_, a, s)\n"
               "      : napkin::rows::launch_columns<column_kernel<1>, napkin::rows::ColumnShape<kLanes, kDepth, 1>, kAccumulators>((vectors + kLanes - 1) / kLanes, a.length_, a, s);\n"
             : "  const cudaError_t e = napkin::rows::launch_columns<column_kernel<1>, napkin::rows::ColumnShape<kLanes, kDepth, 1>, kAccumulators>((vectors + kLanes - 1) / kLanes, a.length_, a, s);\n";
    s += "  if (e != cudaSuccess) return napkin::host::fail(std::string(\"column kernel: \") + cudaGetErrorString(e), err, err_len);\n";
    return s + "  return 0;\n}\n\n";
  }

  // Role letters for TensorBinder: 'r' for the row axis, '0' + i for the i-th row axis (at most 7:
  // an output has them all, and a tensor at most NAPKIN_MAX_RANK dims).
  char role(AxisId a) const {
    if (a == f_.row_axis) return 'r';
    const auto at = std::find(f_.row_axes.begin(), f_.row_axes.end(), a);
    NAPKIN_CHECK(at != f_.row_axes.end(), "every axis but the row axis is a row axis");
    return static_cast<char>('0' + (at - f_.row_axes.begin()));
  }

  std::string entry_point(const std::string& entry) const {
    std::string s = fmt::format(
        "extern \"C\" int32_t {}(const napkin_tensor* tensors, int32_t count, void* stream, char* err, int32_t err_len) {{\n", entry);
    s += "  napkin::TensorBinder tb(tensors, count);\n  Args a{};\n";
    s += "  bool aligned = true;  // every vector access aligned: else the instantiation of one element per access\n";
    std::vector<std::string> vector_strides;  // row-axis strides of the vector tensors (multiples of kVector)
    auto bind = [&](NodeId n, const std::vector<AxisId>& axes, bool output, bool vectors, bool row_stride) {
      const Node& x = nd_.node(n);
      std::string roles;
      for (AxisId a : axes) roles += role(a);
      s += fmt::format("  if (const napkin_tensor* t = tb.bind(\"{}\", {}, \"{}\")) {{\n", x.name, abi_dtype(x.dtype), roles);
      s += fmt::format("    a.{} = static_cast<{}{}*>(t->data);\n", x.name, output ? "" : "const ", memory_type(x.dtype));
      for (std::size_t i = 0; i < axes.size(); ++i) {
        if (axes[i] != f_.row_axis || row_stride) {
          s += fmt::format("    a.s_{}_{} = t->strides[{}];\n", x.name, ax(axes[i]), i);
          if (vectors) vector_strides.push_back(fmt::format("a.s_{}_{}", x.name, ax(axes[i])));
        } else if (vectors) {
          s += fmt::format("    if (t->strides[{0}] != 1) tb.fail_with(napkin::rows::stride_error(\"{1}\", \"{2}\", t->strides[{0}]));\n", i,
                           x.name, ax(axes[i]));
        }
      }
      if (vectors) s += fmt::format("    aligned = aligned && napkin::rows::aligned(a.{}, kVector);\n", x.name);
      s += "  }\n";
    };
    for (const RowInput& in : f_.inputs)
      bind(in.node, nd_.node(in.node).axes, false, vectorised(in.read), in.read == RowRead::gather);
    for (const RowOutput& o : f_.outputs) {
      const ir::Output& out = nd_.outputs[o.index];
      bind(out.node, out.axes, true, o.write == RowWrite::vectors, o.write == RowWrite::strided);
    }
    for (NodeId p : params_)
      s += fmt::format("  a.{0} = tb.param(\"{0}\", {1});\n", nd_.node(p).name, ir::format_number(nd_.node(p).scalar));
    s += "  if (!tb.error().empty()) return napkin::host::fail(tb.error(), err, err_len);\n";
    // Sizes.
    std::vector<AxisId> all = f_.row_axes;
    all.push_back(f_.row_axis);
    for (AxisId a : all) {
      bool bound = false;  // a row axis only indices carry has no tensor to give its size
      for (const RowInput& in : f_.inputs) bound = bound || contains(nd_.node(in.node).axes, a);
      for (const ir::Output& o : nd_.outputs) bound = bound || contains(o.axes, a);
      s += bound ? fmt::format("  const int64_t n_{} = tb.size('{}');\n", ax(a), role(a))
                 : fmt::format("  const int64_t n_{} = kRowLength;  // no tensor has {}\n", ax(a), ax(a));
    }
    if (f_.reduces)
      s += fmt::format("  if (n_{0} != kRowLength)\n    return napkin::host::fail(\"axis {0} has size \" + std::to_string(n_{0}) + \", expected {1} "
                       "(the row length, fixed when this kernel was built)\", err, err_len);\n", rn_, f_.row_length);
    std::vector<AxisId> divided(f_.row_axes.size() > 1 ? f_.row_axes.begin() + 1 : f_.row_axes.end(), f_.row_axes.end());
    if (!f_.reduces) divided.push_back(f_.row_axis);
    s += fast_div_limits(divided);
    std::vector<std::string> rows_terms;
    for (AxisId a : f_.row_axes) rows_terms.push_back("n_" + ax(a));
    s += fmt::format("  a.rows_ = {};\n", rows_terms.empty() ? std::string("1") : fmt::format("{}", fmt::join(rows_terms, " * ")));
    for (std::size_t i = 1; i < f_.row_axes.size(); ++i) s += fmt::format("  a.div_{0}_ = napkin::rows::FastDiv(n_{0});\n", ax(f_.row_axes[i]));
    std::string strides_ok;
    for (const std::string& v : vector_strides) strides_ok += fmt::format(" && {} % kVector == 0", v);
    if (f_.reduces) {
      s += fmt::format("  aligned = aligned{};\n", strides_ok);
      s += "  const cudaStream_t s = static_cast<cudaStream_t>(stream);\n";
      s += "  const int64_t ctas = (a.rows_ + kRowsPerCta - 1) / kRowsPerCta;\n";
      s += l_.vector > 1 ? "  const cudaError_t e = aligned ? napkin::rows::launch<row_kernel<kVector>, kCtaThreads>(ctas, a, s)\n"
                           "                              : napkin::rows::launch<row_kernel<1>, kCtaThreads>(ctas, a, s);\n"
                         : "  const cudaError_t e = napkin::rows::launch<row_kernel<1>, kCtaThreads>(ctas, a, s);\n";
      s += "  if (e != cudaSuccess) return napkin::host::fail(std::string(\"row kernel: \") + cudaGetErrorString(e), err, err_len);\n";
    } else {
      s += fmt::format("  a.length_ = n_{};\n", rn_);
      if (may_flatten()) {
        // Dense in the first output's order: expected strides, innermost first.
        std::vector<std::string> conds;
        std::string dense = "n_" + rn_;
        for (std::size_t i = f_.row_axes.size(); i-- > 0;) {
          const AxisId a = f_.row_axes[i];
          for (const RowInput& in : f_.inputs)
            if (vectorised(in.read)) conds.push_back(fmt::format("a.s_{}_{} == {}", nd_.node(in.node).name, ax(a), dense));
          for (const RowOutput& o : f_.outputs)
            conds.push_back(fmt::format("a.s_{}_{} == {}", nd_.node(nd_.outputs[o.index].node).name, ax(a), dense));
          dense += " * n_" + ax(a);
        }
        if (!conds.empty()) {
          s += "  // Every tensor dense in the output's order: one row of all the elements (no index arithmetic per vector).\n";
          s += fmt::format("  if ({}) {{\n    a.length_ = a.rows_ * n_{};\n    a.rows_ = 1;\n  }}\n", fmt::join(conds, " && "), rn_);
        }
      }
      s += fmt::format("  aligned = aligned && a.length_ % kVector == 0{};\n",
                       strides_ok.empty() ? std::string() : " && (a.rows_ == 1 || (" + strides_ok.substr(4) + "))");
      s += "  if (a.rows_ > 1) a.per_row_ = napkin::rows::FastDiv(aligned ? a.length_ / kVector : a.length_);\n";
      s += "  const cudaStream_t s = static_cast<cudaStream_t>(stream);\n";
      s += "  const int64_t elements = a.rows_ * a.length_;\n";
      s += l_.vector > 1
               ? "  const cudaError_t e = aligned ? napkin::rows::launch<elementwise_kernel<kVector>, kCtaThreads>((elements / kVector + kCtaThreads - 1) / kCtaThreads, a, s)\n"
                 "                              : napkin::rows::launch<elementwise_kernel<1>, kCtaThreads>((elements + kCtaThreads - 1) / kCtaThreads, a, s);\n"
               : "  const cudaError_t e = napkin::rows::launch<elementwise_kernel<1>, kCtaThreads>((elements + kCtaThreads - 1) / kCtaThreads, a, s);\n";
      s += "  if (e != cudaSuccess) return napkin::host::fail(std::string(\"elementwise kernel: \") + cudaGetErrorString(e), err, err_len);\n";
    }
    return s + "  return 0;\n}\n";
  }

  // An elementwise kernel may run as one row of all the elements when no code reads an index and
  // every tensor has every axis with the row axis innermost (the host then checks the strides).
  bool may_flatten() const {
    for (NodeId n : used_)
      if (nd_.node(n).op == OpKind::iota) return false;
    for (const RowInput& in : f_.inputs)
      if (in.read == RowRead::gather || in.read == RowRead::per_row ||
          (vectorised(in.read) && nd_.node(in.node).axes.size() != f_.row_axes.size() + 1))
        return false;
    for (const RowOutput& o : f_.outputs)
      if (o.write != RowWrite::vectors) return false;
    return true;
  }

  const ir::Diagram& d_;
  const RowForm& f_;
  const ir::Diagram& nd_;
  const RowLaunch& l_;
  std::string rn_;
  std::map<NodeId, std::string> row_known_;  // values known at row scope (constants, statistics, per-row values)
  std::map<NodeId, std::string> reciprocals_;  // divisor known at row scope -> the name of its reciprocal
  std::vector<NodeId> params_;
  std::set<NodeId> used_;
  std::map<NodeId, std::string> fragment_, pointer_, out_vector_;
};

}  // namespace

std::string emit_row_kernel(const ir::Diagram& d, const RowForm& f, const plan::RowSchedule& s, const KernelProvenance& prov,
                            const std::string& entry_name) {
  const RowLaunch l = row_launch(f, s);
  return Emitter(d, f, l).unit(prov, s, entry_name);
}

}  // namespace napkin::emit
