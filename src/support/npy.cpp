// SPDX-License-Identifier: Apache-2.0
#include "support/npy.h"

#include <bit>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace napkin {

namespace {

// IEEE half -> double, for '<f2' files.
double half_to_double(std::uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double v;
  if (exponent == 0) v = std::ldexp(mantissa, -24);
  else if (exponent == 31) v = mantissa ? NAN : INFINITY;
  else v = std::ldexp(mantissa + 1024, exponent - 25);
  return sign ? -v : v;
}

// The value of `key` in the header dict, e.g. "'<f8'" for 'descr'.
std::string header_field(const std::string& header, const std::string& key) {
  const auto k = header.find("'" + key + "'");
  if (k == std::string::npos) return {};
  auto colon = header.find(':', k);
  if (colon == std::string::npos) return {};
  auto start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos) return {};
  std::size_t end;
  if (header[start] == '(') end = header.find(')', start) + 1;
  else if (header[start] == '\'') end = header.find('\'', start + 1) + 1;
  else end = header.find_first_of(",}", start);
  if (end == std::string::npos || end == 0) return {};
  return header.substr(start, end - start);
}

}  // namespace

Result<NpyArray> read_npy(const std::string& path) {
  auto file = read_source_file(path);
  if (!file) return file.error();
  return parse_npy(file->text, path);
}

Result<NpyArray> parse_npy(std::string_view bytes, const std::string& path) {
  auto bad = [&](const std::string& why) {
    return plain_error(fmt::format("{}: not a readable .npy file: {}", path, why));
  };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return bad("missing the \\x93NUMPY magic");
  const int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad("truncated header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  } else {
    return bad(fmt::format("format version {} is not supported (expected 1, 2 or 3)", major));
  }
  if (header_start + header_len > bytes.size()) return bad("truncated header");
  const std::string header(bytes.substr(header_start, header_len));
  const std::string descr = header_field(header, "descr");
  const std::string fortran = header_field(header, "fortran_order");
  const std::string shape_text = header_field(header, "shape");
  if (descr.empty() || fortran.empty() || shape_text.empty()) return bad("malformed header dict");
  if (fortran != "False") return bad("Fortran-order arrays are not supported (expected C order)");
  NpyArray a;
  std::int64_t count = 1;
  for (std::size_t i = 1; i + 1 < shape_text.size();) {
    while (i + 1 < shape_text.size() && (shape_text[i] == ' ' || shape_text[i] == ',')) ++i;
    if (i + 1 >= shape_text.size()) break;
    std::size_t used = 0;
    long long dim;
    try {
      dim = std::stoll(shape_text.substr(i), &used);
    } catch (...) {
      return bad("malformed shape " + shape_text);
    }
    if (dim < 0 || used == 0) return bad("malformed shape " + shape_text);
    a.shape.push_back(dim);
    if (__builtin_mul_overflow(count, static_cast<std::int64_t>(dim), &count)) return bad("shape overflows");
    i += used;
  }
  struct Kind { const char* descr; int bytes; };
  static const Kind kinds[] = {{"'<f8'", 8}, {"'<f4'", 4}, {"'<f2'", 2}, {"'<i8'", 8}, {"'<i4'", 4},
                               {"'<i2'", 2}, {"'|i1'", 1}, {"'|u1'", 1}, {"'|b1'", 1}};
  const Kind* kind = nullptr;
  for (const Kind& k : kinds)
    if (descr == k.descr) kind = &k;
  if (!kind)
    return bad(fmt::format("element type {} is not supported (expected <f8 <f4 <f2 <i8 <i4 <i2 "
                           "|i1 |u1 |b1, little-endian)", descr));
  const std::size_t data_start = header_start + header_len;
  // Checked: a shape of 2^61 elements of 8 bytes must not wrap around to 0 bytes.
  const std::uint64_t data_bytes = bytes.size() - data_start;
  std::uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(count), static_cast<std::uint64_t>(kind->bytes), &expected_bytes))
    return bad("shape overflows");
  if (expected_bytes != data_bytes)
    return bad(fmt::format("expected {} bytes of data for shape {}, found {}", expected_bytes, shape_text, data_bytes));
  a.data.resize(static_cast<std::size_t>(count));
  const char* p = bytes.data() + data_start;
  for (std::int64_t i = 0; i < count; ++i, p += kind->bytes) {
    double v = 0;
    const std::string_view d = kind->descr;
    if (d == "'<f8'") { std::memcpy(&v, p, 8); }
    else if (d == "'<f4'") { float x; std::memcpy(&x, p, 4); v = x; }
    else if (d == "'<f2'") { std::uint16_t x; std::memcpy(&x, p, 2); v = half_to_double(x); }
    else if (d == "'<i8'") { std::int64_t x; std::memcpy(&x, p, 8); v = static_cast<double>(x); }
    else if (d == "'<i4'") { std::int32_t x; std::memcpy(&x, p, 4); v = x; }
    else if (d == "'<i2'") { std::int16_t x; std::memcpy(&x, p, 2); v = x; }
    else if (d == "'|i1'") { v = static_cast<std::int8_t>(*p); }
    else { v = static_cast<unsigned char>(*p); }
    a.data[static_cast<std::size_t>(i)] = v;
  }
  return a;
}

Result<bool> write_npy(const std::string& path, const NpyArray& a) {
  static_assert(std::endian::native == std::endian::little, "npy writer assumes little-endian");
  // Python tuple syntax: "()", "(5,)", "(2, 3)".
  std::string shape = "(";
  for (std::size_t i = 0; i < a.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(a.shape[i]);
  shape += a.shape.size() == 1 ? ",)" : ")";
  std::string header = fmt::format("{{'descr': '<f8', 'fortran_order': False, 'shape': {}, }}", shape);
  // Pad so that magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) return plain_error(fmt::format("{}: cannot open for writing", path));
  f.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(len_bytes, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(a.data.data()),
          static_cast<std::streamsize>(a.data.size() * sizeof(double)));
  if (!f) return plain_error(fmt::format("{}: write failed", path));
  return true;
}

}  // namespace napkin
