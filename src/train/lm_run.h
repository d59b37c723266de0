#pragma once
// The parts of a language-model training run that pretraining and continued pretraining (SP-KV, the dense twin)
// share: the "data" section (corpora, haystack, synthetic task mix), the held-out stream, and the "eval" section
// (held-out NLL per corpus and task accuracy, under any attention hooks). Keys: docs/training.md.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "train/data.h"
#include "train/loop.h"
#include "train/mirror.h"
#include "train/run_config.h"

namespace kvsieve::train {

/// The "data" section, read and checked (every file readable, task names known, length weights matching).
struct LmData {
    std::vector<std::string> text_paths;  ///< corpora (resolved paths)
    std::vector<std::string> texts;       ///< their bytes
    std::string haystack;                 ///< filler text of the synthetic tasks
    MixSpec mix;
    double holdout = 0.05;  ///< held-out fraction of each corpus
    /// Corpus names (file stems) for the eval's "nll_<name>" keys.
    std::vector<std::string> names() const;
    /// Task names of the mix.
    std::vector<std::string> task_names() const;
};
/// Throws Error naming an unknown key or task, an unreadable file, or no corpus.
LmData read_lm_data(const RunConfig& rc, const nlohmann::json& section);

/// Writes the held-out part of each corpus to DIR/heldout_<file name> (what the run never trains on, for later
/// evaluation). Throws Error on I/O failure.
void write_heldout_texts(const std::string& dir, const LmData& data, const TextStream& stream);

/// The "eval" section: every `every` steps (0: at the end), held-out NLL over `text_windows` windows of `window`
/// tokens per corpus, and per task `samples` rows of `length` tokens.
struct LmEvalSpec {
    int64_t every = 0, length = 1024, samples = 16, window = 512, text_windows = 8;
    std::vector<std::string> tasks;
};
/// Throws Error naming an unknown key or task.
LmEvalSpec read_lm_eval(const nlohmann::json& section);

/// The evaluation of a run, built once: checks every eval task fits eval.length (Error naming the task now rather
/// than at the first evaluation) and warns about mix tasks a batch length leaves out.
class LmEval {
public:
    LmEval(const LmEvalSpec& spec, const LmData& data, const TextStream& stream, const Tokenizer& tok, uint64_t seed);
    /// {"nll_<corpus>": nats/token, "acc_<task>": …} of `model` with `hooks` (e.g. SP-KV's gates); `prefix` is put
    /// before every key. Copy and recall-style tasks: token accuracy of the answers; eval tasks: exact match.
    nlohmann::json operator()(LlamaMirror& model, const MirrorHooks& hooks = {}, const std::string& prefix = "") const;
    /// The held-out NLL part alone: {"<prefix>nll_<corpus>": nats/token}.
    nlohmann::json heldout(LlamaMirror& model, const MirrorHooks& hooks = {}, const std::string& prefix = "") const;
    const LmEvalSpec& spec() const { return spec_; }

private:
    Sequence row(const std::string& task, int64_t i, int64_t* a0) const;
    LmEvalSpec spec_;
    const LmData& data_;
    const TextStream& stream_;
    const Tokenizer& tok_;
    uint64_t seed_;
};

/// What a trainer of a frozen model (WG-KV, KVpop) reads before training.
struct FrozenModelRun {
    RunConfig rc;
    RunBasics rb;
    std::string output;  ///< "output", or <out>/<output_subdir>
    LmData data;
    LoopOptions loop;  ///< rb.loop with eval_every from the "eval" section
    LmEvalSpec eval;
    std::unique_ptr<Tokenizer> tok;  ///< the init model's
    LlamaMirror lm{nullptr};         ///< the init model, every parameter frozen
};

/// Reads, in order: the config, the run basics (`section` is the trainer's own key), that section through
/// `read_section` (so a bad option fails before any model or data is read), "init" and "data" (both required; `what`
/// names what is trained in the error), the "eval" section, the init model's tokenizer and the model, whose
/// parameters it freezes; every data length must fit the model's context. Throws Error naming the first problem.
FrozenModelRun open_frozen_run(const std::string& config_path, const std::string& section,
                               const std::string& output_subdir, const std::string& what, bool resume, bool progress,
                               const std::function<void(const nlohmann::json&)>& read_section);

}  // namespace kvsieve::train
