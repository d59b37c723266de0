// kvsieve train NAME: one subcommand per registered trainer (cli/trainers.h).
#include "cli/commands.h"
#include "cli/trainers.h"
#include "util/error.h"

namespace kvsieve::cli {

namespace {
std::vector<TrainerSpec>& registry() {
    static std::vector<TrainerSpec> r;
    return r;
}

/// The built-in trainers, one line each.
void register_builtin_trainers() {
    if (!registry().empty()) return;
    register_trainer(kvzap_trainer());
    register_trainer(pretrain_trainer());
    register_trainer(spkv_trainer());
    register_trainer(wgkv_trainer());
    register_trainer(kvpop_trainer());
}
}  // namespace

void register_trainer(TrainerSpec spec) {
    for (const auto& t : registry()) require(t.name != spec.name, "trainer '", spec.name, "' is registered twice");
    registry().push_back(std::move(spec));
}

const std::vector<TrainerSpec>& trainers() { return registry(); }

TrainerSpec config_trainer(std::string name, std::string help, bool (*run)(const std::string&, bool, bool),
                           void (*evaluate)(const std::string&, bool), bool offers_eval_only) {
    TrainerSpec s;
    s.name = name;
    s.help = std::move(help);
    s.setup = [name, run, evaluate, offers_eval_only](CLI::App& cmd) {
        auto config = std::make_shared<std::string>();
        auto resume = std::make_shared<bool>(false), quiet = std::make_shared<bool>(false);
        auto eval_only = std::make_shared<bool>(false);
        cmd.add_option("--config", *config, "JSON config (docs/training.md)")->required()->check(CLI::ExistingFile);
        cmd.add_flag("--resume", *resume, "continue from the run directory's checkpoint");
        cmd.add_flag("-q,--quiet", *quiet, "no progress output");
        if (offers_eval_only)
            cmd.add_flag("--eval-only", *eval_only,
                         "evaluate the run directory's checkpoint as the config's \"eval\" says, print it as JSON on "
                         "stdout and write nothing");
        cmd.callback([name, run, evaluate, config, resume, quiet, eval_only] {
            if (!run)
                fail("train ", name, " needs the libtorch training stack, which this build does not include (install "
                     "libtorch-dev and rebuild)");
            if (*eval_only) {
                require(!*resume, "--eval-only and --resume exclude each other (--eval-only trains nothing)");
                evaluate(*config, !*quiet);
                return;
            }
            // Interrupted (SIGINT/SIGTERM, checkpoint saved): exit 130 so scripts chaining runs stop here.
            if (!run(*config, *resume, !*quiet)) throw CLI::RuntimeError(130);
        });
    };
    return s;
}

void add_train(CLI::App& app) {
    auto* train = app.add_subcommand("train", "fit learned KV policies");
    train->require_subcommand(1);
    register_builtin_trainers();
    for (const TrainerSpec& t : trainers()) t.setup(*train->add_subcommand(t.name, t.help));
}

}  // namespace kvsieve::cli
