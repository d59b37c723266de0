#pragma once
// WG-KV's write gate, training side (Huang et al., "Learning What to Write: Write-Gated KV", §3.2): per layer and KV
// head, g = σ(w2_h · GELU(W1_h · [RMSNorm(k_pre) ⊙ w_pre ; RMSNorm(k_post) ⊙ w_post] + b1_h) + b2_h) from the keys
// before and after RoPE. The parameters are the reference checkpoint's tensors in their own layout (grouped 1×1
// convolutions, predict/wgkv_gates.h), so what this module saves is what the engine and the published gates load.
// Only src/train and its tests include this header (it pulls in libtorch).
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "io/model_config.h"

namespace kvsieve::train {

class WgkvPredictorImpl : public torch::nn::Module {
public:
    /// inner = round(g_expand · d) hidden units per KV head. Initialisation as PyTorch's Conv1d (weights and biases
    /// U(−1/√fan_in, 1/√fan_in)), norm weights 1, except the output bias `bias_init` (σ(3) ≈ 0.95: the gates start
    /// open, so the student starts as the teacher). Throws Error for g_expand ≤ 0 or a model without KV heads.
    WgkvPredictorImpl(const ModelConfig& c, double g_expand, double bias_init);

    /// Gates of `layer` ∈ (0, 1) for keys k_pre, k_post [B, Hkv, T, d] (before / after RoPE): [B, Hkv, T].
    torch::Tensor gate(int layer, const torch::Tensor& k_pre, const torch::Tensor& k_post) const;

    /// The tensors by reference name (model.layers.{i}.self_attn.g_predictors.conv1.weight [Hkv·inner, 2d, 1] …).
    std::map<std::string, torch::Tensor> named_tensors() const;
    /// Writes them as a safetensors file in F32, or F16 when `f16` (half the size; the gate's values then move by
    /// about 1e-3). Throws Error on I/O failure.
    void save_safetensors(const std::string& path, bool f16 = false) const;

    int inner() const { return inner_; }

private:
    struct Layer {
        torch::Tensor w_pre, w_post, w1, b1, w2, b2;  // w1 [Hkv·inner, 2d, 1], w2 [Hkv, inner, 1]
    };
    std::vector<Layer> layers_;
    int hkv_ = 0, d_ = 0, inner_ = 0;
};
TORCH_MODULE(WgkvPredictor);

}  // namespace kvsieve::train
