// SPDX-License-Identifier: Apache-2.0
// `--machine` takes a machine file's path as well as a shipped machine's name (issue #19).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "arch/load.h"
#include "common/test_util.h"

namespace napkin::arch {
namespace {

std::string machines_dir() { return (testing::source_dir() / "machines").string(); }

// A copy of h100-sxm5.toml renamed `name`, written as DIR/NAME.toml; returns its path.
std::string user_machine(const std::filesystem::path& dir, const std::string& name) {
  std::string text = testing::read_text(testing::source_dir() / "machines" / "h100-sxm5.toml");
  text.replace(text.find("name = \"h100-sxm5\""), 18, "name = \"" + name + "\"");
  std::filesystem::create_directories(dir);
  const auto path = dir / (name + ".toml");
  std::ofstream(path) << text;
  return path.string();
}

TEST(MachinePath, APathIsReadAsAMachineFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("napkin_machine_path_" + std::to_string(::getpid()));
  const std::string path = user_machine(dir, "mygpu");
  auto m = find_machine_or_file(path, machines_dir());
  ASSERT_TRUE(m.ok()) << m.error().format();
  EXPECT_EQ(m->name, "mygpu");
  EXPECT_EQ(m->sm_count.value, 132);
  // A shipped machine by its path, and by its name: the same machine.
  auto by_path = find_machine_or_file(machines_dir() + "/h200.toml", "/nonexistent");
  auto by_name = find_machine_or_file("h200", machines_dir());
  ASSERT_TRUE(by_path.ok() && by_name.ok());
  EXPECT_TRUE(*by_path == *by_name);
  std::filesystem::remove_all(dir);
}

TEST(MachinePath, ErrorsNameTheFileOrSayAPathIsAccepted) {
  auto missing = find_machine_or_file("no/such/gpu.toml", machines_dir());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().headline(), "error: no/such/gpu.toml: cannot read the machine file");
  auto bare = find_machine_or_file("gpu.toml", machines_dir());  // ends in .toml: a path
  ASSERT_FALSE(bare.ok());
  EXPECT_EQ(bare.error().headline(), "error: gpu.toml: cannot read the machine file");
  auto directory = find_machine_or_file(machines_dir() + "/", machines_dir());
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().message, machines_dir() + "/: is a directory; expected a machine file (.toml)");
  // A directory named without a '/' (./machines given as "machines") is named as a directory.
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(std::filesystem::path(machines_dir()).parent_path());
  auto bare_directory = find_machine_or_file("machines", machines_dir());
  std::filesystem::current_path(cwd);
  ASSERT_FALSE(bare_directory.ok());
  EXPECT_EQ(bare_directory.error().message,
            "--machine machines: is a directory; expected a machine name (see `napkin machines`) or the path of a "
            "machine file (NAME.toml)");
  auto unknown = find_machine_or_file("h900", machines_dir());
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message, "unknown machine 'h900'; " + machines_dir() +
                                         " has: a100-sxm4-80g, b200, h100-pcie, h100-sxm5, h200, rtx4090; "
                                         "or give the path of a machine file (e.g. ./mygpu.toml; docs/machines.md)");
  // The file's own diagnostic: its name must equal its stem.
  const auto dir = std::filesystem::temp_directory_path() / ("napkin_machine_path_bad_" + std::to_string(::getpid()));
  const std::string path = user_machine(dir, "mygpu");
  const std::string renamed = (dir / "other.toml").string();
  std::filesystem::rename(path, renamed);
  auto wrong_name = find_machine_or_file(renamed, machines_dir());
  ASSERT_FALSE(wrong_name.ok());
  EXPECT_EQ(wrong_name.error().message, "name: expected \"other\" (the file's name), found \"mygpu\"");
  std::filesystem::remove_all(dir);
}

// End to end: every command that takes --machine accepts the path.
TEST(MachinePath, CommandsAcceptThePath) {
  const auto dir = std::filesystem::temp_directory_path() / ("napkin_machine_path_cli_" + std::to_string(::getpid()));
  const std::string path = user_machine(dir, "mygpu");
  for (const std::string& cmd : {"analyze", "derive", "pseudocode"}) {
    auto r = testing::run_napkin(cmd + " examples/attention.napkin --machine '" + path + "'");
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
  }
  auto a = testing::run_napkin("analyze examples/attention.napkin --machine '" + path + "'");
  EXPECT_EQ(a.out.rfind("napkin analyze examples/attention.napkin on mygpu (NVIDIA H100 SXM5 80GB)\n", 0), 0u) << a.out;
  auto c = testing::run_napkin("compare examples/attention.napkin --dtypes bf16 --machines h100-sxm5,'" + path + "'");
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("\nmygpu "), std::string::npos) << c.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace napkin::arch
