#pragma once
// `kvsieve train wgkv`: WG-KV gate distillation (Huang et al., "Learning What to Write: Write-Gated KV", §3.3;
// docs/design.md §5.4). The language model is frozen; a write gate per layer and KV head
// (train/wgkv_predictor.h) reads each key before and after RoPE, and the student's attention adds log g to the
// logits of the keys outside each query's local window (w = 256; train/gated_attention.h, blocked, so the backward
// through the frozen model holds no [T, T] tensor). The teacher is the same model without gates (a no-grad pass).
//   loss = MSE(student final hidden, teacher final hidden) + λ · mean(g + g(1 − g))                         (§3.3)
// The final hidden states are those after the output norm. The regulariser's mean runs over the keys that are
// outside the window of at least one query of the sequence (sinks ≤ j < T − w): the others are never gated and
// their gates get no signal from the distillation term. In training the gate is clamped to g ≥ g_min = 1e-3 (the
// reference code's clamp: log g stays finite). Evaluation uses the inference decision 1[g ≥ τ] (lazy promotion,
// what `--policy wgkv` does). This header does not include libtorch.
#include <cstdint>
#include <string>

namespace kvsieve::train {

/// The "wgkv" section of the config (docs/training.md).
struct WgkvOptions {
    int64_t window = 256;      ///< local window w (tokens), never gated
    int64_t sinks = 0;         ///< leading tokens never gated
    double tau = 0.1;          ///< inference threshold τ (evaluation, and written to the gates' config)
    double g_expand = 4.0;     ///< hidden width per head = g_expand · d (4 for Llama, 1.5 for Qwen3)
    double lambda = 0.16;      ///< λ, weight of the sparsity regulariser
    double g_min = 1e-3;       ///< training clamp of the gate
    double bias_init = 3.0;    ///< output bias of the gate MLP at initialisation (σ(3) ≈ 0.95)
    int64_t attn_block = 128;  ///< block of the gated attention (tokens)
    bool save_f16 = false;     ///< write the output gates in F16 (half the size; checkpoints stay F32)
};

/// Reads the config, validates every key and path before training, then trains the gates of the frozen model
/// "init" and writes them (reference tensor names, predict/wgkv_gates.h) to <out>/gates/model.safetensors at each
/// checkpoint and to the directory "output" (default <out>/gates) at the end, each with a config.json (the options
/// and the model they were trained for). resume: continue from <out>/checkpoint.pt. Returns false when SIGINT or
/// SIGTERM stopped the run (a checkpoint is saved). Throws Error naming the first problem.
bool run_wgkv(const std::string& config_path, bool resume, bool progress);

}  // namespace kvsieve::train
