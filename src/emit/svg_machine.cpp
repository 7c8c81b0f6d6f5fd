// SPDX-License-Identifier: Apache-2.0
// The machine's memory hierarchy as a tree (svg.h has the contract). Levels are laid out top
// down by depth, leaves left to right in the machine's level order, parents centred over
// their children; every machine napkin ships is a chain, drawn as one column.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "emit/svg.h"
#include "emit/svg_canvas.h"

namespace napkin::emit {

namespace {

constexpr double kNodeW = 268;
constexpr double kNodeH = 62;
constexpr double kPipeH = 54;     // vertical room for a pipe and its label
constexpr double kSiblingGap = 150;
constexpr double kMargin = 18;
constexpr double kTop = 64;
constexpr std::string_view kMuted = "#555555";

std::string_view level_title(std::string_view name) {
  if (name == arch::kGmem) return "global memory";
  if (name == arch::kL2) return "L2 cache";
  if (name == arch::kSmem) return "shared memory";
  if (name == arch::kRmem) return "registers";
  if (name == arch::kTensorCore) return "tensor core operands";
  return "";
}

// A light tint of a level colour for the node's fill.
std::string tint(std::string_view level) {
  if (level == arch::kGmem) return "#eeeeee";
  if (level == arch::kL2) return "#f4f4f4";
  if (level == arch::kSmem) return "#fdf0e1";
  if (level == arch::kRmem) return "#e6f4e8";
  if (level == arch::kTensorCore) return "#e5eefb";
  return "#f3e9f7";
}

struct Placed {
  double x = 0, y = 0;  // top-left of the node
};

class MachineDrawing {
 public:
  explicit MachineDrawing(const arch::Machine& m) : m_(m) {
    for (std::size_t i = 0; i < m.levels.size(); ++i) children_[m.levels[i].parent].push_back(i);
    double next_leaf = 0;
    place(0, 0, next_leaf);
    pipe_label_w_ = 0;
    for (const arch::Level& l : m.levels)
      if (!l.parent.empty())
        pipe_label_w_ = std::max({pipe_label_w_, text_width(si_text(l.bytes_per_s.value, "B/s"), 11, true),
                                  text_width(pipe_share(l), 9.5)});
    double tree_right = 0, tree_bottom = 0;
    for (const auto& [i, p] : placed_) {
      tree_right = std::max(tree_right, p.x + kNodeW + 16 + pipe_label_w_);
      tree_bottom = std::max(tree_bottom, p.y + kNodeH + 10);
    }
    draw_title();
    for (std::size_t i = 0; i < m.levels.size(); ++i) draw_level(i);
    const double panel_x = tree_right + 30;
    const double panel_bottom = draw_panel(panel_x);
    height_ = std::max(tree_bottom, panel_bottom) + kMargin;
  }

  std::string svg() const {
    const std::string key = arch::machine_key(m_);
    return canvas_.finish(width_, height_,
                          {fmt::format("napkin {}: machine hierarchy", napkin_version()),
                           fmt::format("machine {} ({})", m_.name, m_.display_name),
                           fmt::format("machine key hash {:016x}", hash(key))},
                          m_.display_name + ": memory hierarchy");
  }

 private:
  static std::uint64_t hash(const std::string& s) {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a, as ir::stable_hash
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  }

  // Places the subtree of level i with its top at depth `depth`; returns the node's x.
  double place(std::size_t i, int depth, double& next_leaf) {
    const auto& kids = children_[m_.levels[i].name];
    double x;
    if (kids.empty()) {
      x = kMargin + next_leaf;
      next_leaf += kNodeW + kSiblingGap;
    } else {
      double sum = 0;
      for (std::size_t k : kids) sum += place(k, depth + 1, next_leaf);
      x = sum / static_cast<double>(kids.size());
    }
    placed_[i] = {x, kTop + depth * (kNodeH + kPipeH)};
    return x;
  }

  void draw_title() {
    canvas_.text(kMargin, 24, m_.display_name, {.size = 14, .bold = true}, "title");
    const std::string sub = fmt::format("{}  ·  compute capability {}  ·  {} SMs  ·  {}", m_.name,
                                        m_.compute_capability, m_.sm_count.value, si_text(m_.clock_hz.value, "Hz"));
    canvas_.text(kMargin, 40, sub, {.size = 10, .fill = kMuted}, "subtitle");
    width_ = std::max(width_, kMargin + text_width(sub, 10) + kMargin);
  }

  // The pipe's bandwidth as one instance of the level sees it.
  static std::string pipe_share(const arch::Level& l) {
    if (l.instances <= 1) return "one link";
    return fmt::format("{} per {}, {} instances",
                       si_text(l.bytes_per_s.value / static_cast<double>(l.instances), "B/s"), l.name, l.instances);
  }

  void draw_level(std::size_t i) {
    const arch::Level& l = m_.levels[i];
    const Placed p = placed_.at(i);
    const std::string_view colour = level_colour(l.name);
    // The pipe to the parent, drawn first so that the nodes cover its ends.
    if (!l.parent.empty()) {
      std::size_t parent = 0;
      while (m_.levels[parent].name != l.parent) ++parent;
      const Placed q = placed_.at(parent);
      const double x0 = q.x + kNodeW / 2, y0 = q.y + kNodeH, x1 = p.x + kNodeW / 2, y1 = p.y;
      canvas_.path(fmt::format("M{} {}C{} {} {} {} {} {}", fmt_num(x0), fmt_num(y0), fmt_num(x0),
                               fmt_num((y0 + y1) / 2), fmt_num(x1), fmt_num((y0 + y1) / 2), fmt_num(x1), fmt_num(y1)),
                   "fill=\"none\" stroke=\"#444444\" stroke-width=\"5\" stroke-opacity=\"0.35\"");
      const double ly = (y0 + y1) / 2;
      const std::string bw = si_text(l.bytes_per_s.value, "B/s");
      canvas_.text(x1 + 12, ly - 2, bw, {.size = 11, .bold = true}, "pipe " + l.name);
      canvas_.text(x1 + 12, ly + 11, pipe_share(l), {.size = 9.5, .fill = kMuted}, "pipe share " + l.name);
    }
    // Instances of the level stacked behind it.
    if (l.instances > 1)
      for (int k = 2; k >= 1; --k)
        canvas_.rect(p.x + 5 * k, p.y - 5 * k, kNodeW, kNodeH,
                     fmt::format("rx=\"6\" fill=\"{}\" stroke=\"{}\" stroke-width=\"1\"", tint(l.name), colour));
    canvas_.rect(p.x, p.y, kNodeW, kNodeH,
                 fmt::format("rx=\"6\" fill=\"{}\" stroke=\"{}\" stroke-width=\"2\"", tint(l.name), colour),
                 "node " + l.name);
    canvas_.text(p.x + 12, p.y + 20, l.name, {.size = 13, .bold = true, .fill = colour});
    canvas_.text(p.x + 20 + text_width(l.name, 13, true), p.y + 20, level_title(l.name), {.size = 10, .fill = kMuted});
    if (l.instances > 1)
      canvas_.text(p.x + kNodeW - 10, p.y + 20, fmt::format("×{}", l.instances), {.size = 13, .bold = true, .anchor = "end", .fill = colour});
    const double cap = static_cast<double>(l.capacity_bytes.value);
    const std::string capacity =
        l.instances > 1 ? fmt::format("{} each, {} in all", bytes_text(cap), bytes_text(cap * static_cast<double>(l.instances)))
                        : bytes_text(cap);
    canvas_.text(p.x + 12, p.y + 38, capacity, {.size = 10.5});
    const std::string inst = l.parent.empty()
                                 ? std::string("root of the hierarchy")
                                 : fmt::format("{} per {}", l.instances_per_parent.value, l.parent);
    canvas_.text(p.x + 12, p.y + 53, inst, {.size = 9.5, .fill = kMuted});
  }

  // Headline figures and the throughput table; returns the bottom.
  double draw_panel(double x) {
    double y = kTop + 4;
    auto heading = [&](const std::string& s) {
      canvas_.text(x, y, s, {.size = 11, .bold = true}, "heading " + s);
      y += 16;
    };
    auto row = [&](const std::vector<std::pair<std::string, double>>& cells, bool header) {
      double cx = x;
      for (const auto& [text, w] : cells) {
        canvas_.text(cx, y, text, {.size = 10, .bold = header, .fill = header ? std::string_view("#000000") : std::string_view("#222222")});
        width_ = std::max(width_, cx + text_width(text, 10, header) + kMargin);
        cx += w;
      }
      y += 14;
    };
    heading("throughput per SM (dense)");
    row({{"unit", 92}, {"dtype", 66}, {"per clock", 80}, {"GPU peak", 0}}, true);
    for (const arch::Throughput& t : m_.throughput) {
      const double per_s = *m_.peak_flop_per_s(t.unit, t.dtype);
      std::string unit(arch::unit_name(t.unit));
      std::replace(unit.begin(), unit.end(), '_', ' ');
      row({{unit, 92},
           {std::string(dtype_name(t.dtype)), 66},
           {fmt::format("{:g}", t.ops_per_clk_per_sm.value), 80},
           {si_text(per_s, t.unit == arch::Unit::sfu ? " op/s" : "FLOP/s"), 0}},
          false);
    }
    y += 10;
    heading("limits");
    const arch::Limits& lim = m_.limits;
    row({{"shared memory", 158}, {fmt::format("{} per SM, {} per block", bytes_text(static_cast<double>(lim.smem_bytes_per_sm.value)),
                                              bytes_text(static_cast<double>(lim.smem_bytes_per_block.value))), 0}}, false);
    row({{"registers", 158}, {fmt::format("{} per SM, {} per thread", lim.registers_per_sm.value, lim.registers_per_thread.value), 0}}, false);
    row({{"threads", 158}, {fmt::format("{} per SM, {} per block", lim.threads_per_sm.value, lim.threads_per_block.value), 0}}, false);
    row({{"CTAs", 158}, {fmt::format("{} per SM", lim.ctas_per_sm.value), 0}}, false);
    if (m_.cluster) {
      std::string c = fmt::format("up to {} CTAs", m_.cluster->max_ctas_portable.value);
      if (m_.cluster->max_ctas_nonportable) c += fmt::format(" ({} non-portable)", m_.cluster->max_ctas_nonportable->value);
      row({{"cluster", 158}, {c, 0}}, false);
    }
    y += 6;
    canvas_.text(x, y, "every number's source: machines/" + m_.name + ".toml", {.size = 9.5, .italic = true, .fill = kMuted});
    width_ = std::max(width_, x + text_width("every number's source: machines/" + m_.name + ".toml", 9.5) + kMargin);
    return y;
  }

  const arch::Machine& m_;
  std::map<std::string, std::vector<std::size_t>> children_;
  std::map<std::size_t, Placed> placed_;
  double pipe_label_w_ = 0;
  double width_ = 0, height_ = 0;
  Canvas canvas_;
};

}  // namespace

std::string draw_machine_svg(const arch::Machine& m) { return MachineDrawing(m).svg(); }

}  // namespace napkin::emit
