// SPDX-License-Identifier: Apache-2.0
// The small SVG writer behind every drawing (internal to emit): fixed number formatting,
// escaping, estimated text extents and a record of every box and label so that a layout can
// be checked for overlaps.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace napkin::emit {

inline constexpr std::string_view kFontStack = "DejaVu Sans, Helvetica, Arial, sans-serif";

// A piece of text; `sub` pieces are drawn as subscripts (g_q: "g", then "q" as a subscript).
struct TextRun {
  std::string text;
  bool sub = false;
};

struct TextStyle {
  double size = 11;
  bool bold = false;
  bool italic = false;
  std::string_view anchor = "start";  // start | middle | end
  std::string_view fill = "#000000";
};

struct Rect {
  double x = 0, y = 0, w = 0, h = 0;
  std::string what;  // for overlap reports
  bool intersects(const Rect& o) const;
};

// Number with one decimal ("12.0"), the only way coordinates are written.
std::string fmt_num(double v);
// XML text escaping (& < > ").
std::string xml_escape(std::string_view s);
// Estimated advance width of `s` in DejaVu Sans at `size` px (code points, wide capitals).
double text_width(std::string_view s, double size, bool bold = false);
double runs_width(const std::vector<TextRun>& runs, double size, bool bold = false);
// Bytes as "228 KiB", "80 GiB", "1.5 MiB".
std::string bytes_text(double bytes);
// A number with 3 significant digits and an SI prefix: si_text(3.35e12, "B/s") = "3.35 TB/s".
std::string si_text(double v, std::string_view unit);

class Canvas {
 public:
  // Elements are written in call order. `attrs` is inserted verbatim (already formatted).
  void rect(double x, double y, double w, double h, std::string_view attrs, std::string what = {});
  void line(double x1, double y1, double x2, double y2, std::string_view attrs);
  void path(std::string_view d, std::string_view attrs);
  void circle(double cx, double cy, double r, std::string_view attrs);
  // Text at baseline y. Tracked for overlaps unless `what` is empty. Returns its extent.
  Rect text(double x, double y, std::string_view s, const TextStyle& st, std::string what = {});
  Rect text_runs(double x, double y, const std::vector<TextRun>& runs, const TextStyle& st,
                 std::string what = {});
  void raw(std::string_view s) { body_ += s; }
  void open_group(std::string_view attrs);
  void close_group() { body_ += "</g>\n"; }
  // Marks a region as occupied for the overlap check without drawing anything.
  void reserve(const Rect& r) { tracked_.push_back(r); }

  // "A | B" for every pair of tracked rectangles that intersect (in recording order).
  std::vector<std::string> overlaps() const;

  // The complete document: XML prolog, `provenance` as one comment (each line "  line"),
  // <svg> with the given size, a white background, the title element, then the body.
  std::string finish(double width, double height, const std::vector<std::string>& provenance,
                     std::string_view title) const;

 private:
  std::string body_;
  std::vector<Rect> tracked_;
};

// The napkin version compiled in (CMake's PROJECT_VERSION).
std::string_view napkin_version();

}  // namespace napkin::emit
