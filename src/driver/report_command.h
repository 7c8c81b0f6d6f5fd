// SPDX-License-Identifier: Apache-2.0
// `napkin report`: one self-contained HTML page (inline CSS and SVG, no script, no external
// resource) with everything napkin derives for a diagram on a machine: the drawings, the
// streamability report, the closed form and thresholds, the ranked schedules with the
// rejections by reason, the best configuration's derivation, the pseudocode, and plots of the
// predicted TFLOP/s against sequence length across machines and dtypes. docs/report.md
// describes every section and the rules of the plots.
#pragma once

#include <string>
#include <vector>

#include "driver/driver.h"

namespace napkin::driver {

struct ReportOptions {
  std::string machine;       // a machine name (machines/NAME.toml); required
  std::string machines_dir;  // empty: arch::default_machines_dir()
  std::string output_dir;    // created when missing; the page is DIR/report.html
  int top = 10;              // ranked schedules listed
  // The plots: machines (a name missing from machines_dir is skipped with a note) and
  // sequence lengths (powers of two are drawn on a log2 axis).
  std::vector<std::string> plot_machines = {"h100-sxm5", "h200", "b200", "a100-sxm4-80g"};
  std::vector<std::int64_t> plot_lengths = {512, 1024, 2048, 4096, 8192, 16384};
  std::int64_t plot_tokens = 16384;  // batch b = max(1, tokens / s): FlashAttention-3's convention
};

// The page as text. Pre: none (every user mistake is an error value). Post, on success: a
// complete HTML5 document, deterministic (no time, no absolute path: the file as given), with
// every piece of text from the diagram, machine or schedule HTML-escaped.
Result<std::string> report_html(const DiagramArgs& args, const ReportOptions& options);

// Writes DIR/report.html and prints "wrote PATH (N bytes)". A bad diagram, binding or machine
// name fails with its diagnostic (exit code 1) before anything is written.
CommandOutput report(const DiagramArgs& args, const ReportOptions& options);

}  // namespace napkin::driver
