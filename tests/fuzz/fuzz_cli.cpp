// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the command line itself. The input is an argument vector, one argument per
// line, run in-process through napkin::cli::execute (tools/napkin/main.cpp) over every
// subcommand. Whatever the arguments, napkin answers with exit 0, 1 (an input error) or 2 (a
// usage error); a failure says why on stderr; stderr never holds a raw control byte; --json
// output that succeeds is JSON. No crash, hang or sanitizer report.
//
// A sandbox keeps the fuzzer's files in one temporary directory, the working directory while
// a command runs (libFuzzer's own paths stay relative to where it was started): the
// examples, the machine files, a trace and two .npy files are copied there flat; an argument
// with '/' or ".." is not run (so every path is a file of that directory); files a command
// writes are removed after it and copied inputs it overwrote are restored, so each input runs
// alone. Work is bounded where napkin lets a user ask for more: eval, run-schedule and run-plan run with
// --max-work 1e6 (a --max-work of the input is not run); build and run (nvcc, a GPU) are not
// run.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli.h"  // tools/napkin
#include "support/npy.h"

namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The working directory's files as first written: restored after every input.
struct Sandbox {
  fs::path dir;
  std::map<std::string, std::string> files;  // name -> bytes

  Sandbox() {
    char tmpl[] = "/tmp/napkin_fuzz_cli_XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    dir = tmpl;
    const fs::path src = NAPKIN_SOURCE_DIR;
    for (const char* sub : {"examples", "machines"})
      for (const auto& e : fs::directory_iterator(src / sub))
        if (e.is_regular_file()) files[e.path().filename().string()] = read_all(e.path());
    files["trace.txt"] = read_all(src / "tests/fuzz/seeds/trace/two_runs.txt");
    // Inputs of examples/matmul.napkin at m=2 k=3 n=2.
    if (!napkin::write_npy((dir / "A.npy").string(), {{2, 3}, {1, 2, 3, 4, 5, 6}}) ||
        !napkin::write_npy((dir / "B.npy").string(), {{3, 2}, {1, 0, 0, 1, 1, 1}}))
      std::abort();
    for (const char* npy : {"A.npy", "B.npy"}) files[npy] = read_all(dir / npy);
    restore();
  }
  ~Sandbox() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  // Removes what a command wrote; rewrites a copied file it changed.
  void restore() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (!files.count(e.path().filename().string())) fs::remove_all(e.path(), ec);
    for (const auto& [name, bytes] : files) {
      const fs::path p = dir / name;
      if (!fs::is_regular_file(p, ec) || fs::file_size(p, ec) != bytes.size() || read_all(p) != bytes) {
        fs::remove_all(p, ec);
        std::ofstream(p, std::ios::binary) << bytes;
      }
    }
  }
};

Sandbox& sandbox() {
  static Sandbox s;
  return s;
}

bool has_control_byte(const std::string& s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)sandbox();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args;
  std::string arg;
  for (std::size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      args.push_back(arg);
      arg.clear();
    } else {
      arg += static_cast<char>(data[i]);
    }
  }
  if (!args.empty() && args.back().empty()) args.pop_back();  // the seed files' last newline
  if (args.size() > 32) return 0;
  for (const std::string& a : args)
    if (a.size() > 512 || a.find('/') != std::string::npos || a.find("..") != std::string::npos ||
        a.rfind("--max-work", 0) == 0)
      return 0;
  if (!args.empty() && (args[0] == "build" || args[0] == "run")) return 0;
  if (!args.empty() && (args[0] == "eval" || args[0] == "run-schedule" || args[0] == "run-plan")) {
    args.push_back("--max-work");
    args.push_back("1e6");
  }
  const fs::path here = fs::current_path();
  fs::current_path(sandbox().dir);
  const napkin::driver::CommandOutput r = napkin::cli::execute(args);
  fs::current_path(here);
  sandbox().restore();
  if (r.exit_code < 0 || r.exit_code > 2) __builtin_trap();
  if (r.exit_code != 0 && r.err.empty()) __builtin_trap();  // a failure says why
  if (has_control_byte(r.err)) __builtin_trap();              // never raw bytes to a terminal
  // Help is text, whatever else is asked; "-he" is -h and -e to CLI11 (short flags cluster).
  bool json = false, help = !args.empty() && args[0] == "help";
  for (const std::string& a : args) {
    json |= a == "--json";
    help |= a == "--help" || a == "--help-all" || (a.size() > 1 && a[0] == '-' && a[1] != '-' && a.find('h') != std::string::npos);
  }
  if (json && !help && r.exit_code == 0 && !nlohmann::json::accept(r.out)) __builtin_trap();
  return 0;
}
