#pragma once
// WG-KV's write gate, inference side (Huang et al., "Learning What to Write: Write-Gated KV", §3.2; docs/design.md
// §5.4). Per layer and KV head h, from the key of a token before and after RoPE (k_pre after QK-norm on Qwen3):
//   x = [RMSNorm(k_pre_h) ⊙ w_pre ; RMSNorm(k_post_h) ⊙ w_post]                       (2d)
//   g = σ(w2_h · GELU(W1_h · x + b1_h) + b2_h) ∈ (0, 1)                               (§3.2)
// with the exact (erf) GELU, RMSNorm(z) = z / √(mean(z²) + ε), ε = 1e-6, one norm weight per layer for each input,
// W1_h [inner, 2d] and inner = g_expand · d. The tensors are the reference checkpoints' own, per layer i:
//   model.layers.{i}.self_attn.g_predictors.pre_key_norm.weight   [d]
//   model.layers.{i}.self_attn.g_predictors.post_key_norm.weight  [d]
//   model.layers.{i}.self_attn.g_predictors.conv1.weight          [Hkv·inner, 2d, 1]  (grouped conv, groups = Hkv:
//   model.layers.{i}.self_attn.g_predictors.conv1.bias            [Hkv·inner]          rows h·inner … of head h)
//   model.layers.{i}.self_attn.g_predictors.conv2.weight          [Hkv, inner, 1]     (groups = Hkv)
//   model.layers.{i}.self_attn.g_predictors.conv2.bias            [Hkv]
// in a safetensors file (tools/convert_wgkv.py converts a reference state dict; `kvsieve train wgkv` writes one).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "predict/trained_defaults.h"

namespace kvsieve {

struct SafeTensor;

/// RMSNorm's ε inside the gate.
inline constexpr float kWgkvNormEps = 1e-6f;

/// The reference name of gate tensor `name` (e.g. "conv1.weight") of layer `layer`.
std::string wgkv_tensor_name(int layer, const std::string& name);

/// The write gates of every layer of one model.
class WgkvGates {
public:
    /// Reads the gates from a safetensors file, or from DIR/model.safetensors when `path` is a directory (then with
    /// the trained defaults of DIR/config.json, predict/trained_defaults.h). Throws Error naming the file if it holds
    /// no gates, or the first missing or mis-shaped tensor (every layer 0 … n_layer − 1 must have the same shapes,
    /// and those must fit Hkv KV heads of size d = head_dim), or naming config.json and the key of a malformed
    /// trained default.
    static WgkvGates load(const std::string& path, int n_layer, int n_head_kv, int head_dim);
    /// The same from tensors already read (`source` names them in errors).
    static WgkvGates from_tensors(const std::map<std::string, SafeTensor>& t, const std::string& source, int n_layer,
                                  int n_head_kv, int head_dim);

    /// g[t·Hkv + h] ∈ (0, 1) for the T keys of `layer`: k_pre, k_post [T][Hkv·d] (before and after RoPE).
    void predict(int layer, const float* k_pre, const float* k_post, int64_t T, float* g) const;

    int inner() const { return inner_; }  ///< hidden width per head (g_expand · d)
    /// τ, window and sinks of the training (config.json beside the weights; empty fields: not recorded).
    const TrainedDefaults& trained_defaults() const { return trained_; }
    int n_layers() const { return static_cast<int>(layers_.size()); }

private:
    struct Layer {
        std::vector<float> w_pre, w_post;  // [d]
        std::vector<float> w1, b1;         // [Hkv·inner][2d], [Hkv·inner]
        std::vector<float> w2, b2;         // [Hkv][inner], [Hkv]
    };
    std::vector<Layer> layers_;
    int hkv_ = 0, d_ = 0, inner_ = 0;
    TrainedDefaults trained_;
};

}  // namespace kvsieve
