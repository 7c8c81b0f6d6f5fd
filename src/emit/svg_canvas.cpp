// SPDX-License-Identifier: Apache-2.0
#include "emit/svg_canvas.h"

#include <cmath>
#include <cstdint>

#include <fmt/format.h>

namespace napkin::emit {

#ifndef NAPKIN_VERSION
#define NAPKIN_VERSION "0.0.0"
#endif
std::string_view napkin_version() { return NAPKIN_VERSION; }

bool Rect::intersects(const Rect& o) const {
  // Touching edges do not count: labels are placed flush against each other on purpose.
  const double e = 0.01;
  return x + e < o.x + o.w && o.x + e < x + w && y + e < o.y + o.h && o.y + e < y + h;
}

std::string fmt_num(double v) {
  std::string s = fmt::format("{:.1f}", v);
  return s == "-0.0" ? "0.0" : s;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

double text_width(std::string_view s, double size, bool bold) {
  // DejaVu Sans advances (em): digits and most lowercase about 0.62, capitals about 0.72,
  // narrow letters (i l j t f r) and punctuation about 0.35. Slightly generous on purpose.
  double em = 0;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (len == 1) {
      if (c == ' ') em += 0.33;
      else if (std::string_view("iljtfr.,:;'|!()[]").find(static_cast<char>(c)) != std::string_view::npos) em += 0.38;
      else if (c == 'm' || c == 'w' || c == 'M' || c == 'W') em += 0.92;
      else if (c >= 'A' && c <= 'Z') em += 0.74;
      else em += 0.64;
    } else {
      em += 0.8;  // ×, ÷, −, ≥, µ, ·: at most 0.84 em in DejaVu Sans
    }
    i += static_cast<std::size_t>(len);
  }
  return em * size * (bold ? 1.1 : 1.0);
}

double runs_width(const std::vector<TextRun>& runs, double size, bool bold) {
  double w = 0;
  for (const TextRun& r : runs) w += text_width(r.text, r.sub ? size * 0.75 : size, bold);
  return w;
}

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024) bytes /= 1024, ++u;
  if (bytes == std::floor(bytes)) return fmt::format("{} {}", static_cast<std::int64_t>(bytes), units[u]);
  return fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string si_text(double v, std::string_view unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int p = 0;
  while (p < 6 && std::fabs(v) >= 1000) v /= 1000, ++p;
  std::string num = std::fabs(v) >= 100 ? fmt::format("{:.0f}", v)
                    : std::fabs(v) >= 10 ? fmt::format("{:.1f}", v)
                                         : fmt::format("{:.2f}", v);
  return fmt::format("{} {}{}", num, prefixes[p], unit);
}

void Canvas::rect(double x, double y, double w, double h, std::string_view attrs, std::string what) {
  body_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" {}/>\n", fmt_num(x),
                       fmt_num(y), fmt_num(w), fmt_num(h), attrs);
  if (!what.empty()) tracked_.push_back({x, y, w, h, std::move(what)});
}

void Canvas::line(double x1, double y1, double x2, double y2, std::string_view attrs) {
  body_ += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" {}/>\n", fmt_num(x1),
                       fmt_num(y1), fmt_num(x2), fmt_num(y2), attrs);
}

void Canvas::path(std::string_view d, std::string_view attrs) {
  body_ += fmt::format("<path d=\"{}\" {}/>\n", d, attrs);
}

void Canvas::circle(double cx, double cy, double r, std::string_view attrs) {
  body_ += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" {}/>\n", fmt_num(cx), fmt_num(cy),
                       fmt_num(r), attrs);
}

Rect Canvas::text(double x, double y, std::string_view s, const TextStyle& st, std::string what) {
  return text_runs(x, y, {TextRun{std::string(s), false}}, st, std::move(what));
}

Rect Canvas::text_runs(double x, double y, const std::vector<TextRun>& runs, const TextStyle& st,
                       std::string what) {
  const double w = runs_width(runs, st.size, st.bold);
  std::string attrs = fmt::format("x=\"{}\" y=\"{}\" font-size=\"{}\"", fmt_num(x), fmt_num(y),
                                  fmt_num(st.size));
  if (st.anchor != "start") attrs += fmt::format(" text-anchor=\"{}\"", st.anchor);
  if (st.bold) attrs += " font-weight=\"bold\"";
  if (st.italic) attrs += " font-style=\"italic\"";
  if (st.fill != "#000000") attrs += fmt::format(" fill=\"{}\"", st.fill);
  std::string content;
  bool lowered = false;  // inside a subscript: the next normal run moves back up
  for (const TextRun& r : runs) {
    if (r.sub) {
      content += fmt::format("<tspan dy=\"{}\" font-size=\"{}\">{}</tspan>", fmt_num(st.size * 0.3),
                             fmt_num(st.size * 0.75), xml_escape(r.text));
      lowered = true;
    } else if (lowered) {
      content += fmt::format("<tspan dy=\"{}\">{}</tspan>", fmt_num(-st.size * 0.3), xml_escape(r.text));
      lowered = false;
    } else {
      content += xml_escape(r.text);
    }
  }
  body_ += fmt::format("<text {}>{}</text>\n", attrs, content);
  const double left = st.anchor == "middle" ? x - w / 2 : st.anchor == "end" ? x - w : x;
  // Ascent about 0.76 em above the baseline, descent 0.24 em (0.45 em with a subscript).
  bool has_sub = false;
  for (const TextRun& r : runs) has_sub |= r.sub;
  Rect extent{left, y - st.size * 0.76, w, st.size * (has_sub ? 1.2 : 1.0), std::move(what)};
  if (!extent.what.empty()) tracked_.push_back(extent);
  return extent;
}

void Canvas::open_group(std::string_view attrs) { body_ += fmt::format("<g {}>\n", attrs); }

std::vector<std::string> Canvas::overlaps() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < tracked_.size(); ++i)
    for (std::size_t j = i + 1; j < tracked_.size(); ++j)
      if (tracked_[i].intersects(tracked_[j]))
        out.push_back(tracked_[i].what + " | " + tracked_[j].what);
  return out;
}

std::string Canvas::finish(double width, double height, const std::vector<std::string>& provenance,
                           std::string_view title) const {
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!--\n";
  for (const std::string& line : provenance) {
    std::string safe = line;  // "--" may not appear inside an XML comment
    for (std::size_t p; (p = safe.find("--")) != std::string::npos;) safe.replace(p, 2, "- -");
    out += "  " + safe + "\n";
  }
  out += "-->\n";
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"{2}\">\n",
      fmt_num(std::ceil(width)), fmt_num(std::ceil(height)), kFontStack);
  out += fmt::format("<title>{}</title>\n", xml_escape(title));
  out += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
                     fmt_num(std::ceil(width)), fmt_num(std::ceil(height)));
  out += body_;
  out += "</svg>\n";
  return out;
}

}  // namespace napkin::emit
