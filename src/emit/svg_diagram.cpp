// SPDX-License-Identifier: Apache-2.0
// The diagram as a neural circuit diagram (svg.h has the contract).
//
// Layout: a layered drawing. Column 0 holds the inputs, column D + 1 the outputs, and column
// c the ops at topological depth c. A tensor that skips columns gets a pass-through item in
// each (the NCD identity wire), so wires only ever join adjacent columns and never cross a
// box. Columns are placed left to right; in each, items are ordered and placed at the height
// that makes their wires straight (the mean of their operands' heights), pushed down only
// as far as needed to keep a fixed gap. The gap between two stacked bundles equals the gap
// between two operand ports of a box, so operands stacked as their box expects them flow in
// straight.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "emit/svg.h"
#include "emit/svg_canvas.h"
#include "ir/printer.h"

namespace napkin::emit {

namespace {

using ir::Diagram;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

constexpr double kPitch = 14;      // between the wires of one bundle
constexpr double kGap = 14;        // between bundles: stacked items, and a box's operand ports
constexpr double kHeader = 19;     // box header band (op label)
constexpr double kFooterLine = 12; // one footer line (over axes, accumulator)
constexpr double kPad = 6;         // above and below the wires inside a box
constexpr double kBend = 40;       // horizontal room for wires to change height
constexpr double kLabelFont = 9.5; // wire labels
constexpr double kBoxFont = 11;    // op labels
constexpr double kNameFont = 12;   // tensor names
constexpr double kMargin = 18;
constexpr double kCrossing = 30;   // room for an output's axis permutation
constexpr std::string_view kBoxStroke = "#333333";
constexpr std::string_view kMuted = "#555555";

// --- what is drawn ----------------------------------------------------------------------------

// Constants, axis indices and elementwise ops on nothing else (masks such as q >= k) are
// folded into the label of the box that uses them; every other node is drawn.
std::vector<bool> folded_nodes(const Diagram& d) {
  std::vector<bool> folded(d.nodes.size(), false);
  std::vector<bool> is_output(d.nodes.size(), false);
  for (const ir::Output& o : d.outputs) is_output[static_cast<std::size_t>(o.node)] = true;
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const Node& n = d.nodes[i];
    if (is_output[i] || n.op == OpKind::input) continue;
    if (n.op == OpKind::constant || n.op == OpKind::iota) {
      folded[i] = true;
    } else if (ir::is_elementwise(n.op) || n.op == OpKind::cast || n.op == OpKind::scale ||
               n.op == OpKind::softcap) {
      folded[i] = std::all_of(n.operands.begin(), n.operands.end(),
                              [&](NodeId m) { return folded[static_cast<std::size_t>(m)]; });
    }
  }
  return folded;
}

std::string number_text(double v) {
  if (std::isinf(v)) return v < 0 ? "−inf" : "inf";
  std::string s = fmt::format("{:.4g}", v);
  if (!s.empty() && s[0] == '-') s = "−" + s.substr(1);
  return s;
}

std::string_view symbol(OpKind k) {
  switch (k) {
    case OpKind::add: return "+";
    case OpKind::sub: return "−";
    case OpKind::mul: return "×";
    case OpKind::div: return "÷";
    case OpKind::lt: return "<";
    case OpKind::le: return "≤";
    case OpKind::gt: return ">";
    case OpKind::ge: return "≥";
    case OpKind::eq: return "=";
    case OpKind::ne: return "≠";
    case OpKind::logical_and: return "and";
    case OpKind::logical_or: return "or";
    default: return ir::op_name(k);
  }
}

bool infix(OpKind k) { return ir::op_class(k) == ir::OpClass::binary && k != OpKind::max && k != OpKind::min; }

// Labels for folded expressions and boxes. Named folded values appear by name and are
// defined once in the legend ("where visible = ...").
class Labeller {
 public:
  Labeller(const Diagram& d, const std::vector<bool>& folded) : d_(d), folded_(folded) {}

  // The box label of drawn node n: its op, with drawn operands written "·".
  std::string box(NodeId id) {
    const Node& n = d_.node(id);
    switch (n.op) {
      case OpKind::contract: return "contract";
      case OpKind::reduce_sum: return "sum";
      case OpKind::reduce_max: return "max";
      case OpKind::cast: return fmt::format("as {}", dtype_name(n.dtype));
      case OpKind::scale: return "× " + number_text(n.scalar);
      case OpKind::softcap: return "softcap " + number_text(n.scalar);
      default: break;
    }
    if (ir::op_class(n.op) == ir::OpClass::composite) return std::string(ir::op_name(n.op));
    const bool all_drawn = std::none_of(n.operands.begin(), n.operands.end(), [&](NodeId m) {
      return folded_[static_cast<std::size_t>(m)];
    });
    if (all_drawn) {
      if (n.op == OpKind::abs) return "|·|";
      if (n.op == OpKind::logical_not) return "not";
      return std::string(symbol(n.op));
    }
    return expr(id, true);
  }

  // name = expression, for every named folded value the labels mention, in id order.
  std::vector<std::string> where() {
    std::vector<std::string> out;
    for (NodeId id : named_) out.push_back(d_.node(id).name + " = " + expr(id, true));
    return out;
  }

 private:
  // `in_infix`: the operand of an infix operator, parenthesised when it is one itself.
  std::string operand(NodeId m, bool in_infix) {
    if (!folded_[static_cast<std::size_t>(m)]) return "·";
    const Node& n = d_.node(m);
    std::string s = expr(m, false);
    const bool compound = (ir::op_class(n.op) == ir::OpClass::binary && infix(n.op)) ||
                          n.op == OpKind::cast || n.op == OpKind::scale;
    return in_infix && compound && n.name.empty() ? "(" + s + ")" : s;
  }

  std::string expr(NodeId id, bool top) {
    const Node& n = d_.node(id);
    if (!top && !n.name.empty() && folded_[static_cast<std::size_t>(id)] &&
        n.op != OpKind::constant) {
      if (std::find(named_.begin(), named_.end(), id) == named_.end()) {
        named_.push_back(id);
        std::sort(named_.begin(), named_.end());
      }
      return n.name;
    }
    const bool in_infix = (ir::op_class(n.op) == ir::OpClass::binary && infix(n.op)) ||
                          n.op == OpKind::neg || n.op == OpKind::logical_not ||
                          n.op == OpKind::cast || n.op == OpKind::scale;
    auto op = [&](std::size_t i) { return operand(n.operands.at(i), in_infix); };
    switch (n.op) {
      case OpKind::constant: return n.name.empty() ? number_text(n.scalar) : n.name;
      case OpKind::iota: return d_.axis(n.axis).name;
      case OpKind::neg: return "−" + op(0);
      case OpKind::abs: return "|" + op(0) + "|";
      case OpKind::logical_not: return "not " + op(0);
      case OpKind::cast: return fmt::format("{} as {}", op(0), dtype_name(n.dtype));
      case OpKind::scale: return fmt::format("{} × {}", op(0), number_text(n.scalar));
      case OpKind::softcap: return fmt::format("softcap({}, {})", op(0), number_text(n.scalar));
      case OpKind::select: return fmt::format("select({}, {}, {})", op(0), op(1), op(2));
      default: break;
    }
    switch (ir::op_class(n.op)) {
      case ir::OpClass::unary: return fmt::format("{}({})", ir::op_name(n.op), op(0));
      case ir::OpClass::binary:
        if (infix(n.op)) return fmt::format("{} {} {}", op(0), symbol(n.op), op(1));
        return fmt::format("{}({}, {})", ir::op_name(n.op), op(0), op(1));
      default: return std::string(ir::op_name(n.op));
    }
  }

  const Diagram& d_;
  const std::vector<bool>& folded_;
  std::vector<NodeId> named_;
};

// --- schedule lookups ---------------------------------------------------------------------

int level_index(const sched::Schedule* s, std::string_view level) {
  if (!s) return -1;
  for (std::size_t i = 0; i < s->levels.size(); ++i)
    if (s->levels[i].level == level) return static_cast<int>(i);
  return -1;
}

// The label of axis `a` on a tensor living at `level`: g_a=N when the level or one enclosing
// it tiles the axis, s_a=N when one streams it (the innermost wins), else the axis name.
std::vector<TextRun> axis_label(const Diagram& d, const sched::Schedule* s, std::string_view level,
                                ir::AxisId a, bool with_size) {
  const std::string& name = d.axis(a).name;
  for (int i = level_index(s, level); i >= 0; --i) {
    const sched::LevelSchedule& l = s->levels[static_cast<std::size_t>(i)];
    for (const sched::TiledAxis& t : l.tiles)
      if (t.axis == name) return {{"g"}, {name, true}, {fmt::format("={}", t.tile)}};
    for (const sched::StreamedAxis& t : l.streams)
      if (t.axis == name) return {{"s"}, {name, true}, {fmt::format("={}", t.chunk)}};
  }
  if (with_size) return {{fmt::format("{}={}", name, d.axis(a).size)}};
  return {{name}};
}

// The accumulators of a streamed axis (innermost level first), or nothing.
std::optional<std::string> accumulator_of(const sched::Schedule* s, std::string_view axis) {
  if (!s) return std::nullopt;
  for (auto l = s->levels.rbegin(); l != s->levels.rend(); ++l)
    for (const sched::StreamedAxis& t : l->streams)
      if (t.axis == axis && !t.accumulators.empty()) return sched::accumulators_text(t.accumulators);
  return std::nullopt;
}

// --- layout -------------------------------------------------------------------------------------

enum class Kind { input, box, pass, output };

struct Item {
  Kind kind = Kind::pass;
  NodeId node = -1;     // the tensor carried (for a box, the node computed)
  int column = 0;
  std::vector<int> preds;  // feeding items: a box's drawn operands in order; else one
  std::vector<int> succs;
  std::vector<ir::AxisId> wires;  // the tensor's axes (empty: a scalar, one dotted wire)
  // Geometry. `top` is the top of the wire region; a box adds a header above and a footer
  // below it. For boxes, x and w are the box; for the others the column's extent.
  double top = 0, region_h = 0, above = 0, below = 0;
  double x = 0, w = 0;
  std::vector<double> port_top;  // box: offset of each operand's first wire slot from top
  double out_off = 0;            // offset of the first output wire slot from top
  std::string header;            // box label
  std::vector<std::string> footer;
  int n_wires() const { return std::max<int>(1, static_cast<int>(wires.size())); }
  double out_y(int i) const { return top + out_off + (i + 0.5) * kPitch; }
  double port_y(std::size_t p, int i) const { return top + port_top[p] + (i + 0.5) * kPitch; }
  double extent_top() const { return top - above; }
  double extent_bottom() const { return top + region_h + below; }
};

struct Column {
  double x = 0, w = 0;
  double label_room = 0;  // after the column: wire and name labels of its boxes
  std::vector<int> items;  // top to bottom once placed
};


class DiagramDrawing {
 public:
  DiagramDrawing(const Diagram& d, const sched::Schedule* s, const arch::Machine* m)
      : d_(d), s_(s), m_(m), folded_(folded_nodes(d)), labeller_(d, folded_) {
    build_items();
    size_items();
    place_columns();
    place_items();
    draw();
  }

  std::string svg() const {
    const std::string file = file_name();
    const std::vector<std::string> provenance = {
        fmt::format("napkin {}: neural circuit diagram", napkin_version()),
        fmt::format("diagram {}: {}", file, ir::diagram_key(d_)),
        fmt::format("canonical text hash {:016x}", ir::stable_hash(ir::print_diagram(d_))),
        fmt::format("schedule: {}", s_ ? sched::to_string(*s_) : "(none)"),
        fmt::format("machine: {}", m_ ? m_->name : "(none)")};
    return canvas_.finish(width_, height_, provenance, file + ": " + ir::diagram_key(d_));
  }
  std::vector<std::string> overlaps() const { return canvas_.overlaps(); }

 private:
  // The file name without its directory, so that a drawing does not depend on where it ran.
  std::string file_name() const {
    const std::string& p = d_.source_name;
    const auto slash = p.find_last_of('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
  }

  std::string level_of(NodeId n) const { return tensor_level(d_, s_, n); }
  bool is_output(NodeId n) const {
    return std::any_of(d_.outputs.begin(), d_.outputs.end(), [&](const ir::Output& o) { return o.node == n; });
  }
  // The dtype text of a tensor: its own, and "bf16 → fp8e4m3" when a level keeps it in another.
  std::string dtype_text(NodeId n) const {
    const Node& node = d_.node(n);
    std::string text(dtype_name(node.dtype));
    if (s_ && !node.name.empty())
      for (auto l = s_->levels.rbegin(); l != s_->levels.rend(); ++l)
        for (const sched::Residency& r : l->keep)
          if (r.tensor == node.name && r.dtype && *r.dtype != node.dtype)
            return text + " → " + std::string(dtype_name(*r.dtype));
    return text;
  }

  // --- items -----------------------------------------------------------------------------
  void build_items() {
    const std::size_t count = d_.nodes.size();
    std::vector<int> depth(count, 0);
    int max_depth = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const Node& n = d_.nodes[i];
      if (folded_[i] || n.op == OpKind::input) continue;
      int dpt = 0;
      for (NodeId m : n.operands)
        if (!folded_[static_cast<std::size_t>(m)]) dpt = std::max(dpt, depth[static_cast<std::size_t>(m)]);
      depth[i] = dpt + 1;
      max_depth = std::max(max_depth, depth[i]);
    }
    output_column_ = max_depth + 1;
    columns_.resize(static_cast<std::size_t>(output_column_ + 1));
    std::vector<int> last_use(count, -1);
    for (std::size_t i = 0; i < count; ++i) {
      if (folded_[i]) continue;
      for (NodeId m : d_.nodes[i].operands)
        if (!folded_[static_cast<std::size_t>(m)])
          last_use[static_cast<std::size_t>(m)] = std::max(last_use[static_cast<std::size_t>(m)], depth[i]);
    }
    for (const ir::Output& o : d_.outputs) last_use[static_cast<std::size_t>(o.node)] = output_column_;

    at_.assign(count, {});
    for (std::size_t i = 0; i < count; ++i) {
      if (folded_[i]) continue;
      const Node& n = d_.nodes[i];
      const NodeId id = static_cast<NodeId>(i);
      Item main;
      main.kind = n.op == OpKind::input ? Kind::input : Kind::box;
      main.node = id;
      main.column = depth[i];
      main.wires = n.axes;
      for (NodeId m : n.operands)
        if (!folded_[static_cast<std::size_t>(m)]) main.preds.push_back(item_at(m, depth[i] - 1));
      add(std::move(main));
      for (int c = depth[i] + 1; c < last_use[i]; ++c) {
        Item pass;
        pass.kind = Kind::pass;
        pass.node = id;
        pass.column = c;
        pass.wires = n.axes;
        pass.preds = {item_at(id, c - 1)};
        add(std::move(pass));
      }
    }
    for (const ir::Output& o : d_.outputs) {
      Item out;
      out.kind = Kind::output;
      out.node = o.node;
      out.column = output_column_;
      out.wires = o.axes;
      out.preds = {item_at(o.node, output_column_ - 1)};
      add(std::move(out));
    }
    for (std::size_t i = 0; i < items_.size(); ++i)
      for (int p : items_[i].preds) items_[static_cast<std::size_t>(p)].succs.push_back(static_cast<int>(i));
  }

  int item_at(NodeId n, int column) const {
    auto it = at_[static_cast<std::size_t>(n)].find(column);
    NAPKIN_CHECK(it != at_[static_cast<std::size_t>(n)].end(), "diagram layout: no item for an operand");
    return it->second;
  }

  void add(Item item) {
    const int index = static_cast<int>(items_.size());
    if (item.kind != Kind::output) at_[static_cast<std::size_t>(item.node)][item.column] = index;
    columns_[static_cast<std::size_t>(item.column)].items.push_back(index);
    items_.push_back(std::move(item));
  }

  // --- sizes -----------------------------------------------------------------------------
  void size_items() {
    for (Item& it : items_) {
      const double wires_h = it.n_wires() * kPitch;
      if (it.kind != Kind::box) {
        it.region_h = wires_h;
        continue;
      }
      const Node& n = d_.node(it.node);
      it.header = labeller_.box(it.node);
      if (!n.over.empty()) {
        std::string over = "over";
        for (ir::AxisId a : n.over) over += " " + d_.axis(a).name;
        it.footer.push_back(over);
        for (ir::AxisId a : n.over)
          if (auto acc = accumulator_of(s_, d_.axis(a).name)) {
            it.footer.push_back(*acc);
            break;
          }
      }
      double ports_h = 0;
      for (std::size_t p = 0; p < it.preds.size(); ++p) {
        if (p) ports_h += kGap;
        ports_h += items_[static_cast<std::size_t>(it.preds[p])].n_wires() * kPitch;
      }
      const double inner = std::max(ports_h, wires_h);
      it.region_h = inner + 2 * kPad;
      double y = kPad + (inner - ports_h) / 2;
      for (int p : it.preds) {
        it.port_top.push_back(y);
        y += items_[static_cast<std::size_t>(p)].n_wires() * kPitch + kGap;
      }
      it.out_off = kPad + (inner - wires_h) / 2;
      it.above = kHeader;
      it.below = it.footer.empty() ? 4 : 4 + kFooterLine * static_cast<double>(it.footer.size());
      double w = text_width(it.header, kBoxFont) + 16;
      for (const std::string& f : it.footer) w = std::max(w, text_width(f, kLabelFont) + 14);
      it.w = std::max(w, 44.0);
    }
  }

  std::vector<TextRun> wire_label(NodeId n, std::string_view level, int i, bool with_size,
                                  const std::vector<ir::AxisId>& wires) const {
    (void)n;
    if (wires.empty()) return {};
    return axis_label(d_, s_, level, wires[static_cast<std::size_t>(i)], with_size);
  }

  double labels_width(NodeId n, std::string_view level, bool with_size,
                      const std::vector<ir::AxisId>& wires) const {
    double w = 0;
    for (std::size_t i = 0; i < wires.size(); ++i)
      w = std::max(w, runs_width(wire_label(n, level, static_cast<int>(i), with_size, wires), kLabelFont));
    return w;
  }

  double name_width(NodeId n) const {
    const Node& node = d_.node(n);
    return text_width(node.name, kNameFont, true) + 5 + text_width(dtype_text(n), kLabelFont);
  }

  // --- columns -----------------------------------------------------------------------------
  void place_columns() {
    // Column 0: name | labels at gmem | transfer tick | labels at the kept level.
    double name_w = 0, gmem_w = 0, kept_w = 0;
    for (int i : columns_[0].items) {
      const Item& it = items_[static_cast<std::size_t>(i)];
      if (it.kind != Kind::input) continue;
      name_w = std::max(name_w, name_width(it.node));
      gmem_w = std::max(gmem_w, labels_width(it.node, arch::kGmem, true, it.wires));
      const std::string level = level_of(it.node);
      if (level != arch::kGmem) kept_w = std::max(kept_w, labels_width(it.node, level, true, it.wires));
    }
    input_wire_x_ = kMargin + name_w + 8;
    input_tick_x_ = input_wire_x_ + gmem_w + 12;
    Column& c0 = columns_[0];
    c0.x = kMargin;
    c0.w = kept_w > 0 ? input_tick_x_ + 4 + kept_w + 8 - kMargin : input_tick_x_ - kMargin;
    double x = c0.x + c0.w + kBend;
    for (int c = 1; c < output_column_; ++c) {
      Column& col = columns_[static_cast<std::size_t>(c)];
      col.x = x;
      col.w = 24;
      for (int i : col.items) {
        const Item& it = items_[static_cast<std::size_t>(i)];
        if (it.kind != Kind::box) continue;
        col.w = std::max(col.w, it.w + 16);
        double room = labels_width(it.node, level_of(it.node), false, it.wires);
        if (!d_.node(it.node).name.empty() && !is_output(it.node)) room = std::max(room, name_width(it.node));
        col.label_room = std::max(col.label_room, room + 10);
      }
      for (int i : col.items) {
        Item& it = items_[static_cast<std::size_t>(i)];
        if (it.kind == Kind::box) it.x = col.x + (col.w - it.w) / 2;
        else it.x = col.x, it.w = col.w;
      }
      x = col.x + col.w + col.label_room + kBend;
    }
    Column& out = columns_[static_cast<std::size_t>(output_column_)];
    out.x = x;
    double labels_w = 0, names_w = 0;
    bool permuted = false, transfer = false;
    for (int i : out.items) {
      const Item& it = items_[static_cast<std::size_t>(i)];
      labels_w = std::max(labels_w, labels_width(it.node, arch::kGmem, true, it.wires));
      names_w = std::max(names_w, name_width(it.node));
      permuted |= it.wires != d_.node(it.node).axes;
      transfer |= level_of(it.node) != arch::kGmem;
    }
    output_cross_x_ = out.x + (permuted ? kCrossing : 0);
    output_tick_x_ = output_cross_x_ + (transfer ? 10 : 0);
    output_label_x_ = output_tick_x_ + (output_tick_x_ > output_cross_x_ ? 6 : 4);
    output_end_x_ = output_label_x_ + labels_w + 6;
    out.w = output_end_x_ + 6 + names_w - out.x;
    for (int i : out.items) items_[static_cast<std::size_t>(i)].x = out.x;
    for (int i : columns_[0].items) items_[static_cast<std::size_t>(i)].x = c0.x;
    width_ = out.x + out.w + kMargin;
  }

  // --- heights ---------------------------------------------------------------------------
  double desired_top(const Item& it) const {
    double sum = 0;
    for (std::size_t p = 0; p < it.preds.size(); ++p) {
      const Item& src = items_[static_cast<std::size_t>(it.preds[p])];
      const double src_top = src.out_y(0) - kPitch / 2;
      sum += src_top - (it.kind == Kind::box ? it.port_top[p] : 0);
    }
    return sum / static_cast<double>(it.preds.size());
  }

  // The first column where the tensor carried by pass item i is used by a box or an output.
  int first_use_of_pass(int i) const {
    int c = output_column_;
    for (int s : items_[static_cast<std::size_t>(i)].succs) {
      const Item& succ = items_[static_cast<std::size_t>(s)];
      c = std::min(c, succ.kind == Kind::pass ? first_use_of_pass(s) : succ.column);
    }
    return c;
  }

  void place_items() {
    // Inputs top to bottom by the column that first uses them (then declaration order), so
    // that late operands such as attention's V run below the early ones instead of across.
    std::vector<int>& inputs = columns_[0].items;
    auto first_use = [&](int i) {
      int c = output_column_;
      for (int s : items_[static_cast<std::size_t>(i)].succs)
        if (items_[static_cast<std::size_t>(s)].kind != Kind::pass) c = std::min(c, items_[static_cast<std::size_t>(s)].column);
        else c = std::min(c, first_use_of_pass(s));
      return c;
    };
    std::stable_sort(inputs.begin(), inputs.end(), [&](int a, int b) { return first_use(a) < first_use(b); });
    double y = 0;
    for (int i : columns_[0].items) {
      Item& it = items_[static_cast<std::size_t>(i)];
      it.top = y + it.above;
      y = it.extent_bottom() + kGap;
    }
    for (std::size_t c = 1; c < columns_.size(); ++c) {
      std::vector<int>& order = columns_[c].items;
      std::vector<std::pair<double, int>> keyed;
      for (int i : order) keyed.push_back({desired_top(items_[static_cast<std::size_t>(i)]), i});
      std::stable_sort(keyed.begin(), keyed.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      order.clear();
      double floor = -1e9;
      for (const auto& [want, i] : keyed) {
        Item& it = items_[static_cast<std::size_t>(i)];
        it.top = std::max(want, floor + it.above);
        floor = it.extent_bottom() + kGap;
        order.push_back(i);
      }
    }
    double min_top = 1e18, max_bottom = -1e18;
    for (const Item& it : items_) {
      min_top = std::min(min_top, it.extent_top());
      max_bottom = std::max(max_bottom, it.extent_bottom());
    }
    const double shift = kTitleHeight - min_top;
    for (Item& it : items_) it.top += shift;
    content_bottom_ = max_bottom + shift;
  }

  // --- drawing ---------------------------------------------------------------------------
  static std::string stroke(std::string_view colour, bool scalar, double width = 1.6) {
    return fmt::format("fill=\"none\" stroke=\"{}\" stroke-width=\"{}\"{}", colour, fmt_num(width),
                       scalar ? " stroke-dasharray=\"1.5 2.5\" stroke-linecap=\"round\"" : "");
  }

  double out_start_x(const Item& it) const {
    if (it.kind == Kind::box) return it.x + it.w;
    return it.x + columns_[static_cast<std::size_t>(it.column)].w;
  }
  double bend_x(const Item& it) const {
    const Column& c = columns_[static_cast<std::size_t>(it.column)];
    return c.x + c.w + c.label_room;
  }

  static std::string curve(double x0, double y0, double x1, double y1) {
    if (std::fabs(y0 - y1) < 0.05) return fmt::format("M{} {}H{}", fmt_num(x0), fmt_num(y0), fmt_num(x1));
    const double xm = (x0 + x1) / 2;
    return fmt::format("M{} {}C{} {} {} {} {} {}", fmt_num(x0), fmt_num(y0), fmt_num(xm), fmt_num(y0),
                       fmt_num(xm), fmt_num(y1), fmt_num(x1), fmt_num(y1));
  }

  void draw_title() {
    canvas_.text(kMargin, 24, file_name(), {.size = 14, .bold = true}, "title");
    std::string sub = ir::diagram_key(d_);
    if (m_) sub += "  ·  " + m_->display_name;
    canvas_.text(kMargin, 40, sub, {.size = 10, .fill = kMuted}, "subtitle");
    width_ = std::max(width_, kMargin + text_width(sub, 10) + kMargin);
  }

  void draw_label(double x, double wire_y, const std::vector<TextRun>& runs, std::string_view colour,
                  const std::string& what) {
    if (runs.empty()) return;
    canvas_.text_runs(x, wire_y - 3.5, runs, {.size = kLabelFont, .fill = colour}, what);
  }

  void draw_name(double x, double baseline, NodeId n, std::string_view anchor) {
    const Node& node = d_.node(n);
    const double name_w = text_width(node.name, kNameFont, true);
    const double total = name_width(n);
    const double left = anchor == "end" ? x - total : x;
    canvas_.text(left, baseline, node.name, {.size = kNameFont, .bold = true}, "name " + node.name);
    canvas_.text(left + name_w + 5, baseline, dtype_text(n), {.size = kLabelFont, .fill = kMuted},
                 "dtype of " + node.name);
  }

  void draw_tick(double x, const Item& it, std::string_view colour) {
    canvas_.line(x, it.out_y(0) - 5, x, it.out_y(it.n_wires() - 1) + 5,
                 fmt::format("stroke=\"{}\" stroke-width=\"2.5\"", colour));
  }

  void draw_input(const Item& it) {
    const Node& n = d_.node(it.node);
    const bool scalar = it.wires.empty();
    const std::string level = level_of(it.node);
    const std::string_view gmem = level_colour(arch::kGmem);
    const double end = it.x + columns_[0].w;
    const double mid = it.out_y(0) + (it.n_wires() - 1) * kPitch / 2;
    draw_name(input_wire_x_ - 8, mid + 4, it.node, "end");
    const bool transfer = level != arch::kGmem;
    for (int i = 0; i < it.n_wires(); ++i) {
      const double y = it.out_y(i);
      const double split = transfer ? input_tick_x_ : end;
      canvas_.path(fmt::format("M{} {}H{}", fmt_num(input_wire_x_), fmt_num(y), fmt_num(split)), stroke(gmem, scalar));
      if (transfer)
        canvas_.path(fmt::format("M{} {}H{}", fmt_num(split), fmt_num(y), fmt_num(end)),
                     stroke(level_colour(level), scalar));
      draw_label(input_wire_x_ + 3, y, wire_label(it.node, arch::kGmem, i, true, it.wires), gmem,
                 fmt::format("label {} wire {}", n.name, i));
      if (transfer)
        draw_label(input_tick_x_ + 5, y, wire_label(it.node, level, i, true, it.wires), level_colour(level),
                   fmt::format("label {} wire {} at {}", n.name, i, level));
    }
    if (transfer) draw_tick(input_tick_x_, it, level_colour(level));
  }

  void draw_box(const Item& it) {
    const Node& n = d_.node(it.node);
    const std::string level = level_of(it.node);
    const std::string_view colour = level_colour(level);
    const Column& col = columns_[static_cast<std::size_t>(it.column)];
    const double box_y = it.top - it.above;
    const double box_h = it.above + it.region_h + it.below;
    // Leads from the column's edges to the box, under it.
    for (std::size_t p = 0; p < it.preds.size(); ++p) {
      const Item& src = items_[static_cast<std::size_t>(it.preds[p])];
      const std::string_view c = level_colour(level_of(src.node));
      for (int i = 0; i < src.n_wires(); ++i)
        canvas_.path(fmt::format("M{} {}H{}", fmt_num(col.x), fmt_num(it.port_y(p, i)), fmt_num(it.x)),
                     stroke(c, src.wires.empty()));
    }
    canvas_.rect(it.x, box_y, it.w, box_h,
                 fmt::format("rx=\"5\" fill=\"#ffffff\" stroke=\"{}\" stroke-width=\"1.3\"", kBoxStroke),
                 fmt::format("box {}", it.node));
    canvas_.line(it.x, it.top, it.x + it.w, it.top, "stroke=\"#cccccc\" stroke-width=\"0.8\"");
    canvas_.text(it.x + it.w / 2, box_y + 13.5, it.header, {.size = kBoxFont, .anchor = "middle"});
    for (std::size_t f = 0; f < it.footer.size(); ++f)
      canvas_.text(it.x + it.w / 2, it.top + it.region_h + 10.5 + kFooterLine * static_cast<double>(f),
                   it.footer[f], {.size = kLabelFont, .italic = f > 0, .anchor = "middle", .fill = f > 0 ? colour : kMuted});
    // Inside: each result axis is woven through from every operand that carries it; an axis
    // summed away (contracted or reduced) ends in a dot.
    const double x0 = it.x, x1 = it.x + it.w;
    const std::string inner = fmt::format("fill=\"none\" stroke=\"{}\" stroke-width=\"1\" stroke-opacity=\"0.55\"", colour);
    for (std::size_t p = 0; p < it.preds.size(); ++p) {
      const Item& src = items_[static_cast<std::size_t>(it.preds[p])];
      for (std::size_t i = 0; i < src.wires.size(); ++i) {
        const ir::AxisId a = src.wires[i];
        const auto out = std::find(it.wires.begin(), it.wires.end(), a);
        const double y0 = it.port_y(p, static_cast<int>(i));
        if (out != it.wires.end()) {
          canvas_.path(curve(x0, y0, x1, it.out_y(static_cast<int>(out - it.wires.begin()))), inner);
        } else {
          canvas_.path(curve(x0, y0, (x0 + x1) / 2, dot_y(it, a)), inner);
        }
      }
      if (src.wires.empty()) canvas_.path(curve(x0, it.port_y(p, 0), x0 + 8, it.port_y(p, 0)), inner);
    }
    for (ir::AxisId a : n.over)
      if (std::find(it.wires.begin(), it.wires.end(), a) == it.wires.end())
        canvas_.circle((x0 + x1) / 2, dot_y(it, a), 2.6, fmt::format("fill=\"{}\"", colour));
    if (it.wires.empty()) canvas_.path(curve((x0 + x1) / 2, it.out_y(0), x1, it.out_y(0)), inner);
    // Result wires, labels and name.
    const double label_x = col.x + col.w + 4;
    for (int i = 0; i < it.n_wires(); ++i) {
      draw_label(label_x, it.out_y(i), wire_label(it.node, level, i, false, it.wires), colour,
                 fmt::format("label {} wire {}", it.node, i));
    }
    if (!n.name.empty() && !is_output(it.node)) draw_name(label_x, it.out_y(0) - kPitch - 1, it.node, "start");
  }

  // The height at which the operands' wires of a summed-away axis meet.
  double dot_y(const Item& it, ir::AxisId a) const {
    double sum = 0;
    int count = 0;
    for (std::size_t p = 0; p < it.preds.size(); ++p) {
      const Item& src = items_[static_cast<std::size_t>(it.preds[p])];
      for (std::size_t i = 0; i < src.wires.size(); ++i)
        if (src.wires[i] == a) sum += it.port_y(p, static_cast<int>(i)), ++count;
    }
    return count ? sum / count : it.top + it.region_h / 2;
  }

  void draw_pass(const Item& it) {
    const std::string_view c = level_colour(level_of(it.node));
    for (int i = 0; i < it.n_wires(); ++i)
      canvas_.path(fmt::format("M{} {}H{}", fmt_num(it.x), fmt_num(it.out_y(i)), fmt_num(it.x + it.w)),
                   stroke(c, it.wires.empty()));
  }

  void draw_output(const Item& it) {
    const Node& n = d_.node(it.node);
    const std::string level = level_of(it.node);
    const std::string_view from = level_colour(level);
    const std::string_view gmem = level_colour(arch::kGmem);
    const bool scalar = it.wires.empty();
    // Wires arrive in the node's axis order and leave in the output's (an NCD wire crossing).
    for (int i = 0; i < it.n_wires(); ++i) {
      int source = i;
      if (!scalar) {
        const auto pos = std::find(n.axes.begin(), n.axes.end(), it.wires[static_cast<std::size_t>(i)]);
        source = static_cast<int>(pos - n.axes.begin());
      }
      const double y = it.out_y(i), y_in = it.out_y(source);
      canvas_.path(curve(it.x, y_in, output_cross_x_, y), stroke(from, scalar));
      if (output_tick_x_ > output_cross_x_)
        canvas_.path(fmt::format("M{} {}H{}", fmt_num(output_cross_x_), fmt_num(y), fmt_num(output_tick_x_)),
                     stroke(from, scalar));
      canvas_.path(fmt::format("M{} {}H{}", fmt_num(output_tick_x_), fmt_num(y), fmt_num(output_end_x_)),
                   stroke(gmem, scalar));
      draw_label(output_label_x_, y, wire_label(it.node, arch::kGmem, i, true, it.wires), gmem,
                 fmt::format("label output {} wire {}", n.name, i));
    }
    if (level != arch::kGmem) draw_tick(output_tick_x_, it, gmem);
    const double mid = it.out_y(0) + (it.n_wires() - 1) * kPitch / 2;
    draw_name(output_end_x_ + 6, mid + 4, it.node, "start");
  }

  // Wires between adjacent columns: from where each item's wires leave it, level through its
  // column's label room, then a bend to the next item's port. A fork gets a dot.
  void draw_edges() {
    for (const Item& src : items_) {
      if (src.succs.empty()) continue;
      const std::string_view c = level_colour(level_of(src.node));
      const bool scalar = src.wires.empty();
      const double xs = out_start_x(src), xb = bend_x(src);
      for (int i = 0; i < src.n_wires(); ++i)
        canvas_.path(fmt::format("M{} {}H{}", fmt_num(xs), fmt_num(src.out_y(i)), fmt_num(xb)), stroke(c, scalar));
      for (int s : src.succs) {
        const Item& dst = items_[static_cast<std::size_t>(s)];
        const double xd = columns_[static_cast<std::size_t>(dst.column)].x;
        // Every port of dst fed by src (an operand used twice has two).
        for (std::size_t p = 0; p < dst.preds.size(); ++p) {
          if (dst.preds[p] != static_cast<int>(&src - items_.data())) continue;
          for (int i = 0; i < src.n_wires(); ++i) {
            const double yd = dst.kind == Kind::box ? dst.port_y(p, i) : dst.out_y(i);
            canvas_.path(curve(xb, src.out_y(i), xd, yd), stroke(c, scalar));
          }
        }
      }
      if (src.succs.size() > 1 ||
          (src.succs.size() == 1 && items_[static_cast<std::size_t>(src.succs[0])].preds.size() > 1 &&
           std::count(items_[static_cast<std::size_t>(src.succs[0])].preds.begin(),
                      items_[static_cast<std::size_t>(src.succs[0])].preds.end(),
                      static_cast<int>(&src - items_.data())) > 1))
        for (int i = 0; i < src.n_wires(); ++i) canvas_.circle(xb, src.out_y(i), 2.4, fmt::format("fill=\"{}\"", c));
    }
  }

  void draw_legend() {
    double y = content_bottom_ + 34;
    const double x = kMargin;
    canvas_.line(x, y - 18, width_ - kMargin, y - 18, "stroke=\"#dddddd\" stroke-width=\"1\"");
    double right = 0;
    // Levels: a swatch and the name (with the machine's capacity per instance).
    std::vector<std::string> levels = {std::string(arch::kGmem)};
    if (s_)
      for (const sched::LevelSchedule& l : s_->levels) levels.push_back(l.level);
    double lx = x;
    canvas_.text(lx, y + 4, s_ ? "levels" : "levels (no schedule: every tensor in gmem)",
                 {.size = 10, .bold = true}, "legend levels");
    lx += text_width(s_ ? "levels" : "levels (no schedule: every tensor in gmem)", 10, true) + 14;
    for (const std::string& l : levels) {
      canvas_.line(lx, y, lx + 22, y, fmt::format("stroke=\"{}\" stroke-width=\"3\"", level_colour(l)));
      std::string text = l;
      if (m_)
        if (const arch::Level* level = m_->level(l)) {
          text += " " + bytes_text(static_cast<double>(level->capacity_bytes.value));
          if (level->instances > 1) text += fmt::format(" ×{}", level->instances);
        }
      canvas_.text(lx + 27, y + 4, text, {.size = 10}, "legend " + l);
      lx += 27 + text_width(text, 10) + 18;
    }
    right = std::max(right, lx);
    y += 20;
    // Notation.
    lx = x;
    auto note = [&](const std::vector<TextRun>& sample, std::string_view colour, const std::string& text) {
      canvas_.text_runs(lx, y + 4, sample, {.size = 10, .fill = colour}, "legend sample " + text);
      lx += runs_width(sample, 10) + 6;
      canvas_.text(lx, y + 4, text, {.size = 10, .fill = kMuted}, "legend " + text);
      lx += text_width(text, 10) + 20;
    };
    if (s_) {
      note({{"g"}, {"a", true}, {"=N"}}, "#000000", "tile of axis a");
      note({{"s"}, {"a", true}, {"=N"}}, "#000000", "chunk of a streamed axis");
      canvas_.line(lx + 2, y - 5, lx + 2, y + 5, "stroke=\"#000000\" stroke-width=\"2.5\"");
      lx += 10;
      canvas_.text(lx, y + 4, "transfer (colour change)", {.size = 10, .fill = kMuted}, "legend transfer");
      lx += text_width("transfer (colour change)", 10) + 20;
    }
    canvas_.circle(lx + 3, y, 2.6, "fill=\"#000000\"");
    lx += 10;
    canvas_.text(lx, y + 4, "axis summed away", {.size = 10, .fill = kMuted}, "legend dot");
    lx += text_width("axis summed away", 10) + 20;
    right = std::max(right, lx);
    y += 20;
    auto line = [&](const std::string& head, const std::string& text) {
      canvas_.text(x, y + 4, head, {.size = 10, .bold = true}, "legend " + head);
      const double hx = x + text_width(head, 10, true) + 8;
      canvas_.text(hx, y + 4, text, {.size = 10, .fill = kMuted}, "legend text " + head);
      right = std::max(right, hx + text_width(text, 10));
      y += 16;
    };
    if (s_) line("schedule", sched::to_string(*s_));
    for (const std::string& w : labeller_.where()) line("where", w);
    width_ = std::max(width_, right + kMargin);
    height_ = y + 12;
  }

  void draw() {
    draw_title();
    draw_edges();
    for (const Item& it : items_) {
      switch (it.kind) {
        case Kind::input: draw_input(it); break;
        case Kind::box: draw_box(it); break;
        case Kind::pass: draw_pass(it); break;
        case Kind::output: draw_output(it); break;
      }
    }
    draw_legend();
  }

  static constexpr double kTitleHeight = 66;

  const Diagram& d_;
  const sched::Schedule* s_;
  const arch::Machine* m_;
  std::vector<bool> folded_;
  Labeller labeller_;
  std::vector<Item> items_;
  std::vector<Column> columns_;
  std::vector<std::map<int, int>> at_;  // node -> column -> item carrying it there
  int output_column_ = 1;
  double input_wire_x_ = 0, input_tick_x_ = 0;
  double output_cross_x_ = 0, output_tick_x_ = 0, output_label_x_ = 0, output_end_x_ = 0;
  double content_bottom_ = 0, width_ = 0, height_ = 0;
  Canvas canvas_;
};

}  // namespace

std::string_view level_colour(std::string_view level) {
  if (level == arch::kGmem) return "#000000";
  if (level == arch::kL2) return "#8c8c8c";
  if (level == arch::kSmem) return "#e8850c";
  if (level == arch::kRmem) return "#2a9d3a";
  if (level == arch::kTensorCore) return "#1f66d1";
  return "#8e44ad";
}

std::string tensor_level(const Diagram& d, const sched::Schedule* schedule, NodeId n) {
  if (!schedule || schedule->levels.empty()) return std::string(arch::kGmem);
  const Node& node = d.node(n);
  if (!node.name.empty())
    for (auto l = schedule->levels.rbegin(); l != schedule->levels.rend(); ++l)
      for (const sched::Residency& r : l->keep)
        if (r.tensor == node.name) return l->level;
  if (node.op == OpKind::input) return std::string(arch::kGmem);
  for (const ir::Output& o : d.outputs)
    if (o.node == n) return std::string(arch::kGmem);
  return schedule->levels.back().level;
}

std::string draw_diagram_svg(const Diagram& d, const sched::Schedule* schedule,
                             const arch::Machine* machine) {
  return DiagramDrawing(d, schedule, machine).svg();
}

std::vector<std::string> diagram_overlaps(const Diagram& d, const sched::Schedule* schedule,
                                          const arch::Machine* machine) {
  return DiagramDrawing(d, schedule, machine).overlaps();
}

}  // namespace napkin::emit
