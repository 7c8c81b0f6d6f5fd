// SPDX-License-Identifier: Apache-2.0
#include "support/diagnostic.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace napkin {

std::string SourceText::line_text(int line) const {
  if (line < 1) return {};
  std::size_t start = 0;
  for (int l = 1; l < line; ++l) {
    start = text.find('\n', start);
    if (start == std::string::npos) return {};
    ++start;
  }
  std::size_t end = text.find('\n', start);
  std::string out = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (!out.empty() && out.back() == '\r') out.pop_back();
  return out;
}

std::string Diagnostic::headline() const {
  const char* kind = severity == Severity::error ? "error" : "warning";
  if (file.empty()) return fmt::format("{}: {}", kind, message);
  if (loc.line == 0) return fmt::format("{}: {}: {}", file, kind, message);
  return fmt::format("{}:{}:{}: {}: {}", file, loc.line, loc.column, kind, message);
}

std::string Diagnostic::format() const {
  std::string out = headline();
  if (loc.line > 0 && !source_line.empty()) {
    out += "\n  " + source_line + "\n  ";
    // Tabs keep their width so the caret lines up under the column.
    for (int i = 1; i < loc.column && i - 1 < static_cast<int>(source_line.size()); ++i)
      out += source_line[i - 1] == '\t' ? '\t' : ' ';
    out += '^';
  }
  if (!note.empty()) out += "\n  " + note;
  return out;
}

static Diagnostic make(Severity s, const SourceText& src, SourceLoc loc, std::string message,
                       std::string note) {
  Diagnostic d;
  d.severity = s;
  d.file = src.name;
  d.loc = loc;
  d.message = std::move(message);
  d.source_line = src.line_text(loc.line);
  d.note = std::move(note);
  return d;
}

Diagnostic make_error(const SourceText& src, SourceLoc loc, std::string message, std::string note) {
  return make(Severity::error, src, loc, std::move(message), std::move(note));
}

Diagnostic make_warning(const SourceText& src, SourceLoc loc, std::string message,
                        std::string note) {
  return make(Severity::warning, src, loc, std::move(message), std::move(note));
}

Diagnostic plain_error(std::string message) {
  Diagnostic d;
  d.message = std::move(message);
  return d;
}

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "napkin internal error: %s:%d: check `%s` failed: %s\n", file, line, expr,
               msg.c_str());
  std::abort();
}

Result<SourceText> read_source_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return plain_error(fmt::format("{}: cannot open the file", path));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return plain_error(fmt::format("{}: cannot read the file", path));
  return SourceText{path, ss.str()};
}

}  // namespace napkin
