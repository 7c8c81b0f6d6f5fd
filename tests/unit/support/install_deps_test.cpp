// SPDX-License-Identifier: Apache-2.0
// tools/install_deps.sh is quiet when everything is present (issue #19: under `set -o pipefail`,
// `pip show | grep -q` failed whenever grep closed the pipe before pip finished writing, so
// every `make run` reinstalled the CUTLASS headers). Run against stub dpkg-query, python3,
// apt-get and sudo on PATH that log what would be installed.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/test_util.h"

namespace napkin {
namespace {

namespace fs = std::filesystem;

class InstallDeps : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("napkin_install_deps_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "bin");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void stub(const std::string& name, const std::string& body) {
    const fs::path p = dir_ / "bin" / name;
    std::ofstream(p) << "#!/usr/bin/env bash\n" << body;
    fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
  }

  // Stubs for a machine where every Debian package is installed (except `missing_package`)
  // and pip shows nvidia-cutlass at `cutlass_version`, followed by 256 kB more (more than a
  // pipe holds, so a reader that stops at the Version line makes pip die of SIGPIPE), and the
  // SASS tools (nvidia-cuda-cuobjdump and -nvdisasm) at `sass_tools_version`.
  void machine(const std::string& cutlass_version, const std::string& missing_package = "",
               const std::string& sass_tools_version = "13.5.37") {
    const std::string log = (dir_ / "log").string();
    stub("dpkg-query", "pkg=\"${@: -1}\"\n[[ \"$pkg\" == '" + missing_package + "' ]] && exit 1\n"
                       "printf 'install ok installed'\n");
    stub("python3",
         "if [[ \"$*\" == '-m pip show nvidia-cutlass' ]]; then\n"
         "  printf 'Name: nvidia-cutlass\\nVersion: " + cutlass_version + "\\nSummary: CUTLASS\\n'\n"
         "  head -c 262144 /dev/zero | tr '\\0' 'x'\n  echo\n  exit 0\nfi\n"
         "if [[ \"$*\" == '-m pip show nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm' ]]; then\n"
         "  printf 'Name: nvidia-cuda-cuobjdump\\nVersion: " + sass_tools_version + "\\n---\\n'\n"
         "  printf 'Name: nvidia-cuda-nvdisasm\\nVersion: " + sass_tools_version + "\\n'\n  exit 0\nfi\n"
         "if [[ \"$*\" == '-m pip --version' ]]; then echo 'pip 23.0'; exit 0; fi\n"
         "echo \"python3 $*\" >> '" + log + "'\n");
    stub("apt-get", "echo \"apt-get $*\" >> '" + log + "'\n");
    stub("sudo", "\"$@\"\n");
  }

  testing::RunResult run(const std::string& args) {
    const std::string cmd = "PATH='" + (dir_ / "bin").string() + "':\"$PATH\" bash '" +
                            (testing::source_dir() / "tools" / "install_deps.sh").string() + "' " + args +
                            " >'" + (dir_ / "out").string() + "' 2>&1";
    const int status = std::system(cmd.c_str());
    testing::RunResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = testing::read_text(dir_ / "out");
    return r;
  }
  std::string log() const { return testing::read_text(dir_ / "log"); }

  fs::path dir_;
};

TEST_F(InstallDeps, QuietAndInstallsNothingWhenEverythingIsPresent) {
  machine("4.2.0.0");
  for (int i = 0; i < 3; ++i) {  // the old race lost almost every time; three runs to be sure
    auto r = run("--cuda");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(log(), "");
  }
}

TEST_F(InstallDeps, InstallsWhatIsMissingAndSaysSo) {
  machine("4.1.0.0", "chromium");
  auto r = run("--cuda");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("install_deps: installing Debian packages: chromium"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("install_deps: installing nvidia-cutlass==4.2.0.0"), std::string::npos) << r.out;
  EXPECT_NE(log().find("apt-get install -y -qq --no-install-recommends chromium"), std::string::npos) << log();
  EXPECT_NE(log().find("python3 -m pip install -q nvidia-cutlass==4.2.0.0"), std::string::npos) << log();
}

TEST_F(InstallDeps, InstallsTheSassToolsAtTheirPinnedVersion) {
  machine("4.2.0.0", "", "13.0.85");
  auto r = run("--cuda");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("install_deps: installing nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37"),
            std::string::npos) << r.out;
  EXPECT_NE(log().find("python3 -m pip install -q nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37"),
            std::string::npos) << log();
}

}  // namespace
}  // namespace napkin
