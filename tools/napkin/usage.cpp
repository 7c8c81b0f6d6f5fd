// SPDX-License-Identifier: Apache-2.0
// Usage errors: option values checked before any file is read, and CLI11's parse failures
// turned into one line that names the command, the option and what was expected.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "cli.h"
#include "ir/parser.h"
#include "support/dtype.h"

namespace napkin::cli {

namespace {

driver::CommandOutput usage_error(const std::string& message, const std::string& note = {}) {
  driver::CommandOutput r;
  r.exit_code = kUsageError;
  r.err = "error: " + shown_text(message) + "\n";
  if (!note.empty()) r.err += "  " + shown_text(note) + "\n";
  return r;
}

// A validator with no description of its own in --help (the option's text says it all).
CLI::Validator check(std::function<std::string(const std::string&)> f) {
  return CLI::Validator([f = std::move(f)](std::string& v) { return f(v); }, "");
}

bool all_digits(const std::string& v) {
  return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Optimal string alignment distance: insertions, deletions, substitutions, transpositions.
std::size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

const CLI::App* find_command(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->get_name() == name) return sub;
  return nullptr;
}

// Every spelling of every option of `cmd` ("--output-dir", "-o", "--help").
std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options([](const CLI::Option*) { return true; })) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

// "FILE" for a positional, "--machine" for an option.
std::string display_name(const CLI::Option& o) {
  if (o.get_lnames().empty() && o.get_snames().empty()) {
    std::string n = o.get_name();
    for (char& c : n) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return n;
  }
  return o.get_name();
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

bool is_option(const std::string& arg) {
  return arg.size() > 1 && arg[0] == '-' && !std::isdigit(static_cast<unsigned char>(arg[1])) && arg[1] != '.';
}

driver::CommandOutput unknown_option(const CLI::App& app, const CLI::App& cmd, const std::string& arg) {
  const std::string flag = arg.substr(0, arg.find('='));
  const std::vector<std::string> own = option_names(cmd);
  const std::string cmd_name = cmd.get_name();
  if (const std::string near = nearest(flag, own); !near.empty())
    return usage_error(fmt::format("{}: unknown option '{}'; did you mean '{}'?", cmd_name, arg, near),
                       fmt::format("napkin {} --help lists its options", cmd_name));
  std::vector<std::string> elsewhere;
  for (const std::string& other : command_names(app)) {
    const CLI::App* sub = find_command(app, other);
    const auto names = option_names(*sub);
    if (std::find(names.begin(), names.end(), flag) != names.end()) elsewhere.push_back(other);
  }
  if (!elsewhere.empty())
    return usage_error(fmt::format("{}: unknown option '{}'; it is an option of {}, not of {}", cmd_name, arg,
                                   joined(elsewhere), cmd_name),
                       fmt::format("{} takes: {}", cmd_name, joined(own)));
  return usage_error(fmt::format("{}: unknown option '{}'", cmd_name, arg),
                     fmt::format("{} takes: {}", cmd_name, joined(own)));
}

}  // namespace

CLI::Validator positive_integer(std::string option, std::string example) {
  return check([=](const std::string& v) -> std::string {
    int n = 0;
    const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (all_digits(v) && ec == std::errc() && n > 0) return {};
    return fmt::format("{} {}: expected a positive integer (at most {}), e.g. {} {}", option, v, INT_MAX, option,
                       example);
  });
}

CLI::Validator non_negative_integer(std::string option, std::uint64_t max) {
  return check([=](const std::string& v) -> std::string {
    std::uint64_t n = 0;
    const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (all_digits(v) && ec == std::errc() && n <= max) return {};
    return fmt::format("{} {}: expected an integer from 0 to {}", option, v, max);
  });
}

CLI::Validator non_negative_number(std::string option, std::string example) {
  return check([=](const std::string& v) -> std::string {
    const auto x = ir::parse_decimal(v);
    if (x && *x >= 0) return {};
    return fmt::format("{} {}: expected a finite decimal number >= 0, e.g. {} {}", option, v, option, example);
  });
}

CLI::Validator positive_number(std::string option, std::string example) {
  return check([=](const std::string& v) -> std::string {
    const auto x = ir::parse_decimal(v);
    if (x && *x > 0) return {};
    return fmt::format("{} {}: expected a finite decimal number > 0, e.g. {} {}", option, v, option, example);
  });
}

CLI::Validator non_empty(std::string option, std::string what) {
  return check([=](const std::string& v) -> std::string {
    if (!v.empty()) return {};
    return fmt::format("{}: expected {}, found an empty string", option, what);
  });
}

CLI::Validator output_path(std::string option, std::string what) {
  return check([=](const std::string& v) -> std::string {
    if (v.empty()) return fmt::format("{}: expected {}, found an empty string", option, what);
    if (v[0] == '-')
      return fmt::format("{}: expected {}, found '{}', which reads as an option (write ./{} for a path that begins "
                         "with '-')", option, what, v, v);
    return {};
  });
}

CLI::Validator binding(std::string option) {
  return check([=](const std::string& v) -> std::string {
    auto b = ir::parse_binding(v);  // its messages begin "--set "
    return b ? std::string() : option + b.error().message.substr(5);
  });
}

CLI::Validator named_path(std::string option, std::string example) {
  return check([=](const std::string& v) -> std::string {
    const auto eq = v.find('=');
    if (eq != std::string::npos && eq > 0 && eq + 1 < v.size()) return {};
    return fmt::format("{} {}: expected NAME=PATH, e.g. {} {}", option, v, option, example);
  });
}

CLI::Validator one_of(std::string option, std::vector<std::string> values) {
  return check([=](const std::string& v) -> std::string {
    if (std::find(values.begin(), values.end(), v) != values.end()) return {};
    const std::string near = nearest(v, values);
    return fmt::format("{} {}: expected one of: {}{}", option, v, joined(values),
                       near.empty() ? "" : fmt::format("; did you mean '{}'?", near));
  });
}

CLI::Validator float_dtype(std::string option) {
  return check([=](const std::string& v) -> std::string {
    const auto t = parse_dtype(v);
    if (t && is_float(*t)) return {};
    return fmt::format("{} {}: expected a floating-point dtype: f64, f32, tf32, bf16, f16, fp8e4m3 or fp8e5m2",
                       option, v);
  });
}

void once_each(const std::string& option, const std::vector<std::string>& values) {
  std::map<std::string, std::string> seen;
  for (const std::string& v : values) {
    const auto eq = v.find('=');
    const std::string name = eq == std::string::npos ? v : v.substr(0, eq);
    const auto [it, fresh] = seen.emplace(name, v);
    if (fresh) continue;
    if (eq == std::string::npos)
      throw CLI::ValidationError(fmt::format("{} {}: '{}' is listed twice; list it once", option, v, name));
    throw CLI::ValidationError(fmt::format("{} {}: '{}' is already given by {} {}; give each name once", option, v,
                                           name, option, it->second));
  }
}

void check_repeats(const CLI::App& app) {
  for (const CLI::App* cmd : app.get_subcommands())
    for (const char* name : {"--set", "--input", "--check-set", "--machines", "--dtypes"})
      if (const CLI::Option* o = cmd->get_option_no_throw(name)) once_each(name, o->results());
}

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string w = lower(word);
  std::string best;
  std::size_t best_d = SIZE_MAX;
  for (const std::string& c : candidates) {
    const std::size_t d = distance(w, lower(c));
    if (d < best_d) best_d = d, best = c;
  }
  // Near: a third of the letters wrong (at least one), the dashes of an option not counted.
  const std::size_t letters = w.size() - std::min(w.find_first_not_of('-'), w.size());
  if (!best.empty() && best_d <= std::max<std::size_t>(1, letters / 3)) return best;
  std::vector<std::string> prefixed;
  for (const std::string& c : candidates)
    if (letters >= 2 && lower(c).rfind(w, 0) == 0) prefixed.push_back(c);
  return prefixed.size() == 1 ? prefixed.front() : std::string();
}

std::optional<driver::CommandOutput> check_command(const CLI::App& app, const std::vector<std::string>& args) {
  const std::vector<std::string> names = command_names(app);
  const std::string list = joined(names);
  const auto unknown = [&](const std::string& word) {
    if (const std::string near = nearest(word, names); !near.empty())
      return usage_error(fmt::format("unknown command '{}'; did you mean '{}'?", word, near),
                         fmt::format("the commands: {}", list));
    return usage_error(fmt::format("unknown command '{}'; expected one of: {}", word, list),
                       "napkin --help says what each does");
  };
  if (args.empty())
    return usage_error(fmt::format("expected a command, one of: {}", list), "napkin --help says what each does");
  const std::string& first = args.front();
  if (first == "help") {
    driver::CommandOutput r;
    if (args.size() == 1) {
      r.out = app.help();
      return r;
    }
    const CLI::App* sub = find_command(app, args[1]);
    if (!sub) return unknown(args[1]);
    r.out = sub->help();
    return r;
  }
  if (first == "-h" || first == "--help" || first == "--help-all") return std::nullopt;
  if (!first.empty() && first[0] == '-')
    return usage_error(fmt::format("unknown option '{}' before the command; the command comes first: "
                                   "napkin COMMAND [ARGUMENTS]", first),
                       fmt::format("the commands: {}", list));
  if (std::find(names.begin(), names.end(), first) == names.end()) return unknown(first);
  // Comma-separated lists: CLI11 drops empty places ("a,,b" would read as "a,b", and "," as no
  // value at all, so that the next option is taken for it).
  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string option = args[i], value;
    if (const std::size_t eq = option.find('='); option.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = option.substr(eq + 1);
      option.resize(eq);
    } else if (i + 1 < args.size()) {
      value = args[i + 1];
    } else {
      continue;  // (no value: CLI11 says so)
    }
    if (option != "--machines" && option != "--dtypes" && option != "--subloops") continue;
    std::size_t place = 1, start = 0;
    for (std::size_t comma = value.find(','); ; comma = value.find(',', start)) {
      const std::size_t end = comma == std::string::npos ? value.size() : comma;
      if (end == start)
        return usage_error(fmt::format("{} {}: place {} of the comma-separated list is empty; write one value in "
                                       "every place, e.g. {} {}", option, value, place, option,
                                       option == "--machines" ? "h100-sxm5,b200" : option == "--dtypes" ? "bf16,fp8" : "32,8"));
      if (comma == std::string::npos) break;
      start = comma + 1;
      ++place;
    }
  }
  return std::nullopt;
}

driver::CommandOutput parse_failure(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) {  // --help, --help-all
    std::ostringstream out, err;
    app.exit(e, out, err);
    driver::CommandOutput r;
    r.out = out.str();
    r.err = err.str();
    return r;
  }
  const std::vector<CLI::App*> parsed = app.get_subcommands();
  const CLI::App* cmd = parsed.empty() ? nullptr : parsed.front();
  const std::string prefix = cmd ? cmd->get_name() + ": " : "";
  const std::string help_note = cmd ? fmt::format("napkin {} --help lists its arguments", cmd->get_name())
                                    : "napkin --help lists the commands";
  std::string what = e.what();
  // An unknown option first: CLI11 checks required options before it, so "--machin X" would
  // otherwise read "missing --machine".
  if (cmd && (dynamic_cast<const CLI::ExtrasError*>(&e) || dynamic_cast<const CLI::RequiredError*>(&e))) {
    const std::vector<std::string> extras = cmd->remaining();
    for (const std::string& arg : extras)
      if (is_option(arg)) return unknown_option(app, *cmd, arg);
    if (!extras.empty())
      return usage_error(fmt::format("{}unexpected argument '{}'", prefix, extras.front()), help_note);
  }
  if (dynamic_cast<const CLI::ValidationError*>(&e)) {
    // CLI11 puts "OPTION: " before what a validator returned; ours names the option itself.
    const auto colon = what.find(": ");
    if (colon != std::string::npos && what.compare(colon + 2, colon, what, 0, colon) == 0)
      what = what.substr(colon + 2);
    return usage_error(what, help_note);
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e) && cmd) {
    // "NAME is required": say what NAME is.
    const std::string name = what.substr(0, what.find(' '));
    if (const CLI::Option* o = cmd->get_option_no_throw(name); o && what == name + " is required")
      return usage_error(fmt::format("{}missing {}: {}", prefix, display_name(*o), o->get_description()),
                         help_note);
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && cmd) {
    const std::string name = what.substr(0, what.find(':'));
    if (const CLI::Option* o = cmd->get_option_no_throw(name)) {
      if (o->count() > 1 && o->get_expected_max() == 1)
        return usage_error(fmt::format("{}{} is given {} times; give it once", prefix, name, o->count()), help_note);
      if (o->count() == 0 || what.find("missing") != std::string::npos || what.find("at least") != std::string::npos)
        return usage_error(fmt::format("{}{} needs a value: {}", prefix, name, o->get_description()), help_note);
    }
  }
  // Anything else CLI11 finds, as it says it.
  if (!what.empty()) what[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(what[0])));
  return usage_error(prefix + what, help_note);
}

}  // namespace napkin::cli
