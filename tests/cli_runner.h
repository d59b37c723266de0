#pragma once
// Runs the `kvsieve` binary (KVSIEVE_BIN, set by tests/CMakeLists.txt) for the end-to-end CLI tests.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "test_util.h"

namespace kvsieve::test {

/// Exit status (128 + signal if killed), stdout and stderr of one run.
struct CmdResult {
    int status;
    std::string out, err;
};

/// Runs `kvsieve ARGS` through /bin/sh (ARGS is shell text: quote as in a shell) with stdin from `input`.
inline CmdResult run_cli(const std::string& args, const std::string& input = "") {
    TempFile err(".err"), in(".in");
    {
        std::ofstream f(in.path(), std::ios::binary);
        f << input;
    }
    const std::string cmd = std::string(KVSIEVE_BIN) + " " + args + " <" + in.path() + " 2>" + err.path();
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

}  // namespace kvsieve::test
