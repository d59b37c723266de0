#pragma once
// Reading a trainer's JSON config: every object's keys checked against the keys it may hold, paths relative to
// the config file, and the sections every trainer shares (optim, tokenizer, model). Keys: docs/training.md.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf_writer.h"
#include "text/tokenizer.h"
#include "train/loop.h"
#include "train/mirror.h"

namespace kvsieve::train {

/// A parsed config file and the folder its relative paths start from.
struct RunConfig {
    nlohmann::json root;
    std::filesystem::path base;
    /// Reads and parses `path`; throws Error if it cannot be read or is not JSON.
    static RunConfig read(const std::string& path);
    /// `p` relative to the config's folder (absolute paths unchanged).
    std::string resolve(const std::string& p) const;
};

/// Throws Error naming the first key of `j` (an object at `where`, e.g. "data") that is not in `known`.
void check_keys(const nlohmann::json& j, const std::string& where, const std::set<std::string>& known);

/// The "optim" section: the loop's options (steps, grad_accum, clip, β, schedule) and the AdamW learning rate and
/// weight decay. Throws Error for an unknown key or schedule.
struct OptimConfig {
    LoopOptions loop;
    double lr = 1e-3, weight_decay = 0.1;
};
OptimConfig read_optim(const nlohmann::json& optim);

/// What every trainer's config has at its top level: the run directory "out" (required), the final model "output"
/// (default <out>/model.gguf), "seed" (default 1), "threads" (0: all cores; applied to the engine's pool and to
/// libtorch), "checkpoint_every" and "log_every", and the "optim" section — as the loop's options for a run that
/// resumes or not and shows progress or not. Checks the top-level keys against `trainer_keys` besides those.
struct RunBasics {
    std::string out, output;
    uint64_t seed = 1;
    OptimConfig optim;
    LoopOptions loop;  ///< optim.loop with out_dir, resume, progress, checkpoint_every and log_every set
};
RunBasics read_run_basics(const RunConfig& rc, const std::set<std::string>& trainer_keys, bool resume, bool progress);

/// The tokenizer of a run and the GGUF metadata that describes it (written into the trained model).
struct TokenizerConfig {
    std::unique_ptr<Tokenizer> tok;
    GGUFMetadata meta;
};
/// The "tokenizer" section: {"from_gguf": path} or {"train_bpe": {vocab_size, min_char_count, extra_task_samples}}
/// trained on `texts` (plus extra_task_samples rendered examples of each of `tasks`, made with `haystack`).
TokenizerConfig read_tokenizer(const RunConfig& rc, const nlohmann::json& section,
                               const std::vector<std::string>& texts, const std::vector<std::string>& tasks,
                               const std::string& haystack, uint64_t seed, bool progress);

/// The model to train: "init" (a GGUF to start from, whose vocabulary must be the tokenizer's) or "model" (a shape:
/// arch llama|qwen2|qwen3, n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_ctx, rope_base, rms_eps, tied),
/// initialised with `seed`. Throws Error naming a missing or unknown key or an inconsistent shape.
LlamaMirror read_model(const RunConfig& rc, const Tokenizer& tok, uint64_t seed);

}  // namespace kvsieve::train
