// SPDX-License-Identifier: Apache-2.0
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "support/diagnostic.h"
#include "support/npy.h"

namespace napkin {
namespace {

TEST(Diagnostic, FormatShowsLineAndCaret) {
  const SourceText src{"a.napkin", "axes q=4\nin Q[q x] bf16\n"};
  const Diagnostic d = make_error(src, {2, 8}, "unknown axis 'x'", "expected one of: q");
  EXPECT_EQ(d.headline(), "a.napkin:2:8: error: unknown axis 'x'");
  EXPECT_EQ(d.format(),
            "a.napkin:2:8: error: unknown axis 'x'\n"
            "  in Q[q x] bf16\n"
            "         ^\n"
            "  expected one of: q");
}

// Binary garbage is shown escaped, never written raw to the terminal: a control byte, an ANSI
// escape sequence, malformed UTF-8 and a bidirectional override; well-formed UTF-8 stays.
TEST(Diagnostic, NonPrintableBytesAreEscapedAndTheCaretFollows) {
  const SourceText src{"b.napkin", std::string("x = \x01\x1b[31m\xff\xc3\xa9\xe2\x80\xae") + "@\n"};
  const Diagnostic d = make_error(src, {1, 17}, std::string("unexpected character '\xff'"));
  EXPECT_EQ(d.format(),
            "b.napkin:1:17: error: unexpected character '\\xFF'\n"
            "  x = \\x01\\x1B[31m\\xFF\xc3\xa9\\u{202E}@\n  " + std::string(29, ' ') + "^");
  EXPECT_EQ(shown_text("caf\xc3\xa9 \t\x7f\xc0\xaf"), "caf\xc3\xa9 \t\\x7F\\xC0\\xAF");
}

// A 200 kB line is cut to a window around the caret; a 200 kB name in a message keeps its ends.
TEST(Diagnostic, LongLinesAndWordsAreElided) {
  const std::string line = std::string(100000, 'a') + " = " + std::string(100000, 'b');
  const Diagnostic d = make_error(SourceText{"l.napkin", line + "\n"}, {1, 100002}, "expected a name");
  const std::string f = d.format();
  const auto shown = f.substr(f.find('\n') + 3, f.rfind('\n') - f.find('\n') - 3);
  EXPECT_LE(shown.size(), static_cast<std::size_t>(kShownLineColumns) + 6);
  EXPECT_EQ(shown.substr(0, 3), "...");
  EXPECT_EQ(shown.substr(shown.size() - 3), "...");
  EXPECT_NE(shown.find("a = b"), std::string::npos);
  // The caret sits under the '=' of the window.
  EXPECT_EQ(f.substr(f.rfind('\n') + 3).size(), shown.find('=') + 1);
  const std::string word = shown_text("unknown name '" + std::string(200000, 'x') + "'");
  EXPECT_EQ(word, "unknown name '" + std::string(39, 'x') + "..." + std::string(39, 'x') + "'");
  // Short lines, and a caret past the end of the line, are as before.
  EXPECT_EQ(make_error(SourceText{"s", "ab\n"}, {1, 3}, "m").format(), "s:1:3: error: m\n  ab\n    ^");
}

TEST(Diagnostic, ADirectoryIsNotAFile) {
  auto r = read_source_file(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, std::filesystem::temp_directory_path().string() + ": is a directory; expected a file");
}

// A file that never ends (a device) is refused past a bound instead of read forever.
TEST(Diagnostic, AnEndlessFileIsRefused) {
  if (!std::filesystem::exists("/dev/zero")) GTEST_SKIP() << "no /dev/zero";
  auto r = read_source_file("/dev/zero");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "/dev/zero: more than 64 MiB; expected a diagram or machine file");
}

TEST(Diagnostic, PlainErrorHasNoLocation) {
  EXPECT_EQ(plain_error("--set q: expected NAME=VALUE").format(),
            "error: --set q: expected NAME=VALUE");
}

TEST(Diagnostic, ResultHoldsValueOrError) {
  Result<int> ok = 3;
  Result<int> bad = plain_error("no");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.value(), 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "no");
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("napkin_npy_" + name);
}

TEST(Npy, RoundTripsShapesAndValues) {
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{}, {5}, {2, 3}, {2, 1, 4, 3}}) {
    NpyArray a;
    a.shape = shape;
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    for (std::int64_t i = 0; i < n; ++i) a.data.push_back(0.5 * static_cast<double>(i) - 1.25);
    const auto path = temp_file("rt.npy").string();
    ASSERT_TRUE(write_npy(path, a).ok());
    auto b = read_npy(path);
    ASSERT_TRUE(b.ok()) << b.error().format();
    EXPECT_EQ(b->shape, a.shape);
    EXPECT_EQ(b->data, a.data);
    // The header is padded so the data starts at a multiple of 64 bytes (numpy's rule).
    EXPECT_EQ((std::filesystem::file_size(path) - a.data.size() * 8) % 64, 0u);
  }
}

TEST(Npy, ReadsFloat32AndRejectsFortranOrder) {
  const auto write_raw = [](const std::string& path, const std::string& header, const std::string& data) {
    std::string h = header;
    while ((10 + h.size() + 1) % 64) h += ' ';
    h += '\n';
    std::ofstream f(path, std::ios::binary);
    f.write("\x93NUMPY\x01\x00", 8);
    const char len[2] = {static_cast<char>(h.size() & 0xff), static_cast<char>(h.size() >> 8)};
    f.write(len, 2);
    f << h << data;
  };
  const float values[3] = {1.5f, -2.0f, 0.25f};
  const auto path = temp_file("f4.npy").string();
  write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
            std::string(reinterpret_cast<const char*>(values), sizeof values));
  auto a = read_npy(path);
  ASSERT_TRUE(a.ok()) << a.error().format();
  EXPECT_EQ(a->data, (std::vector<double>{1.5, -2.0, 0.25}));

  write_raw(path, "{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }",
            std::string(reinterpret_cast<const char*>(values), sizeof values));
  auto b = read_npy(path);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().message, path + ": not a readable .npy file: Fortran-order arrays are not "
                                      "supported (expected C order)");

  write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
            std::string(reinterpret_cast<const char*>(values), sizeof values));
  auto c = read_npy(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message, path + ": not a readable .npy file: expected 16 bytes of data for "
                                      "shape (4,), found 12");
}

// A shape whose byte count wraps around 2^64 is an error, not a 2^61-element allocation.
TEST(Npy, AShapeOverflowingTheByteCountIsAnError) {
  std::string h = "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  const std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size()) + '\0' + h;
  auto a = parse_npy(bytes, "big.npy");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().message, "big.npy: not a readable .npy file: shape overflows");
}

TEST(Npy, MissingFileNamesThePath) {
  auto a = read_npy("/nonexistent/x.npy");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().message, "/nonexistent/x.npy: cannot open the file");
}

}  // namespace
}  // namespace napkin
