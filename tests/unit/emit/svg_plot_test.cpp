// SPDX-License-Identifier: Apache-2.0
// The line-plot helper: golden SVGs (log2 and linear x-axes), determinism, tick labels,
// the legend, degenerate inputs, and a rsvg-convert render.
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "emit/svg_plot.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;

std::vector<emit::PlotSeries> sequence_series() {
  std::vector<emit::PlotSeries> s = {
      {"h100-sxm5 bf16", {{512, 410}, {1024, 560}, {2048, 640}, {4096, 700}, {8192, 720}, {16384, 735}}, "", false},
      {"h100-sxm5 fp8e4m3", {{512, 600}, {1024, 820}, {2048, 990}, {4096, 1100}, {8192, 1180}, {16384, 1210}}, "#0072b2", true},
      {"a100 <&> \"bf16\"", {{512, 180}, {2048, 250}, {16384, 262.5}}, "", false},
  };
  return s;
}

emit::PlotOptions sequence_options() {
  emit::PlotOptions o;
  o.title = "Predicted TFLOP/s";
  o.x_label = "sequence length s";
  o.y_label = "TFLOP/s";
  o.log2_x = true;
  o.notes = {"dashed: fp8e4m3"};
  return o;
}

TEST(SvgPlot, Log2GoldenFile) {
  testing::expect_golden("plot/sequence_log2.svg", emit::draw_plot_svg(sequence_series(), sequence_options()));
}

TEST(SvgPlot, LinearGoldenFile) {
  emit::PlotOptions o;
  o.title = "Linear";
  o.x_label = "x";
  o.y_label = "y";
  o.width = 520;
  o.height = 320;
  const std::vector<emit::PlotSeries> s = {{"squares", {{0, 0}, {1, 1}, {2, 4}, {3, 9}}, "", false},
                                           {"line", {{0, 0.5}, {3, 2.5}}, "", true}};
  testing::expect_golden("plot/linear.svg", emit::draw_plot_svg(s, o));
}

TEST(SvgPlot, IsDeterministic) {
  EXPECT_EQ(emit::draw_plot_svg(sequence_series(), sequence_options()),
            emit::draw_plot_svg(sequence_series(), sequence_options()));
}

TEST(SvgPlot, Log2TicksAreNamedPowersOfTwo) {
  const std::string svg = emit::draw_plot_svg(sequence_series(), sequence_options());
  for (const char* tick : {">512<", ">1k<", ">2k<", ">4k<", ">8k<", ">16k<"}) EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  // y: 0 .. 1210 rounded up to a 1-2-5 step.
  for (const char* tick : {">0<", ">200<", ">1400<"}) EXPECT_NE(svg.find(tick), std::string::npos) << tick;
}

TEST(SvgPlot, LegendNamesEverySeriesEscaped) {
  const std::string svg = emit::draw_plot_svg(sequence_series(), sequence_options());
  EXPECT_NE(svg.find("h100-sxm5 fp8e4m3"), std::string::npos);
  EXPECT_NE(svg.find("a100 &lt;&amp;&gt; &quot;bf16&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("<&>"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);  // the dashed series
  EXPECT_EQ(svg.find(" id="), std::string::npos);              // safe to inline several in one page
}

TEST(SvgPlot, DegenerateInputsGiveFiniteCoordinates) {
  emit::PlotOptions o;
  o.log2_x = true;
  for (const auto& s : std::vector<std::vector<emit::PlotSeries>>{
           {}, {{"empty", {}, "", false}}, {{"one point", {{1024, 0}}, "", false}}, {{"zeros", {{1, 0}, {4, 0}}, "", false}}}) {
    const std::string svg = emit::draw_plot_svg(s, o);
    EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
    EXPECT_EQ(svg.find("inf"), std::string::npos) << svg;
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
  }
}

TEST(SvgPlot, RendersWithRsvgConvert) {
  if (std::system("command -v rsvg-convert >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "SKIPPED LOUDLY: rsvg-convert not found (apt-get install librsvg2-bin; tools/install_deps.sh)";
  const fs::path dir = fs::temp_directory_path() / ("napkin_plot_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream(dir / "plot.svg") << emit::draw_plot_svg(sequence_series(), sequence_options());
  }
  const std::string cmd = "rsvg-convert -o '" + (dir / "plot.png").string() + "' '" + (dir / "plot.svg").string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_GT(fs::file_size(dir / "plot.png"), 5000u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace napkin
