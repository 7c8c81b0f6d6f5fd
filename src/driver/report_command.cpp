// SPDX-License-Identifier: Apache-2.0
#include "driver/report_command.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "arch/load.h"
#include "cost/closed_form.h"
#include "cost/cost.h"
#include "driver/pseudocode_command.h"
#include "driver/units.h"
#include "emit/pseudocode.h"
#include "emit/svg.h"
#include "emit/svg_canvas.h"
#include "emit/svg_plot.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "sched/schedule.h"
#include "sched/streaming.h"
#include "search/search.h"

namespace napkin::driver {

namespace {

// --- HTML text ------------------------------------------------------------------------------

std::string esc(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

// An SVG document made inline: the XML prolog dropped (HTML has none), the rest kept as is.
std::string inline_svg(const std::string& svg) {
  std::string s = svg;
  if (s.rfind("<?xml", 0) == 0) s.erase(0, s.find("?>") + 2);
  while (!s.empty() && s.front() == '\n') s.erase(0, 1);
  return s;
}

// A table: header cells, then rows of cells that are already HTML. Columns listed in
// `numeric` are right-aligned.
std::string table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
                  const std::set<std::size_t>& numeric = {}, std::string_view cls = "") {
  std::string s = cls.empty() ? "<table>\n<thead><tr>" : fmt::format("<table class=\"{}\">\n<thead><tr>", cls);
  for (std::size_t i = 0; i < head.size(); ++i)
    s += fmt::format("<th{}>{}</th>", numeric.count(i) ? " class=\"num\"" : "", esc(head[i]));
  s += "</tr></thead>\n<tbody>\n";
  for (const auto& row : rows) {
    s += "<tr>";
    for (std::size_t i = 0; i < row.size(); ++i)
      s += fmt::format("<td{}>{}</td>", numeric.count(i) ? " class=\"num\"" : "", row[i]);
    s += "</tr>\n";
  }
  return s + "</tbody>\n</table>\n";
}

std::string code(std::string_view s) { return "<code>" + esc(s) + "</code>"; }
std::string pre(std::string_view s, std::string_view cls = "") {
  return (cls.empty() ? std::string("<pre>") : fmt::format("<pre class=\"{}\">", cls)) + esc(s) + "</pre>\n";
}

// --- numbers --------------------------------------------------------------------------------

std::string g4(double v) { return fmt::format("{:.4g}", v); }


// Distinct floating-point input dtypes in input order, joined by "/": "bf16", "fp8e4m3/f16".
std::string input_dtypes(const ir::Diagram& d) {
  std::vector<std::string> seen;
  for (ir::NodeId id : d.inputs()) {
    if (!is_float(d.node(id).dtype)) continue;
    const std::string n(dtype_name(d.node(id).dtype));
    if (std::find(seen.begin(), seen.end(), n) == seen.end()) seen.push_back(n);
  }
  return seen.empty() ? std::string("none") : fmt::format("{}", fmt::join(seen, "/"));
}

// Canonical diagram text with every floating-point input declared `dt` (lines "in NAME[..] T").
// Casts written in the diagram (`as bf16`) are kept: only the stored inputs are quantized.
std::string with_input_dtype(const std::string& text, DType dt) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    if (line.rfind("in ", 0) == 0) {
      const auto sp = line.rfind(' ');
      const auto t = parse_dtype(line.substr(sp + 1));
      if (t && is_float(*t)) line = line.substr(0, sp + 1) + std::string(dtype_name(dt));
    }
    out += line + "\n";
    pos = nl + 1;
  }
  return out;
}

// --- the plots ------------------------------------------------------------------------------

// How the diagram is rebound for one sequence length s.
struct Sweep {
  std::vector<std::string> seq_axes;  // q and k, or the largest axis
  bool batch = false;                 // b = max(1, tokens / s)
  std::string description;            // one sentence for the page
};

Sweep sweep_of(const ir::Diagram& d, std::int64_t tokens) {
  Sweep w;
  if (d.find_axis("q") && d.find_axis("k")) {
    w.seq_axes = {"q", "k"};
    w.batch = d.find_axis("b").has_value();
    w.description = w.batch ? fmt::format("q = k = s and b = max(1, {}/s) (FlashAttention-3's benchmark convention: "
                                          "{} tokens per batch); other axes as in the diagram.", tokens, tokens)
                            : "q = k = s; the diagram has no axis b, so the batch stays as written; other axes as in "
                              "the diagram.";
    return w;
  }
  const ir::Axis* largest = nullptr;
  for (const ir::Axis& a : d.axes)
    if (!largest || a.size > largest->size) largest = &a;
  if (largest) w.seq_axes = {largest->name};
  w.description = largest ? fmt::format("the diagram has no axes q and k, so the plot sweeps its largest axis, "
                                        "{} = s, and keeps the others as written.", largest->name)
                          : "the diagram has no axes.";
  return w;
}

struct SeriesSpec {
  std::string machine;
  DType dtype = DType::bf16;
  bool as_written = true;  // the diagram's own dtypes (else every input quantized to dtype)
};

struct SeriesResult {
  std::vector<emit::PlotPoint> points;
  std::vector<std::string> bounds;  // parallel to points
  std::string skipped;              // why the whole series is absent; empty when drawn
  std::vector<std::string> notes;   // points left out, with why: "s = 512, 1024: reason"
};

// "s = 512, 1024: why" per distinct reason, in order of first appearance; "every s: why".
std::vector<std::string> grouped(const std::vector<std::pair<std::int64_t, std::string>>& missing,
                                 std::size_t lengths) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> groups;
  for (const auto& [s, why] : missing) {
    auto it = std::find_if(groups.begin(), groups.end(), [&, why = why](const auto& g) { return g.first == why; });
    if (it == groups.end()) groups.push_back({why, {s}});
    else it->second.push_back(s);
  }
  std::vector<std::string> out;
  for (const auto& [why, ss] : groups)
    out.push_back(ss.size() == lengths ? "every s: " + why : fmt::format("s = {}: {}", fmt::join(ss, ", "), why));
  return out;
}

SeriesResult run_series(const std::string& text, const std::string& name, const Sweep& sweep,
                        const arch::Machine& m, const std::vector<std::int64_t>& lengths, std::int64_t tokens) {
  SeriesResult r;
  std::vector<std::pair<std::int64_t, std::string>> missing;
  for (std::int64_t s : lengths) {
    std::vector<ir::Binding> bindings;
    for (const std::string& a : sweep.seq_axes)
      bindings.push_back({a, static_cast<double>(s), fmt::format("{}={}", a, s)});
    if (sweep.batch) {
      const std::int64_t b = std::max<std::int64_t>(1, tokens / s);
      bindings.push_back({"b", static_cast<double>(b), fmt::format("b={}", b)});
    }
    auto parsed = ir::parse_diagram(SourceText{name, text}, bindings);
    if (!parsed) {
      missing.emplace_back(s, parsed.error().message);
      continue;
    }
    const ir::Diagram& d = parsed->diagram;
    const sched::StreamingReport report = sched::analyse_streaming(d);
    auto found = search::search(d, report, m);
    if (!found) {
      // A machine without the dtype fails at every length: the whole series is skipped.
      r.skipped = found.error().message;
      r.points.clear();
      r.bounds.clear();
      return r;
    }
    if (found->ranked.empty()) {
      missing.emplace_back(s, "no feasible schedule");
      continue;
    }
    r.points.push_back({static_cast<double>(s), found->ranked.front().tflops});
    r.bounds.push_back(found->ranked.front().bound);
  }
  r.notes = grouped(missing, lengths.size());
  return r;
}

// --- the page -------------------------------------------------------------------------------

constexpr std::string_view kStyle = R"(
:root { --ink:#1d232b; --muted:#5b6673; --line:#dfe3e8; --soft:#f6f7f9; --accent:#0b5cad; }
* { box-sizing: border-box; }
body { margin: 0; background: #eef1f4; color: var(--ink);
  font: 15px/1.5 "DejaVu Sans", Helvetica, Arial, sans-serif; }
header.top { background: #17212b; color: #fff; padding: 22px 32px 18px; }
header.top h1 { margin: 0 0 6px; font-size: 24px; font-weight: 600; }
header.top h1 span { color: #9fc3ea; font-weight: 400; }
header.top dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 10px 0 0; font-size: 13.5px; }
header.top dt { color: #a9b6c3; }
header.top dd { margin: 0; font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; word-break: break-all; }
nav { background: #fff; border-bottom: 1px solid var(--line); padding: 8px 32px; font-size: 13.5px; }
nav a { color: var(--accent); text-decoration: none; margin-right: 18px; white-space: nowrap; }
main { max-width: 1320px; margin: 0 auto; padding: 20px 24px 40px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 6px 24px 18px; margin: 0 0 20px; }
h2 { font-size: 19px; margin: 14px 0 10px; padding-bottom: 6px; border-bottom: 2px solid var(--soft); }
h3 { font-size: 15.5px; margin: 18px 0 6px; color: #2a3440; }
p { margin: 6px 0 10px; }
p.note, li.note { color: var(--muted); font-size: 13.5px; }
code, pre { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
code { background: var(--soft); padding: 1px 4px; border-radius: 3px; }
pre { background: #f7f8fa; border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; overflow-x: auto; line-height: 1.45; }
pre.wrap { white-space: pre-wrap; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13.5px; }
th { text-align: left; background: var(--soft); font-weight: 600; border-bottom: 1px solid #c9d0d8; }
th, td { padding: 4px 10px; vertical-align: top; }
tbody tr:nth-child(even) td { background: #fafbfc; }
td { border-bottom: 1px solid #eef0f3; }
.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td code { background: none; padding: 0; font-size: 12px; }
td.sched code { color: var(--muted); }
span.bound { white-space: nowrap; }
figure { margin: 8px 0 12px; overflow-x: auto; }
figure svg { max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 10px 0; }
.card { background: var(--soft); border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.card .k { color: var(--muted); font-size: 12.5px; }
.card .v { font-size: 20px; font-weight: 600; }
.ok { color: #1a7f37; font-weight: 600; }
.bad { color: #b42318; font-weight: 600; }
footer { text-align: center; color: var(--muted); font-size: 12.5px; padding: 0 0 30px; }
)";

struct Page {
  std::string body;
  void section(std::string_view id, std::string_view title) {
    body += fmt::format("<section id=\"{}\">\n<h2>{}</h2>\n", id, esc(title));
  }
  void end() { body += "</section>\n"; }
  void add(std::string_view html) { body += html; }
};

std::string card(std::string_view key, std::string_view value) {
  return fmt::format("<div class=\"card\"><div class=\"k\">{}</div><div class=\"v\">{}</div></div>\n", esc(key),
                     esc(value));
}

std::string configuration_html(const search::Configuration& c, const arch::Machine& m) {
  std::string s;
  s += "<h3>1. Divisibility</h3>\n<p>Each configured value must be a multiple of the least common multiple of "
       "what the hardware requires.</p>\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& dv : c.divisibility)
    rows.push_back({code(dv.what),
                    dv.padded_from > 0 ? fmt::format("{} (pads {})", dv.value, dv.padded_from) : std::to_string(dv.value),
                    std::to_string(dv.multiple),
                    esc(fmt::format("lcm({})", fmt::join(dv.reasons, ", "))),
                    dv.ok() ? "<span class=\"ok\">ok</span>" : "<span class=\"bad\">fails</span>"});
  s += table({"value", "configured", "multiple of", "requirements", ""}, rows, {1, 2});

  s += "<h3>2. Variables and footprints</h3>\n";
  rows.clear();
  for (const auto& v : c.variables)
    rows.push_back({esc(v.name), code(v.shape), esc(dtype_name(v.dtype)), esc(v.level), esc(v.scope), kib_text(v.bytes)});
  s += table({"variable", "shape", "dtype", "level", "scope", "bytes"}, rows, {5});
  const double smem_sm = static_cast<double>(m.limits.smem_bytes_per_sm.value);
  const double regs_sm = static_cast<double>(m.limits.registers_per_sm.value) * 4;
  rows = {{"shared memory", esc(fmt::format("({} − {} per CTA) / {} per warpgroup", kib_text(smem_sm),
                                            kib_text(c.smem_per_cta_bytes), kib_text(c.smem_per_warpgroup_bytes))),
           fmt::format("{:.2f}", c.max_warpgroups_smem)},
          {"registers", esc(fmt::format("{} / {} per warpgroup ({:.1f} registers per thread)", kib_text(regs_sm),
                                        kib_text(c.registers_per_warpgroup_bytes), c.registers_per_thread)),
           fmt::format("{:.2f}", c.max_warpgroups_registers)}};
  s += table({"capacity", "N_max = capacity / footprint", "N_max"}, rows, {2});
  s += fmt::format("<p>→ <b>{} consumer warpgroups per SM</b> (and one producer warpgroup issuing TMA loads).</p>\n",
                   c.warpgroups);

  s += "<h3>3. Throughput per row and chunk</h3>\n<p>One thread-iteration: one row per thread, one chunk of the "
       "streamed axis.</p>\n";
  rows.clear();
  for (const auto& r : c.rates)
    rows.push_back({esc(r.op), esc(arch::unit_name(r.unit)), esc(dtype_name(r.dtype)), g4(r.ops_per_row),
                    g4(r.ops_per_clk), g4(r.clk_per_row)});
  s += table({"operation", "unit", "dtype", "ops/row", "ops/clk per SM", "clk/row"}, rows, {3, 4, 5});
  s += fmt::format("<p>Per row: tensor core {} clk, SFU {} clk, FMA {} clk → bound by <b>{}</b>.</p>\n",
                   g4(c.tensor_clk_per_row), g4(c.sfu_clk_per_row), g4(c.fma_clk_per_row), esc(c.bound_unit));

  s += "<h3>4. Bandwidth check</h3>\n";
  s += fmt::format("<p>Compute {} per iteration ({} rows × {} clk at {:.3g} GHz) against transfer {} (the streamed "
                   "chunks to {} SMs over HBM, no caching). With L2, {}: "
                   "HBM {}, L2→SMEM {} per iteration: <b>{}</b>.</p>\n",
                   esc(seconds_text(c.compute_s_per_iteration, "µs")), c.warpgroups * c.config.rows_per_warpgroup,
                   g4(std::max({c.tensor_clk_per_row, c.sfu_clk_per_row, c.fma_clk_per_row})),
                   m.clock_hz.value / 1e9, esc(seconds_text(c.transfer_s_per_iteration, "µs")), m.sm_count.value,
                   esc(search::sharing_text(c)), esc(seconds_text(c.hbm_s_per_iteration, "µs")),
                   esc(seconds_text(c.l2_smem_s_per_iteration, "µs")),
                   esc(search::bandwidth_verdict(c)));

  s += "<h3>5. Overlap and efficiency</h3>\n";
  rows = {{"overlap schedule", code(search::overlap_name(c.config.overlap))},
          {"allowance on non-tensor work", fmt::format("{:.0f} %", c.config.overhead * 100)},
          {"period per row", esc(fmt::format("{} clk", g4(c.period_clk_per_row)))},
          {"efficiency (ideal / period)", fmt::format("{:.1f} %", c.efficiency * 100)},
          {"ideal (bound unit at peak, all else hidden)", fmt::format("{:.1f} TFLOP/s", c.ideal_flops_per_s / 1e12)},
          {"predicted (steady state, all SMs busy)", fmt::format("{:.1f} TFLOP/s", c.predicted_flops_per_s / 1e12)},
          {"predicted time (whole diagram, with wave quantization)", esc(seconds_text(c.predicted_time_s, "µs"))}};
  s += table({"step", "value"}, rows, {1});
  return s;
}

}  // namespace

Result<std::string> report_html(const DiagramArgs& args, const ReportOptions& options) {
  auto parsed = load(args);
  if (!parsed) return parsed.error();
  const ir::Diagram& d = parsed->diagram;
  auto machine = load_machine(options.machine, options.machines_dir);
  if (!machine) return machine.error();
  const arch::Machine& m = *machine;

  // The derivation on the chosen machine.
  const sched::StreamingReport report = sched::analyse_streaming(d);
  auto found = search::search(d, report, m);
  if (!found) return found.error();
  const search::SearchResult& sr = *found;
  const search::Ranked* best = sr.ranked.empty() ? nullptr : &sr.ranked.front();
  const cost::ClosedForm form = cost::derive_closed_form(d, report);
  const DType dt = compute_dtype(d);
  const auto peak = m.peak_flop_per_s(arch::Unit::tensor_core, dt);
  std::vector<cost::Threshold> thresholds;
  if (peak) thresholds = cost::compute_bound_thresholds(form, d, *peak, m.bytes_per_s(arch::kL2) / dtype_bytes(dt));
  const std::string key = ir::diagram_key(d);
  const std::string version(emit::napkin_version());
  // The plan of kernels napkin derive prints, where the diagram derives one (any but a single
  // attention kernel the configuration solver configures): the report shows it first.
  const std::optional<plan::Plan> plan = derived_plan(d, m, best != nullptr, args.file);

  Page p;
  // Summary.
  p.section("summary", "Summary");
  if (plan) {
    double flops = 0;
    for (const plan::Kernel& k : plan->kernels) flops += k.flops;
    p.add("<div class=\"cards\">\n");
    p.add(card("predicted time", seconds_text(plan->predicted_s, "µs")));
    p.add(card("predicted throughput", fmt::format("{:.1f} TFLOP/s", flops / plan->predicted_s / 1e12)));
    p.add(card("kernels", std::to_string(plan->kernels.size())));
    p.add(card("materialised", std::to_string(plan->materialised.size())));
    p.add("</div>\n");
    p.add(fmt::format("<p>napkin derives a plan of {} kernel{} (fusion against materialisation by the cost model, "
                      "algebraic moves, one solver per kernel: <code>napkin derive</code>; docs/kernels.md).</p>\n",
                      plan->kernels.size(), plan->kernels.size() == 1 ? "" : "s"));
    std::vector<std::vector<std::string>> rows;
    for (std::size_t i = 0; i < plan->kernels.size(); ++i) {
      const plan::Kernel& k = plan->kernels[i];
      rows.push_back({std::to_string(i + 1), code(k.name), code(plan::kernel_schedule_text(k)),
                      esc(seconds_text(k.predicted_s, "µs")), esc(k.bound)});
    }
    p.add(table({"#", "kernel", "schedule", "predicted", "bound"}, rows, {0, 3}));
    for (const std::string& mv : plan->moves) p.add(fmt::format("<p>Move: {}</p>\n", esc(mv)));
    for (const std::string& w : plan->warnings) p.add(fmt::format("<p class=\"bad\">Warning: {}</p>\n", esc(w)));
    p.add(fmt::format("<p>Materialised in global memory: {}.</p>\n",
                      plan->materialised.empty() ? std::string("nothing") : esc(fmt::format("{}", fmt::join(plan->materialised, "; ")))));
    p.add(best ? fmt::format("<p>One fused schedule for the whole diagram (under <a href=\"#schedules\">Schedules</a>) "
                             "is predicted at {}.</p>\n", esc(seconds_text(best->predicted_time_s, "µs")))
               : "<p>No single fused schedule runs the whole diagram (the rejections are listed under "
                 "<a href=\"#schedules\">Schedules</a>).</p>\n");
  } else if (best) {
    p.add("<div class=\"cards\">\n");
    p.add(card("predicted time", seconds_text(best->predicted_time_s, "µs")));
    p.add(card("predicted throughput", fmt::format("{:.1f} TFLOP/s", best->tflops)));
    if (peak) p.add(card(fmt::format("of {} tensor-core peak", dtype_name(dt)), fmt::format("{:.1f} %", best->tflops * 1e12 / *peak * 100)));
    p.add(card("bound", best->bound));
    p.add(card("groups per SM", std::to_string(best->groups_per_sm)));
    p.add("</div>\n");
    const std::string text = sched::to_string(best->schedule);
    p.add(fmt::format("<p>Best of {} candidates ({}): {}.</p>\n", sr.considered, esc(sr.method), code(best->summary)));
    if (text != best->summary) p.add(pre(text));
  } else {
    p.add(fmt::format("<p class=\"bad\">No feasible schedule among {} candidates ({}); the rejections are listed "
                      "under <a href=\"#schedules\">Schedules</a>.</p>\n", sr.considered, esc(sr.method)));
  }
  p.end();

  // Diagram.
  p.section("diagram", "Diagram");
  p.add("<p>The diagram in canonical form:</p>\n" + pre(ir::print_diagram(d)));
  p.add("<figure>\n" + inline_svg(emit::draw_diagram_svg(d, best ? &best->schedule : nullptr, &m)));
  p.add(fmt::format("<figcaption>The neural circuit diagram{} (docs/drawings.md): wires are axes coloured by the "
                    "memory level their tensor lives at, boxes are ops.</figcaption>\n</figure>\n",
                    best ? " under the best schedule" : ""));
  p.end();

  // Machine.
  p.section("machine", "Machine");
  p.add(fmt::format("<p>{} ({}), from <code>machines/{}.toml</code>.</p>\n", esc(m.display_name), code(m.name),
                    esc(m.name)));
  p.add("<figure>\n" + inline_svg(emit::draw_machine_svg(m)) + "</figure>\n");
  p.end();

  // Streamability.
  p.section("streaming", "Streamability");
  p.add("<p>Per axis: woven (may be tiled), streamed (may be chunked, with its accumulator) or neither, and why "
        "(docs/streaming.md).</p>\n");
  p.add(pre(sched::report_text(report), "wrap"));
  p.end();

  // Closed form and thresholds.
  p.section("closed-form", "Closed form and thresholds");
  p.add("<p>The least transfers across one level of M values (docs/cost_model.md §7):</p>\n" + pre(form.text()));
  {
    std::vector<std::vector<std::string>> rows;
    for (const cost::Term& t : form.terms)
      rows.push_back({esc(t.tensor), esc(fmt::format("{}", fmt::join(t.axes, " "))),
                      esc(t.reread_axes.empty() ? std::string("—") : fmt::format("{}", fmt::join(t.reread_axes, ", "))),
                      fmt::format("{:.6g}", t.alpha), fmt::format("{:g}", t.beta)});
    p.add(table({"tensor", "axes", "re-read once per tile of", "α", "β"}, rows, {3, 4}));
  }
  if (!form.relations.empty()) {
    p.add("<p>Optimal tiles:");
    for (const cost::TileRelation& t : form.relations) p.add(" " + code(t.text));
    p.add("</p>\n");
  }
  if (peak) {
    p.add(fmt::format("<p>Compute-bound on {} ({} tensor core {:.1f} TFLOP/s, HBM {:.3g} TB/s, no caching; "
                      "docs/cost_model.md §11) when:</p>\n<ul>\n",
                      esc(m.name), esc(dtype_name(dt)), *peak / 1e12, m.bytes_per_s(arch::kL2) / 1e12));
    for (const cost::Threshold& t : thresholds) {
      std::string line = t.text;
      if (t.kind == "memory") line += fmt::format(" = {} at {} B/value", kib_text(t.value * dtype_bytes(dt)), dtype_bytes(dt));
      p.add("<li>" + code(line) + "</li>\n");
    }
    p.add("</ul>\n");
  } else {
    p.add(fmt::format("<p class=\"note\">No thresholds: {} has no tensor-core rate for {}.</p>\n", esc(m.name),
                      esc(dtype_name(dt))));
  }
  p.end();

  // Ranked schedules and rejections.
  p.section("schedules", "Schedules");
  int rejected = 0;
  for (const auto& [reason, n] : sr.rejected) rejected += n;
  p.add(fmt::format("<p>Search by the {}: {} candidates, {} feasible, {} rejected. The {} fastest:</p>\n",
                    esc(sr.method), sr.considered, sr.ranked.size(), rejected,
                    std::min<std::size_t>(static_cast<std::size_t>(options.top), sr.ranked.size())));
  {
    std::vector<std::vector<std::string>> rows;
    for (std::size_t i = 0; i < sr.ranked.size() && i < static_cast<std::size_t>(options.top); ++i) {
      const search::Ranked& k = sr.ranked[i];
      const std::string text = sched::to_string(k.schedule);
      rows.push_back({std::to_string(i + 1), code(k.summary) + (text == k.summary ? "" : "<br>" + code(text)),
                      esc(seconds_text(k.predicted_time_s, "µs")), fmt::format("{:.1f}", k.tflops), "<span class=\"bound\">" + esc(k.bound) + "</span>",
                      std::to_string(k.groups_per_sm)});
    }
    std::string t = table({"#", "schedule", "predicted", "TFLOP/s", "bound", "groups/SM"}, rows, {0, 2, 3, 5});
    // The schedule column's second line is the canonical text: muted.
    for (std::size_t pos; (pos = t.find("<td><code>")) != std::string::npos;) t.replace(pos, 4, "<td class=\"sched\">");
    p.add(t);
  }
  p.add("<h3>Rejected candidates by reason</h3>\n");
  if (sr.rejected.empty()) {
    p.add("<p>None.</p>\n");
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const auto& [reason, n] : sr.rejected) {
      std::string example;
      for (const auto& r : sr.rejections)
        if (r.reason.find(reason) != std::string::npos) {
          example = r.candidate + ": " + r.reason;
          break;
        }
      rows.push_back({esc(reason), std::to_string(n), example.empty() ? "—" : esc(example)});
    }
    p.add(table({"reason", "count", "first such candidate"}, rows, {1}));
    p.add("<p class=\"note\"><code>napkin derive -v</code> lists every rejected candidate.</p>\n");
  }
  p.end();

  // The best configuration's derivation.
  p.section("configuration", "Best configuration");
  if (plan) {
    p.add("<p>Each kernel of the plan is configured by its own solver: its schedule is in the table under "
          "<a href=\"#summary\">Summary</a> (<code>napkin derive --top N</code> ranks more).</p>\n");
  } else if (best && best->configuration) {
    p.add(fmt::format("<p>{} from the configuration solver (docs/configuration.md), the paper's section 5 "
                      "automated.</p>\n", code(best->summary)));
    p.add(configuration_html(*best->configuration, m));
  } else if (best) {
    p.add(fmt::format("<p>The best schedule came from the {} (docs/cost_model.md): it has no configuration-solver "
                      "derivation (divisibility, warpgroups, throughput table); its estimate is in the table "
                      "above.</p>\n", esc(sr.method)));
  } else {
    p.add("<p>No feasible schedule.</p>\n");
  }
  p.end();

  // Pseudocode.
  p.section("pseudocode", "Pseudocode");
  if (plan) {
    auto text = plan_pseudocode(d, *plan, m, false);
    if (!text) return text.error();
    p.add("<p>The plan's kernels in order, each with its loop nest: init / loop / finalize per level, and every "
          "variable with its shape, dtype, level and bytes (docs/pseudocode.md).</p>\n");
    p.add(pre(*text));
  } else if (best) {
    p.add("<p>The best schedule's algorithm: init / loop / finalize per level, and every variable with its shape, "
          "dtype, level and bytes (docs/pseudocode.md).</p>\n");
    std::vector<emit::LiveMemory> live;
    if (best->configuration) live = live_memory(*best->configuration, m);
    else if (auto est = cost::estimate(d, best->schedule, m)) live = live_memory(*est);
    p.add(pre(emit::pseudocode_text(d, best->schedule, &m, live)));
  } else {
    p.add("<p>No feasible schedule.</p>\n");
  }
  p.end();

  // Plots: predicted TFLOP/s against sequence length, across machines and dtypes.
  const Sweep sweep = sweep_of(d, options.plot_tokens);
  p.section("plots", sweep.seq_axes.size() == 1 ? "Predicted throughput against " + sweep.seq_axes[0]
                                                 : std::string("Predicted throughput against sequence length"));
  {
    const std::string text = ir::print_diagram(d);
    const std::string own = input_dtypes(d);
    std::vector<DType> quantized;
    if (own != dtype_name(DType::fp8e4m3)) quantized.push_back(DType::fp8e4m3);
    std::vector<SeriesSpec> specs;
    std::vector<std::string> notes;
    std::vector<std::optional<arch::Machine>> machines;
    for (const std::string& name : options.plot_machines) {
      auto pm = load_machine(name, options.machines_dir);
      if (!pm) {
        notes.push_back(fmt::format("{}: skipped, no machine file ({})", name, pm.error().message));
        continue;
      }
      machines.push_back(pm.value());
      specs.push_back({name, dt, true});
      for (DType q : quantized) specs.push_back({name, q, false});
    }
    std::vector<std::future<SeriesResult>> jobs;
    for (const SeriesSpec& sp : specs) {
      const arch::Machine* pm = nullptr;
      for (const auto& mm : machines)
        if (mm->name == sp.machine) pm = &*mm;
      const std::string series_text = sp.as_written ? text : with_input_dtype(text, sp.dtype);
      jobs.push_back(std::async(std::launch::async, [series_text, &d, &sweep, pm, &options] {
        return run_series(series_text, d.source_name, sweep, *pm, options.plot_lengths, options.plot_tokens);
      }));
    }
    std::vector<emit::PlotSeries> series;
    std::vector<std::pair<std::string, SeriesResult>> drawn;
    const auto& palette = emit::plot_palette();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      SeriesResult r = jobs[i].get();
      const SeriesSpec& sp = specs[i];
      const std::string label = fmt::format("{} {}", sp.machine, sp.as_written ? own : std::string(dtype_name(sp.dtype)));
      if (!r.skipped.empty()) {
        notes.push_back(fmt::format("{}: skipped ({})", label, r.skipped));
        continue;
      }
      for (const std::string& n : r.notes) notes.push_back(label + ": " + n);
      if (r.points.empty()) continue;
      std::size_t machine_index = 0;
      for (std::size_t j = 0; j < machines.size(); ++j)
        if (machines[j]->name == sp.machine) machine_index = j;
      series.push_back({label, r.points, palette[machine_index % palette.size()], !sp.as_written});
      drawn.emplace_back(label, std::move(r));
    }
    emit::PlotOptions po;
    po.title = fmt::format("Predicted TFLOP/s of the best schedule: {}", d.source_name);
    po.x_label = sweep.seq_axes.size() == 2 ? "sequence length s (q = k = s)"
                                            : fmt::format("{} = s", sweep.seq_axes.empty() ? "s" : sweep.seq_axes[0]);
    po.y_label = "predicted TFLOP/s";
    po.log2_x = true;
    po.width = 1080;
    po.height = 480;
    po.notes = {"solid: the diagram's own dtypes; dashed, hollow markers: every input quantized to fp8e4m3"};
    if (series.empty())
      p.add("<p class=\"bad\">Nothing to plot: no machine and dtype gave a feasible schedule at any length (see the "
            "notes below).</p>\n");
    else
      p.add("<figure>\n" + inline_svg(emit::draw_plot_svg(series, po)) + "</figure>\n");
    p.add("<ul>\n");
    p.add(fmt::format("<li>Each point is the best schedule that <code>search::search</code> finds for the rebound "
                      "diagram on that machine (the same search as above). Rebinding: {}</li>\n", esc(sweep.description)));
    p.add(fmt::format("<li>Dtypes: solid lines keep the diagram's own input dtypes ({}). Dashed lines are the same "
                      "diagram re-parsed from its canonical text with every floating-point input declared "
                      "<code>fp8e4m3</code>; casts written in the diagram are kept, so the contractions run on the "
                      "fp8 tensor core and the outputs keep their declared dtype. No scaling factors are modelled "
                      "(FlashAttention-3's FP8 path adds per-tensor scales, which cost little).</li>\n", esc(own)));
    bool flat = !drawn.empty();
    for (const auto& [label, r] : drawn)
      for (const emit::PlotPoint& q : r.points)
        flat = flat && std::fabs(q.y - r.points.front().y) <= 1e-3 * std::max(1.0, r.points.front().y);
    if (flat && sweep.batch)
      p.add("<li>The lines are flat: with b·s fixed, every length has the same number of tiles and the same "
            "per-iteration cost, and the model has no per-tile prologue or epilogue (loading Q, writing O) and no "
            "launch latency (docs/cost_model.md, known blind spots). Measured kernels lose throughput at short "
            "lengths for exactly those reasons.</li>\n");
    for (const std::string& n : notes) p.add("<li class=\"note\">" + esc(n) + "</li>\n");
    p.add("</ul>\n");
    // The numbers behind the plot.
    std::vector<std::string> head = {"s"};
    for (const auto& [label, r] : drawn) head.push_back(label);
    std::vector<std::vector<std::string>> rows;
    std::set<std::size_t> numeric;
    for (std::size_t j = 0; j < head.size(); ++j) numeric.insert(j);
    for (std::int64_t s : options.plot_lengths) {
      std::vector<std::string> row = {std::to_string(s)};
      for (const auto& [label, r] : drawn) {
        std::string cell = "—";
        for (std::size_t k = 0; k < r.points.size(); ++k)
          if (r.points[k].x == static_cast<double>(s))
            cell = fmt::format("<span title=\"bound: {}\">{:.1f}</span>", esc(r.bounds[k]), r.points[k].y);
        row.push_back(cell);
      }
      rows.push_back(row);
    }
    if (!drawn.empty()) p.add("<h3>Predicted TFLOP/s</h3>\n" + table(head, rows, numeric));
  }
  p.end();

  std::string title = fmt::format("napkin report: {} on {}", d.source_name, m.name);
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += fmt::format("<meta name=\"generator\" content=\"napkin {}\">\n", esc(version));
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += fmt::format("<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n", esc(title), kStyle);
  html += fmt::format("<header class=\"top\">\n<h1>napkin report <span>{} on {}</span></h1>\n<dl>\n", esc(d.source_name),
                      esc(m.name));
  html += fmt::format("<dt>diagram</dt><dd>{}</dd>\n", esc(key));
  html += fmt::format("<dt>file</dt><dd>{}</dd>\n", esc(d.source_name));
  html += fmt::format("<dt>machine</dt><dd>{} ({})</dd>\n", esc(m.name), esc(m.display_name));
  html += fmt::format("<dt>napkin</dt><dd>{}</dd>\n", esc(version));
  html += "</dl>\n</header>\n<nav>\n";
  for (const auto& [id, name] : std::vector<std::pair<std::string, std::string>>{
           {"summary", "Summary"}, {"diagram", "Diagram"}, {"machine", "Machine"}, {"streaming", "Streamability"},
           {"closed-form", "Closed form"}, {"schedules", "Schedules"}, {"configuration", "Configuration"},
           {"pseudocode", "Pseudocode"}, {"plots", "Plots"}})
    html += fmt::format("<a href=\"#{}\">{}</a>\n", id, name);
  html += "</nav>\n<main>\n" + p.body + "</main>\n";
  html += fmt::format("<footer>Generated by napkin {} from {} ({}). Predictions are estimates from the cost model and "
                      "the configuration solver, not measurements.</footer>\n",
                      esc(version), esc(d.source_name), esc(key));
  html += "</body>\n</html>\n";
  return html;
}

CommandOutput report(const DiagramArgs& args, const ReportOptions& options) {
  auto html = report_html(args, options);
  if (!html) return failure(html.error(), false);
  const std::filesystem::path dir = options.output_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return failure(plain_error(fmt::format("--output-dir {}: cannot create the directory: {}", dir.string(), ec.message())), false);
  const auto path = dir / "report.html";
  std::ofstream f(path, std::ios::binary);
  f << *html;
  f.close();
  if (!f) return failure(plain_error(fmt::format("cannot write '{}'", path.string())), false);
  CommandOutput r;
  if (auto parsed = load(args))
    for (const auto& w : parsed->warnings) r.err += w.format() + "\n";
  r.out = fmt::format("wrote {} ({} bytes)\n", path.string(), html->size());
  return r;
}

}  // namespace napkin::driver
