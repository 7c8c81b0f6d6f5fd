// SPDX-License-Identifier: Apache-2.0
// The driver: each napkin subcommand as a function from options to text. The CLI (tools/napkin)
// only parses arguments and prints what these return; tests call them directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "arch/machine.h"
#include "ir/parser.h"

namespace napkin::driver {

// What a command produced: text for stdout and stderr, and the process exit code.
struct CommandOutput {
  int exit_code = 0;
  std::string out;
  std::string err;
};

// The diagram a command works on: a .napkin path and `--set NAME=VALUE` bindings.
struct DiagramArgs {
  std::string file;
  std::vector<std::string> sets;
};

// Parses the bindings and the file; warnings are returned alongside the diagram.
Result<ir::ParsedDiagram> load(const DiagramArgs& args);

// The machine `name` names (arch::find_machine_or_file): a machine file's path (it holds a '/'
// or ends in ".toml"), or else a name looked up in `dir` (empty: arch::default_machines_dir()).
// An empty name is the error "--machine: expected a machine name (see `napkin machines`) or the
// path of a machine file".
Result<arch::Machine> load_machine(const std::string& name, const std::string& dir = {});

// The failure of a command: the diagnostic on stderr (or as JSON on stdout), exit code 1.
CommandOutput failure(const Diagnostic& d, bool json);

// `j` as the text every --json prints: indented by 2, a newline at the end, and any bytes
// from the user that are not UTF-8 (a file name, a line of a binary file) as U+FFFD, so the
// output is always JSON.
std::string json_text(const nlohmann::json& j);

CommandOutput check(const DiagramArgs& args, bool json);
CommandOutput print(const DiagramArgs& args, bool json);

struct EvalOptions {
  std::uint64_t seed = 0;
  std::vector<std::string> inputs;  // NAME=PATH.npy
  std::string output_dir;
  double max_work = 1e10;           // refuse evaluations needing more scalar steps than this
  bool low_precision = false;       // FlashAttention's baseline (reference::Arithmetic::low_precision)
  bool json = false;
};
CommandOutput eval(const DiagramArgs& args, const EvalOptions& options);

}  // namespace napkin::driver
