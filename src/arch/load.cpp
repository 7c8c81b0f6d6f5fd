// SPDX-License-Identifier: Apache-2.0
#include "arch/load.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace napkin::arch {

namespace {

// The range of a rate or a clock a machine file may state (see Reader::number).
constexpr double kLeastRate = 1e-6, kGreatestRate = 1e24;

namespace fs = std::filesystem;

// Citations that are not keys of [sources]: arithmetic on cited numbers, and placeholders
// awaiting a measurement (docs/machines.md says how each is used).
constexpr std::string_view kDerived = "derived";
constexpr std::string_view kEstimate = "estimate";
constexpr std::string_view kSourceNote =
    "every number in a machine file carries its source: KEY = { value = 132, source = \"<key "
    "of [sources]> <section>\" } (docs/machines.md)";

struct LoadError {
  Diagnostic diagnostic;
};

SourceLoc loc_of(const toml::source_region& r) {
  return {static_cast<int>(r.begin.line), static_cast<int>(r.begin.column)};
}

// "-3", "1.5", "\"abc\"", "a table", ... : how a found value is shown in messages.
std::string describe(const toml::node& n) {
  if (auto i = n.as_integer()) return std::to_string(i->get());
  if (auto f = n.as_floating_point()) return format_number(f->get());
  if (auto s = n.as_string()) return s->get().empty() ? "an empty string" : "\"" + s->get() + "\"";
  if (auto b = n.as_boolean()) return b->get() ? "true" : "false";
  if (n.is_table()) return "a table";
  if (n.is_array()) return "an array";
  return "a date or time";
}

std::string join(const std::vector<std::string>& xs, std::string_view sep = ", ") {
  std::string s;
  for (std::size_t i = 0; i < xs.size(); ++i) s += (i ? std::string(sep) : "") + xs[i];
  return s;
}

std::string child(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

// Reads one parsed file into a Machine; every user mistake throws LoadError.
class Reader {
 public:
  Reader(const SourceText& src, const toml::table& root) : src_(src), root_(root) {}

  Machine read() {
    Machine m;
    m.file = src_.name;
    only_keys(root_, "", {"name", "display_name", "compute_capability", "sm_count", "clock_hz",
                          "max_boost_clock_hz", "sources", "levels", "throughput", "limits",
                          "cluster"});
    m.sources = read_sources();
    m.name = string(root_, "", "name");
    const std::string stem = fs::path(src_.name).stem().string();
    if (m.name != stem)
      fail(*root_.get("name"),
           fmt::format("name: expected \"{}\" (the file's name), found \"{}\"", stem, m.name));
    m.display_name = string(root_, "", "display_name");
    m.compute_capability = string(root_, "", "compute_capability");
    {  // "major.minor", as CUDA numbers architectures (build picks sm_90a from "9.0")
      const std::string& cc = m.compute_capability;
      const auto dot = cc.find('.');
      auto digits = [](std::string_view v) {
        return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
      };
      if (dot == std::string::npos || !digits(std::string_view(cc).substr(0, dot)) || !digits(std::string_view(cc).substr(dot + 1)))
        fail(*root_.get("compute_capability"),
             fmt::format("compute_capability: expected \"major.minor\" (e.g. \"9.0\"), found \"{}\"", cc));
    }
    m.sm_count = integer(root_, "", "sm_count");
    m.clock_hz = number(root_, "", "clock_hz");
    if (root_.get("max_boost_clock_hz")) m.max_boost_clock_hz = number(root_, "", "max_boost_clock_hz");
    m.levels = read_levels();
    m.throughput = read_throughput();
    m.limits = read_limits();
    if (root_.get("cluster")) m.cluster = read_cluster();
    check_consistency(m);
    return m;
  }

 private:
  [[noreturn]] void fail(SourceLoc at, std::string message, std::string note = {}) {
    throw LoadError{make_error(src_, at, std::move(message), std::move(note))};
  }
  [[noreturn]] void fail(const toml::node& at, std::string message, std::string note = {}) {
    fail(loc_of(at.source()), std::move(message), std::move(note));
  }

  void only_keys(const toml::table& t, std::string_view path,
                 std::initializer_list<std::string_view> allowed) {
    for (auto&& [k, v] : t) {
      if (std::find(allowed.begin(), allowed.end(), k.str()) != allowed.end()) continue;
      std::vector<std::string> names(allowed.begin(), allowed.end());
      fail(loc_of(k.source()), fmt::format("{}: unknown key; expected one of {}",
                                           child(path, k.str()), join(names)));
    }
  }

  const toml::node& require(const toml::table& t, std::string_view path, std::string_view key,
                            std::string_view what) {
    const toml::node* n = t.get(key);
    // A key missing from the top level has no better position than the whole file.
    const SourceLoc at = &t == &root_ ? SourceLoc{} : loc_of(t.source());
    if (!n) fail(at, fmt::format("{}: missing; expected {}", child(path, key), what));
    return *n;
  }

  const toml::table& table(const toml::table& t, std::string_view path, std::string_view key) {
    const toml::node& n = require(t, path, key, "a table");
    if (!n.is_table())
      fail(n, fmt::format("{}: expected a table, found {}", child(path, key), describe(n)));
    return *n.as_table();
  }

  std::string string(const toml::table& t, std::string_view path, std::string_view key) {
    const toml::node& n = require(t, path, key, "a string");
    auto s = n.as_string();
    if (!s || s->get().empty())
      fail(n, fmt::format("{}: expected a non-empty string, found {}", child(path, key), describe(n)));
    locs_[child(path, key)] = loc_of(n.source());
    return s->get();
  }

  std::map<std::string, std::string> read_sources() {
    const toml::table& t = table(root_, "", "sources");
    std::map<std::string, std::string> out;
    for (auto&& [k, v] : t) {
      const std::string key = child("sources", k.str());
      if (k.str() == kDerived || k.str() == kEstimate)
        fail(loc_of(k.source()), fmt::format("{}: '{}' is reserved; choose another key", key, k.str()));
      auto s = v.as_string();
      if (!s || s->get().empty())
        fail(v, fmt::format("{}: expected the full reference as a string, found {}", key, describe(v)));
      out.emplace(std::string(k.str()), s->get());
    }
    sources_ = out;
    return out;
  }

  // The { value = N, source = "..." } table at t[key]; returns the value node (checked by the
  // caller) and the verified source.
  std::pair<const toml::node*, std::string> sourced(const toml::table& t, std::string_view path,
                                                    std::string_view key) {
    const std::string full = child(path, key);
    const toml::node& n = require(t, path, key, "{ value = ..., source = \"...\" }");
    if (n.is_number())
      fail(n, fmt::format("{}: missing source for {}", full, describe(n)), std::string(kSourceNote));
    if (!n.is_table())
      fail(n, fmt::format("{}: expected {{ value = ..., source = \"...\" }}, found {}", full,
                          describe(n)), std::string(kSourceNote));
    const toml::table& st = *n.as_table();
    only_keys(st, full, {"value", "source"});
    const toml::node* value = st.get("value");
    if (!value) fail(n, fmt::format("{}: missing value", full));
    const toml::node* source = st.get("source");
    if (!source) fail(n, fmt::format("{}: missing source", full), std::string(kSourceNote));
    auto s = source->as_string();
    if (!s) fail(*source, fmt::format("{}.source: expected a string, found {}", full, describe(*source)));
    const std::string text = s->get();
    const auto start = text.find_first_not_of(" \t");
    if (start == std::string::npos)
      fail(*source, fmt::format("{}.source: expected a citation, found an empty string", full),
           std::string(kSourceNote));
    const auto end = text.find_first_of(" \t:,;(", start);
    const std::string cite = text.substr(start, end == std::string::npos ? end : end - start);
    if (cite != kDerived && cite != kEstimate && !sources_.count(cite)) {
      std::vector<std::string> keys;
      for (const auto& [k, _] : sources_) keys.push_back(k);
      fail(*source,
           fmt::format("{}.source: unknown citation '{}'; expected a key of [sources] ({}), "
                       "'derived' or 'estimate'", full, cite, join(keys)));
    }
    locs_[full] = loc_of(value->source());
    return {value, text};
  }

  Sourced<std::int64_t> integer(const toml::table& t, std::string_view path, std::string_view key) {
    auto [value, source] = sourced(t, path, key);
    auto i = value->as_integer();
    if (!i || i->get() <= 0)
      fail(*value, fmt::format("{}: expected a positive integer, found {}", child(path, key),
                               describe(*value)));
    return {i->get(), source};
  }

  Sourced<double> number(const toml::table& t, std::string_view path, std::string_view key) {
    auto [value, source] = sourced(t, path, key);
    const auto x = value->value<double>();
    if (!value->is_number() || !x || !std::isfinite(*x) || *x <= 0)
      fail(*value, fmt::format("{}: expected a positive number, found {}", child(path, key),
                               describe(*value)));
    // Rates and clocks (per second, per cycle): past these, times and rates overflow or lose
    // every digit (1e-300 bytes/s makes every estimate inf).
    if (*x < kLeastRate || *x > kGreatestRate)
      fail(*value, fmt::format("{}: {} is not a plausible rate or clock; expected a number from {:g} to {:g}",
                               child(path, key), describe(*value), kLeastRate, kGreatestRate));
    return {*x, source};
  }

  std::vector<Level> read_levels() {
    const toml::table& t = table(root_, "", "levels");
    std::map<std::string, Level> by_name;
    for (auto&& [k, v] : t) {
      const std::string path = child("levels", k.str());
      if (!v.is_table()) fail(v, fmt::format("{}: expected a table, found {}", path, describe(v)));
      const toml::table& lt = *v.as_table();
      only_keys(lt, path, {"parent", "capacity_bytes", "instances_per_parent", "bytes_per_s"});
      Level l;
      l.name = std::string(k.str());
      l.capacity_bytes = integer(lt, path, "capacity_bytes");
      if (l.name == kGmem) {
        if (const toml::node* p = lt.get("parent"))
          fail(*p, fmt::format("{}.parent: gmem is the root level and has no parent", path));
        for (std::string_view key : {"instances_per_parent", "bytes_per_s"})
          if (const toml::node* n = lt.get(key))
            fail(*n, fmt::format("{}.{}: the root level has no parent; remove the key", path, key));
        l.instances_per_parent.value = 1;
      } else {
        if (!lt.get("parent"))
          fail(loc_of(lt.source()),
               fmt::format("{}.parent: missing; only the root level gmem has no parent", path));
        l.parent = string(lt, path, "parent");
        l.instances_per_parent = integer(lt, path, "instances_per_parent");
        l.bytes_per_s = number(lt, path, "bytes_per_s");
      }
      by_name.emplace(l.name, std::move(l));
    }
    std::vector<std::string> names;
    for (const auto& [name, _] : by_name) names.push_back(name);
    for (std::string_view need : {kGmem, kL2, kSmem, kRmem, kTensorCore})
      if (!by_name.count(std::string(need)))
        fail(loc_of(t.source()), fmt::format("levels: missing level '{}'; every machine defines "
                                             "gmem, l2, smem, rmem and tc", need));
    for (const auto& [name, l] : by_name) {
      if (l.parent.empty()) continue;
      if (!by_name.count(l.parent))
        fail(locs_.at(fmt::format("levels.{}.parent", name)),
             fmt::format("levels.{}.parent: no level named '{}'; expected one of {}", name,
                         l.parent, join(names)));
    }
    for (const auto& [name, l] : by_name) {
      // Walk to the root; more steps than levels means the parents form a cycle.
      std::string at = name;
      for (std::size_t steps = 0; at != kGmem; ++steps) {
        if (steps > by_name.size())
          fail(locs_.at(fmt::format("levels.{}.parent", name)),
               fmt::format("levels.{}.parent: '{}' does not reach gmem; the parents form a cycle",
                           name, name));
        at = by_name.at(at).parent;
      }
    }
    // Canonical order: breadth first from the root, siblings by name (std::map order).
    std::vector<Level> out{by_name.at(std::string(kGmem))};
    for (std::size_t i = 0; i < out.size(); ++i)
      for (auto& [name, l] : by_name)
        if (l.parent == out[i].name) {
          l.instances = out[i].instances * l.instances_per_parent.value;
          out.push_back(l);
        }
    return out;
  }

  std::vector<Throughput> read_throughput() {
    const toml::table& t = table(root_, "", "throughput");
    std::vector<Throughput> out;
    for (auto&& [uk, uv] : t) {
      const std::string upath = child("throughput", uk.str());
      const auto unit = parse_unit(uk.str());
      if (!unit) fail(loc_of(uk.source()),
                      fmt::format("{}: unknown unit; expected tensor_core, fma or sfu", upath));
      if (!uv.is_table()) fail(uv, fmt::format("{}: expected a table, found {}", upath, describe(uv)));
      for (auto&& [dk, dv] : *uv.as_table()) {
        const auto dtype = parse_dtype(dk.str());
        if (!dtype || *dtype == DType::i32 || *dtype == DType::boolean)
          fail(loc_of(dk.source()),
               fmt::format("{}: unknown dtype; expected one of f64, f32, tf32, bf16, f16, fp8e4m3, "
                           "fp8e5m2", child(upath, dk.str())));
        out.push_back({*unit, *dtype, number(*uv.as_table(), upath, dk.str())});
      }
    }
    const std::pair<Unit, DType> required[] = {{Unit::tensor_core, DType::bf16},
                                               {Unit::tensor_core, DType::f16},
                                               {Unit::fma, DType::f32},
                                               {Unit::sfu, DType::f32}};
    for (auto [unit, dtype] : required) {
      // Copies: clang before 16 cannot capture structured bindings (the fuzz preset's compiler).
      const bool found = std::any_of(out.begin(), out.end(), [&, unit = unit, dtype = dtype](const Throughput& x) {
        return x.unit == unit && x.dtype == dtype;
      });
      if (!found)
        fail(loc_of(t.source()),
             fmt::format("throughput.{}.{}: missing; every machine needs tensor_core bf16 and "
                         "f16, fma f32 and sfu f32", unit_name(unit), dtype_name(dtype)));
    }
    std::sort(out.begin(), out.end(), [](const Throughput& a, const Throughput& b) {
      return std::pair(a.unit, a.dtype) < std::pair(b.unit, b.dtype);
    });
    return out;
  }

  Limits read_limits() {
    const toml::table& t = table(root_, "", "limits");
    const std::string p = "limits";
    only_keys(t, p, {"registers_per_thread", "registers_per_block", "registers_per_sm",
                     "smem_bytes_per_block", "smem_bytes_per_sm", "threads_per_block",
                     "threads_per_sm", "ctas_per_sm", "warp_size_threads",
                     "warpgroup_size_threads"});
    Limits k;
    k.registers_per_thread = integer(t, p, "registers_per_thread");
    k.registers_per_block = integer(t, p, "registers_per_block");
    k.registers_per_sm = integer(t, p, "registers_per_sm");
    k.smem_bytes_per_block = integer(t, p, "smem_bytes_per_block");
    k.smem_bytes_per_sm = integer(t, p, "smem_bytes_per_sm");
    k.threads_per_block = integer(t, p, "threads_per_block");
    k.threads_per_sm = integer(t, p, "threads_per_sm");
    k.ctas_per_sm = integer(t, p, "ctas_per_sm");
    k.warp_size_threads = integer(t, p, "warp_size_threads");
    if (t.get("warpgroup_size_threads"))
      k.warpgroup_size_threads = integer(t, p, "warpgroup_size_threads");
    return k;
  }

  Cluster read_cluster() {
    const toml::table& t = table(root_, "", "cluster");
    const std::string p = "cluster";
    only_keys(t, p, {"max_ctas_portable", "max_ctas_nonportable", "dsmem_bytes_per_s",
                     "gmem_smem_bytes_per_s"});
    Cluster c;
    c.max_ctas_portable = integer(t, p, "max_ctas_portable");
    if (t.get("max_ctas_nonportable")) c.max_ctas_nonportable = integer(t, p, "max_ctas_nonportable");
    if (t.get("gmem_smem_bytes_per_s")) c.gmem_smem_bytes_per_s = number(t, p, "gmem_smem_bytes_per_s");
    const std::int64_t max_ctas =
        c.max_ctas_nonportable ? c.max_ctas_nonportable->value : c.max_ctas_portable.value;
    if (t.get("dsmem_bytes_per_s")) {
      const toml::table& dt = table(t, p, "dsmem_bytes_per_s");
      for (auto&& [k, v] : dt) {
        const std::string path = child("cluster.dsmem_bytes_per_s", k.str());
        std::int64_t ctas = 0;
        std::istringstream in{std::string(k.str())};
        if (!(in >> ctas) || !in.eof() || ctas < 2 || ctas > max_ctas)
          fail(loc_of(k.source()),
               fmt::format("{}: expected a cluster size (CTAs) from 2 to {}, found '{}'", path,
                           max_ctas, k.str()));
        c.dsmem_bytes_per_s.emplace(ctas, number(dt, "cluster.dsmem_bytes_per_s", k.str()));
      }
    }
    return c;
  }

  // Requires a <= b, else an error at a's key.
  void at_most(std::string_view a_key, std::int64_t a, std::string_view b_key, std::int64_t b,
               std::string_view why) {
    if (a > b)
      fail(locs_.at(std::string(a_key)),
           fmt::format("{}: {} exceeds {} {}; {}", a_key, a, b_key, b, why));
  }

  void multiple_of(std::string_view a_key, std::int64_t a, std::string_view b_key, std::int64_t b) {
    if (a % b != 0)
      fail(locs_.at(std::string(a_key)),
           fmt::format("{}: {} is not a multiple of {} {}", a_key, a, b_key, b));
  }

  void check_consistency(const Machine& m) {
    const Limits& k = m.limits;
    at_most("limits.registers_per_thread", k.registers_per_thread.value,
            "limits.registers_per_block", k.registers_per_block.value,
            "one thread's registers come out of its block's");
    at_most("limits.registers_per_block", k.registers_per_block.value, "limits.registers_per_sm",
            k.registers_per_sm.value, "a block's registers come out of its SM's");
    at_most("limits.smem_bytes_per_block", k.smem_bytes_per_block.value,
            "limits.smem_bytes_per_sm", k.smem_bytes_per_sm.value,
            "a block's shared memory comes out of its SM's");
    at_most("limits.threads_per_block", k.threads_per_block.value, "limits.threads_per_sm",
            k.threads_per_sm.value, "a block runs on one SM");
    multiple_of("limits.threads_per_block", k.threads_per_block.value, "limits.warp_size_threads",
                k.warp_size_threads.value);
    multiple_of("limits.threads_per_sm", k.threads_per_sm.value, "limits.warp_size_threads",
                k.warp_size_threads.value);
    if (k.warpgroup_size_threads)
      multiple_of("limits.warpgroup_size_threads", k.warpgroup_size_threads->value,
                  "limits.warp_size_threads", k.warp_size_threads.value);
    if (m.cluster && m.cluster->max_ctas_nonportable)
      at_most("cluster.max_ctas_portable", m.cluster->max_ctas_portable.value,
              "cluster.max_ctas_nonportable", m.cluster->max_ctas_nonportable->value,
              "the portable size is the guaranteed part of the non-portable one");

    const Level& smem = *m.level(kSmem);
    if (smem.instances != m.sm_count.value)
      fail(locs_.at("levels.smem.instances_per_parent"),
           fmt::format("levels.smem.instances_per_parent: gives {} smem instances in all, "
                       "expected sm_count {} (one per SM)", smem.instances, m.sm_count.value));
    if (smem.capacity_bytes.value != k.smem_bytes_per_sm.value)
      fail(locs_.at("levels.smem.capacity_bytes"),
           fmt::format("levels.smem.capacity_bytes: {} disagrees with limits.smem_bytes_per_sm {}",
                       smem.capacity_bytes.value, k.smem_bytes_per_sm.value));
    const Level& rmem = *m.level(kRmem);
    if (rmem.instances != m.sm_count.value)
      fail(locs_.at("levels.rmem.instances_per_parent"),
           fmt::format("levels.rmem.instances_per_parent: gives {} rmem instances in all, "
                       "expected sm_count {} (one register file per SM)", rmem.instances,
                       m.sm_count.value));
    if (rmem.capacity_bytes.value != 4 * k.registers_per_sm.value)
      fail(locs_.at("levels.rmem.capacity_bytes"),
           fmt::format("levels.rmem.capacity_bytes: {} disagrees with 4 bytes x "
                       "limits.registers_per_sm {} = {}", rmem.capacity_bytes.value,
                       k.registers_per_sm.value, 4 * k.registers_per_sm.value));
  }

  const SourceText& src_;
  const toml::table& root_;
  std::map<std::string, std::string> sources_;  // [sources], to check citations
  std::map<std::string, SourceLoc> locs_;  // where each key's value was read, for later checks
};

}  // namespace

Result<Machine> parse_machine(std::string_view text, const std::string& path) {
  const SourceText src{path, std::string(text)};
  try {
    const toml::table root = toml::parse(text, path);
    Reader reader(src, root);
    return reader.read();
  } catch (const toml::parse_error& e) {
    return make_error(src, loc_of(e.source()), fmt::format("invalid TOML: {}", e.description()));
  } catch (const LoadError& e) {
    return e.diagnostic;
  }
}

Result<Machine> load_machine(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return plain_error(fmt::format("{}: is a directory; expected a machine file (.toml)", path));
  if (!std::ifstream(path, std::ios::binary)) return plain_error(fmt::format("{}: cannot read the machine file", path));
  auto text = read_source_file(path);  // bounded: a device file (/dev/zero) never ends
  if (!text) return text.error();
  return parse_machine(text->text, path);
}

std::vector<std::string> machine_names(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".toml")
      names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Result<Machine> find_machine(std::string_view name, const std::string& dir) {
  const std::vector<std::string> names = machine_names(dir);
  if (std::find(names.begin(), names.end(), name) == names.end())
    return plain_error(fmt::format("unknown machine '{}'; {} has: {}", name, dir,
                                   names.empty() ? "no machine files" : join(names)));
  return load_machine((fs::path(dir) / (std::string(name) + ".toml")).string());
}

Result<Machine> find_machine_or_file(std::string_view name_or_path, const std::string& dir) {
  const bool is_path = name_or_path.find('/') != std::string_view::npos || name_or_path.ends_with(".toml");
  if (is_path) return load_machine(std::string(name_or_path));
  auto m = find_machine(name_or_path, dir);
  if (m) return m;
  std::error_code ec;
  if (fs::is_directory(std::string(name_or_path), ec))  // a local directory named like a machine
    return plain_error(fmt::format("--machine {}: is a directory; expected a machine name (see `napkin machines`) "
                                   "or the path of a machine file (NAME.toml)", name_or_path));
  Diagnostic d = m.error();
  d.message += "; or give the path of a machine file (e.g. ./mygpu.toml; docs/machines.md)";
  return d;
}

Result<std::vector<Machine>> load_machines(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return plain_error(fmt::format("{}: not a directory of machine files", dir));
  std::vector<Machine> out;
  for (const std::string& name : machine_names(dir)) {
    auto m = load_machine((fs::path(dir) / (name + ".toml")).string());
    if (!m) return m.error();
    out.push_back(std::move(m).value());
  }
  return out;
}

std::string default_machines_dir() { return NAPKIN_MACHINES_DIR; }

}  // namespace napkin::arch
