// SPDX-License-Identifier: Apache-2.0
// Located diagnostics (file:line:column, the offending line, a caret) and a Result type that
// carries either a value or the error a user needs to see.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace napkin {

// A position in a source text; line and column are 1-based, 0 means "no position".
struct SourceLoc {
  int line = 0;
  int column = 0;
  bool operator==(const SourceLoc&) const = default;
};

// A named text (file contents or a string given to the builder) that locations refer to.
struct SourceText {
  std::string name;  // the file path as the user gave it, or "<builder>"
  std::string text;
  // The text of 1-based line `line`, without its newline; empty if out of range.
  std::string line_text(int line) const;
};

enum class Severity { error, warning };

struct Diagnostic {
  Severity severity = Severity::error;
  std::string file;         // empty when the message is not about a file (e.g. a CLI argument)
  SourceLoc loc;
  std::string message;      // one line: what is wrong, with the expected and the found
  std::string source_line;  // the line `loc` points into, shown with a caret under it
  std::string note;         // optional second line of help

  // "file:line:col: error: message" — the one-line form used on the CLI's last line.
  // Text from the user (file, message, note) is shown as by shown_text below.
  std::string headline() const;
  // headline, then the source line with a caret, then the note (each on its own line). The
  // source line is shown as by shown_text, and one longer than kShownLineColumns is cut to a
  // window around the caret, each cut marked "...".
  std::string format() const;
};

// Text as it may be printed to a terminal: printable ASCII and well-formed UTF-8 as they are,
// every other byte (controls, escape sequences, malformed UTF-8) and every bidirectional
// override character as "\xNN" or "\u{NNNN}"; a run of more than kShownWordColumns non-blank
// columns (a 200 kB name) keeps its first and last 40 with "..." between. Tabs stay tabs.
std::string shown_text(std::string_view text);
inline constexpr int kShownLineColumns = 240;
inline constexpr int kShownWordColumns = 100;

Diagnostic make_error(const SourceText& src, SourceLoc loc, std::string message,
                      std::string note = {});
Diagnostic make_warning(const SourceText& src, SourceLoc loc, std::string message,
                        std::string note = {});
// An error about something other than a source file, e.g. "--set: expected AXIS=N".
Diagnostic plain_error(std::string message);

// Either a value or the diagnostic explaining why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Diagnostic error) : v_(std::move(error)) {}   // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const Diagnostic& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Diagnostic> v_;
};

// The whole file at `path` (bytes as they are) with its name, or "PATH: cannot open the file" /
// "PATH: cannot read the file" / "PATH: is a directory; expected a file".
Result<SourceText> read_source_file(const std::string& path);

// A check that stays on in release builds: broken invariants are bugs, not user errors.
[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);
#define NAPKIN_CHECK(cond, msg)                                              \
  do {                                                                       \
    if (!(cond)) ::napkin::check_failed(#cond, __FILE__, __LINE__, (msg));   \
  } while (0)

}  // namespace napkin
