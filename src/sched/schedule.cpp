// SPDX-License-Identifier: Apache-2.0
// The schedule's text form: a tiny lexer, a recursive-descent parser that remembers the
// column of every token it keeps (so validation errors point at the token), the printer, and
// validation against a diagram through the streamability analysis.
#include "sched/schedule.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <set>

#include <fmt/format.h>

namespace napkin::sched {

const LevelSchedule* Schedule::find(std::string_view level) const {
  for (const LevelSchedule& l : levels)
    if (l.level == level) return &l;
  return nullptr;
}

std::string_view overlap_name(Overlap o) {
  switch (o) {
    case Overlap::sequential: return "sequential";
    case Overlap::intra_warpgroup: return "intra_warpgroup";
    case Overlap::pingpong: return "pingpong";
  }
  return "?";
}

std::optional<Overlap> parse_overlap(std::string_view name) {
  for (Overlap o : {Overlap::sequential, Overlap::intra_warpgroup, Overlap::pingpong})
    if (overlap_name(o) == name) return o;
  return std::nullopt;
}

namespace {
// The words that open a clause: reserved in names unless quoted ("keep").
bool is_clause_word(std::string_view w) {
  static const std::set<std::string, std::less<>> kWords = {"tile",   "stream",  "keep",   "groups",
                                                            "stages", "cluster", "overlap"};
  return kWords.count(w) > 0;
}
// A name as the text writes it: quoted where it is a clause word, so that it reads back.
std::string name_text(const std::string& n) { return is_clause_word(n) ? "\"" + n + "\"" : n; }
}  // namespace

std::string to_string(const Schedule& s) {
  std::string out;
  for (const LevelSchedule& l : s.levels) {
    std::vector<std::string> clauses;
    if (!l.tiles.empty()) {
      std::string c = "tile";
      for (const TiledAxis& t : l.tiles) c += fmt::format(" {}={}", name_text(t.axis), t.tile);
      clauses.push_back(std::move(c));
    }
    if (!l.streams.empty()) {
      std::string c = "stream";
      for (const StreamedAxis& t : l.streams)
        c += fmt::format(" {}={}:{}", name_text(t.axis), t.chunk, accumulators_text(t.accumulators));
      clauses.push_back(std::move(c));
    }
    if (!l.keep.empty()) {
      std::string c = "keep";
      for (const Residency& r : l.keep)
        c += " " + name_text(r.tensor) + (r.dtype ? ":" + std::string(dtype_name(*r.dtype)) : std::string{});
      clauses.push_back(std::move(c));
    }
    if (l.groups != 1) clauses.push_back(fmt::format("groups={}", l.groups));
    if (l.stages != 1) clauses.push_back(fmt::format("stages={}", l.stages));
    if (l.cluster != 1) clauses.push_back(fmt::format("cluster={}", l.cluster));
    if (l.overlap) clauses.push_back(fmt::format("overlap={}", overlap_name(*l.overlap)));
    if (!out.empty()) out += ' ';
    out += l.level + "{" + fmt::format("{}", fmt::join(clauses, "; ")) + "}";
  }
  return out;
}

namespace {

constexpr std::string_view kArg = "--schedule";

// Columns (1-based) of the tokens a level's values came from; 0 when built in C++.
struct LevelPos {
  int name = 0;
  std::vector<int> tile_axis, tile_size, stream_axis, stream_size, stream_acc, keep_tensor,
      keep_dtype;
  int groups = 0, stages = 0, cluster = 0, overlap = 0;
};

// ---------------------------------------------------------------- lexer

enum class Tok { ident, integer, lbrace, rbrace, semi, assign, colon, plus, end, error };

struct Token {
  Tok kind = Tok::end;
  std::string text;
  int column = 1;
  bool quoted = false;  // a name written "keep": never a clause word
};

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::ident: return fmt::format("'{}'", t.text);
    case Tok::integer: return fmt::format("the number {}", t.text);
    case Tok::end: return "the end of the schedule";
    case Tok::error: return fmt::format("the character '{}'", t.text);
    default: return fmt::format("'{}'", t.text);
  }
}

std::vector<Token> lex(std::string_view s) {
  std::vector<Token> out;
  std::size_t i = 0;
  while (true) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    Token t;
    t.column = static_cast<int>(i) + 1;
    if (i == s.size()) {
      out.push_back(t);
      return out;
    }
    const char c = s[i];
    auto is_ident = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
    if (c == '"') {  // a quoted name: a tensor or axis that a clause word names
      std::size_t j = i + 1;
      while (j < s.size() && is_ident(s[j])) ++j;
      const bool ok = j < s.size() && s[j] == '"' && j > i + 1 && !std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (!ok) {
        t.kind = Tok::error;
        t.text = "\"";
        ++i;
      } else {
        t.kind = Tok::ident;
        t.text = std::string(s.substr(i + 1, j - i - 1));
        t.quoted = true;
        i = j + 1;
      }
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && is_ident(s[j])) ++j;
      t.kind = Tok::ident;
      t.text = std::string(s.substr(i, j - i));
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '-' && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      std::size_t j = i + 1;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      t.kind = Tok::integer;
      t.text = std::string(s.substr(i, j - i));
      i = j;
    } else {
      static constexpr std::pair<char, Tok> kPunct[] = {{'{', Tok::lbrace}, {'}', Tok::rbrace},
                                                        {';', Tok::semi},   {'=', Tok::assign},
                                                        {':', Tok::colon},  {'+', Tok::plus}};
      t.kind = Tok::error;
      for (const auto& [ch, kind] : kPunct)
        if (c == ch) t.kind = kind;
      // One UTF-8 sequence as the offending character.
      std::size_t len = 1;
      if (t.kind == Tok::error)
        while (i + len < s.size() && (static_cast<unsigned char>(s[i + len]) & 0xC0) == 0x80) ++len;
      t.text = std::string(s.substr(i, len));
      i += len;
    }
    out.push_back(std::move(t));
  }
}

// ---------------------------------------------------------------- parser

struct Failure {
  Diagnostic diagnostic;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text), toks_(lex(text)) {}

  Schedule parse(std::vector<LevelPos>& pos) {
    Schedule s;
    while (peek().kind != Tok::end) {
      LevelPos p;
      s.levels.push_back(level(p));
      pos.push_back(std::move(p));
    }
    return s;
  }

  Diagnostic error(int column, std::string message) const {
    return make_error(SourceText{std::string(kArg), std::string(text_)}, {1, column},
                      std::move(message));
  }

 private:
  const Token& peek() const { return toks_[i_]; }
  Token next() { return toks_[i_ < toks_.size() - 1 ? i_++ : i_]; }
  [[noreturn]] void fail(const Token& at, std::string message) const {
    throw Failure{error(at.column, std::move(message))};
  }
  [[noreturn]] void expected(std::string_view what) const {
    fail(peek(), fmt::format("expected {}, found {}", what, describe(peek())));
  }
  Token expect(Tok kind, std::string_view what) {
    if (peek().kind != kind) expected(what);
    return next();
  }

  std::int64_t integer(std::string_view what) {
    const Token t = expect(Tok::integer, what);
    std::int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec != std::errc() || ptr != t.text.data() + t.text.size())
      fail(t, fmt::format("{} is too large", t.text));
    return v;
  }
  int small_integer(std::string_view what) {
    const Token t = peek();
    const std::int64_t v = integer(what);
    if (v > INT_MAX || v < INT_MIN) fail(t, fmt::format("{} is too large", t.text));
    return static_cast<int>(v);
  }

  LevelSchedule level(LevelPos& p) {
    LevelSchedule l;
    const Token name = expect(Tok::ident, "a level name such as smem or rmem");
    l.level = name.text;
    p.name = name.column;
    expect(Tok::lbrace, fmt::format("'{{' after level '{}'", l.level));
    std::set<std::string> seen;
    if (peek().kind == Tok::rbrace) {
      next();
      return l;
    }
    while (true) {
      clause(l, p, seen);
      if (peek().kind == Tok::rbrace) {
        next();
        return l;
      }
      expect(Tok::semi, fmt::format("';' or '}}' in level '{}'", l.level));
    }
  }

  void clause(LevelSchedule& l, LevelPos& p, std::set<std::string>& seen) {
    const Token kw = peek();
    if (kw.kind != Tok::ident || kw.quoted) expected("a clause: tile, stream, keep, groups=, stages=, cluster= or overlap=");
    if (!is_clause_word(kw.text))
      fail(kw, fmt::format("unknown clause {}; expected tile, stream, keep, groups=, stages=, "
                           "cluster= or overlap=", describe(kw)));
    next();
    if (!seen.insert(kw.text).second)
      fail(kw, fmt::format("'{}' appears twice in level '{}'", kw.text, l.level));
    if (kw.text == "tile") {
      expect_item_start("an axis after 'tile', such as q=128");
      while (more_items()) {
        const Token axis = next();
        expect(Tok::assign, fmt::format("'=' after axis '{}' in 'tile'", axis.text));
        const int size_col = peek().column;
        const std::int64_t size = integer(fmt::format("a tile size (an integer) after '{}='", axis.text));
        l.tiles.push_back({axis.text, size});
        p.tile_axis.push_back(axis.column);
        p.tile_size.push_back(size_col);
      }
    } else if (kw.text == "stream") {
      expect_item_start("an axis after 'stream', such as k=128:online_softmax");
      while (more_items()) {
        const Token axis = next();
        expect(Tok::assign, fmt::format("'=' after axis '{}' in 'stream'", axis.text));
        const int size_col = peek().column;
        const std::int64_t size = integer(fmt::format("a chunk size (an integer) after '{}='", axis.text));
        expect(Tok::colon, fmt::format("':' and an accumulator after '{}={}' (e.g. {}={}:add)",
                                       axis.text, size, axis.text, size));
        const int acc_col = peek().column;
        StreamedAxis s{axis.text, size, {}};
        const Token first = expect(Tok::ident, "an accumulator (add, max, logsumexp, "
                                               "normalised_contraction, online_softmax or none)");
        if (first.text != "none") {
          Token acc = first;
          while (true) {
            const auto a = parse_accumulator(acc.text);
            if (!a)
              fail(acc, fmt::format("unknown accumulator '{}'; expected add, max, logsumexp, "
                                    "normalised_contraction, online_softmax or none", acc.text));
            if (std::find(s.accumulators.begin(), s.accumulators.end(), *a) != s.accumulators.end())
              fail(acc, fmt::format("accumulator '{}' is listed twice", acc.text));
            s.accumulators.push_back(*a);
            if (peek().kind != Tok::plus) break;
            next();
            acc = expect(Tok::ident, "an accumulator after '+'");
          }
          if (!std::is_sorted(s.accumulators.begin(), s.accumulators.end()))
            fail(first, fmt::format("accumulators must be listed in catalogue order: {}",
                                    accumulators_text([&] {
                                      auto v = s.accumulators;
                                      std::sort(v.begin(), v.end());
                                      return v;
                                    }())));
        }
        l.streams.push_back(std::move(s));
        p.stream_axis.push_back(axis.column);
        p.stream_size.push_back(size_col);
        p.stream_acc.push_back(acc_col);
      }
    } else if (kw.text == "keep") {
      expect_item_start("a tensor after 'keep', such as Q or K:fp8e4m3");
      while (more_items()) {
        const Token tensor = next();
        Residency r{tensor.text, std::nullopt};
        int dtype_col = 0;
        if (peek().kind == Tok::colon) {
          next();
          const Token dt = expect(Tok::ident, fmt::format("a dtype after '{}:'", tensor.text));
          r.dtype = parse_dtype(dt.text);
          if (!r.dtype)
            fail(dt, fmt::format("unknown dtype '{}'; expected f64, f32, tf32, bf16, f16, fp8e4m3, "
                                 "fp8e5m2, i32 or bool", dt.text));
          dtype_col = dt.column;
        }
        l.keep.push_back(std::move(r));
        p.keep_tensor.push_back(tensor.column);
        p.keep_dtype.push_back(dtype_col);
      }
    } else if (kw.text == "overlap") {
      expect(Tok::assign, "'=' after 'overlap'");
      const Token v = expect(Tok::ident, "an overlap after 'overlap=' (sequential, intra_warpgroup or pingpong)");
      l.overlap = parse_overlap(v.text);
      if (!l.overlap) fail(v, fmt::format("unknown overlap '{}'; expected sequential, intra_warpgroup or pingpong", v.text));
      p.overlap = v.column;
    } else {
      expect(Tok::assign, fmt::format("'=' after '{}'", kw.text));
      const int col = peek().column;
      const int v = small_integer(fmt::format("an integer after '{}='", kw.text));
      if (kw.text == "groups") { l.groups = v; p.groups = col; }
      if (kw.text == "stages") { l.stages = v; p.stages = col; }
      if (kw.text == "cluster") { l.cluster = v; p.cluster = col; }
    }
  }

  void expect_item_start(std::string_view what) {
    if (peek().kind != Tok::ident || is_clause(peek())) expected(what);
  }
  // Clause words are reserved: "tile q=1 stages=2" is a missing ';', not an axis 'stages'.
  static bool is_clause(const Token& t) {
    return t.kind == Tok::ident && !t.quoted && is_clause_word(t.text);
  }
  bool more_items() const {
    if (peek().kind != Tok::ident) return false;
    if (is_clause(peek())) fail(peek(), fmt::format("expected ';' before the clause '{}'", peek().text));
    return true;
  }

  std::string_view text_;
  std::vector<Token> toks_;
  std::size_t i_ = 0;
};

// ---------------------------------------------------------------- validation

std::string axis_list(const ir::Diagram& d) {
  std::string out;
  for (std::size_t i = 0; i < d.axes.size(); ++i) out += (i ? " " : "") + d.axes[i].name;
  return out;
}

std::string joined(const std::vector<std::string>& parts) {
  if (parts.empty()) return "nothing";
  std::string out = parts[0];
  for (std::size_t i = 1; i < parts.size(); ++i) out += (i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return out;
}

// at(column, message) makes the diagnostic; column is 0 for schedules built in C++.
template <class At>
std::optional<Diagnostic> validate_impl(const Schedule& s, const ir::Diagram& d,
                                        const StreamingReport& report,
                                        const std::vector<LevelPos>* pos, At at) {
  auto col = [&](std::size_t level, auto member, std::size_t i) -> int {
    if (!pos) return 0;
    const auto& v = (*pos)[level].*member;
    return i < v.size() ? v[i] : 0;
  };
  auto level_col = [&](std::size_t level, int LevelPos::*member) {
    return pos ? (*pos)[level].*member : 0;
  };
  std::set<std::string> level_names;
  for (std::size_t li = 0; li < s.levels.size(); ++li) {
    const LevelSchedule& l = s.levels[li];
    const std::string& L = l.level;
    if (L == "gmem")
      return at(level_col(li, &LevelPos::name),
                "level 'gmem' is the top of the hierarchy; a schedule lists the levels below it");
    if (!level_names.insert(L).second)
      return at(level_col(li, &LevelPos::name), fmt::format("level '{}' appears twice", L));
    std::set<std::string> partitioned;
    // Checks one tiled or streamed axis; returns its AxisStreaming or an error.
    auto check_axis = [&](const std::string& axis, std::int64_t size, std::string_view what,
                          int axis_col, int size_col) -> std::optional<Diagnostic> {
      const auto a = d.find_axis(axis);
      if (!a)
        return at(axis_col, fmt::format("unknown axis '{}' in '{}' of level '{}' (the diagram's "
                                        "axes are {})", axis, what, L, axis_list(d)));
      if (!partitioned.insert(axis).second)
        return at(axis_col, fmt::format("axis '{}' is partitioned twice in level '{}'", axis, L));
      if (size <= 0)
        return at(size_col, fmt::format("{} size of '{}' must be positive, found {}",
                                        what == "tile" ? "tile" : "chunk", axis, size));
      // A lower level works inside one group (or chunk) of the levels above it.
      for (std::size_t up = li; up-- > 0;) {
        const LevelSchedule& o = s.levels[up];
        std::optional<std::int64_t> outer;
        std::string outer_what;
        for (const TiledAxis& t : o.tiles)
          if (t.axis == axis) { outer = t.tile; outer_what = "tile"; }
        for (const StreamedAxis& t : o.streams)
          if (t.axis == axis) { outer = t.chunk; outer_what = "chunk"; }
        if (!outer) continue;
        if (size > *outer)
          return at(size_col, fmt::format("{} {}={} in level '{}' is larger than the {} {}={} of "
                                          "level '{}' that encloses it",
                                          what == "tile" ? "tile" : "chunk", axis, size, L,
                                          outer_what, axis, *outer, o.level));
        break;
      }
      return std::nullopt;
    };
    for (std::size_t i = 0; i < l.tiles.size(); ++i) {
      const TiledAxis& t = l.tiles[i];
      if (auto e = check_axis(t.axis, t.tile, "tile", col(li, &LevelPos::tile_axis, i),
                              col(li, &LevelPos::tile_size, i)))
        return e;
      const AxisStreaming& as = report.of(*d.find_axis(t.axis));
      if (as.kind == AxisKind::streamed)
        return at(col(li, &LevelPos::tile_axis, i),
                  fmt::format("cannot tile '{}' in level '{}': it is not woven ({} reduce{} over "
                              "it); stream it instead, with {}", t.axis, L, joined(as.fold_labels),
                              as.fold_labels.size() == 1 ? "s" : "",
                              accumulators_text(as.accumulators)));
      if (as.kind == AxisKind::none)
        return at(col(li, &LevelPos::tile_axis, i),
                  fmt::format("cannot tile '{}' in level '{}': it is not woven ({} reduce{} over "
                              "it), and it cannot be streamed either: {}", t.axis, L,
                              joined(as.fold_labels), as.fold_labels.size() == 1 ? "s" : "",
                              as.reason));
    }
    for (std::size_t i = 0; i < l.streams.size(); ++i) {
      const StreamedAxis& t = l.streams[i];
      if (auto e = check_axis(t.axis, t.chunk, "stream", col(li, &LevelPos::stream_axis, i),
                              col(li, &LevelPos::stream_size, i)))
        return e;
      const AxisStreaming& as = report.of(*d.find_axis(t.axis));
      const int acc_col = col(li, &LevelPos::stream_acc, i);
      if (as.kind == AxisKind::none)
        return at(col(li, &LevelPos::stream_axis, i),
                  fmt::format("cannot stream '{}' in level '{}': {}", t.axis, L, as.reason));
      if (as.kind == AxisKind::woven && !t.accumulators.empty())
        return at(acc_col, fmt::format("'{}' is woven: its chunks are independent and need no "
                                       "accumulator (write {}={}:none)", t.axis, t.axis, t.chunk));
      if (as.kind == AxisKind::streamed && t.accumulators != as.accumulators)
        return at(acc_col, fmt::format("'{}' streams with {}, not {}", t.axis,
                                       accumulators_text(as.accumulators),
                                       accumulators_text(t.accumulators)));
    }
    std::set<std::string> kept;
    for (std::size_t i = 0; i < l.keep.size(); ++i) {
      const Residency& r = l.keep[i];
      const int tcol = col(li, &LevelPos::keep_tensor, i);
      const auto n = d.find_node(r.tensor);
      if (!n || d.node(*n).op == ir::OpKind::constant) {
        std::vector<std::string> names;
        for (const ir::Node& x : d.nodes)
          if (!x.name.empty() && x.op != ir::OpKind::constant) names.push_back(x.name);
        return at(tcol, fmt::format("unknown tensor '{}' in 'keep' of level '{}' (the diagram's "
                                    "tensors are {})", r.tensor, L, fmt::join(names, " ")));
      }
      if (!kept.insert(r.tensor).second)
        return at(tcol, fmt::format("tensor '{}' is kept twice in level '{}'", r.tensor, L));
      const DType own = d.node(*n).dtype;
      if (r.dtype && (is_float(own) ? !is_float(*r.dtype) : *r.dtype != own))
        return at(col(li, &LevelPos::keep_dtype, i),
                  fmt::format("tensor '{}' is {}; it can be kept as {}, not {}", r.tensor,
                              dtype_name(own),
                              is_float(own) ? "a floating-point dtype" : std::string(dtype_name(own)),
                              dtype_name(*r.dtype)));
    }
    const std::pair<int, int LevelPos::*> counts[] = {
        {l.groups, &LevelPos::groups}, {l.stages, &LevelPos::stages}, {l.cluster, &LevelPos::cluster}};
    const char* count_names[] = {"groups", "stages", "cluster"};
    for (int k = 0; k < 3; ++k)
      if (counts[k].first <= 0)
        return at(level_col(li, counts[k].second),
                  fmt::format("{} in level '{}' must be positive, found {}", count_names[k], L,
                              counts[k].first));
    if (l.overlap == Overlap::pingpong && l.groups < 2)
      return at(level_col(li, &LevelPos::overlap),
                fmt::format("overlap=pingpong in level '{}' needs groups=2 or more (two groups take turns), found "
                            "groups={}",
                            L, l.groups));
  }
  return std::nullopt;
}

}  // namespace

Result<Schedule> parse_schedule_text(std::string_view text) {
  Parser p(text);
  std::vector<LevelPos> pos;
  try {
    return p.parse(pos);
  } catch (const Failure& f) {
    return f.diagnostic;
  }
}

Result<Schedule> parse_schedule(std::string_view text, const ir::Diagram& d) {
  Parser p(text);
  std::vector<LevelPos> pos;
  Schedule s;
  try {
    s = p.parse(pos);
  } catch (const Failure& f) {
    return f.diagnostic;
  }
  const StreamingReport report = analyse_streaming(d);
  auto e = validate_impl(s, d, report, &pos,
                         [&](int column, std::string message) { return p.error(column, std::move(message)); });
  if (e) return *e;
  return s;
}

std::optional<Diagnostic> validate_schedule(const Schedule& s, const ir::Diagram& d,
                                            const StreamingReport& report) {
  return validate_impl(s, d, report, nullptr, [](int, std::string message) {
    Diagnostic diag = plain_error(std::move(message));
    diag.file = "schedule";
    return diag;
  });
}

std::optional<Diagnostic> validate_schedule(const Schedule& s, const ir::Diagram& d) {
  return validate_schedule(s, d, analyse_streaming(d));
}

}  // namespace napkin::sched
