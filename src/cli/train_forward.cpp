// `kvsieve train ...` in the inference binary: the trainers live in kvsieve-train (with libtorch and what only they
// need), so that generate, chat and serve carry none of it; this subcommand runs that binary with the same arguments.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "util/error.h"

namespace kvsieve::cli {

namespace {
/// kvsieve-train beside the running binary (bin/kvsieve → bin/kvsieve-train); "" when /proc/self/exe is unreadable.
std::string trainer_binary() {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string() : (exe.parent_path() / "kvsieve-train").string();
}
}  // namespace

void add_train(CLI::App& app) {
    auto* train = app.add_subcommand("train", "fit learned KV policies (runs kvsieve-train, the training binary)");
    train->prefix_command();  // every argument after `train`, --help included, is kvsieve-train's
    train->set_help_flag();
    train->callback([train] {
        const std::string bin = trainer_binary();
        std::error_code ec;
        require(!bin.empty() && std::filesystem::exists(bin, ec),
                "the trainers are in kvsieve-train, which is not "
                "installed beside this binary (",
                bin.empty() ? std::string("unknown folder") : bin,
                "); build it with scripts/build.sh (libtorch-dev for every trainer but kvzap's linear fit)");
        std::vector<std::string> args = {bin};
        for (const std::string& a : train->remaining()) args.push_back(a);
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(bin.c_str(), argv.data());
        fail("cannot run ", bin, ": ", std::strerror(errno));
    });
}

}  // namespace kvsieve::cli
