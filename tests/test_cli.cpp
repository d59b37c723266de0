// The command-line tool end to end: outputs on good input, one-line errors and non-zero exits on bad input.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sys/wait.h>

#include "test_util.h"

namespace kvsieve {
namespace {

struct CmdResult {
    int status;
    std::string out, err;
};

CmdResult run(const std::string& args) {
    test::TempFile err(".err");
    const std::string cmd = std::string(KVSIEVE_BIN) + " " + args + " 2>" + err.path();
    CmdResult r;
    FILE* p = popen(cmd.c_str(), "r");
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    const int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    std::ifstream e(err.path());
    r.err.assign(std::istreambuf_iterator<char>(e), {});
    return r;
}

/// Bad input: non-zero exit (not a crash), and stderr holds the expected words.
void expect_clean_failure(const std::string& args, const std::string& needle) {
    const CmdResult r = run(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_LT(r.status, 128) << "crashed: " << args;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nstderr: " << r.err;
}

const std::string kModel = test::model_path("stories260K.gguf");

TEST(Cli, TokenizePrintsIdsOnOneLine) {
    // Ids from ../shared/golden/stories260K/once_upon_a_time.json (llama.cpp's tokenizer).
    CmdResult r = run("tokenize -m " + kModel + " -p 'Once upon a time'");
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, "1 348 342 364 305 261 397\n");
    r = run("tokenize -m " + kModel + " -p 'Once upon a time' --no-bos");
    EXPECT_EQ(r.out, "348 342 364 305 261 397\n");
}

TEST(Cli, GenerateGreedyIdsMatchLlamaCpp) {
    // First 16 greedy ids of ../shared/golden/stories260K/once_upon_a_time.json.
    const CmdResult r = run("generate -m " + kModel + " -p 'Once upon a time' -n 16 --temp 0 --ids -q");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "439 261 399 294 316 427 285 391 405 431 313 381 266 268 363 345\n");
}

TEST(Cli, GenerateSampledIsSeedDeterministic) {
    const std::string a = "generate -m " + kModel + " -p 'Tom was sad' -n 24 --temp 1 --seed 7 --ids -q";
    const CmdResult r1 = run(a), r2 = run(a), r3 = run("generate -m " + kModel + " -p 'Tom was sad' -n 24 --temp 1 --seed 8 --ids -q");
    EXPECT_EQ(r1.status, 0);
    EXPECT_EQ(r1.out, r2.out);
    EXPECT_NE(r1.out, r3.out);
}

TEST(Cli, BadInputGivesOneLineErrors) {
    test::TempFile trunc(".gguf");
    {
        std::ifstream in(kModel, std::ios::binary);
        std::vector<char> b(std::istreambuf_iterator<char>(in), {});
        std::ofstream o(trunc.path(), std::ios::binary);
        o.write(b.data(), static_cast<std::streamsize>(b.size() / 2));
    }
    expect_clean_failure("generate -m " + trunc.path() + " -p hi", "truncated");
    expect_clean_failure("generate -m " + test::data_dir() + "/models/tok512.bin -p hi", "not a GGUF file");
    expect_clean_failure("generate -m /nonexistent.gguf -p hi", "nonexistent.gguf");
    expect_clean_failure("generate -m " + kModel + " -p 'Once upon a time there was a dog' -c 4", "longer than the context");
    expect_clean_failure("generate -m " + kModel + " -p hi --temp -1", "--temp");
    expect_clean_failure("generate -m " + kModel + " -p hi --top-p 2", "--top-p");
    expect_clean_failure("generate -m " + kModel + " -p hi -n abc", "-n");
    expect_clean_failure("generate -m " + kModel + " -p hi --frobnicate", "frobnicate");
    expect_clean_failure("bench -m " + kModel + " -r 0", "-r");
    expect_clean_failure("synth no-such-shape -o /tmp/x.gguf", "unknown model shape");
    expect_clean_failure("synth tiny-qwen3 -o /tmp/x.gguf --type q6_k", "synth writes");
    expect_clean_failure("nosuchcommand", "subcommand");
    const CmdResult r = run("generate -m " + trunc.path() + " -p hi");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
}

TEST(Cli, SynthWritesALoadableModelAndBenchRunsIt) {
    test::TempFile m(".gguf");
    CmdResult r = run("synth tiny-qwen3 -o " + m.path() + " --type q8_0");
    ASSERT_EQ(r.status, 0) << r.err;
    r = run("bench -m " + m.path() + " -p 16 -n 4 -r 2 -d 8");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("pp16 @ d8"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tg4 @ d8"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("streaming read measured in this run"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kvsieve
