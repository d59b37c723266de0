#pragma once
// `kvsieve train NAME`: each trainer is one file (cli/train_NAME.cpp) that fills a TrainerSpec and registers it with
// one line, KVSIEVE_TRAINER(its function), at its end; the build compiles every cli/train_*.cpp into kvsieve-train. A
// trainer that needs the libtorch training stack still registers in a build without it, and says so when run. A
// learned method's trainer is the subcommand its descriptor names (predict/learned_methods.h).
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

namespace kvsieve::cli {

/// One trainer: its subcommand name and help, and `setup`, which adds the options to the subcommand and sets
/// its callback (errors: throw Error with one line naming the problem).
struct TrainerSpec {
    std::string name;
    std::string help;
    std::function<void(CLI::App& cmd)> setup;
};

/// Adds a trainer; throws Error if the name is taken.
void register_trainer(TrainerSpec spec);
/// Every registered trainer, in registration order (after register_builtin_trainers()).
const std::vector<TrainerSpec>& trainers();

/// A trainer driven by one JSON config: options --config FILE, --resume, -q/--quiet, and `run(config, resume,
/// progress)`, which returns false when interrupted (the command then exits 130 so chained runs stop). `run` is
/// null in a build without the libtorch training stack: the command then says so. A trainer that can evaluate its
/// run's checkpoint alone passes `evaluate(config, progress)` (printing the evaluation, writing nothing); the
/// command then offers --eval-only, which calls it instead of training.
TrainerSpec config_trainer(std::string name, std::string help, bool (*run)(const std::string&, bool, bool),
                           void (*evaluate)(const std::string&, bool) = nullptr, bool offers_eval_only = false);

/// A command-line flag that sets one key of a config trainer's JSON config.
struct ConfigFlag {
    enum class Kind {
        kText,    ///< one string
        kPath,    ///< one file or folder, relative to the working directory (made absolute in the config)
        kPaths,   ///< one or more files (repeatable), as kPath; the key holds a list
        kInt,     ///< integer
        kReal,    ///< number
        kSwitch,  ///< flag without a value: sets the key to true
    };
    std::string names;  ///< CLI11 spelling, e.g. "-t,--threads"
    std::string key;    ///< the config key it sets
    Kind kind = Kind::kText;
    std::string help;
};

/// A config trainer whose keys may also be given as flags (`flags`, one per key): --config FILE is optional, each
/// flag given sets its key over the file's, -q/--quiet as for the others. `run(config, base, progress)` receives the
/// merged config and the folder the file's relative paths start from ("" without a file). Errors: Error with one line
/// naming the problem (from `run`, or for a --config file that is not a JSON object).
TrainerSpec config_trainer(std::string name, std::string help, std::vector<ConfigFlag> flags,
                           void (*run)(const nlohmann::json& config, const std::string& base, bool progress));

/// Adds a built-in trainer, made by `make` when kvsieve-train builds its subcommands (KVSIEVE_TRAINER).
void add_builtin_trainer(TrainerSpec (*make)());

/// Registers the trainer that `make` (a function returning TrainerSpec) fills when the program starts: one line at
/// the end of cli/train_NAME.cpp.
#define KVSIEVE_TRAINER(make) \
    static const bool kvsieve_trainer_##make = (::kvsieve::cli::add_builtin_trainer(&make), true)

}  // namespace kvsieve::cli
