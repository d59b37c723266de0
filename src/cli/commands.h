#pragma once
// Registration of the `kvsieve` subcommands. Each adds itself to the app and sets its callback.
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
void add_train(CLI::App& app);
void add_pull(CLI::App& app);
void add_policies(CLI::App& app);

}  // namespace kvsieve::cli
