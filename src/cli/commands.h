#pragma once
// Registration of the `kvsieve` subcommands. Each adds itself to the app and sets its callback.
#include <string>

#include <CLI/CLI.hpp>

namespace kvsieve::cli {

void add_generate(CLI::App& app);
void add_chat(CLI::App& app);
void add_serve(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_convert(CLI::App& app);
void add_bench(CLI::App& app);
void add_synth(CLI::App& app);
void add_inspect(CLI::App& app);
void add_quantize(CLI::App& app);
void add_eval(CLI::App& app);
void add_eval_tasks(CLI::App& app);
/// `train`: runs kvsieve-train (beside the binary) with the arguments that follow (cli/train_forward.cpp).
void add_train(CLI::App& app);
/// kvsieve-train's subcommands: one per registered trainer (cli/cmd_train.cpp, cli/trainers.h).
void add_trainers(CLI::App& app);
void add_pull(CLI::App& app);
void add_policies(CLI::App& app);

/// Adds --kv-pool-mb (the size of the KV pool in MiB, docs/glossary.md) to `cmd`, writing `mb`, described by `help`;
/// and its deprecated alias --kv-budget-mb, which writes the same value and prints a deprecation warning once per
/// process. Giving both is an error. Returns the --kv-pool-mb option.
CLI::Option* add_kv_pool_option(CLI::App* cmd, double& mb, const std::string& help);

}  // namespace kvsieve::cli
