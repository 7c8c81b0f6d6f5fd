// SPDX-License-Identifier: Apache-2.0
#include "emit/svg_plot.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "emit/svg_canvas.h"

namespace napkin::emit {

namespace {

constexpr double kTitleSize = 14;
constexpr double kLabelSize = 12;
constexpr double kTickSize = 11;
constexpr double kLegendRow = 18;
constexpr double kLegendSample = 28;

// The smallest 1-2-5 step that splits `span` into at most `max_ticks` intervals.
double nice_step(double span, int max_ticks) {
  if (!(span > 0)) return 1;
  const double raw = span / max_ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw * (1 - 1e-12)) return m * p;
  return 10 * p;
}

// A tick label with as many decimals as the step needs (none for steps >= 1).
std::string linear_tick(double v, double step) {
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  if (std::fabs(v) < step * 1e-9) v = 0;  // no "-0"
  return fmt::format("{:.{}f}", v, decimals);
}

// Powers of two as "512", "1k", "16k", "1M"; others with %g.
std::string log2_tick(double v) {
  const double mib = 1024.0 * 1024.0;
  if (v >= mib && std::fmod(v, mib) == 0) return fmt::format("{:.0f}M", v / mib);
  if (v >= 1024 && std::fmod(v, 1024) == 0) return fmt::format("{:.0f}k", v / 1024);
  if (v == std::floor(v)) return fmt::format("{:.0f}", v);
  return fmt::format("{:g}", v);
}

}  // namespace

const std::vector<std::string>& plot_palette() {
  static const std::vector<std::string> palette = {"#0072b2", "#d55e00", "#009e73", "#cc79a7",
                                                   "#e69f00", "#56b4e9", "#f0e442", "#000000"};
  return palette;
}

std::string draw_plot_svg(const std::vector<PlotSeries>& series, const PlotOptions& o) {
  // Data ranges.
  double x_min = INFINITY, x_max = -INFINITY, y_top = 0;
  for (const PlotSeries& s : series)
    for (const PlotPoint& p : s.points) {
      x_min = std::min(x_min, p.x);
      x_max = std::max(x_max, p.x);
      y_top = std::max(y_top, p.y);
    }
  if (!(x_min <= x_max)) x_min = 1, x_max = 2;
  if (x_min == x_max) x_min = o.log2_x ? x_min / 2 : x_min - 1, x_max = o.log2_x ? x_max * 2 : x_max + 1;
  if (o.y_max) y_top = *o.y_max;
  if (!(y_top > 0)) y_top = 1;
  const double y_step = nice_step(y_top, 8);
  const double y_hi = std::ceil(y_top / y_step - 1e-9) * y_step;

  // Layout: title on top, legend on the right, tick labels and axis labels left and below.
  double legend_w = 0;
  for (const PlotSeries& s : series)
    legend_w = std::max(legend_w, kLegendSample + 8 + text_width(s.label, kTickSize));
  if (legend_w > 0) legend_w += 16;
  double y_tick_w = 0;
  for (double v = 0; v <= y_hi + y_step / 2; v += y_step)
    y_tick_w = std::max(y_tick_w, text_width(linear_tick(v, y_step), kTickSize));
  const double left = 14 + kLabelSize + 8 + y_tick_w + 8;
  const double top = o.title.empty() ? 16 : 16 + kTitleSize + 14;
  const double bottom = 8 + kTickSize + 10 + kLabelSize + 10 + 15 * static_cast<double>(o.notes.size());
  const double px0 = left, px1 = o.width - 12 - legend_w, py0 = top, py1 = o.height - bottom;

  double lo = o.log2_x ? std::log2(x_min) : x_min, hi = o.log2_x ? std::log2(x_max) : x_max;
  const double pad = (hi - lo) * 0.04;
  lo -= pad;
  hi += pad;
  auto sx = [&](double x) { return px0 + ((o.log2_x ? std::log2(x) : x) - lo) / (hi - lo) * (px1 - px0); };
  auto sy = [&](double y) { return py1 - y / y_hi * (py1 - py0); };

  Canvas c;
  const TextStyle tick_x{kTickSize, false, false, "middle", "#333333"};
  const TextStyle tick_y{kTickSize, false, false, "end", "#333333"};
  // Grid and y ticks.
  for (double v = 0; v <= y_hi + y_step / 2; v += y_step) {
    const double y = sy(v);
    c.line(px0, y, px1, y, v == 0 ? R"(stroke="#333333" stroke-width="1")" : R"(stroke="#e3e3e3" stroke-width="1")");
    c.text(px0 - 6, y + kTickSize * 0.35, linear_tick(v, y_step), tick_y);
  }
  // x ticks.
  std::vector<double> x_ticks;
  if (o.log2_x) {
    for (double e = std::ceil(lo - 1e-9); e <= hi + 1e-9; ++e) x_ticks.push_back(std::exp2(e));
  } else {
    const double step = nice_step(hi - lo, 8);
    for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + 1e-9; v += step) x_ticks.push_back(v);
  }
  const double x_step = o.log2_x ? 0 : nice_step(hi - lo, 8);
  for (double v : x_ticks) {
    const double x = sx(v);
    c.line(x, py0, x, py1, R"(stroke="#f0f0f0" stroke-width="1")");
    c.line(x, py1, x, py1 + 4, R"(stroke="#333333" stroke-width="1")");
    c.text(x, py1 + 8 + kTickSize, o.log2_x ? log2_tick(v) : linear_tick(v, x_step), tick_x);
  }
  c.line(px0, py0, px0, py1, R"(stroke="#333333" stroke-width="1")");

  // Series: a polyline, then the markers (filled for solid series, hollow for dashed ones).
  const auto& palette = plot_palette();
  for (std::size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const std::string colour = s.colour.empty() ? palette[i % palette.size()] : s.colour;
    if (s.points.size() >= 2) {
      std::string pts;
      for (const PlotPoint& p : s.points) pts += fmt::format("{}{},{}", pts.empty() ? "" : " ", fmt_num(sx(p.x)), fmt_num(sy(p.y)));
      c.raw(fmt::format(R"(<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{}/>)"
                        "\n",
                        pts, colour, s.dashed ? R"( stroke-dasharray="7 4")" : ""));
    }
    for (const PlotPoint& p : s.points)
      c.circle(sx(p.x), sy(p.y), 3,
               fmt::format(R"(fill="{}" stroke="{}" stroke-width="1.5")", s.dashed ? "#ffffff" : colour, colour));
  }

  // Legend.
  const double lx = px1 + 20;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const std::string colour = s.colour.empty() ? palette[i % palette.size()] : s.colour;
    const double y = py0 + 6 + kLegendRow * static_cast<double>(i);
    c.line(lx, y, lx + kLegendSample, y,
           fmt::format(R"(stroke="{}" stroke-width="2"{})", colour, s.dashed ? R"( stroke-dasharray="7 4")" : ""));
    c.circle(lx + kLegendSample / 2, y, 3,
             fmt::format(R"(fill="{}" stroke="{}" stroke-width="1.5")", s.dashed ? "#ffffff" : colour, colour));
    c.text(lx + kLegendSample + 8, y + kTickSize * 0.35, s.label, {kTickSize, false, false, "start", "#000000"});
  }

  // Title, axis labels, notes.
  if (!o.title.empty())
    c.text((px0 + px1) / 2, 16 + kTitleSize, o.title, {kTitleSize, true, false, "middle", "#000000"});
  const double x_label_y = py1 + 8 + kTickSize + 10 + kLabelSize;
  if (!o.x_label.empty()) c.text((px0 + px1) / 2, x_label_y, o.x_label, {kLabelSize, false, false, "middle", "#000000"});
  if (!o.y_label.empty()) {
    const double x = 14 + kLabelSize, y = (py0 + py1) / 2;
    c.raw(fmt::format(R"svg(<text x="{0}" y="{1}" transform="rotate(-90 {0} {1})" font-size="{2}" text-anchor="middle">{3}</text>)svg"
                      "\n",
                      fmt_num(x), fmt_num(y), fmt_num(kLabelSize), xml_escape(o.y_label)));
  }
  for (std::size_t i = 0; i < o.notes.size(); ++i)
    c.text(px0, x_label_y + 16 + 15 * static_cast<double>(i), o.notes[i], {10, false, true, "start", "#555555"});

  return c.finish(o.width, o.height, {fmt::format("napkin {}: plot", napkin_version()), "title: " + o.title},
                  o.title);
}

}  // namespace napkin::emit
