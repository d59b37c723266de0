#pragma once
// `kvsieve train METHOD -m MODEL.gguf`: training a learned method's predictor for one's own model in one command. The
// method's shipped config (predict/learned_methods.h: the one that trained the SmolLM2 predictor, found with
// predict/data_dirs.h) gives every default; the model, the corpus, the number of steps and any key (--set) may be
// changed. The run (checkpoints, log) goes to the user's training folder and is resumed when the same command runs
// again; the predictor goes to the user's predictor folder, where `--policy METHOD` finds it for that model by its
// digest (predict/bundled_predictors.h).
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace kvsieve {
struct LearnedMethod;
}

namespace kvsieve::cli {

/// The one-command options as given.
struct QuickTrainOptions {
    std::string model;                ///< -m: the GGUF to train for
    std::vector<std::string> corpus;  ///< --corpus: text files (default: the config's)
    int64_t steps = 0;                ///< --steps: optimiser steps (0: the config's)
    std::string run_dir;              ///< --run-dir (default <user train dir>/<method>/<model stem>)
    std::string predictor_dir;        ///< --predictor-dir (default <user predictor dir>/<method>/<model stem>)
    std::vector<std::string> sets;    ///< --set KEY=VALUE, KEY dotted ("optim.lr"), VALUE JSON or else a string
};

/// Adds -m/--model, --corpus, --steps, --run-dir, --predictor-dir and --set to `cmd`, filling `o`.
void add_quick_train_options(CLI::App& cmd, QuickTrainOptions& o);

/// What one command trains: the merged config and where it writes.
struct QuickTrainPlan {
    nlohmann::json config;      ///< every path in it absolute
    std::string run_dir;        ///< the config's "out"
    std::string predictor_dir;  ///< the config's method.predictor_key
};

/// The plan for `method` (its trainer a JSON-config trainer): `config_path` (or, when "", the method's shipped
/// SmolLM2 config) with its relative paths ("init", "model", "out", "output", "predictor", data.text, corpus,
/// tokenizer.from_gguf) made absolute from the config's folder, then the model ("init", or "model" where the config
/// names its model so), the corpus (data.text or "corpus"), optim.steps and each --set applied, "name" set to
/// <model stem>-<method>, "out" and the predictor key set. Writes nothing. Errors (Error, one line): no -m, a model
/// or corpus file that does not exist, no shipped config and no --config, a malformed --set, --steps for a method
/// without steps, no user folder ($HOME unset) without --run-dir/--predictor-dir.
QuickTrainPlan plan_quick_train(const LearnedMethod& method, const std::string& config_path,
                                const QuickTrainOptions& o);

/// For a trainer whose keys are flags (KVzap) run without --config: a corpus not given is the shipped config's, an
/// "out" not given is <user predictor dir>/<method>/<model stem>. Nothing is changed without a "model". Throws Error
/// when "out" is needed and $HOME is unset.
void fill_flag_trainer_defaults(const LearnedMethod& method, nlohmann::json& j);

/// Sets the dotted key `key` ("optim.lr") of `j` to `value` parsed as JSON (a string when it is not JSON), making
/// the objects on the way. Throws Error for an empty key or a part of the path that is not an object.
void set_dotted(nlohmann::json& j, const std::string& key, const std::string& value);

}  // namespace kvsieve::cli
