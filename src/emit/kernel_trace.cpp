// SPDX-License-Identifier: Apache-2.0
#include "emit/kernel_trace.h"

#include <array>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace napkin::emit {

namespace {

// trace.h's events, as trace_tiles prints them.
constexpr std::array<std::string_view, 9> kEvents = {"tile",         "turn",    "issued",      "S ready",
                                                      "softmax done", "PV done", "store start", "store end",
                                                      "first K"};

// What a warpgroup does between two events (FwdEvent's comments say where each is recorded):
// {kind (the colour and the legend), label}. Both ends of a tile share one kind.
std::pair<std::string, std::string> span_kind(std::string_view from, std::string_view to) {
  static const std::map<std::pair<std::string_view, std::string_view>, std::pair<std::string, std::string>> kKinds = {
      {{"tile", "turn"}, {"tile boundary", "tile start"}},
      {{"tile", "first K"}, {"tile boundary", "wait K"}},
      {{"first K", "turn"}, {"tile boundary", "wait turn"}},
      {{"store end", "tile"}, {"tile boundary", "next tile"}},
      {{"turn", "issued"}, {"issue WGMMA", "issue"}},
      {{"issued", "S ready"}, {"wait for S", "wait S"}},
      {{"issued", "PV done"}, {"wait for P V", "wait P V"}},
      {{"softmax done", "PV done"}, {"wait for P V", "wait P V"}},
      {{"S ready", "softmax done"}, {"softmax", "softmax"}},
      {{"softmax done", "turn"}, {"to the turn", "turn"}},
      {{"PV done", "turn"}, {"rescale O, to the turn", "rescale"}},
      {{"PV done", "store start"}, {"finish rows", "finish"}},
      {{"store start", "store end"}, {"O store", "store"}},
  };
  auto it = kKinds.find({from, to});
  if (it != kKinds.end()) return it->second;
  const std::string other = fmt::format("{} -> {}", from, to);
  return {other, other};
}

struct Event {
  unsigned long long cycle;
  int lane;                // the warpgroup (WG<k>) or, in an SM's block, the CTA (CTA<k>)
  std::string_view prefix; // "WG" or "CTA"
  std::string_view name;
  int line;
};

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// "  CYCLES  WG<k>  EVENT" (or CTA<k>, in an SM's block); nullopt with `error` set when the line
// starts like one but is not.
std::optional<Event> parse_event(const SourceText& src, int line_no, std::string_view line,
                                 std::optional<Diagnostic>& error) {
  size_t i = 0;
  auto skip_spaces = [&] {
    while (i < line.size() && line[i] == ' ') ++i;
  };
  auto fail = [&](std::string message) {
    error = make_error(src, {line_no, static_cast<int>(i) + 1}, std::move(message),
                       "an event line is '  CYCLES  WG<k>  EVENT' (CTA<k> in an SM's block), as "
                       "bench/attention/trace_tiles.cu prints it");
    return std::nullopt;
  };
  skip_spaces();
  Event e{};
  e.line = line_no;
  auto [p, ec] = std::from_chars(line.data() + i, line.data() + line.size(), e.cycle);
  if (ec != std::errc{}) return fail("expected the event's clock (an integer)");
  i = static_cast<size_t>(p - line.data());
  skip_spaces();
  for (std::string_view prefix : {std::string_view("WG"), std::string_view("CTA")})
    if (line.substr(i, prefix.size()) == prefix) e.prefix = prefix;
  if (e.prefix.empty()) return fail("expected 'WG' and the warpgroup's number (or 'CTA' and the CTA's)");
  i += e.prefix.size();
  auto [q, ec2] = std::from_chars(line.data() + i, line.data() + line.size(), e.lane);
  if (ec2 != std::errc{} || e.lane < 0) return fail(fmt::format("expected a number after '{}'", e.prefix));
  i = static_cast<size_t>(q - line.data());
  skip_spaces();
  const std::string_view name = trim_right(line.substr(i));
  for (std::string_view known : kEvents)
    if (name == known) {
      e.name = known;
      return e;
    }
  return fail(fmt::format("unknown event '{}' (expected one of: {})", name,
                          fmt::join(kEvents.begin(), kEvents.end(), ", ")));
}

}  // namespace

Result<KernelTrace> parse_kernel_trace(const SourceText& src, int section, double clock_mhz) {
  std::vector<std::string_view> lines;
  {
    std::string_view text = src.text;
    while (!text.empty()) {
      const size_t nl = text.find('\n');
      lines.push_back(text.substr(0, nl));
      if (nl == std::string_view::npos) break;
      text.remove_prefix(nl + 1);
    }
  }
  // A timeline block: CTA 0's warpgroups, or (NAPKIN_FWD_TRACE_SM0) every CTA resident on SM 0.
  constexpr std::string_view kHeader = "CTA 0, tiles";
  constexpr std::string_view kSmHeader = "SM 0, every resident CTA";
  constexpr std::string_view kClock = "SM clock: ";
  KernelTrace trace;
  double text_clock = 0;
  int seen = 0;
  for (size_t n = 0; n < lines.size(); ++n) {
    const std::string_view line = lines[n];
    const int line_no = static_cast<int>(n) + 1;
    if (line.starts_with(kClock)) {
      const std::string_view rest = line.substr(kClock.size());
      auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), text_clock);
      if (ec != std::errc{} || !(text_clock > 0) || !std::string_view(p, rest.data() + rest.size()).starts_with(" MHz"))
        return make_error(src, {line_no, static_cast<int>(kClock.size()) + 1}, "expected the clock as 'SM clock: N MHz'");
      continue;
    }
    if (line.starts_with("d") && line.find(" causal=") != std::string_view::npos) {  // a run's first line
      trace.title = std::string(trim_right(line.substr(0, line.find(':'))));
      text_clock = 0;  // each run prints its own clock
      continue;
    }
    const bool sm_block = line.starts_with(kSmHeader);
    if (!line.starts_with(kHeader) && !sm_block) continue;
    if (seen++ != section) continue;

    trace.clock_mhz = clock_mhz > 0 ? clock_mhz : text_clock;
    if (!(trace.clock_mhz > 0))
      return make_error(src, {line_no, 1}, "no 'SM clock: N MHz' line before this timeline",
                        "give the clock with --clock-mhz (trace_tiles prints it since it reads %globaltimer)");
    std::vector<Event> events;
    for (size_t m = n + 1; m < lines.size(); ++m) {
      const std::string_view l = lines[m];
      const size_t first = l.find_first_not_of(' ');
      if (first == 0 || first == std::string_view::npos || !std::isdigit(static_cast<unsigned char>(l[first]))) break;
      std::optional<Diagnostic> error;
      auto e = parse_event(src, static_cast<int>(m) + 1, l, error);
      if (!e) return *error;
      if (e->prefix != (sm_block ? "CTA" : "WG"))
        return make_error(src, {e->line, static_cast<int>(first) + 1},
                          sm_block ? "expected 'CTA<k>': this block lists the CTAs of SM 0"
                                   : "expected 'WG<k>': this block lists CTA 0's warpgroups");
      events.push_back(*e);
    }
    if (events.size() < 2) return make_error(src, {line_no, 1}, "this timeline has fewer than two events");
    const double seconds_per_cycle = 1.0 / (trace.clock_mhz * 1e6);
    const unsigned long long t0 = events.front().cycle;
    std::map<int, const Event*> last;  // each lane's previous event
    std::map<int, TimelineLane> lanes;
    for (const Event& e : events) {
      TimelineLane& lane = lanes[e.lane];
      if (lane.unit.empty()) lane.unit = sm_block ? fmt::format("CTA {}", e.lane) : fmt::format("warpgroup {}", e.lane);
      const auto it = last.find(e.lane);
      if (e.cycle < t0 || (it != last.end() && e.cycle < it->second->cycle))
        return make_error(src, {e.line, 1}, "this event is earlier than the one before it: the timeline must be in clock order");
      if (it != last.end()) {
        const Event& a = *it->second;
        const auto [kind, label] = span_kind(a.name, e.name);
        lane.spans.push_back({label, kind, (a.cycle - t0) * seconds_per_cycle, (e.cycle - t0) * seconds_per_cycle});
      }
      last[e.lane] = &e;
    }
    for (auto& [wg, lane] : lanes) trace.lanes.push_back(std::move(lane));
    if (trace.title.empty()) trace.title = "kernel trace";
    trace.title += fmt::format(": {} as measured ({:.0f} MHz)", sm_block ? "the CTAs of SM 0" : "CTA 0", trace.clock_mhz);
    return trace;
  }
  if (seen == 0)
    return make_error(src, {0, 0},
                      fmt::format("no timeline in the text: expected blocks that begin '{}' or '{}' (the output of "
                                  "bench/attention/trace_tiles)",
                                  kHeader, kSmHeader));
  return make_error(src, {0, 0},
                    fmt::format("no timeline {} in the text: it has {}, numbered from 0 (blocks that begin '{}' or '{}')",
                                section, seen, kHeader, kSmHeader));
}

}  // namespace napkin::emit
