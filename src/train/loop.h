#pragma once
// The training loop every trainer shares: gradient accumulation, clipping, the learning-rate schedule, periodic
// evaluation, a JSONL log, a progress bar with loss, tokens/s and ETA, checkpoints, resume, and a checkpoint on
// SIGINT/SIGTERM so an interrupted run loses nothing.
#include <torch/torch.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/optim.h"

namespace kvsieve::train {

/// Options of one run.
struct LoopOptions {
    int64_t steps = 1000;    ///< optimizer steps
    int64_t grad_accum = 1;  ///< micro-batches per step
    double clip = 1.0;       ///< global gradient-norm clip (≤ 0: off)
    double beta1 = 0.9, beta2 = 0.95;
    Schedule schedule;
    int64_t log_every = 10;          ///< steps between log lines
    int64_t eval_every = 0;          ///< steps between evaluations (0: only at the end)
    int64_t checkpoint_every = 100;  ///< steps between checkpoints (and at the end, and on SIGINT)
    std::string out_dir;             ///< log.jsonl and checkpoint.pt go here
    bool resume = false;             ///< continue from out_dir/checkpoint.pt
    bool keep_log = false;           ///< on resume, leave log.jsonl as it is (set to evaluate a checkpoint only)
    bool progress = true;
};

/// Result of one micro-batch: the loss to back-propagate (mean over its tokens) and the number of tokens.
struct MicroResult {
    torch::Tensor loss;
    int64_t tokens = 0;
    double data_seconds = 0;  ///< time spent building the batch (logged, to spot a data-bound run)
    /// Extra scalars of the micro-step (e.g. an auxiliary loss), averaged over each log interval and logged
    /// under their names.
    std::map<std::string, double> metrics;
    /// True when the micro-step back-propagated its loss itself, already divided by grad_accum (e.g. one layer's
    /// graph at a time, to hold less memory); `loss` is then only logged.
    bool backward_done = false;
};

/// Runs the loop over `module`'s parameters (grouped). Throws Error if out_dir holds a checkpoint and resume is
/// false (nothing is overwritten), or resume is true and there is none.
class TrainLoop {
public:
    TrainLoop(torch::nn::Module& module, std::vector<ParamGroup> groups, LoopOptions o);

    using MicroStep = std::function<MicroResult(int64_t step, int64_t micro)>;
    using EvalFn = std::function<nlohmann::json(int64_t step)>;
    using SaveFn = std::function<void(int64_t step)>;
    /// Trains from the start (or the checkpoint's step) to o.steps. `eval` returns metrics logged as
    /// {"step", "eval": …}; `save` is called with each checkpoint (e.g. to export the model). Returns the step
    /// reached (< steps if interrupted).
    int64_t run(const MicroStep& micro, const EvalFn& eval, const SaveFn& save);

    /// Writes what a run produces to `path`; `final` is false for the copy beside each checkpoint, true for the
    /// run's output.
    using ExportFn = std::function<void(const std::string& path, bool final)>;
    /// run() with the ending every trainer shares: at each checkpoint `save_to(checkpoint_copy, false)`; once all
    /// steps are done `save_to(output, true)` and, with progress on, "wrote OUTPUT" on stderr. Returns true when the
    /// run finished (false if interrupted: the checkpoint and its copy are then the latest state).
    bool run_and_export(const MicroStep& micro, const EvalFn& eval, const ExportFn& save_to,
                        const std::string& checkpoint_copy, const std::string& output);

    int64_t start_step() const { return start_step_; }
    std::string checkpoint_path() const { return o_.out_dir + "/checkpoint.pt"; }

private:
    void save_checkpoint(int64_t step) const;
    void load_checkpoint();
    void log(const nlohmann::json& j) const;

    torch::nn::Module& module_;
    std::vector<ParamGroup> groups_;
    LoopOptions o_;
    std::unique_ptr<torch::optim::AdamW> opt_;
    int64_t start_step_ = 0;
    int64_t tokens_seen_ = 0;
    double elapsed_before_ = 0;  ///< seconds trained before this process (from the checkpoint)
    double elapsed_now_ = 0;     ///< seconds trained in all, this process included (logged and checkpointed)
};

}  // namespace kvsieve::train
