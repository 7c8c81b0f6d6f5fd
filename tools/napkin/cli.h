// SPDX-License-Identifier: Apache-2.0
// The napkin command line as a function, and what it needs beyond CLI11: checks of option
// values that name the option and the value, and usage errors that say what was expected and
// suggest the nearest command or option.
//
// Exit codes, one convention for every command (README "Using napkin"):
//   0  success;
//   1  an input error: the command line is understood, but what it names is wrong (a diagram,
//      machine, schedule, .npy or trace that does not parse or verify, a name the diagram
//      lacks, a file that cannot be read or written, work past --max-work);
//   2  a usage error: the command line itself is wrong (no or an unknown command, an unknown
//      option, a missing argument, a value not of its option's form or range, an option or a
//      name given twice). Found before any file is read; never printed as JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "driver/driver.h"

namespace napkin::cli {

inline constexpr int kInputError = 1;  // driver::failure's exit code
inline constexpr int kUsageError = 2;

// Runs napkin on `args` (argv without the program name): parses them, runs the subcommand and
// returns what it printed and its exit code; nothing is printed. Defined in main.cpp, beside
// the subcommands it declares.
driver::CommandOutput execute(const std::vector<std::string>& args);

// Checks of one option value; each failure reads "OPTION VALUE: expected ..., e.g. ...".
CLI::Validator positive_integer(std::string option, std::string example);  // --top 5
CLI::Validator non_negative_integer(std::string option,                     // --seed 0 (to 2^64 - 1)
                                    std::uint64_t max = UINT64_MAX);
CLI::Validator non_negative_number(std::string option, std::string example);  // --overhead 0.5
CLI::Validator positive_number(std::string option, std::string example);    // --max-work 1e9
CLI::Validator non_empty(std::string option, std::string what);             // --schedule TEXT
CLI::Validator output_path(std::string option, std::string what);          // -o DIR (not "-x")
CLI::Validator binding(std::string option);                                // --set NAME=VALUE
CLI::Validator named_path(std::string option, std::string example);         // --input NAME=PATH
CLI::Validator one_of(std::string option, std::vector<std::string> values);  // --row-layout quad
CLI::Validator float_dtype(std::string option);                             // --accumulator f32

// Throws CLI::ValidationError when a name is given twice in `values`: the NAME of NAME=VALUE
// entries, or the whole entry of a list (--machines a,a).
void once_each(const std::string& option, const std::vector<std::string>& values);

// once_each for every option of the parsed command that names things: --set, --input,
// --check-set (NAME=VALUE each), --machines and --dtypes (lists).
void check_repeats(const CLI::App& app);

// The candidate nearest to `word` (edit distance with transpositions, or a unique prefix), or
// empty when none is near enough to be what was meant.
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

// Before CLI11 sees `args`: no command, an unknown command (with the nearest one), an option
// before the command. `help` and `help COMMAND` print the help text.
std::optional<driver::CommandOutput> check_command(const CLI::App& app, const std::vector<std::string>& args);

// What a CLI11 parse failure prints: the help text for --help (exit 0), or one usage error
// naming the command, the option and what was expected (exit 2).
driver::CommandOutput parse_failure(const CLI::App& app, const CLI::ParseError& e);

}  // namespace napkin::cli
