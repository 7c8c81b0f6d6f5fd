// SPDX-License-Identifier: Apache-2.0
#include "driver/driver.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "arch/load.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "reference/interpreter.h"
#include "support/npy.h"

namespace napkin::driver {

using nlohmann::json;

namespace {

json diagnostic_json(const Diagnostic& d) {
  json j{{"severity", d.severity == Severity::error ? "error" : "warning"},
         {"message", d.message}};
  if (!d.file.empty()) j["file"] = d.file;
  if (d.loc.line) {
    j["line"] = d.loc.line;
    j["column"] = d.loc.column;
  }
  if (!d.note.empty()) j["note"] = d.note;
  return j;
}

std::string warnings_text(const std::vector<Diagnostic>& ws) {
  std::string s;
  for (const Diagnostic& w : ws) s += w.format() + "\n";
  return s;
}

json axes_json(const ir::Diagram& d, const std::vector<ir::AxisId>& axes) {
  json j = json::array();
  for (ir::AxisId a : axes) j.push_back(d.axis(a).name);
  return j;
}

json diagram_json(const ir::Diagram& d) {
  json axes = json::array();
  for (const ir::Axis& a : d.axes) axes.push_back({{"name", a.name}, {"size", a.size}});
  json nodes = json::array();
  for (std::size_t i = 0; i < d.nodes.size(); ++i) {
    const ir::Node& n = d.nodes[i];
    json j{{"id", i}, {"op", ir::op_name(n.op)}, {"axes", axes_json(d, n.axes)},
           {"dtype", dtype_name(n.dtype)}, {"operands", n.operands}};
    if (!n.name.empty()) j["name"] = n.name;
    if (!n.over.empty()) j["over"] = axes_json(d, n.over);
    if (n.op == ir::OpKind::iota) j["axis"] = d.axis(n.axis).name;
    if (n.op == ir::OpKind::constant || n.op == ir::OpKind::scale || n.op == ir::OpKind::softcap ||
        n.op == ir::OpKind::rmsnorm || n.op == ir::OpKind::layernorm)
      j["scalar"] = std::isfinite(n.scalar) ? json(n.scalar) : json(ir::format_number(n.scalar));
    nodes.push_back(j);
  }
  json outputs = json::array();
  for (const ir::Output& o : d.outputs)
    outputs.push_back({{"name", d.node(o.node).name}, {"axes", axes_json(d, o.axes)}});
  return {{"file", d.source_name}, {"key", ir::diagram_key(d)}, {"axes", axes},
          {"nodes", nodes}, {"outputs", outputs}};
}

}  // namespace

Result<ir::ParsedDiagram> load(const DiagramArgs& args) {
  std::vector<ir::Binding> bindings;
  for (const std::string& s : args.sets) {
    auto b = ir::parse_binding(s);
    if (!b) return b.error();
    bindings.push_back(b.value());
  }
  return ir::load_diagram(args.file, bindings);
}

Result<arch::Machine> load_machine(const std::string& name, const std::string& dir) {
  if (name.empty())
    return plain_error("--machine: expected a machine name (see `napkin machines`) or the path of a machine file");
  return arch::find_machine_or_file(name, dir.empty() ? arch::default_machines_dir() : dir);
}

std::string json_text(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

CommandOutput failure(const Diagnostic& d, bool json_out) {
  CommandOutput r;
  r.exit_code = 1;
  if (json_out) r.out = json_text(json{{"ok", false}, {"error", diagnostic_json(d)}});
  r.err = d.format() + "\n";
  return r;
}

CommandOutput check(const DiagramArgs& args, bool json_out) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), json_out);
  const ir::Diagram& d = parsed->diagram;
  CommandOutput r;
  r.err = warnings_text(parsed->warnings);
  int ops = 0;
  for (const ir::Node& n : d.nodes) ops += ir::op_class(n.op) != ir::OpClass::leaf;
  if (json_out) {
    json inputs = json::array(), outputs = json::array(), warnings = json::array();
    for (ir::NodeId id : d.inputs())
      inputs.push_back({{"name", d.node(id).name}, {"axes", axes_json(d, d.node(id).axes)},
                        {"dtype", dtype_name(d.node(id).dtype)}});
    for (const ir::Output& o : d.outputs)
      outputs.push_back({{"name", d.node(o.node).name}, {"axes", axes_json(d, o.axes)},
                         {"dtype", dtype_name(d.node(o.node).dtype)}});
    for (const Diagnostic& w : parsed->warnings) warnings.push_back(diagnostic_json(w));
    json axes = json::array();
    for (const ir::Axis& a : d.axes) axes.push_back({{"name", a.name}, {"size", a.size}});
    r.out = json_text(json{{"ok", true}, {"file", args.file}, {"key", ir::diagram_key(d)}, {"axes", axes},
                           {"inputs", inputs}, {"outputs", outputs}, {"ops", ops}, {"warnings", warnings}});
    return r;
  }
  std::string sizes;
  for (const ir::Axis& a : d.axes) sizes += fmt::format(" {}={}", a.name, a.size);
  const auto count = [](std::size_t n, std::string_view one, std::string_view many) {
    return fmt::format("{} {}", n, n == 1 ? one : many);
  };
  r.out = fmt::format("ok: {}: {} ({}), {}, {}, {}, {}\n", args.file, count(d.axes.size(), "axis", "axes"),
                      sizes.empty() ? "" : sizes.substr(1), count(d.inputs().size(), "input", "inputs"),
                      count(d.outputs.size(), "output", "outputs"),
                      count(static_cast<std::size_t>(ops), "op", "ops"),
                      count(parsed->warnings.size(), "warning", "warnings"));
  return r;
}

CommandOutput print(const DiagramArgs& args, bool json_out) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), json_out);
  CommandOutput r;
  r.err = warnings_text(parsed->warnings);
  r.out = json_out ? json_text(diagram_json(parsed->diagram)) : ir::print_diagram(parsed->diagram);
  return r;
}

CommandOutput eval(const DiagramArgs& args, const EvalOptions& options) {
  auto parsed = load(args);
  if (!parsed) return failure(parsed.error(), options.json);
  const ir::Diagram& d = parsed->diagram;
  if (options.output_dir.empty())
    return failure(plain_error("--output-dir: expected a directory to write the outputs to"), options.json);
  const double work = reference::work_estimate(d);
  if (work > options.max_work) {
    const ir::Axis* largest = &d.axes.front();  // a verified diagram has an axis where work > 1
    for (const ir::Axis& a : d.axes)
      if (a.size > largest->size) largest = &a;
    return failure(plain_error(fmt::format(
                       "{}: evaluating needs about {:.3g} f64 steps, more than --max-work {:.3g}; "
                       "bind smaller sizes with --set (e.g. --set {}={}), or raise --max-work",
                       args.file, work, options.max_work, largest->name, std::min<std::int64_t>(largest->size / 8 + 1, 256))),
                   options.json);
  }
  reference::TensorMap inputs = reference::random_inputs(d, options.seed);
  for (const std::string& spec : options.inputs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return failure(plain_error(fmt::format("--input {}: expected NAME=PATH.npy", spec)), options.json);
    const std::string name = spec.substr(0, eq), path = spec.substr(eq + 1);
    const auto id = d.find_node(name);
    if (!id || d.node(*id).op != ir::OpKind::input) {
      std::string known;
      for (ir::NodeId i : d.inputs()) known += " " + d.node(i).name;
      return failure(plain_error(fmt::format("--input {}: {} has no input named '{}' (inputs:{})",
                                             spec, args.file, name, known)),
                     options.json);
    }
    auto arr = read_npy(path);
    if (!arr) return failure(arr.error(), options.json);
    const ir::Node& n = d.node(*id);
    reference::Tensor t = reference::Tensor::zeros(d, n.axes);
    if (arr->shape != t.sizes)
      return failure(plain_error(fmt::format(
                         "--input {}: {} has shape ({}), but input '{}' is {} = ({})", spec, path,
                         fmt::join(arr->shape, ", "), name, ir::axes_text(d, n.axes),
                         fmt::join(t.sizes, ", "))),
                     options.json);
    // An i32 or bool input holds integers (0 or 1 for bool): anything else would be rounded
    // silently, so the first element that is not one is named.
    if (n.dtype == DType::i32 || n.dtype == DType::boolean) {
      const bool is_bool = n.dtype == DType::boolean;
      for (std::size_t i = 0; i < arr->data.size(); ++i) {
        const double v = arr->data[i];
        const bool ok = is_bool ? (v == 0 || v == 1)
                                : std::isfinite(v) && v == std::floor(v) && v >= -2147483648.0 && v <= 2147483647.0;
        if (ok) continue;
        std::vector<std::int64_t> at(t.sizes.size());
        for (std::size_t k = at.size(), rest = i; k-- > 0;) {
          at[k] = static_cast<std::int64_t>(rest % static_cast<std::size_t>(t.sizes[k]));
          rest /= static_cast<std::size_t>(t.sizes[k]);
        }
        return failure(plain_error(fmt::format("--input {}: element ({}) of {} is {}, but input '{}' is {}: expected {}", spec,
                                               fmt::join(at, ", "), path, ir::format_number(v), name,
                                               dtype_name(n.dtype),
                                               is_bool ? "0 or 1" : "an integer from -2147483648 to 2147483647")),
                       options.json);
      }
    }
    t.data = std::move(arr->data);
    inputs[name] = std::move(t);
  }
  std::error_code ec;
  std::filesystem::create_directories(options.output_dir, ec);
  if (ec)
    return failure(plain_error(fmt::format("--output-dir {}: cannot create the directory: {}",
                                           options.output_dir, ec.message())),
                   options.json);
  const auto start = std::chrono::steady_clock::now();
  auto outputs = reference::evaluate(
      d, inputs, {options.low_precision ? reference::Arithmetic::low_precision : reference::Arithmetic::f64});
  if (!outputs) return failure(outputs.error(), options.json);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CommandOutput r;
  r.err = warnings_text(parsed->warnings);
  json written = json::array();
  std::string table;
  for (const ir::Output& o : d.outputs) {
    const std::string& name = d.node(o.node).name;
    const reference::Tensor& t = outputs->at(name);
    const std::string path = (std::filesystem::path(options.output_dir) / (name + ".npy")).string();
    auto ok = write_npy(path, {t.sizes, t.data});
    if (!ok) return failure(ok.error(), options.json);
    // The mean and rms are of the finite elements; the non-finite ones are counted apart.
    double sum = 0, sq = 0;
    for (double v : t.data) {
      if (!std::isfinite(v)) continue;
      sum += v;
      sq += v * v;
    }
    const reference::NonFinite bad = reference::count_non_finite(t);
    const double n = static_cast<double>(t.data.size() - static_cast<std::size_t>(bad.total()));
    const double mean = n ? sum / n : 0, rms = n ? std::sqrt(sq / n) : 0;
    written.push_back({{"name", name}, {"path", path}, {"axes", axes_json(d, o.axes)},
                       {"shape", t.sizes}, {"mean", n ? json(mean) : json(nullptr)},
                       {"rms", n ? json(rms) : json(nullptr)}, {"non_finite", bad.total()},
                       {"nan", bad.nan}, {"pos_inf", bad.pos_inf}, {"neg_inf", bad.neg_inf}});
    std::string stats = fmt::format("mean {:+.6f}  rms {:.6f}", mean, rms);
    if (!n) stats = "no finite element";
    if (bad.total())
      stats += fmt::format("  non-finite {} of {} ({}{})", bad.total(), t.data.size(),
                           reference::non_finite_text(bad), n ? "; mean and rms of the rest" : "");
    table += fmt::format("  {:<8} {:<24} ({})  {}\n", name, path, fmt::join(t.sizes, ", "), stats);
  }
  // Inputs as the interpreter reads them (rounded to their dtype): one line for each that
  // holds a NaN or an infinity, so that a non-finite output can be traced to its cause.
  json read = json::array();
  for (ir::NodeId id : d.inputs()) {
    const ir::Node& in = d.node(id);
    const reference::Tensor& t = inputs.at(in.name);
    const reference::NonFinite bad = reference::count_non_finite(t, in.dtype);
    read.push_back({{"name", in.name}, {"non_finite", bad.total()}, {"nan", bad.nan},
                    {"pos_inf", bad.pos_inf}, {"neg_inf", bad.neg_inf}});
    if (bad.total())
      table += fmt::format("  input {} ({}, {}): non-finite {} of {} ({})\n", in.name, fmt::join(t.sizes, ", "),
                           dtype_name(in.dtype), bad.total(), t.data.size(), reference::non_finite_text(bad));
  }
  if (options.json) {
    r.out = json_text(json{{"ok", true}, {"file", args.file}, {"key", ir::diagram_key(d)},
                           {"seed", options.seed}, {"seconds", seconds}, {"outputs", written},
                           {"inputs", read}});
  } else {
    r.out = fmt::format("evaluated {} in {} ({:.3f} s, seed {}):\n{}", args.file,
                        options.low_precision ? "low precision (FlashAttention's baseline: each node in its dtype, sums in f32)"
                                              : "f64",
                        seconds, options.seed, table);
  }
  return r;
}

}  // namespace napkin::driver
