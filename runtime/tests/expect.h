// SPDX-License-Identifier: Apache-2.0
// The runtime's host tests (no GPU): a failed expectation prints what was checked and what came
// out; main returns nonzero where any failed.
#pragma once

#include <cstdio>
#include <string>

namespace napkin::runtime_test {

inline int failures = 0;

inline void expect(bool ok, const char* what, const std::string& got) {
  if (!ok) {
    std::printf("FAIL %s: '%s'\n", what, got.c_str());
    ++failures;
  }
}

}  // namespace napkin::runtime_test
