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
}
}  // namespace

void register_trainer(TrainerSpec spec) {
    for (const auto& t : registry()) require(t.name != spec.name, "trainer '", spec.name, "' is registered twice");
    registry().push_back(std::move(spec));
}

const std::vector<TrainerSpec>& trainers() { return registry(); }

void add_train(CLI::App& app) {
    auto* train = app.add_subcommand("train", "fit learned KV policies");
    train->require_subcommand(1);
    register_builtin_trainers();
    for (const TrainerSpec& t : trainers()) t.setup(*train->add_subcommand(t.name, t.help));
}

}  // namespace kvsieve::cli
