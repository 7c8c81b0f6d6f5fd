// SPDX-License-Identifier: Apache-2.0
// Lexer, recursive-descent parser to a small AST, and elaboration of the AST into the IR
// through the Builder. Definitions may appear in any order (a diagram is a graph, not a
// program), so elaboration resolves names on demand and reports cycles.
#include "ir/parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "ir/builder.h"

namespace napkin::ir {

namespace {

// ---------------------------------------------------------------- lexer

enum class Tok {
  ident, number, lparen, rparen, lbracket, rbracket, comma, assign, plus, minus, star, slash,
  lt, le, gt, ge, eq, ne, and_, or_, not_, bar, newline, end, error
};

std::string_view tok_text(Tok t) {
  switch (t) {
    case Tok::ident: return "a name";
    case Tok::number: return "a number";
    case Tok::lparen: return "'('";
    case Tok::rparen: return "')'";
    case Tok::lbracket: return "'['";
    case Tok::rbracket: return "']'";
    case Tok::comma: return "','";
    case Tok::assign: return "'='";
    case Tok::plus: return "'+'";
    case Tok::minus: return "'-'";
    case Tok::star: return "'*'";
    case Tok::slash: return "'/'";
    case Tok::lt: return "'<'";
    case Tok::le: return "'<='";
    case Tok::gt: return "'>'";
    case Tok::ge: return "'>='";
    case Tok::eq: return "'=='";
    case Tok::ne: return "'!='";
    case Tok::and_: return "'&&'";
    case Tok::or_: return "'||'";
    case Tok::not_: return "'!'";
    case Tok::bar: return "'|'";
    case Tok::newline: return "the end of the line";
    case Tok::end: return "the end of the file";
    case Tok::error: return "an invalid character";
  }
  return "?";
}

struct Token {
  Tok kind = Tok::end;
  std::string text;
  double number = 0.0;
  SourceLoc loc;
};

std::string describe(const Token& t) {
  if (t.kind == Tok::ident) return fmt::format("'{}'", t.text);
  if (t.kind == Tok::number) return fmt::format("the number {}", t.text);
  if (t.kind == Tok::error) return fmt::format("the character '{}'", t.text);
  return std::string(tok_text(t.kind));
}

class Lexer {
 public:
  // A UTF-8 byte-order mark that some editors write first is no part of the diagram.
  explicit Lexer(const std::string& text) : s_(text) {
    if (s_.rfind("\xEF\xBB\xBF", 0) == 0) pos_ = 3;
  }

  // Newlines inside () or [] are not statement ends, so long expressions can wrap.
  Token next() {
    for (;;) {
      skip_blanks();
      if (pos_ >= s_.size()) return make(Tok::end, "", loc());
      const char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') advance();
        continue;
      }
      if (c == '\n') {
        const SourceLoc at = loc();
        advance();
        if (depth_ > 0) continue;
        return make(Tok::newline, "\\n", at);
      }
      return lex_token();
    }
  }

 private:
  Token make(Tok k, std::string text, SourceLoc at) {
    Token t;
    t.kind = k;
    t.text = std::move(text);
    t.loc = at;
    return t;
  }
  SourceLoc loc() const { return {line_, col_}; }
  void advance() {
    if (s_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  void skip_blanks() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      advance();
  }
  bool peek_is(char c, std::size_t ahead = 1) const {
    return pos_ + ahead < s_.size() && s_[pos_ + ahead] == c;
  }

  Token lex_token() {
    const SourceLoc at = loc();
    const char c = s_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t start = pos_;
      while (pos_ < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
        advance();
      return make(Tok::ident, s_.substr(start, pos_ - start), at);
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && pos_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))))
      return lex_number(at);
    auto two = [&](char second, Tok if_two, Tok if_one) {
      if (peek_is(second)) {
        std::string text = s_.substr(pos_, 2);
        advance();
        advance();
        return make(if_two, text, at);
      }
      std::string text(1, s_[pos_]);
      advance();
      return make(if_one, text, at);
    };
    switch (c) {
      case '(': ++depth_; advance(); return make(Tok::lparen, "(", at);
      case ')': if (depth_ > 0) --depth_; advance(); return make(Tok::rparen, ")", at);
      case '[': ++depth_; advance(); return make(Tok::lbracket, "[", at);
      case ']': if (depth_ > 0) --depth_; advance(); return make(Tok::rbracket, "]", at);
      case ',': advance(); return make(Tok::comma, ",", at);
      case '+': advance(); return make(Tok::plus, "+", at);
      case '-': advance(); return make(Tok::minus, "-", at);
      case '*': advance(); return make(Tok::star, "*", at);
      case '/': advance(); return make(Tok::slash, "/", at);
      case '=': return two('=', Tok::eq, Tok::assign);
      case '<': return two('=', Tok::le, Tok::lt);
      case '>': return two('=', Tok::ge, Tok::gt);
      case '!': return two('=', Tok::ne, Tok::not_);
      case '|': return two('|', Tok::or_, Tok::bar);
      case '&':
        if (peek_is('&')) return two('&', Tok::and_, Tok::error);
        break;
      default: break;
    }
    // One UTF-8 sequence (or, where the bytes are not one, a single byte) as the offending
    // character.
    std::size_t len = 1;
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0xC2 && u <= 0xF4) len = u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : 2;
    for (std::size_t i = 1; i < len; ++i)
      if (pos_ + i >= s_.size() || (static_cast<unsigned char>(s_[pos_ + i]) & 0xC0) != 0x80) len = 1;
    std::string text = s_.substr(pos_, len);
    for (std::size_t i = 0; i < len && pos_ < s_.size(); ++i) advance();
    return make(Tok::error, text, at);
  }

  Token lex_number(SourceLoc at) {
    const std::size_t start = pos_;
    auto digits = [&] {
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) advance();
    };
    digits();
    if (pos_ < s_.size() && s_[pos_] == '.') {
      advance();
      digits();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      const std::size_t save_pos = pos_;
      const int save_col = col_;
      advance();
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) advance();
      if (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        digits();
      } else {
        pos_ = save_pos;  // "2e" is the number 2 followed by the name e
        col_ = save_col;
      }
    }
    Token t = make(Tok::number, s_.substr(start, pos_ - start), at);
    t.number = std::strtod(t.text.c_str(), nullptr);
    return t;
  }

  const std::string& s_;
  std::size_t pos_ = 0;
  int line_ = 1, col_ = 1, depth_ = 0;
};

// ---------------------------------------------------------------- AST

struct Name {
  std::string text;
  SourceLoc loc;
};

struct Expr {
  enum class Kind { number, ref, call, unary, binary, cast, abs } kind = Kind::number;
  SourceLoc loc;
  double number = 0.0;
  std::string name;  // ref: value/axis name; call: function; unary/binary: operator token text
  Tok op = Tok::end;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<Name> over;                       // call: axes after `over`
  bool has_over = false;
  std::vector<std::pair<Name, double>> kwargs;  // call: eps=1e-6
  std::optional<std::vector<Name>> annotation;  // ref: slope[h]
  DType cast_to = DType::f64;                   // cast
  SourceLoc dtype_loc;
  int depth = 1;                                // height of this subtree
};
using ExprPtr = std::unique_ptr<Expr>;

struct Definition {
  Name name;
  std::optional<std::vector<Name>> annotation;
  ExprPtr value;
};

struct InputDecl {
  Name name;
  std::vector<Name> axes;
  DType dtype;
};

struct OutputDecl {
  Name name;
  std::optional<std::vector<Name>> axes;
};

struct ParamDecl {
  Name name;
  double value;
};

struct AxisDecl {
  Name name;
  std::int64_t size;
  SourceLoc size_loc;
};

struct Program {
  std::vector<AxisDecl> axes;
  std::vector<ParamDecl> params;
  std::vector<InputDecl> inputs;
  std::vector<Definition> definitions;
  std::vector<OutputDecl> outputs;
};

// The parser reports its first error by throwing this (internal only; parse_diagram catches).
struct ParseError {
  Diagnostic diagnostic;
};

// ---------------------------------------------------------------- parser

class Parser {
 public:
  explicit Parser(const SourceText& src) : src_(src), lex_(src.text) { next(); }

  Program parse_program() {
    Program p;
    for (;;) {
      while (tok_.kind == Tok::newline) next();
      if (tok_.kind == Tok::end) break;
      parse_statement(p);
    }
    return p;
  }

 private:
  [[noreturn]] void fail(SourceLoc at, std::string message, std::string note = {}) {
    // An error past the line of a '(' still open: most likely that '(' lacks its ')' (the
    // newlines inside it did not end the statement). Where a statement's keyword begins the
    // line, it is certainly so: that is the error.
    if (note.empty() && !open_parens_.empty() && at.line > open_parens_.back().loc.line) {
      const std::string line = at.column == 1 ? src_.line_text(at.line) : "";
      std::string keyword;
      for (const char* k : {"out", "in", "axes", "param"})
        if (line.rfind(std::string(k) + " ", 0) == 0) keyword = k;
      if (!keyword.empty()) {
        note = fmt::format("'{}' begins a statement here, still inside it ({})", keyword, message);
        message = not_closed();
        throw ParseError{make_error(src_, at, std::move(message), std::move(note))};
      }
      note = not_closed();
    }
    throw ParseError{make_error(src_, at, std::move(message), std::move(note))};
  }
  // "the '(' at line L, column C is not closed", of the innermost open bracket.
  std::string not_closed() const {
    const Open& o = open_parens_.back();
    return fmt::format("the '{}' at line {}, column {} is not closed", o.ch, o.loc.line, o.loc.column);
  }
  [[noreturn]] void expected(std::string_view what) {
    std::string note;
    if (!open_parens_.empty() && what.find(open_parens_.back().ch == '(' ? "')'" : "']'") != std::string_view::npos)
      note = not_closed();
    if (tok_.kind == Tok::error)
      fail(tok_.loc, fmt::format("unexpected character {}; expected {}", character_name(tok_.text), what), note);
    fail(tok_.loc, fmt::format("expected {}, found {}", what, describe(tok_)), note);
  }
  // A character as an error names it: itself where it prints, its code point as well where it
  // may not show (a no-break space, a zero-width space, a control character).
  static std::string character_name(const std::string& c) {
    const auto b = [&](std::size_t i) { return static_cast<unsigned char>(c[i]); };
    if (c.size() == 1 && b(0) >= 0x21 && b(0) < 0x7F) return "'" + c + "'";
    unsigned code = b(0);
    if (c.size() == 2) code = (b(0) & 0x1Fu) << 6 | (b(1) & 0x3Fu);
    if (c.size() == 3) code = (b(0) & 0x0Fu) << 12 | (b(1) & 0x3Fu) << 6 | (b(2) & 0x3Fu);
    if (c.size() == 4) code = (b(0) & 0x07u) << 18 | (b(1) & 0x3Fu) << 12 | (b(2) & 0x3Fu) << 6 | (b(3) & 0x3Fu);
    if (c.size() == 1 && b(0) >= 0x80) return fmt::format("byte 0x{:02X} (not UTF-8)", b(0));
    return fmt::format("U+{:04X}", code) + (code >= 0xA0 ? " ('" + c + "')" : "");
  }
  void next() {
    tok_ = lex_.next();
    if (tok_.kind == Tok::number) check_range(tok_);
  }
  // A literal a double cannot hold is an error where it is written, not a silent inf or 0.
  void check_range(const Token& t) {
    if (!std::isfinite(t.number))
      fail(t.loc, fmt::format("the number {} is too large for a double (the largest is about 1.8e308)", t.text));
    const std::string mantissa = t.text.substr(0, t.text.find_first_of("eE"));
    if (t.number == 0 && mantissa.find_first_of("123456789") != std::string::npos)
      fail(t.loc, fmt::format("the number {} is too small for a double: it would be 0 (the smallest is about 4.9e-324)",
                              t.text));
  }
  bool is_word(std::string_view w) const { return tok_.kind == Tok::ident && tok_.text == w; }
  Token expect(Tok k, std::string_view what) {
    if (tok_.kind != k) expected(what);
    Token t = tok_;
    next();
    return t;
  }
  Name expect_name(std::string_view what) {
    Token t = expect(Tok::ident, what);
    if (is_keyword(t.text))
      fail(t.loc, fmt::format("'{}' is a keyword and cannot be used as a name", t.text));
    return {t.text, t.loc};
  }
  static bool is_keyword(std::string_view w) {
    return w == "axes" || w == "param" || w == "in" || w == "out" || w == "over" || w == "as" ||
           w == "inf";
  }
  void end_statement() {
    if (tok_.kind != Tok::newline && tok_.kind != Tok::end) expected("the end of the line");
  }

  void parse_statement(Program& p) {
    if (is_word("axes")) {
      next();
      if (tok_.kind != Tok::ident) expected("an axis declaration such as q=1024");
      while (tok_.kind == Tok::ident) {
        Name n = expect_name("an axis name");
        expect(Tok::assign, fmt::format("'=' and a size after axis '{}'", n.text));
        if (tok_.kind == Tok::minus) {
          const SourceLoc at = tok_.loc;
          next();
          fail(at, fmt::format("axis '{}' must have a positive size, found -{}", n.text,
                               tok_.kind == Tok::number ? tok_.text : std::string("...")));
        }
        Token size = expect(Tok::number, fmt::format("a positive integer size for axis '{}'", n.text));
        p.axes.push_back({n, to_size(size, n.text), size.loc});
      }
      end_statement();
      return;
    }
    if (is_word("param")) {
      next();
      Name n = expect_name("a parameter name");
      expect(Tok::assign, fmt::format("'=' and a value after param '{}'", n.text));
      ExprPtr e = parse_unary();
      const auto v = literal_value(*e);
      if (!v) fail(e->loc, fmt::format("param '{}' must be a number", n.text));
      p.params.push_back({n, *v});
      end_statement();
      return;
    }
    if (is_word("in")) {
      next();
      InputDecl in;
      in.name = expect_name("an input name");
      const SourceLoc open = tok_.loc;
      expect(Tok::lbracket, fmt::format("'[' and the axes of input '{}'", in.name.text));
      in.axes = parse_axis_list(open);
      in.dtype = parse_dtype_token(fmt::format("the dtype of input '{}'", in.name.text));
      p.inputs.push_back(std::move(in));
      end_statement();
      return;
    }
    if (is_word("out")) {
      next();
      OutputDecl out;
      out.name = expect_name("the name of a value to output");
      if (tok_.kind == Tok::lbracket) {
        const SourceLoc open = tok_.loc;
        next();
        out.axes = parse_axis_list(open);
      }
      p.outputs.push_back(std::move(out));
      end_statement();
      return;
    }
    if (tok_.kind != Tok::ident) expected("a statement (axes, param, in, out, or NAME = ...)");
    Definition def;
    def.name = expect_name("a name");
    if (tok_.kind == Tok::lbracket) {
      const SourceLoc open = tok_.loc;
      next();
      def.annotation = parse_axis_list(open);
    }
    expect(Tok::assign, fmt::format("'=' after '{}'", def.name.text));
    def.value = parse_expr();
    p.definitions.push_back(std::move(def));
    end_statement();
  }

  std::int64_t to_size(const Token& t, const std::string& axis) {
    std::int64_t v = 0;
    const auto* first = t.text.data();
    const auto* last = t.text.data() + t.text.size();
    auto [ptr, ec] = std::from_chars(first, last, v);
    if (ec == std::errc::result_out_of_range)
      fail(t.loc, fmt::format("axis '{}' size {} does not fit in 64 bits", axis, t.text));
    if (ec != std::errc() || ptr != last)
      fail(t.loc, fmt::format("axis '{}' must have a positive integer size, found {}", axis, t.text));
    if (v <= 0) fail(t.loc, fmt::format("axis '{}' must have a positive size, found {}", axis, t.text));
    return v;
  }

  // After '[': names up to ']'.
  // After the '[' at `open`: axis names, then ']'.
  std::vector<Name> parse_axis_list(SourceLoc open) {
    open_parens_.push_back({open, '['});
    std::vector<Name> out;
    while (tok_.kind == Tok::ident) {
      out.push_back(expect_name("an axis name"));
      if (tok_.kind == Tok::comma) next();
    }
    expect(Tok::rbracket, "an axis name or ']'");
    open_parens_.pop_back();
    return out;
  }

  DType parse_dtype_token(const std::string& what) {
    if (tok_.kind != Tok::ident) expected(what + " (f64, f32, tf32, bf16, f16, fp8e4m3, fp8e5m2, i32, bool)");
    auto t = parse_dtype(tok_.text);
    if (!t)
      fail(tok_.loc, fmt::format("unknown dtype '{}'; expected one of f64, f32, tf32, bf16, f16, "
                                 "fp8e4m3, fp8e5m2, i32, bool", tok_.text));
    next();
    return *t;
  }

  static std::optional<double> literal_value(const Expr& e) {
    if (e.kind == Expr::Kind::number) return e.number;
    return std::nullopt;
  }

  // expr := or_expr ['as' dtype]
  ExprPtr parse_expr() {
    ExprPtr e = parse_binary(0);
    while (is_word("as")) {
      auto c = std::make_unique<Expr>();
      c->kind = Expr::Kind::cast;
      c->loc = tok_.loc;
      next();
      c->dtype_loc = tok_.loc;
      c->cast_to = parse_dtype_token("a dtype after 'as'");
      c->args.push_back(std::move(e));
      set_depth(*c);
      e = std::move(c);
    }
    return e;
  }

  static int precedence(Tok t) {
    switch (t) {
      case Tok::or_: return 1;
      case Tok::and_: return 2;
      case Tok::lt: case Tok::le: case Tok::gt: case Tok::ge: case Tok::eq: case Tok::ne: return 3;
      case Tok::plus: case Tok::minus: return 4;
      case Tok::star: case Tok::slash: return 5;
      default: return -1;
    }
  }

  // Precedence climbing; comparisons do not chain (a < b < c is an error).
  ExprPtr parse_binary(int min_prec) {
    ExprPtr lhs = parse_unary();
    for (;;) {
      const int prec = precedence(tok_.kind);
      if (prec < 0 || prec < min_prec) return lhs;
      Token op = tok_;
      next();
      ExprPtr rhs = parse_binary(prec + 1);
      if (prec == 3 && precedence(tok_.kind) == 3)
        fail(tok_.loc, "comparisons do not chain; combine them with '&&'");
      auto b = std::make_unique<Expr>();
      b->kind = Expr::Kind::binary;
      b->op = op.kind;
      b->name = op.text;
      b->loc = op.loc;
      b->args.push_back(std::move(lhs));
      b->args.push_back(std::move(rhs));
      set_depth(*b);
      lhs = std::move(b);
    }
  }

  // Guards the recursion of parse_unary/parse_primary against absurdly nested input.
  struct NestingGuard {
    Parser& p;
    explicit NestingGuard(Parser& parser) : p(parser) {
      if (++p.nesting_ > kMaxNesting)
        p.fail(p.tok_.loc, fmt::format("expression nested more than {} levels deep", kMaxNesting));
    }
    ~NestingGuard() { --p.nesting_; }
  };
  static constexpr int kMaxNesting = 200;

  // Sets e's height from its children; deep trees would overflow the stack later.
  void set_depth(Expr& e) {
    e.depth = 1;
    for (const auto& a : e.args) e.depth = std::max(e.depth, a->depth + 1);
    if (e.depth > kMaxNesting)
      fail(e.loc, fmt::format("expression more than {} operations deep (each operator of a chain such as "
                              "a + b + c ... is one level); split it into named values", kMaxNesting));
  }

  ExprPtr parse_unary() {
    NestingGuard guard(*this);
    if (tok_.kind == Tok::minus || tok_.kind == Tok::not_) {
      Token op = tok_;
      next();
      ExprPtr x = parse_unary();
      if (op.kind == Tok::minus && x->kind == Expr::Kind::number) {  // fold -literal
        x->number = -x->number;
        x->loc = op.loc;
        return x;
      }
      auto u = std::make_unique<Expr>();
      u->kind = Expr::Kind::unary;
      u->op = op.kind;
      u->name = op.text;
      u->loc = op.loc;
      u->args.push_back(std::move(x));
      set_depth(*u);
      return u;
    }
    return parse_primary();
  }

  ExprPtr parse_primary() {
    auto e = std::make_unique<Expr>();
    e->loc = tok_.loc;
    if (tok_.kind == Tok::number) {
      e->kind = Expr::Kind::number;
      e->number = tok_.number;
      next();
      return e;
    }
    if (is_word("inf")) {
      e->kind = Expr::Kind::number;
      e->number = INFINITY;
      next();
      return e;
    }
    if (tok_.kind == Tok::lparen) {
      open_parens_.push_back({tok_.loc, '('});
      next();
      ExprPtr inner = parse_expr();
      expect(Tok::rparen, "')'");
      open_parens_.pop_back();
      return inner;
    }
    if (tok_.kind == Tok::bar) {  // |x| is abs(x)
      next();
      e->kind = Expr::Kind::abs;
      e->args.push_back(parse_binary(4));
      expect(Tok::bar, "'|' to close the absolute value");
      set_depth(*e);
      return e;
    }
    if (tok_.kind != Tok::ident) expected("a value, a number, or a function call");
    if (is_keyword(tok_.text))
      fail(tok_.loc, fmt::format("expected a value, found the keyword '{}'", tok_.text));
    e->name = tok_.text;
    next();
    if (tok_.kind == Tok::lparen) {
      e->kind = Expr::Kind::call;
      open_parens_.push_back({tok_.loc, '('});
      next();
      parse_call_args(*e);
      open_parens_.pop_back();
      set_depth(*e);
      return e;
    }
    e->kind = Expr::Kind::ref;
    if (tok_.kind == Tok::lbracket) {
      const SourceLoc open = tok_.loc;
      next();
      e->annotation = parse_axis_list(open);
    }
    return e;
  }

  // After '(': expr {, expr} [over axes] {, name=number} ')'
  void parse_call_args(Expr& call) {
    if (tok_.kind == Tok::rparen) {
      next();
      return;
    }
    for (;;) {
      if (tok_.kind == Tok::ident && !is_keyword(tok_.text)) {
        // keyword argument? (name '=' ...). Peek by parsing a name and checking for '='.
        Lexer probe = lex_;
        Token after = probe.next();
        if (after.kind == Tok::assign) {
          Name key{tok_.text, tok_.loc};
          next();
          next();
          ExprPtr v = parse_unary();
          const auto value = literal_value(*v);
          if (!value) fail(v->loc, fmt::format("argument '{}' must be a number", key.text));
          for (const auto& [seen, unused] : call.kwargs)
            if (seen.text == key.text)
              fail(key.loc, fmt::format("argument '{}' given twice (first at {}:{})", key.text, seen.loc.line, seen.loc.column));
          call.kwargs.emplace_back(key, *value);
          if (tok_.kind == Tok::comma) {
            next();
            continue;
          }
          expect(Tok::rparen, "',' or ')'");
          return;
        }
      }
      if (!call.kwargs.empty()) expected("a keyword argument (name=value) after keyword arguments");
      if (call.has_over) expected("a keyword argument such as eps=1e-6 after the 'over' axes");
      call.args.push_back(parse_expr());
      if (is_word("over")) {
        call.has_over = true;
        next();
        if (tok_.kind != Tok::ident) expected("an axis name after 'over'");
        while (tok_.kind == Tok::ident) call.over.push_back(expect_name("an axis name"));
      }
      if (tok_.kind == Tok::comma) {
        if (call.has_over) {
          next();
          if (tok_.kind != Tok::ident) expected("a keyword argument such as eps=1e-6");
          continue;
        }
        next();
        continue;
      }
      const bool takes_eps = call.name == "rmsnorm" || call.name == "layernorm";
      expect(Tok::rparen, call.has_over ? (takes_eps ? "')' or ', eps=...'" : "')' or another axis after 'over'") : "',' or ')'");
      return;
    }
  }

  const SourceText& src_;
  Lexer lex_;
  Token tok_;
  int nesting_ = 0;
  struct Open {
    SourceLoc loc;
    char ch;  // '(' or '['
  };
  std::vector<Open> open_parens_;  // innermost last, for "not closed" notes
};

// ---------------------------------------------------------------- elaboration

class Elaborator {
 public:
  Elaborator(const SourceText& src, const Program& p, const std::vector<Binding>& bindings)
      : src_(src), p_(p), bindings_(bindings), b_(src.name, &src) {}

  Result<ParsedDiagram> run() {
    std::set<std::string> bound;
    auto binding = [&](const std::string& name) -> const Binding* {
      for (const Binding& b : bindings_)
        if (b.name == name) {
          bound.insert(name);
          return &b;
        }
      return nullptr;
    };
    for (const AxisDecl& a : p_.axes) {
      std::int64_t size = a.size;
      if (const Binding* b = binding(a.name.text)) {
        if (!(b->value >= 1) || !std::isfinite(b->value) || b->value != std::floor(b->value))
          return plain_error(fmt::format("--set {}: axis '{}' needs a positive integer size",
                                         b->text, a.name.text));
        if (b->value > 9.2e18)
          return plain_error(fmt::format("--set {}: axis '{}' is larger than the largest size napkin takes (2^63 - 1)",
                                         b->text, a.name.text));
        size = static_cast<std::int64_t>(b->value);
      }
      b_.axis(a.name.text, size, a.name.loc);
    }
    for (const ParamDecl& prm : p_.params) {
      double v = prm.value;
      if (const Binding* b = binding(prm.name.text)) v = b->value;
      values_[prm.name.text] = b_.param(prm.name.text, v, prm.name.loc);
    }
    for (const Binding& b : bindings_)
      if (!bound.count(b.name))
        return plain_error(fmt::format("--set {}: {} has no axis or param named '{}' ({})", b.text,
                                       src_.name, b.name, known_sizes()));
    for (const InputDecl& in : p_.inputs) {
      std::vector<AxisId> axes;
      for (const Name& n : in.axes) axes.push_back(axis_of(n, fmt::format("input '{}'", in.name.text)));
      if (b_.failed()) break;
      values_[in.name.text] = b_.input(in.name.text, axes, in.dtype, in.name.loc);
    }
    for (const Definition& def : p_.definitions) {
      if (b_.failed()) break;
      auto [it, fresh] = definitions_.emplace(def.name.text, &def);
      if (!fresh) {
        b_.fail(def.name.loc, fmt::format("'{}' is defined twice", def.name.text),
                fmt::format("the first definition is at line {}, column {}",
                            it->second->name.loc.line, it->second->name.loc.column));
      } else if (values_.count(def.name.text)) {
        b_.fail(def.name.loc, fmt::format("'{}' is defined twice", def.name.text));
      }
    }
    for (const Definition& def : p_.definitions) {
      if (b_.failed()) break;
      define(def);
    }
    for (const OutputDecl& out : p_.outputs) {
      if (b_.failed()) break;
      auto it = values_.find(out.name.text);
      if (it == values_.end()) {
        unknown_value(out.name, "an output");
        break;
      }
      std::optional<std::vector<AxisId>> order;
      if (out.axes) {
        order.emplace();
        for (const Name& n : *out.axes) order->push_back(axis_of(n, fmt::format("output '{}'", out.name.text)));
      }
      b_.output(it->second, order, out.name.loc);
    }
    auto d = b_.finish();
    if (!d) return d.error();
    return ParsedDiagram{std::move(d.value()), b_.warnings()};
  }

 private:
  std::string known_sizes() const {
    std::string s = "axes:";
    for (const AxisDecl& a : p_.axes) s += " " + a.name.text;
    if (!p_.params.empty()) {
      s += "; params:";
      for (const ParamDecl& prm : p_.params) s += " " + prm.name.text;
    }
    return s;
  }

  AxisId axis_of(const Name& n, const std::string& where) {
    if (b_.failed()) return -1;
    if (auto a = b_.diagram().find_axis(n.text)) return *a;
    std::string known;
    for (const Axis& a : b_.diagram().axes) known += (known.empty() ? "" : " ") + a.name;
    b_.fail(n.loc, fmt::format("unknown axis '{}' in {}", n.text, where),
            known.empty() ? "no axes are declared; add a line such as `axes q=1024 d=64`"
                          : fmt::format("expected one of the declared axes: {}", known));
    return -1;
  }

  void unknown_value(const Name& n, std::string_view what) {
    std::string note = "expected an input, a defined value, a param, or an axis";
    b_.fail(n.loc, fmt::format("unknown name '{}' used as {}", n.text, what), note);
  }

  Value define(const Definition& def) {
    if (auto it = values_.find(def.name.text); it != values_.end()) return it->second;
    if (in_progress_.count(def.name.text)) return {};
    if (stack_.size() >= kMaxDefinitionDepth) {
      b_.fail(def.name.loc, fmt::format("definitions refer forward more than {} deep; define "
                                        "values before they are used", kMaxDefinitionDepth));
      return {};
    }
    in_progress_.insert(def.name.text);
    stack_.push_back(def.name.text);
    // Values defined later in the file come first, before any node of this expression, so that
    // node order is dependency order whatever the statement order: the printed text (which
    // lists definitions before their uses) then parses back to the same diagram.
    define_forward_references(*def.value);
    if (b_.failed()) {
      stack_.pop_back();
      in_progress_.erase(def.name.text);
      return {};
    }
    Value v = elaborate(*def.value);
    stack_.pop_back();
    in_progress_.erase(def.name.text);
    if (!v.valid()) return {};
    v = b_.named(def.name.text, v, def.name.loc);
    if (!v.valid()) return {};
    if (def.annotation && !check_annotation(def.name, *def.annotation, v)) return {};
    values_[def.name.text] = v;
    return v;
  }

  void define_forward_references(const Expr& e) {
    if (e.kind == Expr::Kind::ref && !values_.count(e.name) && !in_progress_.count(e.name))
      if (auto it = definitions_.find(e.name); it != definitions_.end()) define(*it->second);
    for (const auto& a : e.args)
      if (a && !b_.failed()) define_forward_references(*a);
  }

  bool check_annotation(const Name& n, const std::vector<Name>& written, Value v) {
    std::vector<AxisId> axes;
    for (const Name& a : written) {
      axes.push_back(axis_of(a, fmt::format("the annotation of '{}'", n.text)));
      if (b_.failed()) return false;
    }
    const auto& actual = b_.diagram().node(v.id).axes;
    if (!std::is_permutation(axes.begin(), axes.end(), actual.begin(), actual.end())) {
      b_.fail(n.loc, fmt::format("'{}' is written {}, but its axes are {}", n.text,
                                 axes_text(b_.diagram(), axes), axes_text(b_.diagram(), actual)));
      return false;
    }
    return true;
  }

  Value reference(const Expr& e) {
    const Name n{e.name, e.loc};
    if (auto it = values_.find(e.name); it != values_.end()) {
      if (e.annotation && !check_annotation(n, *e.annotation, it->second)) return {};
      return it->second;
    }
    if (auto it = definitions_.find(e.name); it != definitions_.end()) {
      if (in_progress_.count(e.name)) {
        std::string path;
        bool on = false;
        for (const std::string& s : stack_) {
          if (s == e.name) on = true;
          if (on) path += s + " -> ";
        }
        b_.fail(e.loc, fmt::format("cycle: '{}' depends on itself ({}{})", e.name, path, e.name));
        return {};
      }
      Value v = define(*it->second);
      if (v.valid() && e.annotation && !check_annotation(n, *e.annotation, v)) return {};
      return v;
    }
    if (auto a = b_.diagram().find_axis(e.name)) {
      if (e.annotation) {
        b_.fail(e.loc, fmt::format("'{}' is an axis; an axis index takes no [axes]", e.name));
        return {};
      }
      return b_.index(*a, e.loc);
    }
    unknown_value(n, "a value");
    return {};
  }

  std::vector<AxisId> over_axes(const Expr& e) {
    std::vector<AxisId> out;
    for (const Name& n : e.over) out.push_back(axis_of(n, fmt::format("{}(... over ...)", e.name)));
    return out;
  }

  // The value of a param named by `e`, or none.
  std::optional<Value> param_value(const Expr& e) {
    if (e.kind != Expr::Kind::ref) return std::nullopt;
    auto it = values_.find(e.name);
    if (it == values_.end()) return std::nullopt;
    const Node& n = b_.diagram().node(it->second.id);
    if (n.op != OpKind::constant || n.name.empty()) return std::nullopt;
    return it->second;
  }

  // A literal, or a name defined as one (a param is taken by param_value first).
  std::optional<double> scalar_arg(const Expr& e, std::string_view what) {
    if (e.kind == Expr::Kind::number) return e.number;
    if (e.kind == Expr::Kind::ref)
      if (auto it = values_.find(e.name); it != values_.end())
        if (const Node& n = b_.diagram().node(it->second.id); n.op == OpKind::constant) return n.scalar;
    b_.fail(e.loc, fmt::format("{} must be a number or a param", what));
    return std::nullopt;
  }

  Value elaborate(const Expr& e) {
    if (b_.failed()) return {};
    switch (e.kind) {
      case Expr::Kind::number: return b_.constant(e.number, e.loc);
      case Expr::Kind::ref: return reference(e);
      case Expr::Kind::abs: return b_.unary(OpKind::abs, elaborate(*e.args[0]), e.loc);
      case Expr::Kind::cast: return b_.cast(elaborate(*e.args[0]), e.cast_to, e.loc);
      case Expr::Kind::unary: {
        Value x = elaborate(*e.args[0]);
        return b_.unary(e.op == Tok::minus ? OpKind::neg : OpKind::logical_not, x, e.loc);
      }
      case Expr::Kind::binary: {
        Value a = elaborate(*e.args[0]);
        Value c = elaborate(*e.args[1]);
        return b_.binary(binary_op(e.op), a, c, e.loc);
      }
      case Expr::Kind::call: return call(e);
    }
    return {};
  }

  static OpKind binary_op(Tok t) {
    switch (t) {
      case Tok::plus: return OpKind::add;
      case Tok::minus: return OpKind::sub;
      case Tok::star: return OpKind::mul;
      case Tok::slash: return OpKind::div;
      case Tok::lt: return OpKind::lt;
      case Tok::le: return OpKind::le;
      case Tok::gt: return OpKind::gt;
      case Tok::ge: return OpKind::ge;
      case Tok::eq: return OpKind::eq;
      case Tok::ne: return OpKind::ne;
      case Tok::and_: return OpKind::logical_and;
      case Tok::or_: return OpKind::logical_or;
      default: return OpKind::add;
    }
  }

  bool want(const Expr& e, std::size_t n_args, bool over, std::string_view usage) {
    const bool ok = e.args.size() == n_args && e.has_over == over;
    if (!ok) b_.fail(e.loc, fmt::format("{} expects {}", e.name, usage));
    if (ok && !e.kwargs.empty() && e.name != "rmsnorm" && e.name != "layernorm")
      b_.fail(e.kwargs[0].first.loc, fmt::format("{} takes no argument '{}'", e.name, e.kwargs[0].first.text));
    return ok;
  }

  Value call(const Expr& e) {
    static const std::map<std::string, OpKind, std::less<>> unary = {
        {"exp", OpKind::exp}, {"exp2", OpKind::exp2}, {"log", OpKind::log},
        {"neg", OpKind::neg}, {"tanh", OpKind::tanh}, {"abs", OpKind::abs}, {"floor", OpKind::floor}};
    static const std::map<std::string, OpKind, std::less<>> binary = {
        {"add", OpKind::add}, {"sub", OpKind::sub}, {"mul", OpKind::mul},
        {"div", OpKind::div}, {"max", OpKind::max}, {"min", OpKind::min}};
    static const std::map<std::string, OpKind, std::less<>> composite = {
        {"softmax", OpKind::softmax}, {"logsumexp", OpKind::logsumexp},
        {"rmsnorm", OpKind::rmsnorm}, {"layernorm", OpKind::layernorm}};
    const std::string& f = e.name;
    if (auto it = unary.find(f); it != unary.end()) {
      if (!want(e, 1, false, fmt::format("one operand: {}(x)", f))) return {};
      return b_.unary(it->second, elaborate(*e.args[0]), e.loc);
    }
    if ((f == "max" || f == "sum") && e.has_over) {
      if (!want(e, 1, true, fmt::format("one operand and the axes to reduce: {}(x over k)", f))) return {};
      Value x = elaborate(*e.args[0]);
      auto over = over_axes(e);
      return b_.reduce(f == "sum" ? OpKind::reduce_sum : OpKind::reduce_max, x, over, e.loc);
    }
    if (f == "min" && e.has_over) {  // -max(-x over k): exact, and one reduction the kernels know
      if (!want(e, 1, true, "one operand and the axes to reduce: min(x over k)")) return {};
      Value x = elaborate(*e.args[0]);
      auto over = over_axes(e);
      return b_.unary(OpKind::neg, b_.reduce(OpKind::reduce_max, b_.unary(OpKind::neg, x, e.loc), over, e.loc), e.loc);
    }
    if (auto it = binary.find(f); it != binary.end()) {
      if (!want(e, 2, false, fmt::format("two operands: {}(a, b){}", f,
                                         f == "max" || f == "min" ? fmt::format(", or {}(x over k) to reduce", f) : "")))
        return {};
      Value a = elaborate(*e.args[0]);
      Value c = elaborate(*e.args[1]);
      return b_.binary(it->second, a, c, e.loc);
    }
    if (f == "sum") {
      b_.fail(e.loc, "sum expects one operand and the axes to reduce: sum(x over k)");
      return {};
    }
    if (f == "sigmoid" || f == "silu" || f == "relu" || f == "gelu_tanh") {
      if (!want(e, 1, false, fmt::format("one operand: {}(x)", f))) return {};
      return activation(f, elaborate(*e.args[0]), e.loc);
    }
    if (f == "scale" || f == "softcap") {
      if (!want(e, 2, false, fmt::format("a value and a number: {}(x, c)", f))) return {};
      Value x = elaborate(*e.args[0]);
      // A param stays a kernel argument (a literal would fold it into the build): the op's own
      // formula over it, x * c or c * tanh(x / c).
      if (auto p = param_value(*e.args[1])) {
        if (f == "scale") return b_.binary(OpKind::mul, x, *p, e.loc);
        return b_.binary(OpKind::mul, *p, b_.unary(OpKind::tanh, b_.binary(OpKind::div, x, *p, e.loc), e.loc), e.loc);
      }
      auto c = scalar_arg(*e.args[1], fmt::format("{}'s second argument", f));
      if (!c) return {};
      return f == "scale" ? b_.scale(x, *c, e.loc) : b_.softcap(x, *c, e.loc);
    }
    if (f == "cast") {
      if (!want(e, 2, false, "a value and a dtype: cast(x, bf16)")) return {};
      const Expr& t = *e.args[1];
      auto dt = t.kind == Expr::Kind::ref ? parse_dtype(t.name) : std::nullopt;
      if (!dt) {
        b_.fail(t.loc, "cast's second argument must be a dtype (f64, f32, tf32, bf16, f16, "
                       "fp8e4m3, fp8e5m2, i32, bool)");
        return {};
      }
      return b_.cast(elaborate(*e.args[0]), *dt, e.loc);
    }
    if (f == "select") {
      if (!want(e, 3, false, "a condition and two values: select(cond, if_true, if_false)")) return {};
      Value c = elaborate(*e.args[0]);
      Value t = elaborate(*e.args[1]);
      Value x = elaborate(*e.args[2]);
      return b_.select(c, t, x, e.loc);
    }
    if (f == "contract") {
      if (e.args.size() < 2 || !e.has_over || !e.kwargs.empty()) {
        b_.fail(e.loc, "contract expects two or more operands and the contracted axes: "
                       "contract(A, B over k)",
                "a product that sums over no axis (an outer product) is elementwise: A * B");
        return {};
      }
      std::vector<Value> xs;
      for (const auto& a : e.args) xs.push_back(elaborate(*a));
      auto over = over_axes(e);
      return b_.contract(xs, over, e.loc);
    }
    if (auto it = composite.find(f); it != composite.end()) {
      const bool norm = it->second == OpKind::rmsnorm || it->second == OpKind::layernorm;
      if (!want(e, 1, true, fmt::format("one operand and its axes: {}(x over k{})", f,
                                        norm ? ", eps=1e-6" : "")))
        return {};
      double eps = it->second == OpKind::rmsnorm ? 1e-6 : norm ? 1e-5 : 0.0;
      for (const auto& [key, value] : e.kwargs) {
        if (key.text != "eps") {
          b_.fail(key.loc, fmt::format("{} takes no argument '{}'; expected eps", f, key.text));
          return {};
        }
        eps = value;
      }
      Value x = elaborate(*e.args[0]);
      auto over = over_axes(e);
      return b_.composite(it->second, x, over, eps, e.loc);
    }
    if (f == "gelu") {
      b_.fail(e.loc, "unknown function 'gelu': napkin has no erf, so GELU's exact form cannot be written",
              "gelu_tanh(x) is its tanh approximation (PyTorch's gelu(x, approximate='tanh'))");
      return {};
    }
    b_.fail(e.loc, fmt::format("unknown function '{}'", f),
            "expected one of: contract exp exp2 log neg tanh abs floor add sub mul div max min scale "
            "cast softcap select sum softmax logsumexp rmsnorm layernorm sigmoid silu relu gelu_tanh");
    return {};
  }

  // The activations, written out in the operations above: the IR has no node of their own, so
  // every part of napkin sees what the user could have written by hand (docs/language.md).
  Value activation(const std::string& f, Value x, SourceLoc loc) {
    // Nodes in the order the parser makes them for the written-out form (left to right), so
    // the diagrams are equal node for node.
    auto c = [&](double v) { return b_.constant(v, loc); };
    auto op = [&](OpKind k, Value a, Value y) { return b_.binary(k, a, y, loc); };
    if (f == "relu") return op(OpKind::max, x, c(0));  // max(x, 0)
    if (f == "gelu_tanh") {  // x * 0.5 * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
      const Value half = op(OpKind::mul, x, c(0.5));
      const Value one = c(1);
      const Value sqrt_2_pi = c(0.7978845608028654);
      const Value cube = op(OpKind::mul, op(OpKind::mul, op(OpKind::mul, c(0.044715), x), x), x);
      const Value inner = op(OpKind::mul, sqrt_2_pi, op(OpKind::add, x, cube));
      return op(OpKind::mul, half, op(OpKind::add, one, b_.unary(OpKind::tanh, inner, loc)));
    }
    const Value numerator = f == "silu" ? x : c(1);  // silu: x / (1 + exp(-x)); sigmoid: 1 / (1 + exp(-x))
    const Value one = c(1);
    const Value e = b_.unary(OpKind::exp, b_.unary(OpKind::neg, x, loc), loc);
    return op(OpKind::div, numerator, op(OpKind::add, one, e));
  }

  static constexpr std::size_t kMaxDefinitionDepth = 1000;
  const SourceText& src_;
  const Program& p_;
  const std::vector<Binding>& bindings_;
  Builder b_;
  std::map<std::string, Value> values_;
  std::map<std::string, const Definition*> definitions_;
  std::set<std::string> in_progress_;
  std::vector<std::string> stack_;
};

}  // namespace

std::optional<double> parse_decimal(std::string_view text) {
  std::size_t i = 0;
  const auto digits = [&] {
    const std::size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i - start;
  };
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  std::size_t mantissa = digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return std::nullopt;
  }
  if (i != text.size()) return std::nullopt;
  const std::string s(text);
  const double v = std::strtod(s.c_str(), nullptr);
  const bool nonzero = s.substr(0, s.find_first_of("eE")).find_first_of("123456789") != std::string::npos;
  if (!std::isfinite(v) || (v == 0 && nonzero)) return std::nullopt;
  return v;
}

Result<Binding> parse_binding(std::string_view text) {
  const auto eq = text.find('=');
  const std::string arg(text);
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size())
    return plain_error(fmt::format("--set {}: expected NAME=VALUE, e.g. --set q=8192", arg));
  Binding b;
  b.name = std::string(text.substr(0, eq));
  b.text = arg;
  const bool name_ok = (std::isalpha(static_cast<unsigned char>(b.name[0])) || b.name[0] == '_') &&
                       std::all_of(b.name.begin(), b.name.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                       });
  if (!name_ok)
    return plain_error(fmt::format("--set {}: '{}' is not a name (letters, digits and _, not first a digit)", arg,
                                   b.name));
  const std::string value(text.substr(eq + 1));
  // inf and -inf, as in a diagram (a param may be unbounded: a window of every key).
  const auto v = value == "inf" ? std::optional<double>(INFINITY) : value == "-inf" ? std::optional<double>(-INFINITY)
                                                                                      : parse_decimal(value);
  if (!v)
    return plain_error(fmt::format("--set {}: '{}' is not a decimal number such as 8192, 0.5 or 1e-6, nor inf or -inf", arg,
                                   value));
  b.value = *v;
  return b;
}

Result<ParsedDiagram> parse_diagram(const SourceText& source, const std::vector<Binding>& bindings) {
  Program program;
  try {
    program = Parser(source).parse_program();
  } catch (const ParseError& e) {
    return e.diagnostic;
  }
  return Elaborator(source, program, bindings).run();
}

Result<ParsedDiagram> load_diagram(const std::string& path, const std::vector<Binding>& bindings) {
  auto src = read_source_file(path);
  if (!src) return src.error();
  return parse_diagram(*src, bindings);
}

}  // namespace napkin::ir
