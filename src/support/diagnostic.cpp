// SPDX-License-Identifier: Apache-2.0
#include "support/diagnostic.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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

namespace {

// One shown character of a text: its bytes [begin, end) printed as `text`, `columns` wide.
struct Glyph {
  std::size_t begin = 0, end = 0;
  std::string text;
  int columns = 1;
};

// The code point of the well-formed UTF-8 sequence at s[i] and its length, or length 0.
std::pair<char32_t, std::size_t> decode_utf8(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  const std::size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
  if (n == 0 || c > 0xF4 || i + n > s.size()) return {0, 0};
  char32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return {0, 0};
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  const char32_t least = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;  // overlong forms are malformed
  if (cp < least || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0, 0};
  return {cp, n};
}

// Characters that reorder what a terminal shows (the "Trojan Source" controls) or are C1
// controls: shown as \u{NNNN} so the line reads as the parser reads it.
bool hidden(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

std::vector<Glyph> glyphs(std::string_view s) {
  std::vector<Glyph> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    Glyph g;
    g.begin = i;
    if (c == '\t' || (c >= 0x20 && c < 0x7F)) {
      g.text = std::string(1, s[i]);
      g.end = i + 1;
    } else if (const auto [cp, n] = c >= 0x80 ? decode_utf8(s, i) : std::pair<char32_t, std::size_t>{0, 0}; n) {
      g.text = hidden(cp) ? fmt::format("\\u{{{:04X}}}", static_cast<std::uint32_t>(cp)) : std::string(s.substr(i, n));
      g.end = i + n;
    } else {
      g.text = fmt::format("\\x{:02X}", c);
      g.end = i + 1;
    }
    // Shown as it is: one column (wide CJK is not measured); escaped: its escape's width.
    g.columns = g.text.size() == g.end - g.begin ? 1 : static_cast<int>(g.text.size());
    out.push_back(std::move(g));
    i = out.back().end;
  }
  return out;
}

bool blank(const Glyph& g) { return g.text == " " || g.text == "\t"; }

// The source line cut to kShownLineColumns around the glyph `caret`, and the caret's padding.
std::pair<std::string, std::string> shown_line(const std::vector<Glyph>& gs, std::size_t caret) {
  int total = 0;
  for (const Glyph& g : gs) total += g.columns;
  std::size_t first = 0, last = gs.size();
  if (total > kShownLineColumns) {
    // About a third of the width before the caret, the rest after it (more before at the end).
    int used = 0;
    first = last = std::min(caret, gs.size());
    while (first > 0 && used + gs[first - 1].columns <= kShownLineColumns / 3) used += gs[--first].columns;
    while (last < gs.size() && used + gs[last].columns <= kShownLineColumns) used += gs[last++].columns;
    while (first > 0 && used + gs[first - 1].columns <= kShownLineColumns) used += gs[--first].columns;
  }
  std::string line = first > 0 ? "..." : "", pad = first > 0 ? "   " : "";
  for (std::size_t i = first; i < last; ++i) line += gs[i].text;
  if (last < gs.size()) line += "...";
  // Tabs keep their width so the caret lines up under the column.
  for (std::size_t i = first; i < caret && i < last; ++i)
    pad += gs[i].text == "\t" ? std::string("\t") : std::string(static_cast<std::size_t>(gs[i].columns), ' ');
  return {line, pad};
}

}  // namespace

std::string shown_text(std::string_view text) {
  const std::vector<Glyph> gs = glyphs(text);
  std::string out;
  for (std::size_t i = 0; i < gs.size();) {
    if (blank(gs[i])) {
      out += gs[i++].text;
      continue;
    }
    std::size_t end = i;
    int columns = 0;
    while (end < gs.size() && !blank(gs[end])) columns += gs[end++].columns;
    if (columns <= kShownWordColumns) {
      for (; i < end; ++i) out += gs[i].text;
      continue;
    }
    // A word too long to read: its first and last 40 columns.
    int kept = 0;
    for (; kept < 40; ++i) kept += gs[i].columns, out += gs[i].text;
    out += "...";
    std::size_t tail = end;
    for (kept = 0; kept < 40; ) kept += gs[--tail].columns;
    for (i = tail; i < end; ++i) out += gs[i].text;
  }
  return out;
}

std::string Diagnostic::headline() const {
  const char* kind = severity == Severity::error ? "error" : "warning";
  if (file.empty()) return fmt::format("{}: {}", kind, shown_text(message));
  if (loc.line == 0) return fmt::format("{}: {}: {}", shown_text(file), kind, shown_text(message));
  return fmt::format("{}:{}:{}: {}: {}", shown_text(file), loc.line, loc.column, kind, shown_text(message));
}

std::string Diagnostic::format() const {
  std::string out = headline();
  if (loc.line > 0 && !source_line.empty()) {
    const std::vector<Glyph> gs = glyphs(source_line);
    // The glyph holding byte column loc.column (1-based); past the end: the line's end.
    std::size_t caret = 0;
    while (caret < gs.size() && gs[caret].end < static_cast<std::size_t>(std::max(loc.column, 1))) ++caret;
    const auto [line, pad] = shown_line(gs, caret);
    out += "\n  " + line + "\n  " + pad + "^";
  }
  if (!note.empty()) out += "\n  " + shown_text(note);
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
  std::error_code ec;
  // A directory opens as an empty stream on Linux; say what it is instead.
  if (std::filesystem::is_directory(path, ec))
    return plain_error(fmt::format("{}: is a directory; expected a file", path));
  std::ifstream f(path, std::ios::binary);
  if (!f) return plain_error(fmt::format("{}: cannot open the file", path));
  // Read in blocks up to a bound: a device or a pipe (/dev/zero) never ends.
  constexpr std::size_t kMaxSourceBytes = std::size_t{64} << 20;
  std::string text;
  char block[1 << 16];
  while (f.read(block, sizeof block) || f.gcount() > 0) {
    text.append(block, static_cast<std::size_t>(f.gcount()));
    if (text.size() > kMaxSourceBytes)
      return plain_error(fmt::format("{}: more than {} MiB; expected a diagram or machine file", path, kMaxSourceBytes >> 20));
  }
  if (f.bad()) return plain_error(fmt::format("{}: cannot read the file", path));
  return SourceText{path, std::move(text)};
}

}  // namespace napkin
