// SPDX-License-Identifier: Apache-2.0
// Shared helpers for napkin's tests: source-tree paths, golden files, running the CLI.
#pragma once

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <gtest/gtest.h>

namespace napkin::testing {

inline std::filesystem::path source_dir() { return NAPKIN_SOURCE_DIR; }

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::filesystem::path> files_in(const std::filesystem::path& dir,
                                                   const std::string& extension) {
  std::vector<std::filesystem::path> out;
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && (extension.empty() || e.path().extension() == extension))
      out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Compares `actual` with the golden file tests/golden/<relative>. With NAPKIN_UPDATE_GOLDEN=1
// in the environment the golden file is rewritten instead (review the diff, then commit).
inline void expect_golden(const std::string& relative, const std::string& actual) {
  const auto path = source_dir() / "tests" / "golden" / relative;
  if (const char* u = std::getenv("NAPKIN_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(path))
      << "missing golden file " << path << "; run `make golden` to create it";
  EXPECT_EQ(read_text(path), actual) << "output differs from golden file " << path;
}

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr are captured separately
  std::string err;
};

// Runs the napkin binary with `args` (already shell-quoted) from the source directory.
inline RunResult run_napkin(const std::string& args) {
  const auto tmp = std::filesystem::temp_directory_path() /
                   ("napkin_test_" + std::to_string(::getpid()) + "_" + std::to_string(std::rand()));
  std::filesystem::create_directories(tmp);
  const std::string cmd = "cd '" + source_dir().string() + "' && '" + std::string(NAPKIN_BINARY) +
                          "' " + args + " >'" + (tmp / "out").string() + "' 2>'" +
                          (tmp / "err").string() + "'";
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(tmp / "out");
  r.err = read_text(tmp / "err");
  std::filesystem::remove_all(tmp);
  return r;
}

}  // namespace napkin::testing
