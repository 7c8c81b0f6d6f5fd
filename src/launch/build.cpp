// SPDX-License-Identifier: Apache-2.0
#include "launch/build.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "napkin/kernel_abi.h"  // runtime/include: the C interface of a generated kernel
#include "emit/attention_kernel.h"
#include "emit/generates.h"
#include "emit/expression.h"
#include "emit/gemm_kernel.h"
#include "emit/row_kernel.h"
#include "plan/plan.h"
#include "ir/printer.h"
#include "reference/interpreter.h"
#include "sched/streaming.h"
#include "search/search.h"
#include "support/dtype.h"

#ifndef NAPKIN_VERSION
#define NAPKIN_VERSION "0.0.0"
#endif
#ifndef NAPKIN_RUNTIME_INCLUDE_DIR
#define NAPKIN_RUNTIME_INCLUDE_DIR ""
#endif
#ifndef NAPKIN_CUTLASS_INCLUDE_DIR
#define NAPKIN_CUTLASS_INCLUDE_DIR ""
#endif

namespace napkin::launch {
using driver::CommandOutput;
using driver::DiagramArgs;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : std::move(fallback);
}

// Runs `command` through the shell; its output (stdout and stderr) and exit status.
std::pair<int, std::string> run_program(const std::string& command) {
  std::string output;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "cannot start: " + command};
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) output.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return plain_error(path + ": cannot open the file");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  return static_cast<bool>(f);
}

// The derived schedule and its estimate, one line; or why there is none.
struct Derived {
  std::string line;
  double predicted_s = 0;  // 0: none
  std::string schedule;
};
Derived derive_for(const ir::Diagram& d, const arch::Machine& m) {
  search::SearchOptions so;
  so.row_layout = search::RowLayout::quad;  // WGMMA's row layout, as the kernel's
  auto r = search::search(d, sched::analyse_streaming(d), m, so);
  if (!r) return {"no derivation: " + r.error().message, 0, ""};
  if (r->ranked.empty()) return {fmt::format("no feasible configuration among {} candidates", r->considered), 0, ""};
  const search::Ranked& best = r->ranked.front();
  return {fmt::format("{} on {}: {} predicted {:.4g} us, {:.0f} TFLOP/s, bound by {}", r->method, m.name, best.summary,
                      best.predicted_time_s * 1e6, best.tflops, best.bound),
          best.predicted_time_s, sched::to_string(best.schedule)};
}

const char* role_word(char r) {
  switch (r) {
    case 'b': return "batch";
    case 'h': return "kv_head";
    case 'g': return "group";
    case 'q': return "query";
    case 'k': return "key";
    case 'd': return "head_dim";
    case 'e': return "value_dim";
    default: return "?";
  }
}

json tensor_json(const ir::Diagram& d, const std::string& name, const std::vector<ir::AxisId>& axes, DType dtype,
                 const std::string& roles, const std::string& kind) {
  json ax = json::array();
  for (std::size_t i = 0; i < axes.size(); ++i)
    ax.push_back({{"name", d.axis(axes[i]).name}, {"size", d.axis(axes[i]).size}, {"role", role_word(roles[i])}});
  return {{"name", name}, {"kind", kind}, {"dtype", std::string(dtype_name(dtype))}, {"axes", ax}};
}

json manifest_for(const ir::Diagram& d, const emit::AttentionForm& f, const Derived& derived, const arch::Machine& m) {
  json inputs = json::array();
  auto add = [&](ir::NodeId n, const std::string& roles, const char* kind) {
    inputs.push_back(tensor_json(d, d.node(n).name, d.node(n).axes, d.node(n).dtype, roles, kind));
  };
  add(f.q, f.q_roles, "query");
  add(f.k, f.k_roles, "key");
  add(f.v, f.v_roles, "value");
  for (const emit::AuxInput& a : f.aux) add(a.node, a.roles, "auxiliary");
  const std::string out_name = d.node(f.output).name.empty() ? "O" : d.node(f.output).name;
  json outputs = json::array();
  for (std::size_t i = 0; i < d.outputs.size(); ++i)
    outputs.push_back(i == f.o_index ? tensor_json(d, out_name, d.outputs[i].axes, f.output_dtype, f.o_roles, "output")
                                     : tensor_json(d, d.node(f.lse_output).name, d.outputs[i].axes, DType::f32, f.lse_roles,
                                                   "logsumexp"));
  json params = json::array();
  for (ir::NodeId p : f.params) params.push_back({{"name", d.node(p).name}, {"value", d.node(p).scalar}});
  json j = {{"napkin_version", NAPKIN_VERSION},
            {"abi_version", NAPKIN_KERNEL_ABI_VERSION},
            {"family", "attention"},
            {"diagram", {{"file", d.source_name}, {"key", ir::diagram_key(d)}, {"hash", fmt::format("{:016x}", ir::stable_hash(ir::print_diagram(d)))}}},
            {"fusion", emit::describe_fusion(f)},
            {"element", std::string(dtype_name(f.element))},
            {"head_dim", f.head_dim},
            {"value_head_dim", f.head_dim_v},
            {"inputs", inputs},
            {"outputs", outputs},
            {"params", params},
            {"machine", m.name},
            {"schedule", {{"kernel", "the device library's measured table for this head dim (napkin/attention_schedule.h)"},
                          {"derived", derived.line},
                          {"derived_schedule", derived.schedule}}}};
  j["predicted_time_us"] = derived.predicted_s > 0 ? json(derived.predicted_s * 1e6) : json(nullptr);
  return j;
}

// The build's inputs that decide the library: the source, the flags, and the device library.
std::uint64_t cache_key(const std::string& source, const std::string& flags, const std::string& runtime_include) {
  std::string all = source + "\n" + flags;
  std::error_code ec;
  std::vector<fs::path> headers;
  for (auto it = fs::recursive_directory_iterator(runtime_include, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file()) headers.push_back(it->path());
  std::sort(headers.begin(), headers.end());
  for (const fs::path& h : headers) {
    auto t = read_text(h.string());
    all += "\n" + h.filename().string() + "\n" + (t ? *t : std::string());
  }
  return ir::stable_hash(all);
}

int count_lines(const std::string& text, const std::string& word) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.find(word) != std::string::npos;
  return n;
}

struct Built {
  fs::path dir, library;
  json manifest;
  Derived derived;
  double compile_s = 0;
  std::string warning;  // e.g. ptxas spills
  bool cached = false;
  bool compiled = false;
};

// ---- Plans: a diagram that is more than one attention kernel ----

// The axes whose size a plan's library fixes at compile time: the rows its row kernels reduce
// over, and the head dims of its attention kernels. Every other size is the caller's.
std::set<std::string> fixed_axes(const plan::Plan& p) {
  std::set<std::string> fixed;
  for (const plan::Kernel& k : p.kernels) {
    if (k.kind == plan::KernelKind::row_reduction)
      for (const ir::Node& n : k.diagram.nodes) {
        const ir::OpClass c = ir::op_class(n.op);
        if (c == ir::OpClass::reduction || c == ir::OpClass::composite)
          for (ir::AxisId a : n.over) fixed.insert(k.diagram.axis(a).name);
      }
    if (k.kind == plan::KernelKind::attention)
      for (ir::NodeId c = 0; c < static_cast<ir::NodeId>(k.diagram.nodes.size()); ++c) {
        const ir::Node& n = k.diagram.node(c);
        if (n.op != ir::OpKind::contract || n.over.empty() || n.operands.size() != 2) continue;
        // The first contraction's summed axis is Q's and K's head dim; V's is the axis of the
        // second's input operand that P lacks.
        for (ir::AxisId a : n.over) fixed.insert(k.diagram.axis(a).name);
        for (int side = 0; side < 2; ++side) {
          const ir::NodeId p = n.operands[static_cast<std::size_t>(side)], v = n.operands[static_cast<std::size_t>(1 - side)];
          const bool p_is_map = std::any_of(k.diagram.nodes.begin(), k.diagram.nodes.begin() + p, [&](const ir::Node& m) {
            return m.op == ir::OpKind::contract && k.diagram.depends_on(p, static_cast<ir::NodeId>(&m - k.diagram.nodes.data()));
          });
          if (!p_is_map) continue;
          const auto& p_axes = k.diagram.node(p).axes;
          for (ir::AxisId a : k.diagram.node(v).axes)
            if (std::find(p_axes.begin(), p_axes.end(), a) == p_axes.end()) fixed.insert(k.diagram.axis(a).name);
        }
      }
  }
  // An attention kernel streams its key axis: a runtime size, not fixed.
  for (const plan::Kernel& k : p.kernels)
    if (k.kind == plan::KernelKind::attention && k.streamed)
      for (const auto& l : k.streamed->schedule.levels)
        for (const auto& st : l.streams) fixed.erase(st.axis);
  // A merged axis fixes its parts (the library checks their product).
  for (const plan::AxisMerge& m : p.merged_axes)
    if (fixed.count(m.name)) fixed.insert(m.parts.begin(), m.parts.end());
  fixed.insert(p.sized_axes.begin(), p.sized_axes.end());
  // A cut axis whose outer part is fixed is fixed (its inner part always is: the library asks
  // for a multiple of it).
  for (const plan::AxisCut& c : p.cut_axes)
    if (fixed.count(c.outer)) fixed.insert(c.name);
  return fixed;
}

json plan_tensor_json(const ir::Diagram& d, const std::string& name, const std::vector<ir::AxisId>& axes, DType dtype,
                      const std::set<std::string>& fixed, const std::vector<plan::AxisCut>& cuts, const std::string& kind) {
  json ax = json::array();
  for (ir::AxisId a : axes) {
    const std::string& axis = d.axis(a).name;
    json j = {{"name", axis}, {"size", d.axis(a).size}, {"role", fixed.count(axis) ? "fixed" : "free"}};
    for (const plan::AxisCut& c : cuts)
      if (c.name == axis && !fixed.count(axis)) j["multiple_of"] = c.inner_size;
    ax.push_back(std::move(j));
  }
  return {{"name", name}, {"kind", kind}, {"dtype", std::string(dtype_name(dtype))}, {"axes", ax}};
}

json plan_manifest(const ir::Diagram& d, const plan::Plan& p, const arch::Machine& m) {
  const std::set<std::string> fixed = fixed_axes(p);
  json inputs = json::array(), outputs = json::array(), params = json::array(), kernels = json::array();
  for (ir::NodeId n : d.inputs()) inputs.push_back(plan_tensor_json(d, d.node(n).name, d.node(n).axes, d.node(n).dtype, fixed, p.cut_axes, "input"));
  for (const ir::Output& o : d.outputs)
    outputs.push_back(plan_tensor_json(d, d.node(o.node).name, o.axes, d.node(o.node).dtype, fixed, p.cut_axes, "output"));
  for (const ir::Node& n : d.nodes)
    if (n.op == ir::OpKind::constant && !n.name.empty()) params.push_back({{"name", n.name}, {"value", n.scalar}});
  double flops = 0, bytes = 0;
  std::vector<std::string> parts;
  for (const plan::Kernel& k : p.kernels) {
    kernels.push_back({{"name", k.name}, {"kind", std::string(plan::kernel_kind_name(k.kind))}, {"schedule", plan::kernel_schedule_text(k)},
                       {"predicted_us", k.predicted_s * 1e6}, {"flops", k.flops}, {"hbm_bytes", k.hbm_bytes}, {"bound", k.bound}});
    flops += k.flops;
    bytes += k.hbm_bytes;
    parts.push_back(std::string(plan::kernel_kind_name(k.kind)));
  }
  json j = {{"napkin_version", NAPKIN_VERSION},
            {"abi_version", NAPKIN_KERNEL_ABI_VERSION},
            {"family", "plan"},
            {"diagram", {{"file", d.source_name}, {"key", ir::diagram_key(d)}, {"hash", fmt::format("{:016x}", ir::stable_hash(ir::print_diagram(d)))}}},
            {"fusion", fmt::format("plan of {} kernel(s): {}", p.kernels.size(), fmt::join(parts, ", "))},
            {"element", std::string(dtype_name(d.node(d.outputs[0].node).dtype))},
            {"inputs", inputs},
            {"outputs", outputs},
            {"params", params},
            {"machine", m.name},
            {"plan", {{"kernels", kernels}, {"materialised", p.materialised}, {"moves", p.moves}, {"flops", flops}, {"hbm_bytes", bytes}}},
            {"predicted_time_us", p.predicted_s * 1e6}};
  return j;
}

const char* abi_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "NAPKIN_F32";
    case DType::f16: return "NAPKIN_F16";
    case DType::bf16: return "NAPKIN_BF16";
    case DType::i32: return "NAPKIN_I32";
    case DType::boolean: return "NAPKIN_BOOL";
    default: return "NAPKIN_F64";
  }
}

std::string plan_tensor_literal(const ir::Diagram& d, const std::string& name, const std::vector<ir::AxisId>& axes, DType t) {
  std::vector<std::string> names;
  for (ir::AxisId a : axes) names.push_back("\"" + d.axis(a).name + "\"");
  return fmt::format("{{\"{}\", {}, {}, {{{}}}}}", name, abi_dtype_name(t), axes.size(), fmt::join(names, ", "));
}

// The plan's translation units: one per kernel (its own launch entry) and the plan's own
// (kernel.cu: the order, the intermediates, the exported entries and the manifest).
Result<std::vector<std::pair<std::string, std::string>>> plan_sources(const ir::Diagram& d, const plan::Plan& p,
                                                                      const SourceText& src, const emit::KernelProvenance& prov,
                                                                      const std::string& manifest) {
  std::vector<std::pair<std::string, std::string>> files;
  std::string decls, kernels, inter;
  std::set<std::string> io_names, seen_inter;
  for (ir::NodeId n : d.inputs()) io_names.insert(d.node(n).name);
  for (const ir::Output& o : d.outputs) io_names.insert(d.node(o.node).name);
  for (std::size_t i = 0; i < p.kernels.size(); ++i) {
    const plan::Kernel& k = p.kernels[i];
    const ir::Diagram& kd = k.diagram;
    const std::string entry = fmt::format("napkin_plan_kernel_{}", i);
    emit::KernelProvenance kp = prov;
    kp.derived = fmt::format("kernel {} of {}: {} (predicted {:.4g} us)", i + 1, p.kernels.size(), k.name, k.predicted_s * 1e6);
    std::string source;
    switch (k.kind) {
      case plan::KernelKind::attention: {
        auto f = emit::recognise_attention(kd, src);
        if (!f) return f.error();
        source = emit::emit_attention_kernel(kd, *f, kp, "{}", entry);
        break;
      }
      case plan::KernelKind::gemm: case plan::KernelKind::dual_gemm: case plan::KernelKind::gemm_reduction: {
        auto f = emit::recognise_gemm(kd, src);
        if (!f) return f.error();
        source = emit::emit_gemm_kernel(kd, *f, *k.gemm, kp, entry);
        break;
      }
      case plan::KernelKind::row_reduction: case plan::KernelKind::column_reduction: case plan::KernelKind::elementwise: {
        auto f = emit::recognise_rows(kd, src);
        if (!f) return f.error();
        source = emit::emit_row_kernel(kd, *f, k.rows.value_or(plan::RowSchedule{}), kp, entry);
        break;
      }
    }
    files.emplace_back(fmt::format("kernel_{}.cu", i), source);
    decls += fmt::format("extern \"C\" int32_t {}(const napkin_tensor*, int32_t, void*, char*, int32_t);\n", entry);
    std::vector<std::string> names;
    for (ir::NodeId n : kd.inputs()) names.push_back("\"" + kd.node(n).name + "\"");
    for (const ir::Output& o : kd.outputs) {
      const std::string& name = kd.node(o.node).name;
      names.push_back("\"" + name + "\"");
      if (!io_names.count(name) && seen_inter.insert(name).second)
        inter += "    " + plan_tensor_literal(kd, name, o.axes, kd.node(o.node).dtype) + ",\n";
    }
    kernels += fmt::format("    {{{}, \"{}\", {}, {{{}}}}},\n", entry, fmt::format("{} ({})", i + 1, k.name), names.size(), fmt::join(names, ", "));
  }
  std::string merges;
  for (const plan::AxisMerge& m : p.merged_axes) {
    std::vector<std::string> parts;
    for (const std::string& part : m.parts) parts.push_back("\"" + part + "\"");
    merges += fmt::format("    {{\"{}\", {}, {{{}}}}},\n", m.name, m.parts.size(), fmt::join(parts, ", "));
  }
  std::string cuts;
  for (const plan::AxisCut& c : p.cut_axes) cuts += fmt::format("    {{\"{}\", \"{}\", \"{}\", {}}},\n", c.name, c.outer, c.inner, c.inner_size);
  std::string sized;
  for (const std::string& a : p.sized_axes)
    if (const auto id = d.find_axis(a)) sized += fmt::format("    {{\"{}\", {}}},\n", a, d.axis(*id).size);
  std::string io;
  for (ir::NodeId n : d.inputs()) io += "    " + plan_tensor_literal(d, d.node(n).name, d.node(n).axes, d.node(n).dtype) + ",\n";
  for (const ir::Output& o : d.outputs) io += "    " + plan_tensor_literal(d, d.node(o.node).name, o.axes, d.node(o.node).dtype) + ",\n";
  std::string plan_cu = fmt::format(
      "// SPDX-License-Identifier: Apache-2.0\n"
      "// Generated by napkin {} from {} ({}). Do not edit: `napkin build` writes it.\n"
      "// The plan: {} kernel(s) in order (kernel_<i>.cu), predicted {:.4g} us.\n"
      "#include \"napkin/plan_launch.h\"\n\n{}\nnamespace {{\n\n"
      "const napkin::PlanTensor kIO[] = {{\n{}}};\n"
      "const napkin::PlanTensor kIntermediates[] = {{\n{}    {{\"\", NAPKIN_F32, 0, {{}}}}}};\n"
      "const napkin::PlanKernel kKernels[] = {{\n{}}};\n"
      "const char* const kNames[] = {{{}nullptr}};\n"
      "const napkin::PlanMerge kMerges[] = {{\n{}    {{\"\", 0, {{}}}}}};\n"
      "const napkin::PlanSize kSized[] = {{\n{}    {{\"\", 0}}}};\n"
      "const napkin::PlanCut kCuts[] = {{\n{}    {{\"\", \"\", \"\", 1}}}};\n"
      "const napkin::PlanSpec kPlan{{kIO, {}, kIntermediates, {}, kKernels, {}, kNames, kMerges, {}, kSized, {}, kCuts, {}}};\n\n"
      "constexpr char kManifest[] = R\"napkin_manifest({})napkin_manifest\";\n\n}}  // namespace\n\n"
      "NAPKIN_GENERATED_PLAN(kPlan, kManifest)\n",
      prov.napkin_version, prov.source_name, prov.diagram_key, p.kernels.size(), p.predicted_s * 1e6, decls, io, inter, kernels,
      emit::expression::library_names(d), merges, sized, cuts, d.inputs().size() + d.outputs.size(), seen_inter.size(),
      p.kernels.size(), p.merged_axes.size(), p.sized_axes.size(), p.cut_axes.size(), manifest);
  files.insert(files.begin(), {"kernel.cu", plan_cu});
  return files;
}

// The device library's kernels are sm_90a code (wgmma, TMA, setmaxnreg): a kernel for another
// machine would be written for a GPU it cannot run on.
std::optional<Diagnostic> hopper_only(const arch::Machine& m) {
  if (m.compute_capability == "9.0") return std::nullopt;
  return plain_error(fmt::format(
      "--machine {}: napkin generates Hopper kernels (sm_90a: wgmma, TMA), and {} is compute capability {}; "
      "derive, analyze and report model it, build and run need an sm_90 machine (h100-sxm5, h100-pcie, h200)",
      m.name, m.display_name, m.compute_capability));
}

Result<Built> build_kernel(const DiagramArgs& args, const std::string& machine, const std::string& out_dir,
                           bool compile) {
  auto parsed = driver::load(args);
  if (!parsed) return parsed.error();
  const ir::Diagram& d = parsed->diagram;
  auto m = driver::load_machine(machine);
  if (!m) return m.error();
  if (auto e = hopper_only(*m)) return *e;
  auto src = read_source_file(args.file);
  if (!src) return src.error();
  if (out_dir.empty()) return plain_error("-o: expected an output directory");
  Built b;
  b.dir = out_dir;
  std::vector<std::pair<std::string, std::string>> files;  // (file name, source); kernel.cu first
  if (auto form = emit::recognise_attention(d, *src)) {
    b.derived = derive_for(d, *m);
    b.manifest = manifest_for(d, *form, b.derived, *m);
    emit::KernelProvenance prov{NAPKIN_VERSION, ir::diagram_key(d), args.file, b.derived.line};
    files.emplace_back("kernel.cu", emit::emit_attention_kernel(d, *form, prov, b.manifest.dump()));
    b.warning = plan::memory_warning(d, *m);
  } else {
    // Not one attention kernel: the derived plan, a translation unit per kernel.
    plan::PlanOptions po;
    po.search.row_layout = search::RowLayout::quad;  // WGMMA's row layout, as the kernels'
    po.generates = emit::generates(*src);
    auto r = plan::derive_plan(d, *m, po);
    // The plan by the planner's rules alone (whether it would be one attention kernel).
    const auto planners_own = [&] {
      plan::PlanOptions planner = po;
      planner.generates = nullptr;
      return plan::derive_plan(d, *m, planner);
    };
    if (!r) {
      // A diagram that is one attention kernel by the planner's rules: the attention emitter's
      // reason first (what the user wrote it as), the plan's after.
      auto any = planners_own();
      if (!any || !plan::one_attention_kernel(any->chosen)) return r.error();
      Diagnostic e = form.error();
      e.note = "nor as a plan of other kernels: " + r.error().message;
      return e;
    }
    const plan::Plan& p = r->chosen;
    // One attention kernel of the diagram as written is the attention emitter's, which refused
    // it; one of a rewritten diagram (keys over two axes taken as one) is built as a plan.
    if (plan::one_attention_kernel(p)) return form.error();
    b.derived = {fmt::format("kernel plan on {}: {} kernel(s), predicted {:.4g} us", m->name, p.kernels.size(), p.predicted_s * 1e6),
                 p.predicted_s, ""};
    for (const std::string& w : p.warnings) b.warning += (b.warning.empty() ? "" : "\n  warning: ") + w;
    // An attention-shaped diagram (two contractions, the second reading the first through a
    // softmax or exponentials written out) that the attention emitter refuses: the refusal (with
    // the one kernel's prediction where the planner would run one), so that the slower plan is
    // no surprise.
    std::vector<ir::NodeId> contractions;
    for (ir::NodeId n = 0; n < static_cast<ir::NodeId>(d.nodes.size()); ++n)
      if (d.node(n).op == ir::OpKind::contract) contractions.push_back(n);
    auto attention_shaped = [&]() {
      if (contractions.size() != 2) return false;
      std::vector<ir::NodeId> todo(d.node(contractions[1]).operands);
      std::set<ir::NodeId> seen;
      bool exponential = false;
      while (!todo.empty()) {
        const ir::NodeId n = todo.back();
        todo.pop_back();
        if (!seen.insert(n).second) continue;
        const ir::OpKind op = d.node(n).op;
        exponential = exponential || op == ir::OpKind::softmax || op == ir::OpKind::exp || op == ir::OpKind::exp2;
        if (n == contractions[0]) return exponential;
        for (ir::NodeId o : d.node(n).operands) todo.push_back(o);
      }
      return false;
    };
    const bool one_attention = p.kernels.size() == 1 && p.kernels[0].kind == plan::KernelKind::attention;
    if (attention_shaped() && !one_attention) {
      auto any = planners_own();
      const std::string one = any && plan::one_attention_kernel(any->chosen)
                                  ? fmt::format(" ({:.4g} us predicted)", any->chosen.predicted_s * 1e6) : "";
      const Diagnostic& why = form.error();
      b.warning += fmt::format("{}not one attention kernel{}, because the kernel generator refuses this diagram: {}{}; "
                               "built as this plan instead",
                               b.warning.empty() ? "" : "\n  warning: ", one,
                               why.loc.line > 0 ? fmt::format("{}:{}: ", why.loc.line, why.loc.column) : "", why.message);
    }
    b.manifest = plan_manifest(d, p, *m);
    emit::KernelProvenance prov{NAPKIN_VERSION, ir::diagram_key(d), args.file, b.derived.line};
    auto sources = plan_sources(d, p, *src, prov, b.manifest.dump());
    if (!sources) return sources.error();
    files = std::move(*sources);
  }
  std::error_code ec;
  fs::create_directories(b.dir, ec);
  if (ec) return plain_error(fmt::format("-o {}: cannot create the directory ({})", out_dir, ec.message()));
  for (const auto& [name, text] : files)
    if (!write_text(b.dir / name, text)) return plain_error(fmt::format("-o {}: cannot write {}", out_dir, name));
  // A unit of an earlier build into this directory with more kernels (kernel_<i>.cu past this
  // plan's) would read as part of this one: removed.
  const std::size_t units = files.size() - 1;  // kernel.cu, then kernel_0.cu ... (none for attention)
  for (std::size_t i = units; fs::exists(b.dir / fmt::format("kernel_{}.cu", i), ec); ++i)
    fs::remove(b.dir / fmt::format("kernel_{}.cu", i), ec);
  if (!write_text(b.dir / "manifest.json", b.manifest.dump(2, ' ', false, json::error_handler_t::replace) + "\n"))
    return plain_error(fmt::format("-o {}: cannot write manifest.json", out_dir));
  // An earlier build's library would be loaded beside these sources (--no-compile, or nvcc
  // failing below): removed, so that the directory holds this build's library or none.
  fs::remove(b.dir / "libkernel.so", ec);
  if (!compile) return b;
  std::string source;
  for (const auto& [name, text] : files) source += name + "\n" + text + "\n";

  const ToolPaths tools = tool_paths();
  if (tools.cutlass_include.empty() || !fs::exists(fs::path(tools.cutlass_include) / "cute" / "tensor.hpp"))
    return plain_error("the CuTe/CUTLASS headers were not found: run tools/install_deps.sh --cuda, or set "
                       "NAPKIN_CUTLASS_INCLUDE");
  if (!fs::exists(fs::path(tools.runtime_include) / "napkin" / "attention_kernel.h"))
    return plain_error(fmt::format("napkin's device library was not found in '{}': set NAPKIN_RUNTIME_INCLUDE",
                                   tools.runtime_include));
  const std::string flags =
      "-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas=-warn-spills "
      "-Xcompiler=-fPIC -shared -diag-suppress=177";
  const std::uint64_t key = cache_key(source, flags, tools.runtime_include);
  const fs::path cached = fs::path(tools.cache_dir) / fmt::format("{:016x}.so", key);
  b.library = b.dir / "libkernel.so";
  b.compiled = true;
  if (fs::exists(cached)) {
    b.cached = true;
  } else {
    fs::create_directories(tools.cache_dir, ec);
    const fs::path tmp = fs::path(tools.cache_dir) / fmt::format("{:016x}.so.tmp{}", key, static_cast<long>(getpid()));
    // One translation unit: compiled and linked at once. Several (a plan): compiled in parallel,
    // then linked.
    std::string cmd;
    const std::string includes = fmt::format("-I{} -I{}", quote(tools.runtime_include), quote(tools.cutlass_include));
    if (files.size() == 1) {
      cmd = fmt::format("{} {} {} {} -o {}", quote(tools.nvcc), flags, includes, quote((b.dir / "kernel.cu").string()),
                        quote(tmp.string()));
    } else {
      std::string compile_flags = flags;
      compile_flags.replace(compile_flags.find(" -shared"), 8, "");
      std::string objects;
      for (const auto& [name, text] : files) {
        const fs::path obj = b.dir / (fs::path(name).stem().string() + ".o");
        cmd += fmt::format("{} {} {} -c {} -o {} & ", quote(tools.nvcc), compile_flags, includes, quote((b.dir / name).string()),
                           quote(obj.string()));
        objects += " " + quote(obj.string());
      }
      cmd = fmt::format("( {}wait ) && {} -shared -gencode=arch=compute_90a,code=sm_90a{} -o {}", cmd, quote(tools.nvcc),
                        objects, quote(tmp.string()));
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto [status, output] = run_program(cmd);
    b.compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_text(b.dir / "nvcc.log", cmd + "\n" + output);
    if (status != 0 || !fs::exists(tmp))
      return plain_error(fmt::format("nvcc failed on {} (exit {}); its output is in {}", (b.dir / "kernel.cu").string(),
                                     status, (b.dir / "nvcc.log").string()));
    // ptxas's C75xx: WGMMAs serialised or setmaxnreg ignored, a silent 25-30 % loss.
    if (output.find("C75") != std::string::npos) {
      fs::remove(tmp, ec);
      return plain_error(fmt::format("ptxas serialised WGMMAs (C75xx) in {}; see {}", (b.dir / "kernel.cu").string(),
                                     (b.dir / "nvcc.log").string()));
    }
    if (output.find("spill") != std::string::npos)
      b.warning += (b.warning.empty() ? "" : "\n  warning: ") +
                   fmt::format("ptxas spilled registers in {} schedule(s) of this kernel: correct, but slower (see {})",
                               count_lines(output, "spill"), (b.dir / "nvcc.log").string());
    fs::rename(tmp, cached, ec);
    if (ec) return plain_error(fmt::format("cannot store the kernel in the cache {}: {}", cached.string(), ec.message()));
  }
  fs::remove(b.library, ec);
  fs::copy_file(cached, b.library, ec);
  if (ec) return plain_error(fmt::format("cannot copy {} to {}: {}", cached.string(), b.library.string(), ec.message()));
  return b;
}

std::string build_summary(const Built& b) {
  std::string s = fmt::format("wrote {} and {}\n", (b.dir / "kernel.cu").string(), (b.dir / "manifest.json").string());
  s += fmt::format("  fused: {}\n", b.manifest["fusion"].get<std::string>());
  s += fmt::format("  derived: {}\n", b.derived.line);
  if (!b.warning.empty()) s += "  warning: " + b.warning + "\n";
  if (b.compiled)
    s += b.cached ? fmt::format("  {}: from the build cache (same source, flags and device library)\n", b.library.string())
                  : fmt::format("  compiled {} in {:.1f} s (nvcc, sm_90a)\n", b.library.string(), b.compile_s);
  return s;
}

}  // namespace

ToolPaths tool_paths() {
  ToolPaths t;
  t.runtime_include = env_or("NAPKIN_RUNTIME_INCLUDE", NAPKIN_RUNTIME_INCLUDE_DIR);
  t.cutlass_include = env_or("NAPKIN_CUTLASS_INCLUDE", NAPKIN_CUTLASS_INCLUDE_DIR);
  t.nvcc = env_or("NAPKIN_NVCC", "nvcc");
  const char* home = std::getenv("HOME");
  const std::string xdg = env_or("XDG_CACHE_HOME", home != nullptr ? std::string(home) + "/.cache" : "/tmp");
  t.cache_dir = env_or("NAPKIN_CACHE", xdg + "/napkin/kernels");
  return t;
}

CommandOutput build(const DiagramArgs& args, const BuildOptions& o) {
  auto b = build_kernel(args, o.machine, o.out_dir, o.compile);
  if (!b) return driver::failure(b.error(), o.json);
  CommandOutput r;
  if (o.json) {
    r.out = json{{"ok", true}, {"dir", b->dir.string()}, {"library", b->compiled ? json(b->library.string()) : json(nullptr)},
                 {"cached", b->cached}, {"compile_s", b->compile_s}, {"manifest", b->manifest}}
                .dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  } else {
    r.out = build_summary(*b);
  }
  return r;
}

namespace {

std::uint16_t f32_to_half_bits(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  std::uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}
float half_bits_to_f32(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  int exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t x;
  if (exp == 0x1f) x = sign | 0x7f800000u | (mant << 13);
  else if (exp == 0) {
    if (mant == 0) x = sign;
    else {
      exp = 1;
      while (!(mant & 0x400u)) mant <<= 1, --exp;
      mant &= 0x3ffu;
      x = sign | (static_cast<std::uint32_t>(exp - 15 + 127) << 23) | (mant << 13);
    }
  } else x = sign | (static_cast<std::uint32_t>(exp - 15 + 127) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace

HostTensor to_host(const std::string& name, DType t, const reference::Tensor& x) {
  HostTensor h{name, t, x.sizes, {}};
  const std::size_t n = x.data.size();
  auto put = [&](const void* p, std::size_t bytes) {
    const auto* c = static_cast<const unsigned char*>(p);
    h.bytes.insert(h.bytes.end(), c, c + bytes);
  };
  h.bytes.reserve(n * 4);
  for (double raw : x.data) {
    // Rounded to the dtype first, as the reference interpreter rounds its inputs (truncating
    // f32's bits instead gave the kernel inputs up to an ulp away from the reference's: ~1 %
    // error in attention's output); the conversions below are then exact.
    const double v = round_to_dtype(raw, t);
    const float f = static_cast<float>(v);
    switch (t) {
      case DType::bf16: {
        std::uint32_t b;
        std::memcpy(&b, &f, 4);
        const std::uint16_t s = static_cast<std::uint16_t>(b >> 16);  // exact: v is a bf16 value
        put(&s, 2);
        break;
      }
      case DType::f16: {
        const std::uint16_t s = f32_to_half_bits(f);
        put(&s, 2);
        break;
      }
      case DType::i32: {  // (a NaN poison as the most negative i32: a cast of NaN is undefined)
        const std::int32_t i = std::isnan(v) ? INT32_MIN : static_cast<std::int32_t>(round_to_dtype(v, DType::i32));
        put(&i, 4);
        break;
      }
      case DType::boolean: {
        const unsigned char c = v != 0.0;
        put(&c, 1);
        break;
      }
      case DType::f64: put(&v, 8); break;
      default: put(&f, 4); break;
    }
  }
  return h;
}

double host_value(const HostTensor& h, std::size_t i) {
  switch (h.dtype) {
    case DType::bf16: {
      std::uint16_t s;
      std::memcpy(&s, &h.bytes[2 * i], 2);
      const std::uint32_t b = static_cast<std::uint32_t>(s) << 16;
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    case DType::f16: {
      std::uint16_t s;
      std::memcpy(&s, &h.bytes[2 * i], 2);
      return half_bits_to_f32(s);
    }
    case DType::i32: {
      std::int32_t v;
      std::memcpy(&v, &h.bytes[4 * i], 4);
      return v;
    }
    case DType::boolean: return h.bytes[i] != 0 ? 1.0 : 0.0;
    case DType::f64: {
      double v;
      std::memcpy(&v, &h.bytes[8 * i], 8);
      return v;
    }
    default: {
      float f;
      std::memcpy(&f, &h.bytes[4 * i], 4);
      return f;
    }
  }
}

namespace {

int abi_dtype(DType t) {
  switch (t) {
    case DType::bf16: return NAPKIN_BF16;
    case DType::f16: return NAPKIN_F16;
    case DType::i32: return NAPKIN_I32;
    case DType::boolean: return NAPKIN_BOOL;
    case DType::f64: return NAPKIN_F64;
    default: return NAPKIN_F32;
  }
}

std::vector<napkin_tensor> abi_tensors(std::vector<HostTensor>& hs) {
  std::vector<napkin_tensor> ts;
  for (HostTensor& h : hs) {
    napkin_tensor t{};
    t.name = h.name.c_str();
    t.data = h.bytes.data();
    t.dtype = abi_dtype(h.dtype);
    t.rank = static_cast<std::int32_t>(h.shape.size());
    std::int64_t stride = 1;
    for (int i = t.rank - 1; i >= 0; --i) {
      t.shape[i] = h.shape[static_cast<std::size_t>(i)];
      t.strides[i] = stride;
      stride *= h.shape[static_cast<std::size_t>(i)];
    }
    ts.push_back(t);
  }
  return ts;
}

// The name an output is bound by (an unnamed attention output is O).
std::string output_name(const ir::Diagram& d, const ir::Output& o) { return d.node(o.node).name.empty() ? "O" : d.node(o.node).name; }

// The inputs, the params (rank-0 f64 in host memory, at the values `d` binds: --set p=...) and
// the (NaN-poisoned) outputs of `d` as host tensors, from the seeded reference inputs; the
// outputs last, in the diagram's order, each in the dtype the library writes it in (its
// manifest's `outputs`: an attention kernel's O in its element type), else its own.
std::vector<HostTensor> host_tensors(const ir::Diagram& d, const reference::TensorMap& inputs, const json& manifest_outputs) {
  std::vector<HostTensor> hs;
  for (ir::NodeId n : d.inputs()) hs.push_back(to_host(d.node(n).name, d.node(n).dtype, inputs.at(d.node(n).name)));
  for (const ir::Node& n : d.nodes)
    if (n.op == ir::OpKind::constant && !n.name.empty() &&
        std::none_of(hs.begin(), hs.end(), [&](const HostTensor& h) { return h.name == n.name; })) {
      HostTensor p{n.name, DType::f64, {}, std::vector<unsigned char>(sizeof(double))};
      std::memcpy(p.bytes.data(), &n.scalar, sizeof(double));
      hs.push_back(std::move(p));
    }
  for (const ir::Output& o : d.outputs) {
    reference::Tensor poison;
    poison.axes = o.axes;
    for (ir::AxisId a : o.axes) poison.sizes.push_back(d.axis(a).size);
    poison.data.assign(static_cast<std::size_t>(d.elements(o.axes)), std::nan(""));
    DType dtype = d.node(o.node).dtype;
    for (const json& m : manifest_outputs)
      if (m.value("name", std::string()) == output_name(d, o)) dtype = parse_dtype(m.value("dtype", std::string())).value_or(dtype);
    hs.push_back(to_host(output_name(d, o), dtype, poison));
  }
  return hs;
}

struct Library {
  void* handle = nullptr;
  ~Library() {
    if (handle != nullptr) dlclose(handle);
  }
};

// A library built before: the manifest napkin would write for this diagram, beside its path.
Result<Built> prebuilt(const DiagramArgs& args, const std::string& machine, const std::string& library) {
  auto parsed = driver::load(args);
  if (!parsed) return parsed.error();
  auto m = driver::load_machine(machine);
  if (!m) return m.error();
  if (auto e = hopper_only(*m)) return *e;
  auto src = read_source_file(args.file);
  if (!src) return src.error();
  Built b;
  b.library = library;
  auto form = emit::recognise_attention(parsed->diagram, *src);
  if (form) {
    b.derived = derive_for(parsed->diagram, *m);
    b.manifest = manifest_for(parsed->diagram, *form, b.derived, *m);
    return b;
  }
  plan::PlanOptions po;
  po.search.row_layout = search::RowLayout::quad;
  po.generates = emit::generates(*src);
  auto r = plan::derive_plan(parsed->diagram, *m, po);
  if (!r) return r.error();
  b.derived = {"kernel plan", r->chosen.predicted_s, ""};
  b.manifest = plan_manifest(parsed->diagram, r->chosen, *m);
  return b;
}

// Why this machine cannot run a kernel (no CUDA driver, or no GPU it can see), or "": asked of
// the driver itself, before minutes of nvcc and before a kernel is blamed for the machine.
std::string no_gpu() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr)
    return "napkin run needs an NVIDIA GPU, and this machine has no CUDA driver (libcuda.so.1 not found); "
           "napkin build FILE -o DIR compiles the kernel without one";
  using Init = int (*)(unsigned);
  using Count = int (*)(int*);
  auto init = reinterpret_cast<Init>(dlsym(cuda, "cuInit"));
  auto count = reinterpret_cast<Count>(dlsym(cuda, "cuDeviceGetCount"));
  int devices = 0;
  const int rc = init == nullptr || count == nullptr ? -1 : init(0);
  const int rc_count = rc == 0 ? count(&devices) : rc;
  dlclose(cuda);
  if (rc_count != 0 || devices == 0)
    return fmt::format("napkin run needs an NVIDIA GPU, and the CUDA driver sees none (cuInit/cuDeviceGetCount: {}, {} "
                       "devices); napkin build FILE -o DIR compiles the kernel without one", rc_count, devices);
  return "";
}

}  // namespace

CommandOutput run(const DiagramArgs& args, const RunOptions& o) {
  std::string dir = o.out_dir;
  if (dir.empty()) dir = "out/kernels/" + fs::path(args.file).stem().string();
  if (o.library.empty())
    if (const std::string why = no_gpu(); !why.empty()) return driver::failure(plain_error(why), o.json);
  Result<Built> b = o.library.empty() ? build_kernel(args, o.machine, dir, true) : prebuilt(args, o.machine, o.library);
  if (!b) return driver::failure(b.error(), o.json);
  std::string text = o.library.empty() ? build_summary(*b) : fmt::format("loaded {} (built before)\n", o.library);

  Library lib;
  lib.handle = dlopen(fs::absolute(b->library).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib.handle == nullptr) return driver::failure(plain_error(fmt::format("cannot load {}: {}", b->library.string(), dlerror())), o.json);
  if (!o.library.empty()) {
    // The library must compute this diagram (up to sizes): same inputs, roles, dtypes, fused code.
    // Of two query-row axes, the emitter makes the larger the query and the other the GQA group
    // (AttentionForm): a kernel built at other sizes may have them the other way round and is
    // still this diagram's, so the two roles compare equal.
    using Manifest = const char* (*)();
    auto manifest = reinterpret_cast<Manifest>(dlsym(lib.handle, "napkin_kernel_manifest"));
    if (manifest == nullptr) return driver::failure(plain_error(o.library + ": not a napkin kernel (no napkin_kernel_manifest)"), o.json);
    const json m = json::parse(manifest(), nullptr, false);
    auto shape_free = [](json j) {
      for (json& t : j["inputs"])
        for (json& a : t["axes"]) {
          a.erase("size");
          if (a.value("role", "") == "group") a["role"] = "query";
        }
      return json{j["inputs"], j["fusion"], j["head_dim"], j["value_head_dim"], j["element"]};
    };
    if (m.is_discarded() || shape_free(m) != shape_free(b->manifest))
      return driver::failure(plain_error(fmt::format("{}: its manifest does not describe {} (other inputs, head dim or fused "
                                                     "code); rebuild it with napkin build", o.library, args.file)), o.json);
  }
  using RunHost = std::int32_t (*)(napkin_tensor*, std::int32_t, char*, std::int32_t);
  using Time = std::int32_t (*)(const napkin_tensor*, std::int32_t, std::int32_t, double*, char*, std::int32_t);
  auto run_host = reinterpret_cast<RunHost>(dlsym(lib.handle, "napkin_kernel_run_host"));
  auto time = reinterpret_cast<Time>(dlsym(lib.handle, "napkin_kernel_time"));
  if (run_host == nullptr || time == nullptr)
    return driver::failure(plain_error(fmt::format("{} lacks napkin_kernel_run_host / napkin_kernel_time", b->library.string())), o.json);

  if (!o.library.empty())  // (a build asked before compiling)
    if (const std::string why = no_gpu(); !why.empty()) return driver::failure(plain_error(why), o.json);

  // Validation at small sizes against the reference interpreter (f64).
  DiagramArgs small = args;
  auto full = driver::load(args);
  if (!full) return driver::failure(full.error(), o.json);
  // A validation size replaces the command line's binding of the same axis (the first binding of
  // a name is the one the parser takes).
  auto bind = [&](const std::string& binding) {
    const std::string name = binding.substr(0, binding.find('=') + 1);
    std::erase_if(small.sets, [&](const std::string& s) { return s.rfind(name, 0) == 0; });
    small.sets.push_back(binding);
  };
  if (o.check_sets.empty()) {
    for (const json& in : b->manifest["inputs"])
      for (const json& ax : in["axes"]) {
        const std::string role = ax["role"], name = ax["name"];
        const std::int64_t size = ax["size"];
        std::int64_t want = size;
        if (role == "batch" || role == "kv_head" || role == "group") want = std::min<std::int64_t>(size, 2);
        if (role == "query") want = std::min<std::int64_t>(size, 197);
        if (role == "key") want = std::min<std::int64_t>(size, 263);
        // A plan's runtime sizes: multiples of 8 (TMA's 16-byte rows) that no tile divides.
        if (role == "free") {
          static const std::int64_t kFree[] = {200, 264, 136, 328, 72, 392};
          const auto at = static_cast<std::size_t>(ir::stable_hash(name) % 6);
          want = std::min<std::int64_t>(size, kFree[at]);
        }
        // A cut axis: three of its inner parts (the outer part more than one index).
        if (ax.contains("multiple_of")) want = std::min<std::int64_t>(size, 3 * ax["multiple_of"].get<std::int64_t>());
        if (want != size) bind(name + "=" + std::to_string(want));
      }
  } else {
    for (const std::string& s : o.check_sets) bind(s);
  }
  auto sd = driver::load(small);
  if (!sd) return driver::failure(sd.error(), o.json);
  const ir::Diagram& d = sd->diagram;
  const reference::TensorMap inputs = reference::random_inputs(d, o.seed);
  auto ref = reference::evaluate(d, inputs);
  if (!ref) return driver::failure(ref.error(), o.json);
  // FlashAttention's baseline: the same inputs through the diagram in its own dtypes, summing in f32.
  auto low = reference::evaluate(d, inputs, {reference::Arithmetic::low_precision});
  if (!low) return driver::failure(low.error(), o.json);
  std::vector<HostTensor> hs = host_tensors(d, inputs, b->manifest["outputs"]);
  std::vector<napkin_tensor> ts = abi_tensors(hs);
  char err[1024] = {};
  if (run_host(ts.data(), static_cast<std::int32_t>(ts.size()), err, sizeof err) != 0)
    return driver::failure(plain_error(fmt::format("the kernel failed at the validation sizes: {}", err)), o.json);
  // Every output against the reference: the relative L2 error within the dtype's tolerance, no
  // non-finite value where the reference is finite, and FlashAttention's rule.
  double rel = 0, max_err = 0;
  json rule_json;
  std::vector<std::string> why;
  const std::size_t first_output = hs.size() - d.outputs.size();
  for (std::size_t oi = 0; oi < d.outputs.size(); ++oi) {
    const ir::Output& out = d.outputs[oi];
    const std::string name = output_name(d, out);
    const reference::Tensor& want = ref->at(d.node(out.node).name);
    const HostTensor& got = hs[first_output + oi];
    const DType dtype = got.dtype;
    reference::Tensor result = want;  // the kernel's output, in f64
    double err2 = 0, ref2 = 0, out_max = 0;
    std::int64_t bad = 0;
    for (std::size_t i = 0; i < want.data.size(); ++i) {
      const double g = host_value(got, i), w = want.data[i];
      result.data[i] = g;
      // Equal values (an infinity where the reference has the same one: an additive mask written
      // as an output) add no error; a non-finite value on either side that the other lacks is bad.
      if (g == w || (std::isnan(g) && std::isnan(w))) {
        if (std::isfinite(w)) ref2 += w * w;
        continue;
      }
      if (!std::isfinite(g) || !std::isfinite(w)) {
        ++bad;
        continue;
      }
      err2 += (g - w) * (g - w);
      ref2 += w * w;
      out_max = std::max(out_max, std::fabs(g - w));
    }
    const double out_rel = std::sqrt(err2 / std::max(ref2, 1e-300));
    // bf16 keeps 8 significant bits, f16 11: P and O are rounded once each, and the sums over keys
    // cancel (sigmoid attention: 1.7 % at b=2 h=2 q=197 k=263 on the H100).
    const double tolerance = dtype == DType::bf16 ? 2e-2 : 5e-3;
    const bool l2_ok = bad == 0 && out_rel <= tolerance;
    // The kernel stores the output in its dtype, so the baseline does too (a no-op where the
    // diagram's output is already `as` that dtype, as in every example).
    reference::Tensor baseline = low->at(d.node(out.node).name);
    for (double& x : baseline.data) x = round_to_dtype(x, dtype);
    const reference::ErrorRuleVerdict rule = reference::flash_attention_rule(d, want, baseline, result);
    const std::string which = d.outputs.size() > 1 ? fmt::format(" ({})", name) : "";
    text += fmt::format("validation{}: {} against the reference interpreter (f64, seed {}): relative L2 error {:.3g} "
                        "(tolerance {:.3g}), max abs error {:.3g}, {} non-finite: {}\n",
                        which, ir::diagram_key(d), o.seed, out_rel, tolerance, out_max, bad, l2_ok ? "ok" : "FAILED");
    text += rule.applied ? fmt::format("validation{}: {}: {}\n", which, rule.message, rule.passed ? "ok" : "FAILED")
                         : fmt::format("validation{}: {}\n", which, rule.message);
    if (!l2_ok) why.push_back(fmt::format("{}relative L2 error {:.3g}", which.empty() ? "" : name + ": ", out_rel));
    if (!rule.passed) why.push_back((which.empty() ? "" : name + ": ") + rule.message);
    rel = std::max(rel, out_rel);
    max_err = std::max(max_err, out_max);
    if (oi == 0 || !rule.passed)
      rule_json = json{{"applied", rule.applied}, {"passed", rule.passed}, {"max_error", rule.max_error},
                       {"baseline_error", rule.baseline_error}, {"slack", rule.slack}, {"bound", rule.bound}};
  }
  if (!why.empty()) {
    CommandOutput r;
    r.exit_code = 1;
    r.out = text;
    r.err = fmt::format("error: the kernel's output differs from the reference ({})\n", fmt::join(why, "; "));
    return r;
  }

  if (o.iters == 0) {
    CommandOutput r;
    r.out = o.json ? json{{"ok", true}, {"relative_l2_error", rel}, {"max_abs_error", max_err}, {"flash_attention_rule", rule_json}}
                         .dump(2, ' ', false, json::error_handler_t::replace) + "\n"
                   : text;
    return r;
  }
  // Timing at the diagram's sizes.
  const reference::TensorMap full_inputs = reference::random_inputs(full->diagram, o.seed + 1);
  std::vector<HostTensor> fh = host_tensors(full->diagram, full_inputs, b->manifest["outputs"]);
  std::vector<napkin_tensor> ft = abi_tensors(fh);
  double ms = 0;
  if (time(ft.data(), static_cast<std::int32_t>(ft.size()), o.iters, &ms, err, sizeof err) != 0)
    return driver::failure(plain_error(fmt::format("the kernel failed at full size: {}", err)), o.json);
  const double predicted_us = b->derived.predicted_s * 1e6;
  text += fmt::format("timed: {}: median of {} launches {:.4g} us", ir::diagram_key(full->diagram), o.iters, ms * 1e3);
  text += predicted_us > 0 ? fmt::format("; predicted {:.4g} us (measured / predicted {:.2f})\n", predicted_us, ms * 1e3 / predicted_us)
                           : "; no prediction (" + b->derived.line + ")\n";
  CommandOutput r;
  if (o.json)
    r.out = json{{"ok", true}, {"relative_l2_error", rel}, {"max_abs_error", max_err}, {"flash_attention_rule", rule_json},
                 {"median_us", ms * 1e3},
                 {"predicted_us", predicted_us > 0 ? json(predicted_us) : json(nullptr)}, {"manifest", b->manifest}}
                .dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  else
    r.out = text;
  return r;
}

}  // namespace napkin::launch
