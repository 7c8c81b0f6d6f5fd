// SPDX-License-Identifier: Apache-2.0
// `napkin report`: the page for examples/attention.napkin on h100-sxm5 against its golden file,
// its sections, its self-containment and escaping, errors, and a load in headless Chromium
// (Debian's `chromium`) that must log no console error and render every section.
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "common/test_util.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSections[] = {"summary",   "diagram",       "machine",    "streaming", "closed-form",
                                     "schedules", "configuration", "pseudocode", "plots"};

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// The report is written once through the CLI (the search runs for every plotted machine and
// dtype, a few seconds) and shared by the tests.
class Report : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("napkin_report_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    run_ = new testing::RunResult(
        testing::run_napkin("report examples/attention.napkin --machine h100-sxm5 -o '" + dir_->string() + "'"));
    html_ = new std::string(testing::read_text(*dir_ / "report.html"));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete run_;
    delete html_;
  }
  static fs::path* dir_;
  static testing::RunResult* run_;
  static std::string* html_;
};
fs::path* Report::dir_ = nullptr;
testing::RunResult* Report::run_ = nullptr;
std::string* Report::html_ = nullptr;

TEST_F(Report, WritesOnePage) {
  ASSERT_EQ(run_->exit_code, 0) << run_->err;
  EXPECT_NE(run_->out.find("report.html"), std::string::npos) << run_->out;
  EXPECT_EQ(run_->err, "");
  ASSERT_FALSE(html_->empty());
}

TEST_F(Report, MatchesGoldenFile) { testing::expect_golden("report/attention_h100-sxm5.html", *html_); }

TEST_F(Report, HasEverySection) {
  const std::string& h = *html_;
  for (const char* id : kSections) {
    EXPECT_EQ(count(h, std::string("<section id=\"") + id + "\">"), 1u) << id;
    EXPECT_EQ(count(h, std::string("href=\"#") + id + "\""), 1u) << id;  // in the navigation
  }
  // Header: diagram key, machine, version.
  EXPECT_NE(h.find("b=2 h=16 q=8192 k=8192 d=128 #"), std::string::npos);
  EXPECT_NE(h.find("h100-sxm5 (NVIDIA H100 SXM5 80GB)"), std::string::npos);
  EXPECT_NE(h.find("<dt>napkin</dt><dd>0."), std::string::npos);
  // Drawings (diagram, machine) and the plot, inline.
  EXPECT_EQ(count(h, "<svg xmlns=\"http://www.w3.org/2000/svg\""), 3u);
  EXPECT_NE(h.find("neural circuit diagram"), std::string::npos);
  // Streamability, closed form, thresholds.
  EXPECT_NE(h.find("k: streamed online_softmax"), std::string::npos);
  EXPECT_NE(h.find("H*(M) = "), std::string::npos);
  EXPECT_NE(h.find("g_q &gt;= 295"), std::string::npos);
  // Ranked schedules (10 rows) and the rejections by reason.
  EXPECT_NE(h.find("<td class=\"num\">10</td>"), std::string::npos);
  EXPECT_EQ(h.find("<td class=\"num\">11</td>"), std::string::npos);
  EXPECT_NE(h.find("Rejected candidates by reason"), std::string::npos);
  EXPECT_NE(h.find("<td>registers</td>"), std::string::npos);
  // The solver's derivation of the best configuration.
  for (const char* step : {"1. Divisibility", "2. Variables and footprints", "3. Throughput per row and chunk",
                           "4. Bandwidth check", "5. Overlap and efficiency"})
    EXPECT_NE(h.find(step), std::string::npos) << step;
  EXPECT_NE(h.find("consumer warpgroups per SM"), std::string::npos);
  // Pseudocode, escaped.
  EXPECT_NE(h.find("O_acc &lt;- alpha * O_acc"), std::string::npos);
  // Plots: every machine, both dtypes; fp8 skipped on the A100 with its reason.
  for (const char* series : {"h100-sxm5 bf16", "h100-sxm5 fp8e4m3", "h200 bf16", "h200 fp8e4m3", "b200 bf16",
                             "b200 fp8e4m3", "a100-sxm4-80g bf16"})
    EXPECT_NE(h.find(series), std::string::npos) << series;
  EXPECT_NE(h.find("a100-sxm4-80g fp8e4m3: skipped (machine a100-sxm4-80g has no tensor_core rate for fp8e4m3"),
            std::string::npos);
  EXPECT_NE(h.find("b = max(1, 16384/s)"), std::string::npos);
}

TEST_F(Report, IsSelfContainedAndEscaped) {
  const std::string& h = *html_;
  EXPECT_EQ(h.rfind("<!DOCTYPE html>\n", 0), 0u);
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_EQ(h.find("<link"), std::string::npos);
  EXPECT_EQ(h.find("src="), std::string::npos);
  EXPECT_EQ(h.find("url("), std::string::npos);
  EXPECT_EQ(h.find("<?xml"), std::string::npos);  // SVG prologs dropped when inlined
  // The only absolute URL is the SVG namespace.
  EXPECT_EQ(count(h, "http"), count(h, "http://www.w3.org/2000/svg"));
  EXPECT_EQ(h.find(" <- "), std::string::npos);   // pseudocode arrows escaped
  EXPECT_EQ(h.find("->l2<"), std::string::npos);  // "gmem->l2" escaped
  // Deterministic: no temporary or absolute paths.
  EXPECT_EQ(h.find(fs::temp_directory_path().string()), std::string::npos);
  EXPECT_EQ(h.find(testing::source_dir().string()), std::string::npos);
}

// A diagram that derives a plan of kernels: the summary, the configuration and the pseudocode show
// the plan napkin derive prints, not "no feasible schedule" of one fused schedule.
TEST(ReportOfAPlan, ShowsThePlansKernels) {
  const fs::path dir = fs::temp_directory_path() / ("napkin_report_plan_" + std::to_string(::getpid()));
  auto r = testing::run_napkin("report examples/swiglu_mlp.napkin --machine h100-sxm5 -o '" + dir.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = testing::read_text(dir / "report.html");
  fs::remove_all(dir);
  for (const char* part : {"napkin derives a plan of 2 kernels", "<code>dual_gemm H &lt;- X Wg Wu</code>",
                           "<code>gemm Y &lt;- Wd H</code>", "Each kernel of the plan is configured by its own solver",
                           "## kernel 1 of 2: dual_gemm H &lt;- X Wg Wu", "G_acc += X @ Wg over e"})
    EXPECT_NE(html.find(part), std::string::npos) << part;
  EXPECT_EQ(html.find("No feasible schedule.</p>"), std::string::npos);
}

// A plan with a kernel that cannot run at these sizes carries derive's warning into the report.
TEST(ReportOfAPlan, ShowsItsWarnings) {
  const fs::path dir = fs::temp_directory_path() / ("napkin_report_warn_" + std::to_string(::getpid()));
  auto r = testing::run_napkin("report examples/attention.napkin --machine h100-sxm5 --set d=36 -o '" + dir.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = testing::read_text(dir / "report.html");
  fs::remove_all(dir);
  EXPECT_NE(html.find("Warning: at these sizes the kernel gemm S &lt;- Q K cannot run"), std::string::npos);
}

TEST(ReportErrors, UnknownMachineWritesNothing) {
  const fs::path dir = fs::temp_directory_path() / ("napkin_report_err_" + std::to_string(::getpid()));
  const auto r = testing::run_napkin("report examples/attention.napkin --machine h999 -o '" + dir.string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("h999"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "report.html"));
  fs::remove_all(dir);
}

TEST(ReportErrors, MissingOutputDirIsAUsageError) {
  const auto r = testing::run_napkin("report examples/attention.napkin --machine h100-sxm5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--output-dir"), std::string::npos) << r.err;
}

// Headless Chromium: the page loads with no console error, and the DOM it builds holds every
// section and the inline drawings. Skips (loudly) only when Chromium is absent or cannot start.
TEST_F(Report, LoadsInHeadlessChromiumWithoutErrors) {
  std::string browser;
  for (const char* b : {"chromium", "chromium-browser"})
    if (std::system((std::string("command -v ") + b + " >/dev/null 2>&1").c_str()) == 0) {
      browser = b;
      break;
    }
  if (browser.empty())
    GTEST_SKIP() << "\n*** SKIPPED: Chromium is not installed, so the report was NOT checked in a browser.\n"
                    "*** Install Debian's `chromium` (tools/install_deps.sh does) and run again. ***";
  ASSERT_EQ(run_->exit_code, 0);
  const fs::path page = *dir_ / "report.html";
  const fs::path profile = *dir_ / "chromium-profile";
  const std::string common = "timeout 180 " + browser +
                             " --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions"
                             " --user-data-dir='" + profile.string() + "' --enable-logging=stderr --v=0 ";
  const std::string dump = common + "--dump-dom 'file://" + page.string() + "' >'" + (*dir_ / "dom.html").string() +
                           "' 2>'" + (*dir_ / "dom.err").string() + "'";
  const int status = std::system(dump.c_str());
  const std::string dom = testing::read_text(*dir_ / "dom.html");
  const std::string err = testing::read_text(*dir_ / "dom.err");
  if (status != 0 && dom.empty())
    GTEST_SKIP() << "\n*** SKIPPED: Chromium is installed but could not be launched here (exit status " << status
                 << "), so the report was NOT checked in a browser. Its stderr:\n" << err << "\n***";
  ASSERT_EQ(status, 0) << err;

  // No console errors, no uncaught exceptions.
  std::size_t line_start = 0;
  while (line_start < err.size()) {
    std::size_t nl = err.find('\n', line_start);
    if (nl == std::string::npos) nl = err.size();
    const std::string line = err.substr(line_start, nl - line_start);
    // Chromium logs page messages as "LEVEL:CONSOLE:LINE] ..." ("ERROR:CONSOLE", and
    // "INFO:CONSOLE ... Uncaught ReferenceError" for a failing script): the page logs none.
    EXPECT_EQ(line.find(":CONSOLE"), std::string::npos) << line;
    EXPECT_EQ(line.find("Uncaught"), std::string::npos) << line;
    line_start = nl + 1;
  }
  // The DOM Chromium built holds every section and the three inline SVGs.
  for (const char* id : kSections)
    EXPECT_NE(dom.find(std::string("<section id=\"") + id + "\">"), std::string::npos) << id;
  EXPECT_EQ(count(dom, "<svg "), 3u);
  EXPECT_NE(dom.find("</html>"), std::string::npos);

  // And it renders: a screenshot of the top of the page is a non-trivial PNG.
  const fs::path png = *dir_ / "report.png";
  const std::string shot = common + "--hide-scrollbars --window-size=1400,2000 --screenshot='" + png.string() +
                           "' 'file://" + page.string() + "' >/dev/null 2>&1";
  ASSERT_EQ(std::system(shot.c_str()), 0) << shot;
  ASSERT_TRUE(fs::exists(png));
  EXPECT_GT(fs::file_size(png), 50000u);
}

}  // namespace
}  // namespace napkin
