#pragma once
// SP-KV's utility predictor, training side (Szilvasy, Faysse et al., "Self-Pruned Key-Value Attention", eq. 1 and
// App. I): per layer, f: D → hidden → H_kv with SiLU between (or linear D → H_kv), u = σ(f(h)) ∈ (0, 1) per KV head
// from the layer's attention-input hidden state. The output bias starts at +5 (σ(5) ≈ 0.993: every gate open, so
// the gated model starts as the dense one). Saved under the schema predict/spkv_gates.h reads. Only src/train and
// its tests include this header (it pulls in libtorch).
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "io/model_config.h"

namespace kvsieve::train {

class SpkvPredictorImpl : public torch::nn::Module {
public:
    /// hidden: width of the MLP's hidden layer (0: a linear predictor). Weights N(0, 1/fan_in), the first bias 0,
    /// the output bias `bias_init`. Throws Error for a negative width or a model shape without KV heads.
    SpkvPredictorImpl(const ModelConfig& c, int hidden, double bias_init);

    /// Pre-sigmoid utility logits of `layer` for hidden states h [B, T, D]: [B, Hkv, T].
    torch::Tensor logits(int layer, const torch::Tensor& h) const;

    /// The tensors by GGUF name (blk.<l>.spkv.fc1.weight [hidden, D] …, predict/spkv_gates.h), for save_mirror.
    std::map<std::string, torch::Tensor> gguf_tensors() const;

    int hidden() const { return hidden_; }

private:
    struct Layer {
        torch::Tensor w1, b1, w2, b2;  // MLP: w1 [hidden, D], w2 [Hkv, hidden]; linear: w2 [Hkv, D]
    };
    std::vector<Layer> layers_;
    int hidden_;
};
TORCH_MODULE(SpkvPredictor);

}  // namespace kvsieve::train

namespace kvsieve::train {

struct SpkvOptions;

/// The gate the attention sees for utilities u [B, Hkv, T] ∈ (0, 1) (train/spkv.h):
/// - evaluation (training = false): the inference decision 1[u ≥ τ];
/// - dense mode: undefined (no gate); local mode has no utilities (run_spkv closes every gate itself);
/// - soft mode: (1 − α)·u + α·1[u ≥ τ], with u detached once α > 0 (TAHG freezes the predictor, eq. 7);
/// - hard mode: z ~ Bernoulli(max(u, p_min)), returned as z + u − sg(u) (straight-through, eqs. 10–11).
torch::Tensor spkv_training_gate(const SpkvOptions& o, const torch::Tensor& u, double alpha, bool training);

}  // namespace kvsieve::train
