// SPDX-License-Identifier: Apache-2.0
// The napkin command line as a user meets it: golden output for every example, exit codes,
// JSON that parses, and one-line errors for bad files, flags and arguments.
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "ir/parser.h"
#include "reference/interpreter.h"
#include "support/npy.h"

namespace napkin {
namespace {

using testing::run_napkin;

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

TEST(Cli, PrintEveryExampleMatchesGolden) {
  for (const auto& f : testing::files_in(testing::source_dir() / "examples", ".napkin")) {
    const std::string name = f.filename().string();
    auto r = run_napkin("print examples/" + name);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    testing::expect_golden("print/" + name, r.out);
  }
}

TEST(Cli, CheckSummaryAndJsonMatchGolden) {
  auto text = run_napkin("check examples/attention.napkin");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  testing::expect_golden("check/attention.txt", text.out);
  auto j = run_napkin("check --json examples/gqa.napkin --set q=512");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto parsed = nlohmann::json::parse(j.out);
  EXPECT_EQ(parsed.at("axes").at(3).at("name"), "q");
  EXPECT_EQ(parsed.at("axes").at(3).at("size"), 512);
  testing::expect_golden("check/gqa_q512.json", j.out);
  auto ir_json = run_napkin("print --json examples/causal.napkin");
  ASSERT_EQ(ir_json.exit_code, 0);
  testing::expect_golden("print/causal.json", ir_json.out);
}

TEST(Cli, EvalWritesOutputsEqualToTheInterpreter) {
  const auto dir = std::filesystem::temp_directory_path() / "napkin_cli_eval";
  std::filesystem::remove_all(dir);
  auto r = run_napkin("eval examples/attention.napkin --set b=1 --set h=2 --set q=33 --set k=17 "
                      "--set d=8 --seed 5 -o " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto o = read_npy((dir / "O.npy").string());
  ASSERT_TRUE(o.ok()) << o.error().format();
  EXPECT_EQ(o->shape, (std::vector<std::int64_t>{1, 2, 33, 8}));
  auto p = ir::load_diagram((testing::source_dir() / "examples/attention.napkin").string(),
                            {{"b", 1, ""}, {"h", 2, ""}, {"q", 33, ""}, {"k", 17, ""}, {"d", 8, ""}});
  ASSERT_TRUE(p.ok());
  auto expected = reference::evaluate(p->diagram, reference::random_inputs(p->diagram, 5));
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(o->data, expected->at("O").data);
}

TEST(Cli, EvalReadsInputsFromNpy) {
  const auto dir = std::filesystem::temp_directory_path() / "napkin_cli_npy";
  std::filesystem::create_directories(dir);
  NpyArray a{{2, 3}, {1, 2, 3, 4, 5, 6}}, b{{3, 2}, {1, 0, 0, 1, 1, 1}};
  ASSERT_TRUE(write_npy((dir / "A.npy").string(), a).ok());
  ASSERT_TRUE(write_npy((dir / "B.npy").string(), b).ok());
  auto r = run_napkin("eval examples/matmul.napkin --set m=2 --set k=3 --set n=2 --input A=" +
                      (dir / "A.npy").string() + " --input B=" + (dir / "B.npy").string() +
                      " -o " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto c = read_npy((dir / "C.npy").string());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->data, (std::vector<double>{4, 5, 10, 11}));
}

TEST(Cli, FailuresGiveANonzeroExitAndAOneLineReason) {
  struct Case {
    std::string args, first_line;
  };
  const std::vector<Case> cases = {
      {"check tests/errors/unknown_axis.napkin",
       "tests/errors/unknown_axis.napkin:2:8: error: unknown axis 'x' in input 'Q'"},
      {"check examples/missing.napkin", "error: examples/missing.napkin: cannot open the file"},
      {"check examples/attention.napkin --set q=-1",
       "error: --set q=-1: axis 'q' needs a positive integer size"},
      {"check examples/attention.napkin --set t=4",
       "error: --set t=4: examples/attention.napkin has no axis or param named 't' (axes: b h q k d)"},
      {"check examples/attention.napkin --set q",
       "error: --set q: expected NAME=VALUE, e.g. --set q=8192"},
      {"eval examples/attention.napkin -o /tmp/napkin_never",
       "error: examples/attention.napkin: evaluating needs about 7.09e+13 f64 steps, more than "
       "--max-work 1e+10; bind smaller sizes with --set (e.g. --set q=256), or raise --max-work"},
      {"eval examples/matmul.napkin --set m=2 --set k=3 --set n=2 --input Z=z.npy -o /tmp/x",
       "error: --input Z=z.npy: examples/matmul.napkin has no input named 'Z' (inputs: A B)"},
      {"eval examples/matmul.napkin --set m=2 --set k=3 --set n=2 --input A=/nonexistent.npy -o /tmp/x",
       "error: /nonexistent.npy: cannot open the file"},
  };
  for (const Case& c : cases) {
    auto r = run_napkin(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args;
    EXPECT_EQ(first_line(r.err), c.first_line) << c.args;
    EXPECT_EQ(r.out, "") << c.args;
  }
}

TEST(Cli, JsonErrorsAreJson) {
  auto r = run_napkin("check --json tests/errors/cycle.napkin");
  EXPECT_EQ(r.exit_code, 1);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("ok"), false);
  EXPECT_EQ(j.at("error").at("line"), 5);
  EXPECT_EQ(j.at("error").at("message"), "cycle: 'A' depends on itself (A -> B -> C -> A)");
}

TEST(Cli, UsageErrorsAndHelp) {
  auto none = run_napkin("");
  EXPECT_NE(none.exit_code, 0);
  auto unknown = run_napkin("frobnicate");
  EXPECT_NE(unknown.exit_code, 0);
  auto bad_flag = run_napkin("check examples/attention.napkin --colour");
  EXPECT_NE(bad_flag.exit_code, 0);
  EXPECT_NE(bad_flag.err.find("--colour"), std::string::npos) << bad_flag.err;
  for (const char* sub : {"check", "print", "eval"}) {
    auto help = run_napkin(std::string(sub) + " --help");
    EXPECT_EQ(help.exit_code, 0) << sub;
    EXPECT_NE(help.out.find("--set"), std::string::npos) << sub;
  }
}

}  // namespace
}  // namespace napkin
