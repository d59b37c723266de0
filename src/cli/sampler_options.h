#pragma once
// Command-line options of the token sampler, shared by every command that generates text: --temp, --top-k,
// --top-p, --min-p, --seed (llama.cpp's spelling).
#include <CLI/CLI.hpp>

#include "model/sampler.h"

namespace kvsieve::cli {

/// Adds the sampler options to a subcommand, writing into sp (its defaults are shown in --help).
inline void add_sampler_options(CLI::App* cmd, SamplerParams& sp) {
    cmd->add_option("--temp", sp.temp, "temperature; 0 is greedy")->capture_default_str();
    cmd->add_option("--top-k", sp.top_k, "top-k sampling (0: off)")->capture_default_str();
    cmd->add_option("--top-p", sp.top_p, "top-p sampling (1: off)")->capture_default_str();
    cmd->add_option("--min-p", sp.min_p, "min-p sampling (0: off)")->capture_default_str();
    cmd->add_option("--seed", sp.seed, "random seed")->capture_default_str();
}

}  // namespace kvsieve::cli
