// SPDX-License-Identifier: Apache-2.0
#include "driver/derive_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "arch/load.h"
#include "cost/cost.h"
#include "driver/units.h"
#include "emit/attention_kernel.h"
#include "emit/generates.h"
#include "emit/pseudocode.h"
#include "emit/svg.h"
#include "ir/printer.h"
#include "plan/plan.h"
#include "sched/schedule.h"

namespace napkin::driver {

using nlohmann::json;

namespace {

std::string configuration_text(const search::Configuration& c, const arch::Machine& m) {
  std::string s;
  s += "1. divisibility (each value a multiple of the LCM of what the hardware requires)\n";
  for (const auto& dv : c.divisibility)
    s += fmt::format("   {:<6} = {:<6} multiple of {:<4} = lcm({})  {}{}\n", dv.what, dv.value, dv.multiple,
                     fmt::join(dv.reasons, ", "), dv.ok() ? "ok" : "FAILS",
                     dv.padded_from > 0 ? fmt::format(" (the tile pads {} = {}; TMA fills zeros)", dv.what, dv.padded_from) : "");
  s += "2. variables and footprints\n";
  s += fmt::format("   {:<46} {:<22} {:<8} {:<5} {:<14} {:>12}\n", "variable", "shape", "dtype", "level", "scope", "bytes");
  for (const auto& v : c.variables)
    s += fmt::format("   {:<46} {:<22} {:<8} {:<5} {:<14} {:>12}\n", v.name, v.shape, dtype_name(v.dtype), v.level,
                     v.scope, kib_text(v.bytes));
  const double smem_sm = static_cast<double>(m.limits.smem_bytes_per_sm.value);
  const double regs_sm = static_cast<double>(m.limits.registers_per_sm.value) * 4;
  s += fmt::format("   smem:      N_max = ({} - {} per CTA) / {} per warpgroup = {:.2f}\n", kib_text(smem_sm),
                   kib_text(c.smem_per_cta_bytes), kib_text(c.smem_per_warpgroup_bytes), c.max_warpgroups_smem);
  s += fmt::format("   registers: N_max = {} / {} per warpgroup = {:.2f}  ({:.1f} registers per thread)\n", kib_text(regs_sm),
                   kib_text(c.registers_per_warpgroup_bytes), c.max_warpgroups_registers, c.registers_per_thread);
  s += fmt::format("   -> {} consumer warpgroups per SM (and one producer warpgroup issuing TMA loads)\n", c.warpgroups);
  s += "3. throughput per row and chunk (one thread-iteration, one row per thread)\n";
  s += fmt::format("   {:<44} {:<12} {:<8} {:>10} {:>8} {:>9}\n", "operation", "unit", "dtype", "ops/row", "ops/clk", "clk/row");
  for (const auto& r : c.rates)
    s += fmt::format("   {:<44} {:<12} {:<8} {:>10.6g} {:>8.6g} {:>9.4g}\n", r.op, arch::unit_name(r.unit),
                     dtype_name(r.dtype), r.ops_per_row, r.ops_per_clk, r.clk_per_row);
  s += fmt::format("   per row: tensor core {:.4g} clk, SFU {:.4g} clk, FMA {:.4g} clk -> bound by {}\n",
                   c.tensor_clk_per_row, c.sfu_clk_per_row, c.fma_clk_per_row, c.bound_unit);
  s += fmt::format("4. bandwidth: compute {} per iteration ({} rows x {:.4g} clk at {:.3g} GHz) against transfer {} "
                   "(the streamed chunks to {} SMs over HBM, no caching)\n",
                   seconds_text(c.compute_s_per_iteration), c.warpgroups * c.config.rows_per_warpgroup,
                   std::max({c.tensor_clk_per_row, c.sfu_clk_per_row, c.fma_clk_per_row}), m.clock_hz.value / 1e9,
                   seconds_text(c.transfer_s_per_iteration), m.sm_count.value);
  s += fmt::format("   with L2: {}: HBM {}, L2->SMEM {} per iteration: {}\n", search::sharing_text(c),
                   seconds_text(c.hbm_s_per_iteration), seconds_text(c.l2_smem_s_per_iteration),
                   search::bandwidth_verdict(c));
  s += fmt::format("5. overlap: {} with a {:.0f}% allowance on non-tensor work: {:.4g} clk per row, efficiency {:.1f}%\n",
                   search::overlap_name(c.config.overlap), c.config.overhead * 100, c.period_clk_per_row,
                   c.efficiency * 100);
  s += fmt::format("   ideal (bound unit at peak, all else hidden): {:.3f} PFLOP/s; predicted: {:.3f} PFLOP/s\n",
                   c.ideal_flops_per_s / 1e15, c.predicted_flops_per_s / 1e15);
  if (c.visited_fraction < 1)
    s += fmt::format("6. masks: {:.1f}% of the (tile, chunk) blocks are visited; the others are all -inf and "
                     "skipped\n",
                     c.visited_fraction * 100);
  if (!c.mask_inputs.empty())
    s += fmt::format("{}the masks read {}: the prediction skips no block by their values; the generated kernel "
                     "also skips the blocks their values hide (block summaries of i32 and bool inputs)\n",
                     c.visited_fraction < 1 ? "   " : "6. masks: ", fmt::join(c.mask_inputs, ", "));
  if (c.splits > 1)
    s += fmt::format("   too few tiles to fill the {} SMs: each tile's stream is split into {} slices, a CTA each, and a "
                     "combine pass merges their partial rows ({})\n",
                     m.sm_count.value, c.splits, seconds_text(c.combine_s));
  if (c.bound_by_compulsory())
    s += fmt::format("   bound by the compulsory HBM traffic (every input read and output written once): {}\n",
                     seconds_text(c.compulsory_s));
  return s;
}

json configuration_json(const search::Configuration& c) {
  json div = json::array(), vars = json::array(), rates = json::array();
  for (const auto& dv : c.divisibility)
    div.push_back({{"what", dv.what}, {"value", dv.value}, {"multiple", dv.multiple}, {"reasons", dv.reasons},
                   {"padded_from", dv.padded_from}});
  for (const auto& v : c.variables)
    vars.push_back({{"name", v.name}, {"shape", v.shape}, {"dtype", dtype_name(v.dtype)}, {"level", v.level},
                    {"scope", v.scope}, {"bytes", v.bytes}});
  for (const auto& r : c.rates)
    rates.push_back({{"op", r.op}, {"unit", arch::unit_name(r.unit)}, {"dtype", dtype_name(r.dtype)},
                     {"ops_per_row", r.ops_per_row}, {"ops_per_clk", r.ops_per_clk}, {"clk_per_row", r.clk_per_row}});
  return {{"rows_per_warpgroup", c.config.rows_per_warpgroup}, {"row_layout", search::row_layout_name(c.config.row_layout)},
          {"chunk", c.config.chunk},
          {"stages", c.config.stages}, {"overlap", search::overlap_name(c.config.overlap)},
          {"overhead", c.config.overhead}, {"warpgroups", c.warpgroups}, {"divisibility", div},
          {"variables", vars}, {"smem_per_cta_bytes", c.smem_per_cta_bytes},
          {"smem_per_warpgroup_bytes", c.smem_per_warpgroup_bytes},
          {"registers_per_warpgroup_bytes", c.registers_per_warpgroup_bytes},
          {"max_warpgroups_smem", c.max_warpgroups_smem}, {"max_warpgroups_registers", c.max_warpgroups_registers},
          {"registers_per_thread", c.registers_per_thread}, {"rates", rates}, {"bound_unit", c.bound_unit},
          {"compute_s_per_iteration", c.compute_s_per_iteration},
          {"transfer_s_per_iteration", c.transfer_s_per_iteration}, {"ctas_sharing_chunk", c.ctas_sharing_chunk},
          {"hbm_s_per_iteration", c.hbm_s_per_iteration}, {"l2_smem_s_per_iteration", c.l2_smem_s_per_iteration},
          {"compute_bound", c.compute_bound},
          {"ideal_flops_per_s", c.ideal_flops_per_s}, {"period_clk_per_row", c.period_clk_per_row},
          {"efficiency", c.efficiency}, {"predicted_flops_per_s", c.predicted_flops_per_s},
          {"visited_fraction", c.visited_fraction}, {"splits", c.splits}, {"combine_s", c.combine_s},
          {"compulsory_s", c.compulsory_s}};
}

// -v: every rejected candidate with its reason, in a column where the candidate is short.
std::string rejections_text(const search::SearchResult& r) {
  constexpr std::size_t kColumn = 52;
  std::string s = "rejected:\n";
  for (const auto& x : r.rejections)
    s += x.candidate.size() <= kColumn ? fmt::format("  {:<52} {}\n", x.candidate, x.reason)
                                       : fmt::format("  {}\n      {}\n", x.candidate, x.reason);
  return s;
}

std::string indent(const std::string& text, const std::string& by) {
  std::string s;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    s += by + text.substr(start, end == std::string::npos ? std::string::npos : end - start + 1);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return s;
}

std::string plan_kernels_text(const plan::Plan& p, int top, bool verbose) {
  std::string s;
  for (std::size_t i = 0; i < p.kernels.size(); ++i) {
    const plan::Kernel& k = p.kernels[i];
    s += fmt::format("  {}. {}\n", i + 1, k.name.empty() ? std::string("(no family)") : k.name);
    if (k.bound == "infeasible") continue;
    const double tflops = k.predicted_s > 0 ? k.flops / k.predicted_s / 1e12 : 0;
    s += fmt::format("     predicted {}, {:.1f} TFLOP/s, {:.4g} MB of HBM traffic, bound by {}\n", seconds_text(k.predicted_s),
                     tflops, k.hbm_bytes / 1e6, k.bound);
    const std::string schedule = plan::kernel_schedule_text(k);
    s += fmt::format("     schedule: {}{}\n", schedule.empty() ? "-" : schedule,
                     k.kind == plan::KernelKind::dual_gemm && k.gemm
                         ? fmt::format(" (tile N per product: one WGMMA tile of {} columns)", 2 * k.gemm->tile_n)
                         : "");
    if (!k.detail.empty() && k.detail != schedule) s += fmt::format("     {}\n", k.detail);  // (an attention kernel's is its schedule)
    if (k.considered > 1) {
      int rejected = 0;
      for (const auto& [cls, n] : k.rejected) rejected += n;
      s += fmt::format("     solver: {} candidates, {} rejected (", k.considered, rejected);
      bool first = true;
      for (const auto& [cls, n] : k.rejected) {
        s += fmt::format("{}{} {}", first ? "" : ", ", cls, n);
        first = false;
      }
      s += ")\n";
    }
    if (top > 1 && k.gemm_top.size() > 1) {
      for (std::size_t j = 0; j < k.gemm_top.size() && j < static_cast<std::size_t>(top); ++j)
        s += fmt::format("       {:>2}. {:<46} {:>10}  {}\n", j + 1, plan::gemm_schedule_text(k.gemm_top[j].schedule),
                         seconds_text(k.gemm_top[j].estimate.time_s), k.gemm_top[j].estimate.bound);
    }
    if (verbose) s += "     kernel diagram:\n" + indent(ir::print_diagram(k.diagram), "       ");
  }
  return s;
}

json plan_json(const plan::Plan& p) {
  json kernels = json::array();
  for (const plan::Kernel& k : p.kernels)
    kernels.push_back({{"name", k.name}, {"kind", std::string(plan::kernel_kind_name(k.kind))},
                       {"schedule", plan::kernel_schedule_text(k)}, {"predicted_s", k.predicted_s}, {"flops", k.flops},
                       {"hbm_bytes", k.hbm_bytes}, {"bound", k.bound}, {"detail", k.detail},
                       {"diagram", ir::print_diagram(k.diagram)}});
  return {{"name", p.name}, {"kernels", kernels}, {"materialised", p.materialised}, {"moves", p.moves},
          {"predicted_s", p.predicted_s}, {"infeasible", p.infeasible}, {"warnings", p.warnings}};
}

}  // namespace

std::vector<std::pair<std::string, std::vector<std::tuple<std::string, std::string, double, double>>>>
timeline_of(const search::Configuration& c, double clock_hz) {
  // Clocks of one SM iteration: every warpgroup's rows through the tensor core one after the
  // other, each warpgroup's softmax on the SFU once its first GEMM is done, the FMA rescale
  // after it, and the producer's TMA load of the next chunk from the start.
  const double rows = static_cast<double>(c.config.rows_per_warpgroup);
  const double first = c.rates.empty() ? 0 : c.rates.front().clk_per_row;
  const double nt = (1 + c.config.overhead) * c.sfu_clk_per_row;
  std::vector<std::tuple<std::string, std::string, double, double>> tc, sfu, fma, tma;
  const bool softmax = c.online_softmax;  // (false: P summed plainly, as sigmoid attention)
  double t_tc = 0, t_sfu = 0;
  for (int w = 0; w < c.warpgroups; ++w) {
    const double start = t_tc;
    tc.emplace_back(fmt::format("WG{} first GEMM", w + 1), "tensor", start / clock_hz, (start + first * rows) / clock_hz);
    const double rest = (c.tensor_clk_per_row - first) * rows;
    tc.emplace_back(fmt::format("WG{} second GEMM", w + 1), "tensor", (start + first * rows) / clock_hz,
                    (start + first * rows + rest) / clock_hz);
    t_tc = start + c.tensor_clk_per_row * rows;
    const double s0 = std::max(t_sfu, start + first * rows);
    sfu.emplace_back(fmt::format("WG{} {}", w + 1, softmax ? "softmax exp" : "score code"), "sfu", s0 / clock_hz,
                     (s0 + nt * rows) / clock_hz);
    fma.emplace_back(fmt::format("WG{} {}", w + 1, softmax ? "rescale" : "accumulate"), "fma", (s0 + nt * rows) / clock_hz,
                     (s0 + nt * rows + c.fma_clk_per_row * rows) / clock_hz);
    t_sfu = s0 + nt * rows;
  }
  tma.emplace_back("next K/V chunk", "memory", 0, c.transfer_with_l2_s_per_iteration());
  return {{"TMA (producer)", tma}, {"tensor core", tc}, {"SFU", sfu}, {"FMA", fma}};
}

// A diagram that is not one attention kernel: its kernel plan.
CommandOutput derive_plan_output(const DiagramArgs& args, const ir::Diagram& d, const arch::Machine& m,
                                 const plan::Derivation& r, double plan_s, const DeriveOptions& o) {
  const plan::Plan& p = r.chosen;
  double flops = 0, bytes = 0;
  for (const plan::Kernel& k : p.kernels) flops += k.flops, bytes += k.hbm_bytes;
  if (!o.timeline_svg.empty()) {
    // A plan's timeline: its kernels one after the other, each as long as predicted, coloured
    // by what bounds it.
    emit::TimelineLane lane{"GPU, kernels in order", {}};
    double t = 0;
    for (std::size_t i = 0; i < p.kernels.size(); ++i) {
      const plan::Kernel& k = p.kernels[i];
      lane.spans.push_back({fmt::format("{}. {}", i + 1, k.name), "bound by " + k.bound, t, t + k.predicted_s});
      t += k.predicted_s;
    }
    std::ofstream f(o.timeline_svg);
    f << emit::draw_timeline_svg({lane}, t, fmt::format("{} on {}: the plan's kernels, predicted", d.source_name, m.name));
    if (!f) return failure(plain_error(fmt::format("{}: cannot write the timeline", o.timeline_svg)), o.json);
  }
  CommandOutput out;
  if (o.json) {
    json alts = json::array();
    for (const auto& a : r.alternatives) {
      json j = plan_json(a.plan);
      j["why_not"] = a.why_not;
      alts.push_back(j);
    }
    json j{{"file", args.file}, {"diagram", ir::diagram_key(d)}, {"machine", m.name}, {"method", "kernel plan"},
           {"predicted_time_s", p.predicted_s}, {"tflops", flops / p.predicted_s / 1e12}, {"plan", plan_json(p)},
           {"alternatives", alts}, {"search_s", plan_s}};
    out.out = json_text(j);
    return out;
  }
  std::string s = fmt::format("napkin derive {} on {} ({})\ndiagram: {}\n", args.file, m.name, m.display_name,
                              ir::diagram_key(d));
  s += fmt::format("method: kernel plan (fusion against materialisation by the cost model, algebraic moves, one solver "
                   "per kernel); derived in {}\n", seconds_text(plan_s));
  // The attention solver's row layout: napkin build configures with the kernels' (quad), so
  // say which one these predictions used where they differ.
  if (std::any_of(p.kernels.begin(), p.kernels.end(), [](const plan::Kernel& k) { return k.kind == plan::KernelKind::attention; }))
    s += fmt::format("attention kernels configured with the {} row layout{}\n", o.row_layout,
                     o.row_layout == "thread" ? " (the paper's; napkin build uses WGMMA's: --row-layout quad)" : "");
  s += "\n";
  s += fmt::format("chosen plan: {} kernel{}, predicted {}, {:.1f} TFLOP/s, {:.4g} MB of HBM traffic\n", p.kernels.size(),
                   p.kernels.size() == 1 ? "" : "s", seconds_text(p.predicted_s), flops / p.predicted_s / 1e12, bytes / 1e6);
  for (const std::string& mv : p.moves) s += fmt::format("  move: {}\n", mv);
  s += p.materialised.empty() ? std::string("  materialised: nothing (every intermediate stays on chip)\n")
                              : fmt::format("  materialised: {}\n", fmt::join(p.materialised, "; "));
  s += plan_kernels_text(p, o.top, o.verbose);
  for (const std::string& w : p.warnings) s += fmt::format("  warning: {}\n", w);
  if (!r.alternatives.empty()) {
    s += "\nalternatives:\n";
    for (const auto& a : r.alternatives) s += fmt::format("  {}: {}\n", a.plan.name, a.why_not);
  }
  if (o.pseudocode) {
    s += "\nkernel diagrams of the chosen plan:\n";
    for (std::size_t i = 0; i < p.kernels.size(); ++i)
      s += fmt::format("# {}. {}\n{}", i + 1, p.kernels[i].name, ir::print_diagram(p.kernels[i].diagram));
  }
  out.out = s;
  return out;
}

namespace {
// `attention`: set to the diagram where its plan is one attention kernel.
CommandOutput derive_text(const DiagramArgs& args, const DeriveOptions& o, std::optional<ir::Diagram>* attention);
}  // namespace

Result<plan::Derivation> derive_as_built(const ir::Diagram& d, const arch::Machine& m, plan::PlanOptions po, const std::string& file) {
  if (auto src = read_source_file(file)) po.generates = emit::generates(std::move(*src));
  auto derivation = plan::derive_plan(d, m, po);
  if (!derivation && po.generates) {
    plan::PlanOptions planner = po;
    planner.generates = nullptr;
    auto any = plan::derive_plan(d, m, planner);
    if (any && plan::one_attention_kernel(any->chosen)) derivation = std::move(any);
  }
  return derivation;
}

// The derivation, and where its plan is one attention kernel that the kernel generator does not
// take (K with a batch axis V lacks, paged keys), the generator's reason: `napkin build` refuses.
CommandOutput derive(const DiagramArgs& args, const DeriveOptions& o) {
  std::optional<ir::Diagram> attention;
  CommandOutput out = derive_text(args, o, &attention);
  if (out.exit_code != 0 || o.json || !attention) return out;
  auto src = read_source_file(args.file);
  if (!src) return out;
  if (auto f = emit::recognise_attention(*attention, *src); !f)
    out.out += fmt::format("\nnote: napkin build generates no kernel for it: {}\n", f.error().headline());
  return out;
}

namespace {
CommandOutput derive_text(const DiagramArgs& args, const DeriveOptions& o, std::optional<ir::Diagram>* attention) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), o.json);
  const ir::Diagram& d = parsed->diagram;
  auto m = load_machine(o.machine);
  if (!m) return failure(m.error(), o.json);
  search::SearchOptions so;
  so.overhead = o.overhead;
  so.subloops = o.subloops;
  if (o.accumulator) {
    auto t = parse_dtype(*o.accumulator);
    if (!t || !is_float(*t))
      return failure(plain_error(fmt::format("--accumulator: '{}' is not a floating-point dtype", *o.accumulator)), o.json);
    so.accumulator_dtype = t;
  }
  if (o.overhead < 0) return failure(plain_error("--overhead: expected a non-negative fraction such as 0.5"), o.json);
  if (auto rl = search::parse_row_layout(o.row_layout)) {
    so.row_layout = *rl;
  } else {
    return failure(plain_error(fmt::format("--row-layout: expected 'thread' or 'quad', got '{}'", o.row_layout)), o.json);
  }
  const auto start = std::chrono::steady_clock::now();
  plan::PlanOptions po;
  po.search = so;
  po.top = o.top;
  auto derivation = derive_as_built(d, *m, po, args.file);
  const double plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!derivation) return failure(derivation.error(), o.json);
  const plan::Plan& chosen = derivation->chosen;
  const bool one_attention_kernel = plan::one_attention_kernel(chosen);
  // (The kernel's own diagram where the plan rewrote the written one: keys over two axes as one.)
  if (chosen.kernels.size() == 1 && chosen.kernels[0].kind == plan::KernelKind::attention)
    *attention = one_attention_kernel ? d : chosen.kernels[0].diagram;
  if (!one_attention_kernel) return derive_plan_output(args, d, *m, *derivation, plan_s, o);
  const sched::StreamingReport report = sched::analyse_streaming(d);
  auto r = search::search(d, report, *m, so);
  if (!r) return failure(r.error(), o.json);
  if (r->ranked.empty()) {
    // The paper's model (one row per thread) fits nothing; the plan's attention kernel is
    // configured with the kernel's own row layout. -v lists the paper's rejections after it.
    CommandOutput out = derive_plan_output(args, d, *m, *derivation, plan_s, o);
    if (o.verbose && !o.json)
      out.out += fmt::format("\nthe {} row layout fits no configuration among {} candidates; ", search::row_layout_name(so.row_layout),
                             r->considered) + rejections_text(*r);
    return out;
  }
  const double search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int rejected = 0;
  for (const auto& [k, n] : r->rejected) rejected += n;
  CommandOutput out;
  if (r->ranked.empty()) {
    std::string why = fmt::format("no feasible configuration among {} candidates:", r->considered);
    for (const auto& [k, n] : r->rejected) why += fmt::format(" {} {},", k, n);
    why.pop_back();
    if (!o.verbose) return failure(plain_error(why + " (run with -v for each reason)"), o.json);
    // -v: every candidate with its reason, then the error.
    CommandOutput f = failure(plain_error(why + (o.json ? " (each reason under \"rejections\")" : " (each reason above)")), o.json);
    if (o.json) {
      json j = json::parse(f.out);
      json all = json::array();
      for (const auto& x : r->rejections) all.push_back({{"candidate", x.candidate}, {"reason", x.reason}});
      j["rejections"] = all;
      f.out = json_text(j);
    } else {
      f.out = rejections_text(*r);
    }
    return f;
  }
  const search::Ranked& best = r->ranked.front();
  if (!o.timeline_svg.empty() && best.configuration) {
    std::vector<emit::TimelineLane> lanes;
    for (const auto& [unit, spans] : timeline_of(*best.configuration, m->clock_hz.value)) {
      emit::TimelineLane lane{unit, {}};
      for (const auto& [label, kind, s0, s1] : spans) lane.spans.push_back({label, kind, s0, s1});
      lanes.push_back(lane);
    }
    const double period = best.configuration->warpgroups * best.configuration->config.rows_per_warpgroup *
                          best.configuration->period_clk_per_row / m->clock_hz.value;
    std::ofstream f(o.timeline_svg);
    f << emit::draw_timeline_svg(lanes, period, fmt::format("{} on {}: one iteration per SM", d.source_name, m->name));
    if (!f) return failure(plain_error(fmt::format("{}: cannot write the timeline", o.timeline_svg)), o.json);
  }
  if (o.json) {
    json top = json::array();
    for (std::size_t i = 0; i < r->ranked.size() && i < static_cast<std::size_t>(o.top); ++i) {
      const auto& k = r->ranked[i];
      top.push_back({{"schedule", sched::to_string(k.schedule)}, {"summary", k.summary},
                     {"predicted_time_s", k.predicted_time_s}, {"tflops", k.tflops}, {"bound", k.bound},
                     {"groups_per_sm", k.groups_per_sm}});
    }
    json rej = json::object();
    for (const auto& [k, n] : r->rejected) rej[k] = n;
    json j{{"file", args.file}, {"diagram", ir::diagram_key(d)}, {"machine", m->name}, {"method", r->method},
           {"schedule", sched::to_string(best.schedule)}, {"predicted_time_s", best.predicted_time_s},
           {"tflops", best.tflops}, {"bound", best.bound}, {"groups_per_sm", best.groups_per_sm},
           {"considered", r->considered}, {"feasible", r->ranked.size()}, {"rejected", rej}, {"top", top},
           {"search_s", search_s}};
    if (best.configuration) j["configuration"] = configuration_json(*best.configuration);
    if (o.verbose) {
      json all = json::array();
      for (const auto& x : r->rejections) all.push_back({{"candidate", x.candidate}, {"reason", x.reason}});
      j["rejections"] = all;
    }
    out.out = json_text(j);
    return out;
  }
  std::string s = fmt::format("napkin derive {} on {} ({})\ndiagram: {}\n", args.file, m->name, m->display_name,
                              ir::diagram_key(d));
  s += fmt::format("method: {}; {} candidates, {} feasible, {} rejected (", r->method, r->considered,
                   r->ranked.size(), rejected);
  bool first = true;
  for (const auto& [k, n] : r->rejected) {
    s += fmt::format("{}{} {}", first ? "" : ", ", k, n);
    first = false;
  }
  s += ")\n\n";
  s += fmt::format("best: {}\n  predicted {}, {:.1f} TFLOP/s, bound by {}\n  schedule: {}\n\n", best.summary,
                   seconds_text(best.predicted_time_s), best.tflops, best.bound, sched::to_string(best.schedule));
  if (std::string w = plan::memory_warning(d, *m); !w.empty()) s += fmt::format("warning: {}\n\n", w);
  if (best.configuration) s += configuration_text(*best.configuration, *m) + "\n";
  const std::size_t shown = std::min<std::size_t>(r->ranked.size(), static_cast<std::size_t>(o.top));
  s += fmt::format("top {}:\n", shown);
  // Summaries that fit a column (the configuration solver's) make a table; whole schedule texts
  // (the cost model's, which can differ only at their end) go in full under their figures.
  constexpr std::size_t kColumn = 52;
  const bool table = std::all_of(r->ranked.begin(), r->ranked.begin() + static_cast<std::ptrdiff_t>(shown),
                                 [&](const search::Ranked& k) { return k.summary.size() <= kColumn; });
  for (std::size_t i = 0; i < shown; ++i) {
    const auto& k = r->ranked[i];
    if (table)
      s += fmt::format("  {:>2}. {:<52} {:>10} {:>8.1f} TFLOP/s  {}\n", i + 1, k.summary, seconds_text(k.predicted_time_s),
                       k.tflops, k.bound);
    else
      s += fmt::format("  {:>2}. {:>10} {:>8.1f} TFLOP/s  {}\n      {}\n", i + 1, seconds_text(k.predicted_time_s), k.tflops,
                       k.bound, k.summary);
  }
  if (o.verbose) s += rejections_text(*r);
  if (o.pseudocode) {
    // The live memory under the table is counted as the search judged the schedule: by the
    // solver (step 2) on its path, else by the cost model.
    std::vector<emit::LiveMemory> live;
    if (best.configuration) live = live_memory(*best.configuration, *m);
    else if (auto est = cost::estimate(d, best.schedule, *m)) live = live_memory(*est);
    s += "\npseudocode of the best schedule:\n" + emit::pseudocode_text(d, best.schedule, &*m, live);
  }
  out.out = s;
  return out;
}
}  // namespace

}  // namespace napkin::driver
