// SPDX-License-Identifier: Apache-2.0
// Line plots as SVG: axes with ticks and grid, a linear or log2 x-axis, a linear y-axis from
// zero, one polyline per series with point markers, and a legend. Used by `napkin report` for
// predicted TFLOP/s against sequence length; docs/report.md shows one.
//
// Like the drawings of svg.h: returns the whole SVG document as text, prints nothing, and is
// deterministic (series in the given order, coordinates with one decimal, tick labels from
// fixed rules); no CSS, no script, no ids, so several plots can be inlined in one HTML page.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace napkin::emit {

struct PlotPoint {
  double x = 0;
  double y = 0;
};

struct PlotSeries {
  std::string label;               // legend text
  std::vector<PlotPoint> points;   // drawn in the given order; may be empty (legend only)
  std::string colour;              // "#rrggbb"; empty: the palette colour of the series index
  bool dashed = false;
};

struct PlotOptions {
  std::string title;               // drawn above the plot and as the SVG <title>
  std::string x_label;
  std::string y_label;
  bool log2_x = false;             // ticks at every power of two in range, "512", "1k", "16k"
  double width = 760;              // of the whole drawing, legend included
  double height = 420;
  std::optional<double> y_max;     // default: the largest y, rounded up to a 1-2-5 step
  std::vector<std::string> notes;  // lines of small text under the x-axis label
};

// The palette: eight colours distinguishable in print and by most colour-blind readers
// (Okabe-Ito, black last), as "#rrggbb".
const std::vector<std::string>& plot_palette();

// Pre: every coordinate finite; with log2_x every x > 0; y >= 0. Post: a standalone SVG
// document with a provenance comment (napkin version, title). With no points at all the axes
// span x in [1, 2] and y in [0, 1].
std::string draw_plot_svg(const std::vector<PlotSeries>& series, const PlotOptions& options);

}  // namespace napkin::emit
