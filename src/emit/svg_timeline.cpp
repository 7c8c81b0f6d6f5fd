// SPDX-License-Identifier: Apache-2.0
// A per-unit timeline (svg.h has the contract): lanes of spans over a time axis.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "emit/svg.h"
#include "emit/svg_canvas.h"
#include "support/diagnostic.h"

namespace napkin::emit {

namespace {

constexpr double kMargin = 18;
constexpr double kPlotW = 760;
constexpr double kLaneH = 30;
constexpr double kLaneGap = 8;
constexpr double kTop = 70;
constexpr std::string_view kMuted = "#555555";

// Light fills (ColorBrewer pastels) so that black labels stay legible, with darker edges of
// the same hue so that adjacent spans of one kind stay apart.
constexpr std::string_view kPalette[] = {"#9ecae1", "#fdae6b", "#a1d99b", "#d4b9da", "#fdd0a2",
                                         "#c7e9c0", "#bcbddc", "#fcbba1", "#d9d9d9"};
constexpr std::string_view kEdges[] = {"#3182bd", "#e6550d", "#31a354", "#8856a7", "#d94801",
                                       "#238b45", "#756bb1", "#cb181d", "#636363"};

// The unit and scale of the axis: the largest of s, ms, µs, ns below `range_s`.
std::pair<double, std::string_view> time_unit(double range_s) {
  if (range_s >= 1) return {1, "s"};
  if (range_s >= 1e-3) return {1e3, "ms"};
  if (range_s >= 1e-6) return {1e6, "µs"};
  return {1e9, "ns"};
}

// A tick step of 1, 2 or 5 times a power of ten giving 4 to 10 ticks over `range`.
double tick_step(double range) {
  const double raw = range / 8;
  const double p = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

std::string tick_text(double v) {
  std::string s = fmt::format("{:.3f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::string draw_timeline_svg(const std::vector<TimelineLane>& lanes, double period_s, std::string title) {
  Canvas canvas;
  double end_s = period_s > 0 ? period_s : 0;
  std::vector<std::string> kinds;  // in order of first appearance
  for (const TimelineLane& lane : lanes)
    for (const TimelineSpan& s : lane.spans) {
      NAPKIN_CHECK(std::isfinite(s.start_s) && std::isfinite(s.end_s) && s.start_s >= 0 && s.end_s >= s.start_s,
                   "timeline span '" + s.label + "' has bad times");
      end_s = std::max(end_s, s.end_s);
      const std::string& k = s.kind.empty() ? s.label : s.kind;
      if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
    }
  if (end_s <= 0) end_s = 1e-6;
  const auto [scale, unit] = time_unit(end_s);
  const double step = tick_step(end_s * scale);
  const double axis_end = std::ceil(end_s * scale / step - 1e-9) * step;  // in `unit`

  double gutter = 60;
  for (const TimelineLane& lane : lanes) gutter = std::max(gutter, text_width(lane.unit, 11, true) + 16);
  const double x0 = kMargin + gutter, x1 = x0 + kPlotW;
  auto x_of = [&, scale = scale](double t_s) { return x0 + (t_s * scale) / axis_end * kPlotW; };

  canvas.text(kMargin, 24, title, {.size = 14, .bold = true}, "title");
  std::string sub = fmt::format("{} lane{}", lanes.size(), lanes.size() == 1 ? "" : "s");
  if (period_s > 0) sub += fmt::format("  ·  period {} {}", tick_text(period_s * scale), unit);
  canvas.text(kMargin, 40, sub, {.size = 10, .fill = kMuted}, "subtitle");

  const double plot_bottom = kTop + static_cast<double>(lanes.size()) * (kLaneH + kLaneGap);
  // Lane backgrounds, then grid and period lines, then the spans on top.
  for (std::size_t li = 0; li < lanes.size(); ++li) {
    const double y = kTop + static_cast<double>(li) * (kLaneH + kLaneGap);
    canvas.rect(x0, y, kPlotW, kLaneH, "fill=\"#fafafa\" stroke=\"#dddddd\" stroke-width=\"0.8\"");
    canvas.text(x0 - 10, y + kLaneH / 2 + 4, lanes[li].unit, {.size = 11, .bold = true, .anchor = "end"}, "lane " + lanes[li].unit);
  }
  for (double t = 0; t <= axis_end + step * 1e-6; t += step) {
    const double x = x0 + t / axis_end * kPlotW;
    canvas.line(x, kTop - 4, x, plot_bottom, "stroke=\"#eeeeee\" stroke-width=\"1\"");
  }
  if (period_s > 0)
    for (int k = 1; k * period_s <= end_s * (1 + 1e-9); ++k) {
      const double x = x_of(k * period_s);
      canvas.line(x, kTop - 8, x, plot_bottom, "stroke=\"#666666\" stroke-width=\"1\" stroke-dasharray=\"4 3\"");
      canvas.text(x + 3, kTop - 9, k == 1 ? "period" : fmt::format("{} periods", k), {.size = 9, .fill = kMuted},
                  fmt::format("period {}", k));
    }
  for (std::size_t li = 0; li < lanes.size(); ++li) {
    const TimelineLane& lane = lanes[li];
    const double y = kTop + static_cast<double>(li) * (kLaneH + kLaneGap);
    for (const TimelineSpan& s : lane.spans) {
      const std::string& k = s.kind.empty() ? s.label : s.kind;
      const auto idx = static_cast<std::size_t>(std::find(kinds.begin(), kinds.end(), k) - kinds.begin()) % std::size(kPalette);
      const double sx = x_of(s.start_s), sw = std::max(x_of(s.end_s) - sx, 1.0);
      canvas.open_group("");
      canvas.raw(fmt::format("<title>{}: {} to {} {}</title>\n", xml_escape(s.label), tick_text(s.start_s * scale),
                             tick_text(s.end_s * scale), unit));
      canvas.rect(sx, y + 3, sw, kLaneH - 6,
                  fmt::format("rx=\"3\" fill=\"{}\" stroke=\"{}\" stroke-width=\"1\"", kPalette[idx], kEdges[idx]));
      if (text_width(s.label, 10) + 8 <= sw)
        canvas.text(sx + sw / 2, y + kLaneH / 2 + 3.5, s.label, {.size = 10, .anchor = "middle"});
      canvas.close_group();
    }
  }
  // Time axis.
  canvas.line(x0, plot_bottom + 2, x1, plot_bottom + 2, "stroke=\"#000000\" stroke-width=\"1\"");
  for (double t = 0; t <= axis_end + step * 1e-6; t += step) {
    const double x = x0 + t / axis_end * kPlotW;
    canvas.line(x, plot_bottom + 2, x, plot_bottom + 7, "stroke=\"#000000\" stroke-width=\"1\"");
    canvas.text(x, plot_bottom + 19, tick_text(t), {.size = 10, .anchor = "middle"}, "tick " + tick_text(t));
  }
  canvas.text(x1, plot_bottom + 34, fmt::format("time ({})", unit), {.size = 10, .anchor = "end", .fill = kMuted}, "axis title");
  // Legend: one swatch per kind.
  double lx = x0, ly = plot_bottom + 54;
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    const double w = 16 + 6 + text_width(kinds[k], 10) + 18;
    if (lx + w > x1 && lx > x0) lx = x0, ly += 18;
    canvas.rect(lx, ly - 9, 16, 11,
                fmt::format("rx=\"2\" fill=\"{}\" stroke=\"{}\" stroke-width=\"1\"", kPalette[k % std::size(kPalette)],
                            kEdges[k % std::size(kEdges)]));
    canvas.text(lx + 22, ly, kinds[k], {.size = 10}, "legend " + kinds[k]);
    lx += w;
  }
  const double width = std::max(x1 + kMargin + 10, kMargin + text_width(title, 14, true) + kMargin);
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the lanes, as ir::stable_hash
  auto mix = [&](const std::string& s) { for (unsigned char c : s) h = (h ^ c) * 1099511628211ull; };
  for (const TimelineLane& lane : lanes) {
    mix(lane.unit);
    for (const TimelineSpan& s : lane.spans) mix(fmt::format("|{}|{}|{:.17g}|{:.17g}", s.label, s.kind, s.start_s, s.end_s));
  }
  return canvas.finish(width, ly + 16,
                       {fmt::format("napkin {}: timeline", napkin_version()), "title: " + title,
                        fmt::format("lanes hash {:016x}, period {:.6g} s", h, period_s)},
                       title);
}

}  // namespace napkin::emit
