#pragma once
// `kvsieve train pretrain`: pretraining (or continued pretraining) of a Llama-family model from a JSON config.
// This header does not include libtorch, so the command-line tool can call it cheaply.
#include <string>

namespace kvsieve::train {

/// Reads the config (keys documented in docs/training.md), validates every key, path and task name before any
/// training starts, then trains and writes <out>/model.gguf at each checkpoint and the config's "output" path at
/// the end. resume: continue from <out>/checkpoint.pt. Returns true when all steps ran, false when SIGINT or
/// SIGTERM stopped the run (a checkpoint is saved; "output" is not written). Throws Error naming the first problem.
bool run_pretrain(const std::string& config_path, bool resume, bool progress);

}  // namespace kvsieve::train
