// SPDX-License-Identifier: Apache-2.0
// The .napkin language front end: text -> verified Diagram. The grammar is in
// docs/language.md. Every error names file:line:column, shows the line with a caret, and says
// what was expected and what was found.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/ir.h"

namespace napkin::ir {

// A size or value bound from the command line: `--set q=8192` overrides axis q's size, or a
// `param`'s value.
struct Binding {
  std::string name;
  double value = 0.0;
  std::string text;  // as the user wrote it, for error messages
};
// Parses "NAME=VALUE" where NAME is a name of the language and VALUE a decimal number
// (parse_decimal); the error names the argument and says what was expected.
Result<Binding> parse_binding(std::string_view text);

// A finite decimal number as the language writes one, with an optional sign: 8192, -0.5, 1e-6,
// .25. Not hex, inf, nan, blanks, or a value a double cannot hold (1e400). Empty otherwise.
std::optional<double> parse_decimal(std::string_view text);

struct ParsedDiagram {
  Diagram diagram;
  std::vector<Diagnostic> warnings;
};

// Parses and verifies `source`. Every binding must name an axis or a param of the file.
Result<ParsedDiagram> parse_diagram(const SourceText& source,
                                    const std::vector<Binding>& bindings = {});
// Reads `path` (error if unreadable) and parses it.
Result<ParsedDiagram> load_diagram(const std::string& path,
                                   const std::vector<Binding>& bindings = {});

}  // namespace napkin::ir
