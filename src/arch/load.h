// SPDX-License-Identifier: Apache-2.0
// Loading machine files (TOML, format in docs/machines.md) into verified Machine values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "arch/machine.h"
#include "support/diagnostic.h"

namespace napkin::arch {

// Parses and verifies one machine file whose text is `text`; `path` names it in diagnostics
// and its stem must equal the machine's `name`.
// Post, on success: every required key is present; every number is positive and finite (an
// integer where the key counts bytes, instances or threads) and carries a source whose first
// word is a key of [sources], "derived" or "estimate"; the levels form a tree rooted at gmem
// holding gmem, l2, smem, rmem and tc; smem instances equal sm_count; smem and rmem capacities
// agree with the limits; per-block limits do not exceed per-SM ones; tensor_core bf16 and
// f16, fma f32 and sfu f32 rates exist; levels and throughput are in canonical order.
// On failure: one error "path:line:col: error: KEY: reason (expected ..., found ...)".
Result<Machine> parse_machine(std::string_view text, const std::string& path);

// Reads `path` and parses it; an unreadable file is an error naming the path.
Result<Machine> load_machine(const std::string& path);

// Stems of the *.toml files directly in `dir`, sorted; empty when dir does not exist.
std::vector<std::string> machine_names(const std::string& dir);

// Loads dir/NAME.toml; an unknown name is an error listing the machines in dir.
Result<Machine> find_machine(std::string_view name, const std::string& dir);

// What `--machine` takes: a machine file's path when `name_or_path` names one (it holds a '/'
// or ends in ".toml": `./mygpu.toml`, `machines/h200.toml`), else a name looked up in `dir` as
// find_machine does. Errors: the file's own diagnostic; an unknown name lists dir's machines and
// says that a path is accepted too.
Result<Machine> find_machine_or_file(std::string_view name_or_path, const std::string& dir);

// Every machine in dir, sorted by name; the first file that fails to load is the error.
Result<std::vector<Machine>> load_machines(const std::string& dir);

// The machines/ directory of the source tree this binary was built from (the CLI's default;
// `--dir` overrides it).
std::string default_machines_dir();

}  // namespace napkin::arch
