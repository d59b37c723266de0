#pragma once
// `kvsieve train spkv`: SP-KV continued pretraining (Szilvasy, Faysse et al., "Self-Pruned Key-Value Attention";
// docs/design.md §5.3). The whole language model and a per-layer utility predictor (train/spkv_predictor.h) are
// trained together by next-token loss alone through gated attention (train/gated_attention.h): keys outside the
// local window are weighted by their gate. Variants (config "spkv.mode"):
//  - "soft" (eq. 6): gate = u. The last `tahg_fraction` of the steps are threshold-aware hard gating (eq. 7): the
//    predictor is frozen and the gate moves linearly from u to the hard decision 1[u ≥ τ] over
//    `tahg_anneal_steps`, so the model finishes training with the gates it will have at inference.
//  - "hard" (eqs. 10–12): gate = z ~ Bernoulli(max(u, p_min)) in the forward; the straight-through estimator
//    passes ∂L/∂z to u (z + u − sg(u)); p_min keeps every key sampled open now and then.
//  - "dense": no gates (the dense twin trained on the same batches, the baseline ΔNLL is measured against);
//  - "local": every gate closed, a sliding window of w tokens (the baseline of the palindrome task, App. G).
// Optional density regulariser (eq. 13 in the form we use): λ · max(0, ρ̄ − ρ*) with ρ̄ the mean utility of the
// keys that are global for some query, ρ* the target density.
// This header does not include libtorch.
#include <cstdint>
#include <string>

namespace kvsieve::train {

/// The "spkv" section of the config (docs/training.md).
struct SpkvOptions {
    std::string mode = "soft";        ///< soft | hard | dense | local
    int64_t window = 128;             ///< local window w (tokens), never gated
    int64_t sinks = 0;                ///< leading tokens never gated
    double tau = 0.5;                 ///< inference threshold τ (TAHG binarises at it; evaluation uses it)
    int hidden = -1;                  ///< predictor hidden width (0: linear; −1: D / 8)
    double bias_init = 5.0;           ///< output bias of the predictor (σ(5) ≈ 0.993: every gate open)
    double lr_mult = 5.0;             ///< predictor learning rate = lr × lr_mult (Table 4 caption)
    double weight_decay = 0.1;        ///< predictor weight decay (Table 4 caption)
    double tahg_fraction = 0.25;      ///< soft mode: last fraction of the steps in TAHG (0: none)
    int64_t tahg_anneal_steps = 500;  ///< steps over which TAHG moves from u to 1[u ≥ τ]
    double p_min = 0.05;              ///< hard mode: probability clipping
    double density_weight = 0.0;      ///< λ of the density regulariser (0: off)
    double density_target = 0.0;      ///< ρ*
    bool freeze_lm = false;           ///< train only the predictor (the frozen-LM ablation, Table 4)
    int64_t attn_block = 128;         ///< block of the gated attention (tokens)
};

/// TAHG's mixing weight α at optimizer step `step` of `total`: 0 before the TAHG phase (which starts at step
/// round(total · (1 − tahg_fraction))), then (step − start + 1) / tahg_anneal_steps capped at 1 (1 at once when
/// tahg_anneal_steps is 0). Always 0 outside soft mode or with tahg_fraction 0.
double tahg_alpha(const SpkvOptions& o, int64_t step, int64_t total);
/// First step of the TAHG phase (total when there is none).
int64_t tahg_start(const SpkvOptions& o, int64_t total);

/// Reads the config, validates every key, path and task before training, then trains and writes <out>/model.gguf
/// (the model with its gates, blk.<l>.spkv.*, predict/spkv_gates.h) at each checkpoint and the config's "output"
/// path at the end. resume: continue from <out>/checkpoint.pt. Returns false when SIGINT or SIGTERM stopped the run
/// (a checkpoint is saved). Throws Error naming the first problem.
bool run_spkv(const std::string& config_path, bool resume, bool progress);

/// The evaluation run_spkv() logs (the config's "eval": held-out NLL, task accuracies with keys beyond the window
/// kept iff u ≥ τ, per-head density), of the run directory's checkpoint as it is, printed on stdout as one JSON
/// line {"step", "eval"}. Writes nothing (the log and checkpoint are left as they are), so it may run beside the
/// training of the same directory. Throws Error if there is no checkpoint, or as run_spkv() for the config.
void evaluate_spkv(const std::string& config_path, bool progress);

}  // namespace kvsieve::train
