// SPDX-License-Identifier: Apache-2.0
// The SVG drawings: golden files for every example (plain and scheduled), the machine and a
// hand-made timeline; determinism; no overlapping boxes or labels; every drawing renders to
// a non-trivial PNG with rsvg-convert; `napkin draw` writes the same files.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"
#include "emit/svg.h"
#include "ir/parser.h"
#include "sched/schedule.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFlash =
    "smem{tile b=1 h=1 q=128; stream k=128:online_softmax; keep Q K:fp8e4m3 V; stages=2} "
    "rmem{tile q=64; groups=3}";
constexpr const char* kMatmul = "smem{tile m=128 n=128; stream k=64:add; keep A B; stages=4} rmem{tile m=64; keep C}";

ir::Diagram example(const std::string& name) {
  auto r = ir::load_diagram((testing::source_dir() / "examples" / name).string());
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().format());
  return r.value().diagram;
}

arch::Machine machine(const std::string& name) {
  auto m = arch::find_machine(name, arch::default_machines_dir());
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().format());
  return m.value();
}

sched::Schedule schedule(const char* text, const ir::Diagram& d) {
  auto s = sched::parse_schedule(text, d);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().format());
  return s.value();
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

// A FlashAttention-3-like iteration of two consumer warpgroups in ping-pong, by hand.
std::vector<emit::TimelineLane> pingpong_lanes() {
  using emit::TimelineSpan;
  const double us = 1e-6;
  return {
      {"TMA", {{"load K", "load", 0.00 * us, 0.24 * us}, {"load V", "load", 0.24 * us, 0.48 * us},
               {"load K", "load", 0.97 * us, 1.21 * us}, {"load V", "load", 1.21 * us, 1.45 * us}}},
      {"tensor core", {{"QKᵀ wg1", "gemm", 0.10 * us, 0.42 * us}, {"PV wg1", "gemm", 0.74 * us, 1.06 * us},
                       {"QKᵀ wg2", "gemm", 0.42 * us, 0.74 * us}, {"PV wg2", "gemm", 1.06 * us, 1.38 * us}}},
      {"SFU (exp)", {{"softmax wg1", "softmax", 0.42 * us, 0.74 * us},
                     {"softmax wg2", "softmax", 0.74 * us, 1.06 * us}}},
      {"FMA", {{"rescale", "rescale", 0.74 * us, 0.80 * us}, {"rescale", "rescale", 1.06 * us, 1.12 * us}}},
  };
}

TEST(SvgDiagram, EveryExampleMatchesGoldenWithoutOverlaps) {
  for (const auto& f : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    const std::string stem = f.stem().string();
    const ir::Diagram d = example(f.filename().string());
    const std::string svg = emit::draw_diagram_svg(d, nullptr, nullptr);
    testing::expect_golden("svg/" + stem + ".svg", svg);
    EXPECT_EQ(joined(emit::diagram_overlaps(d, nullptr, nullptr)), "") << stem;
  }
}

TEST(SvgDiagram, ScheduledAttentionAndMatmulMatchGolden) {
  const arch::Machine h100 = machine("h100-sxm5");
  const ir::Diagram att = example("attention.napkin");
  const sched::Schedule flash = schedule(kFlash, att);
  testing::expect_golden("svg/attention_flash_h100-sxm5.svg", emit::draw_diagram_svg(att, &flash, &h100));
  EXPECT_EQ(joined(emit::diagram_overlaps(att, &flash, &h100)), "");
  const ir::Diagram mm = example("matmul.napkin");
  const sched::Schedule tiled = schedule(kMatmul, mm);
  testing::expect_golden("svg/matmul_tiled_h100-sxm5.svg", emit::draw_diagram_svg(mm, &tiled, &h100));
  EXPECT_EQ(joined(emit::diagram_overlaps(mm, &tiled, &h100)), "");
  // Every example under a schedule that keeps everything in smem: still no overlaps.
  for (const auto& f : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    const ir::Diagram d = example(f.filename().string());
    const sched::Schedule s = schedule("smem{} rmem{}", d);
    EXPECT_EQ(joined(emit::diagram_overlaps(d, &s, &h100)), "") << f;
  }
}

TEST(SvgDiagram, ProvenanceAndDeterminism) {
  const ir::Diagram d = example("attention.napkin");
  const sched::Schedule s = schedule(kFlash, d);
  const std::string a = emit::draw_diagram_svg(d, &s, nullptr);
  EXPECT_EQ(a, emit::draw_diagram_svg(d, &s, nullptr));
  EXPECT_EQ(a.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!--\n  napkin ", 0), 0u);
  EXPECT_NE(a.find("schedule: " + sched::to_string(s)), std::string::npos);
  EXPECT_NE(a.find("canonical text hash "), std::string::npos);
  EXPECT_NE(a.find("attention.napkin"), std::string::npos);
  // The drawing does not depend on the directory the diagram was read from.
  ir::Diagram moved = d;
  moved.source_name = "/elsewhere/attention.napkin";
  EXPECT_EQ(a, emit::draw_diagram_svg(moved, &s, nullptr));
  // Different sizes give a different drawing (labels and hash).
  auto small = ir::load_diagram((testing::source_dir() / "examples/attention.napkin").string(),
                                {ir::Binding{"q", 512, "q=512"}});
  ASSERT_TRUE(small.ok());
  EXPECT_NE(emit::draw_diagram_svg(small->diagram, nullptr, nullptr), emit::draw_diagram_svg(d, nullptr, nullptr));
}

TEST(SvgDiagram, TensorLevelsAndLabels) {
  const ir::Diagram d = example("attention.napkin");
  const sched::Schedule s = schedule(kFlash, d);
  auto level = [&](const char* name) { return emit::tensor_level(d, &s, *d.find_node(name)); };
  EXPECT_EQ(level("Q"), "smem");   // kept at smem
  EXPECT_EQ(level("S"), "rmem");   // an intermediate lives at the innermost level
  EXPECT_EQ(level("O"), "gmem");   // an output not kept below gmem
  EXPECT_EQ(emit::tensor_level(d, nullptr, *d.find_node("S")), "gmem");
  EXPECT_EQ(emit::level_colour("gmem"), "#000000");
  EXPECT_EQ(emit::level_colour("smem"), "#e8850c");
  EXPECT_EQ(emit::level_colour("rmem"), "#2a9d3a");
  EXPECT_EQ(emit::level_colour("tc"), "#1f66d1");
  const std::string svg = emit::draw_diagram_svg(d, &s, nullptr);
  // g_q=128 at smem, g_q=64 at rmem, s_k=128 with its accumulator, K's quantised dtype.
  EXPECT_NE(svg.find("g<tspan dy=\"2.9\" font-size=\"7.1\">q</tspan><tspan dy=\"-2.9\">=128</tspan>"), std::string::npos);
  EXPECT_NE(svg.find(">q</tspan><tspan dy=\"-2.9\">=64</tspan>"), std::string::npos);
  EXPECT_NE(svg.find("s<tspan dy=\"2.9\" font-size=\"7.1\">k</tspan><tspan dy=\"-2.9\">=128</tspan>"), std::string::npos);
  EXPECT_NE(svg.find(">online_softmax</text>"), std::string::npos);
  EXPECT_NE(svg.find("bf16 → fp8e4m3"), std::string::npos);
}

TEST(SvgMachine, H100MatchesGoldenAndEveryMachineDraws) {
  testing::expect_golden("svg/machine_h100-sxm5.svg", emit::draw_machine_svg(machine("h100-sxm5")));
  auto all = arch::load_machines(arch::default_machines_dir());
  ASSERT_TRUE(all.ok());
  for (const arch::Machine& m : *all) {
    const std::string svg = emit::draw_machine_svg(m);
    EXPECT_EQ(svg, emit::draw_machine_svg(m));
    EXPECT_NE(svg.find(m.display_name), std::string::npos);
    for (const arch::Level& l : m.levels) EXPECT_NE(svg.find(">" + l.name + "</text>"), std::string::npos) << l.name;
  }
}

TEST(SvgTimeline, HandMadeLanesMatchGolden) {
  const std::string svg = emit::draw_timeline_svg(pingpong_lanes(), 0.97e-6, "attention: one iteration per SM (by hand)");
  testing::expect_golden("svg/timeline_pingpong.svg", svg);
  EXPECT_EQ(svg, emit::draw_timeline_svg(pingpong_lanes(), 0.97e-6, "attention: one iteration per SM (by hand)"));
  EXPECT_NE(svg.find("time (µs)"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray=\"4 3\""), std::string::npos);  // the period line
  // Empty lanes still give a valid drawing with an axis.
  const std::string empty = emit::draw_timeline_svg({{"TMA", {}}}, 0, "empty");
  EXPECT_NE(empty.find("</svg>"), std::string::npos);
}

// --- rendering ---------------------------------------------------------------------------------

bool have_rsvg() { return std::system("command -v rsvg-convert >/dev/null 2>&1") == 0; }

// PNG width and height from the IHDR chunk, or {0, 0}.
std::pair<int, int> png_size(const std::string& png) {
  if (png.size() < 24 || png.compare(1, 3, "PNG") != 0) return {0, 0};
  auto be32 = [&](std::size_t o) {
    return (static_cast<unsigned char>(png[o]) << 24) | (static_cast<unsigned char>(png[o + 1]) << 16) |
           (static_cast<unsigned char>(png[o + 2]) << 8) | static_cast<unsigned char>(png[o + 3]);
  };
  return {be32(16), be32(20)};
}

TEST(SvgRender, EveryDrawingRendersToPng) {
  if (!have_rsvg())
    GTEST_SKIP() << "\n\n*** rsvg-convert NOT FOUND: SVG rendering is NOT tested. Install it with "
                    "tools/install_deps.sh (Debian package librsvg2-bin). ***\n";
  std::vector<std::pair<std::string, std::string>> drawings;
  for (const auto& f : testing::files_in(testing::source_dir() / "examples", ".napkin"))
    drawings.emplace_back(f.stem().string(), emit::draw_diagram_svg(example(f.filename().string()), nullptr, nullptr));
  const arch::Machine h100 = machine("h100-sxm5");
  const ir::Diagram att = example("attention.napkin");
  const sched::Schedule flash = schedule(kFlash, att);
  drawings.emplace_back("attention_flash", emit::draw_diagram_svg(att, &flash, &h100));
  drawings.emplace_back("machine", emit::draw_machine_svg(h100));
  drawings.emplace_back("timeline", emit::draw_timeline_svg(pingpong_lanes(), 0.97e-6, "timeline"));
  const fs::path dir = fs::temp_directory_path() / ("napkin_svg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& [name, svg] : drawings) {
    const fs::path in = dir / (name + ".svg"), out = dir / (name + ".png");
    std::ofstream(in, std::ios::binary) << svg;
    const std::string cmd = "rsvg-convert '" + in.string() + "' -o '" + out.string() + "' 2>'" +
                            (dir / (name + ".err")).string() + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << name << ": " << testing::read_text(dir / (name + ".err"));
    EXPECT_EQ(testing::read_text(dir / (name + ".err")), "") << name;
    const std::string png = testing::read_text(out);
    const auto [w, h] = png_size(png);
    EXPECT_GE(w, 300) << name;
    EXPECT_GE(h, 150) << name;
    EXPECT_GT(png.size(), 8000u) << name << ": the PNG is nearly empty";
  }
  fs::remove_all(dir);
}

// --- the command ----------------------------------------------------------------------------

TEST(DrawCommand, WritesTheDrawings) {
  const fs::path dir = fs::temp_directory_path() / ("napkin_draw_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto r = testing::run_napkin("draw examples/attention.napkin --machine h100-sxm5 --schedule '" +
                               std::string(kFlash) + "' -o '" + dir.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("diagram.svg"), std::string::npos);
  const ir::Diagram d = example("attention.napkin");
  const arch::Machine h100 = machine("h100-sxm5");
  const sched::Schedule s = schedule(kFlash, d);
  EXPECT_EQ(testing::read_text(dir / "diagram.svg"), emit::draw_diagram_svg(d, &s, &h100));
  EXPECT_EQ(testing::read_text(dir / "machine.svg"), emit::draw_machine_svg(h100));
  // --set rebinds sizes; without --machine there is no machine drawing.
  fs::remove_all(dir);
  r = testing::run_napkin("draw examples/matmul.napkin --set m=256 -o '" + dir.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(testing::read_text(dir / "diagram.svg").find("m=256"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "machine.svg"));
  fs::remove_all(dir);
}

TEST(DrawCommand, ErrorsNameTheProblemAndWriteNothing) {
  const fs::path dir = fs::temp_directory_path() / ("napkin_draw_err_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto r = testing::run_napkin("draw examples/attention.napkin --machine h999 -o '" + dir.string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("h999"), std::string::npos) << r.err;
  r = testing::run_napkin("draw examples/attention.napkin --schedule 'smem{tile k=64}' -o '" + dir.string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--schedule:1:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cannot tile 'k'"), std::string::npos) << r.err;
  r = testing::run_napkin("draw examples/nope.napkin -o '" + dir.string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(fs::exists(dir));
  r = testing::run_napkin("draw examples/attention.napkin");
  EXPECT_NE(r.exit_code, 0);  // -o is required
}

}  // namespace
}  // namespace napkin
