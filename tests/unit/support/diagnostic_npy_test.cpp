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

TEST(Npy, MissingFileNamesThePath) {
  auto a = read_npy("/nonexistent/x.npy");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().message, "/nonexistent/x.npy: cannot open the file");
}

}  // namespace
}  // namespace napkin
