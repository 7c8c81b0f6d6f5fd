// SPDX-License-Identifier: Apache-2.0
// The napkin command line as a user meets it: golden output for every example, exit codes,
// JSON that parses, and one-line errors for bad files, flags and arguments.
#include <filesystem>
#include <cmath>
#include <fstream>

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

// An i32 or bool input from .npy holds integers (0 or 1): a fraction, NaN or a value past i32 is
// refused by element, not rounded.
TEST(Cli, EvalRefusesNonIntegersForIntegerInputs) {
  const auto dir = std::filesystem::temp_directory_path() / "napkin_cli_npy_int";
  std::filesystem::create_directories(dir);
  const std::string diagram = (dir / "d.napkin").string();
  std::ofstream(diagram) << "axes b=2 s=2\nin seg[b s] i32\nin keep[b s] bool\nY = select(keep, seg, 0) as f32\nout Y\n";
  const struct {
    std::string input;
    std::vector<double> values;
    std::string message;
  } cases[] = {
      {"seg", {0, 1, 2.5, 3}, "element (1, 0) of"},
      {"seg", {0, 1, 2, std::nan("")}, "element (1, 1) of"},
      {"seg", {3e10, 1, 2, 3}, "is 30000000000, but input 'seg' is i32: expected an integer from -2147483648 to 2147483647"},
      {"keep", {0, 1, 2, 1}, "is 2, but input 'keep' is bool: expected 0 or 1"},
  };
  for (const auto& c : cases) {
    const std::string path = (dir / (c.input + ".npy")).string();
    ASSERT_TRUE(write_npy(path, {{2, 2}, c.values}).ok());
    auto r = run_napkin("eval " + diagram + " --input " + c.input + "=" + path + " -o " + dir.string());
    EXPECT_EQ(r.exit_code, 1) << c.message;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  ASSERT_TRUE(write_npy((dir / "seg.npy").string(), {{2, 2}, {-5, 0, 7, 2147483647}}).ok());
  EXPECT_EQ(run_napkin("eval " + diagram + " --input seg=" + (dir / "seg.npy").string() + " -o " + dir.string()).exit_code, 0);
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
      {"check examples/attention.napkin --set q=99999999999999999999",
       "error: --set q=99999999999999999999: axis 'q' is larger than the largest size napkin takes (2^63 - 1)"},
      {"eval examples/matmul.napkin -o /tmp/napkin_never --set m=100000",
       "error: examples/matmul.napkin: evaluating needs about 1.68e+12 f64 steps, more than "
       "--max-work 1e+10; bind smaller sizes with --set (e.g. --set m=256), or raise --max-work"},
      {"check examples/attention.napkin --set t=4",
       "error: --set t=4: examples/attention.napkin has no axis or param named 't' (axes: b h q k d)"},
      {"eval examples/attention.napkin -o /tmp/napkin_never",
       "error: examples/attention.napkin: evaluating needs about 5.61e+11 f64 steps, more than "
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

// Exit 2 for every usage error (tools/napkin/cli.h), found before any file is read, with one
// line naming the command, the option and what was expected, and the nearest command or option.
TEST(Cli, UsageErrorsExitTwoAndSayWhatWasExpected) {
  struct Case {
    std::string args, first_line;
  };
  const std::string attention = "examples/attention.napkin", h100 = " --machine h100-sxm5";
  const std::vector<Case> cases = {
      {"", "error: expected a command, one of: check print eval machines analyze compare derive pseudocode "
           "run-schedule run-plan draw draw-trace report build run"},
      {"chek " + attention, "error: unknown command 'chek'; did you mean 'check'?"},
      {"drive " + attention, "error: unknown command 'drive'; did you mean 'derive'?"},
      {"psuedocode " + attention, "error: unknown command 'psuedocode'; did you mean 'pseudocode'?"},
      {"frobnicate", "error: unknown command 'frobnicate'; expected one of: check print eval machines analyze "
                     "compare derive pseudocode run-schedule run-plan draw draw-trace report build run"},
      {"--json check " + attention,
       "error: unknown option '--json' before the command; the command comes first: napkin COMMAND [ARGUMENTS]"},
      {"check " + attention + " --colour", "error: check: unknown option '--colour'"},
      {"check " + attention + " --jsn", "error: check: unknown option '--jsn'; did you mean '--json'?"},
      {"derive " + attention + " --machin h100-sxm5", "error: derive: unknown option '--machin'; did you mean '--machine'?"},
      {"derive " + attention + h100 + " --tpo 3", "error: derive: unknown option '--tpo'; did you mean '--top'?"},
      {"check " + attention + " --machine h100-sxm5",
       "error: check: unknown option '--machine'; it is an option of analyze derive pseudocode run-plan draw report build "
       "run, not of check"},
      {"check", "error: check: missing FILE: the .napkin diagram"},
      {"check " + attention + " other.napkin", "error: check: unexpected argument 'other.napkin'"},
      {"derive " + attention, "error: derive: missing --machine: machine name (see `napkin machines`)"},
      {"derive " + attention + h100 + " --top", "error: derive: --top needs a value: how many ranked schedules to print (default 5)"},
      {"derive " + attention + h100 + " --top 3 --top 4", "error: derive: --top is given 2 times; give it once"},
      {"derive " + attention + h100 + " --top 0",
       "error: --top 0: expected a positive integer (at most 2147483647), e.g. --top 5"},
      {"derive " + attention + h100 + " --top -3",
       "error: --top -3: expected a positive integer (at most 2147483647), e.g. --top 5"},
      {"derive " + attention + h100 + " --top 2.5",
       "error: --top 2.5: expected a positive integer (at most 2147483647), e.g. --top 5"},
      {"report " + attention + h100 + " -o /tmp/napkin_never --top 0",
       "error: --top 0: expected a positive integer (at most 2147483647), e.g. --top 10"},
      {"derive " + attention + h100 + " --subloops 32,0",
       "error: --subloops 0: expected a positive integer (at most 2147483647), e.g. --subloops 32,8"},
      {"derive " + attention + h100 + " --overhead nan",
       "error: --overhead nan: expected a finite decimal number >= 0, e.g. --overhead 0.5"},
      {"derive " + attention + h100 + " --overhead -0.5",
       "error: --overhead -0.5: expected a finite decimal number >= 0, e.g. --overhead 0.5"},
      {"derive " + attention + " --machine ''",
       "error: --machine: expected a machine name (see `napkin machines`), found an empty string"},
      {"eval examples/matmul.napkin --seed -1 -o /tmp/napkin_never",
       "error: --seed -1: expected an integer from 0 to 18446744073709551615"},
      {"eval examples/matmul.napkin --max-work -1 -o /tmp/napkin_never",
       "error: --max-work -1: expected a finite decimal number > 0, e.g. --max-work 1e9"},
      {"eval examples/matmul.napkin --max-work inf -o /tmp/napkin_never",
       "error: --max-work inf: expected a finite decimal number > 0, e.g. --max-work 1e9"},
      {"eval examples/matmul.napkin --input A=a.npy --input A=b.npy -o /tmp/napkin_never",
       "error: --input A=b.npy: 'A' is already given by --input A=a.npy; give each name once"},
      {"eval examples/matmul.napkin --input A -o /tmp/napkin_never",
       "error: --input A: expected NAME=PATH, e.g. --input Q=q.npy"},
      {"analyze " + attention + h100 + " --schedule ''",
       "error: --schedule: expected a schedule text (docs/streaming.md), found an empty string"},
      {"run-schedule " + attention + " --schedule ''",
       "error: --schedule: expected a schedule text (docs/streaming.md), found an empty string"},
      {"check " + attention + " --set q=0x100",
       "error: --set q=0x100: '0x100' is not a decimal number such as 8192, 0.5 or 1e-6, nor inf or -inf"},
      {"check " + attention + " --set q=1e400",
       "error: --set q=1e400: '1e400' is not a decimal number such as 8192, 0.5 or 1e-6, nor inf or -inf"},
      {"check " + attention + " --set q", "error: --set q: expected NAME=VALUE, e.g. --set q=8192"},
      {"check " + attention + " --set q=1 --set q=2",
       "error: --set q=2: 'q' is already given by --set q=1; give each name once"},
      {"compare " + attention + " --machines h100-sxm5,h100-sxm5 --dtypes bf16",
       "error: --machines h100-sxm5: 'h100-sxm5' is listed twice; list it once"},
      // Empty places of a list (CLI11 would drop them, or read the next option as the value).
      {"compare " + attention + " --machines , --dtypes bf16",
       "error: --machines ,: place 1 of the comma-separated list is empty; write one value in every place, e.g. "
       "--machines h100-sxm5,b200"},
      {"compare " + attention + " --machines h100-sxm5,,b200 --dtypes bf16",
       "error: --machines h100-sxm5,,b200: place 2 of the comma-separated list is empty; write one value in every "
       "place, e.g. --machines h100-sxm5,b200"},
      {"derive " + attention + h100 + " --subloops=32,",
       "error: --subloops 32,: place 2 of the comma-separated list is empty; write one value in every place, e.g. "
       "--subloops 32,8"},
      {"draw-trace t.txt -o t.svg --section -1", "error: --section -1: expected an integer from 0 to 2147483647"},
      {"derive " + attention + h100 + " --row-layout quads",
       "error: --row-layout quads: expected one of: thread quad; did you mean 'quad'?"},
      {"compare " + attention + " --machines h100-sxm5 --dtypes bf16,int4",
       "error: --dtypes int4: expected one of: bf16 f16 fp8 fp8e4m3 fp8e5m2 tf32 f32"},
      {"draw-trace t.txt -o t.svg --clock-mhz 0",
       "error: --clock-mhz 0: expected a finite decimal number > 0, e.g. --clock-mhz 1755"},
      // An option where a path belongs (found by fuzz_cli: `-o --json` wrote a file named --json).
      {"draw-trace t.txt --section 1 -o --json",
       "error: --output: expected a path for the SVG, found '--json', which reads as an option (write ./--json for a "
       "path that begins with '-')"},
      {"eval examples/matmul.napkin -o -x",
       "error: --output-dir: expected a directory, found '-x', which reads as an option (write ./-x for a path that "
       "begins with '-')"},
  };
  for (const Case& c : cases) {
    auto r = run_napkin(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_EQ(first_line(r.err), c.first_line) << c.args;
    EXPECT_EQ(r.out, "") << c.args;
  }
}

TEST(Cli, HelpExitsZero) {
  for (const char* sub : {"check", "print", "eval"}) {
    for (const std::string& args : {std::string(sub) + " --help", "help " + std::string(sub)}) {
      auto help = run_napkin(args);
      EXPECT_EQ(help.exit_code, 0) << args;
      EXPECT_NE(help.out.find("--set"), std::string::npos) << args;
    }
  }
  for (const char* args : {"--help", "help", "-h"}) {
    auto help = run_napkin(args);
    EXPECT_EQ(help.exit_code, 0) << args;
    EXPECT_NE(help.out.find("derive"), std::string::npos) << args;
  }
}

// Input errors exit 1: a directory, binary garbage (escaped, never raw), a 200 kB line (cut).
TEST(Cli, InputErrorsExitOneAndNeverEchoRawBytes) {
  auto dir = run_napkin("check examples");
  EXPECT_EQ(dir.exit_code, 1);
  EXPECT_EQ(dir.err, "error: examples: is a directory; expected a file\n");
  auto no_machines = run_napkin("machines --dir tests/golden");
  EXPECT_EQ(no_machines.exit_code, 1);
  EXPECT_EQ(no_machines.err, "error: tests/golden: no machine files (NAME.toml) in the directory\n");
  auto out_is_file = run_napkin("draw examples/matmul.napkin -o README.md");
  EXPECT_EQ(out_is_file.exit_code, 1);
  EXPECT_EQ(first_line(out_is_file.err), "error: --output-dir README.md: cannot create the directory: Not a directory");
  const auto tmp = std::filesystem::temp_directory_path() / "napkin_cli_binary.napkin";
  std::string garbage = "axes q=4\n";
  for (int i = 0; i < 4096; ++i) garbage += static_cast<char>((i * 37 + 11) % 256);
  std::ofstream(tmp, std::ios::binary) << garbage;
  auto bin = run_napkin("check " + tmp.string());
  EXPECT_EQ(bin.exit_code, 1);
  for (char c : bin.err)
    EXPECT_TRUE(c == '\n' || c == '\t' || (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f))
        << "raw byte " << static_cast<int>(static_cast<unsigned char>(c)) << " in:\n" << bin.err;
  auto json = run_napkin("check --json " + tmp.string());  // JSON of invalid UTF-8: still JSON
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_TRUE(nlohmann::json::accept(json.out)) << json.out;
  std::ofstream(tmp, std::ios::binary) << "axes q=4\nin X[q] f32\nY[q] = X" << std::string(200000, ' ') << "@\nout Y\n";
  auto long_line = run_napkin("check " + tmp.string());
  EXPECT_EQ(long_line.exit_code, 1);
  EXPECT_LT(long_line.err.size(), 600u) << long_line.err.size();
  std::filesystem::remove(tmp);
}

}  // namespace
}  // namespace napkin
