// SPDX-License-Identifier: Apache-2.0
// A fuzz target without libFuzzer: runs LLVMFuzzerTestOneInput once on each seed of a kind
// (fuzz_seeds.txt) and each file of tests/fuzz/regressions/KIND/, so that a plain build's
// ctest keeps every seed and every past crash passing.
//   replay_KIND --seeds fuzz_seeds.txt KIND SOURCE_DIR
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace fs = std::filesystem;

namespace {

// Files matching DIR/PATTERN, where PATTERN is "*" or "*.EXT".
std::vector<fs::path> matching(const fs::path& dir, const std::string& pattern) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool ok = pattern == "*" || (pattern.rfind("*", 0) == 0 && name.size() >= pattern.size() - 1 &&
                                       name.compare(name.size() - (pattern.size() - 1), pattern.size() - 1,
                                                    pattern, 1) == 0);
    if (e.is_regular_file() && ok && name[0] != '.') out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 || std::string(argv[1]) != "--seeds") {
    std::fprintf(stderr, "usage: %s --seeds fuzz_seeds.txt KIND SOURCE_DIR\n", argv[0]);
    return 2;
  }
  const std::string kind = argv[3];
  const fs::path root = argv[4];
  std::vector<fs::path> inputs;
  std::ifstream seeds(argv[2]);
  for (std::string line; std::getline(seeds, line);) {
    std::istringstream in(line);
    std::string k, glob;
    if (!(in >> k >> glob) || k[0] == '#' || k != kind) continue;
    const fs::path g = root / glob;
    for (const fs::path& p : matching(g.parent_path(), g.filename().string())) inputs.push_back(p);
  }
  for (const fs::path& p : matching(root / "tests/fuzz/regressions" / kind, "*")) inputs.push_back(p);
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  for (const fs::path& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay %s: %zu inputs, no crash\n", kind.c_str(), inputs.size());
  return inputs.empty() ? 1 : 0;
}
