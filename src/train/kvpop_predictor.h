#pragma once
// KVpop's scorers, training side (Hauzenberger et al., KVpop §3, eqs. 10–11, 35–42; predict/kvpop_scorer.h gives the
// equations and the file layout). Per layer and KV head, on x = [RMSNorm(k); RMSNorm(v)] of each entry:
//   mlp    r_t = w2 · SiLU(W1 x_t + b1) + b2                                                        (eqs. 35–36)
//   mlstm  the mLSTM of predict/kvpop_scorer.h in its *parallel* form (Beck et al. 2024, the mLSTM's parallel
//          formulation): for the entry u read at step q (q = u + w delayed, q = u immediate),
//            log D_{q,j} = Σ_{j<l≤q} log f_l + ĩ_j (j ≤ q),  m_q = max_j log D_{q,j}
//            h_u = Σ_j e^{log D_{q,j} − m_q} (φ(q̃_u)·φ(k̃_j)) ṽ_j / max(|Σ_j e^{log D_{q,j} − m_q} φ(q̃_u)·φ(k̃_j)|, e^{−m_q})
//            r_u = c · tanh((wo·h_u + bo) / c)
//          which equals the engine's recurrence step by step (the stabiliser m_q is the recurrence's); it holds one
//          [T, T] tensor per head of one layer (train one layer's scorer at a time).
// The per-head decay log γ_h = log γ_min + σ(a_h)(log γ_max − log γ_min) (eqs. 18–21), a_h = 0 at start.
// Only src/train and its tests include this header (it pulls in libtorch).
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "io/model_config.h"

namespace kvsieve::train {

/// Shape of a KVpop scorer.
struct KvpopScorerShape {
    std::string kind = "mlstm";  ///< "mlp" or "mlstm"
    int64_t hidden = 0;          ///< MLP hidden width (0: 2d)
    int64_t feature = 0;         ///< mLSTM f (0: max(4, d/2)); φ has 2f entries
    int64_t value = 0;           ///< mLSTM dv (0: max(4, d/2))
    double softcap = 10;         ///< c
    double forget_bias = 3;      ///< mLSTM forget-gate bias at start (σ(3) ≈ 0.95: a memory of ~20 tokens)
};

class KvpopPredictorImpl : public torch::nn::Module {
public:
    /// Initialisation: projections N(0, 1/fan_in), biases 0 except the forget gate's (`forget_bias`), decay a_h = 0.
    /// Throws Error for an unknown kind or a model without KV heads.
    KvpopPredictorImpl(const ModelConfig& c, KvpopScorerShape shape);

    /// Scores r [B, Hkv, T] of `layer` for keys and values k, v [B, Hkv, T, d]. mlstm: entry u is read at step
    /// u + delay (delay = w for the delayed readout, 0 for immediate); entries with u + delay ≥ T get no readout
    /// (0: they never leave the window within the sequence).
    torch::Tensor scores(int layer, const torch::Tensor& k, const torch::Tensor& v, int64_t delay) const;
    /// log γ_h of `layer` [Hkv].
    torch::Tensor log_gamma(int layer) const;
    /// The parameters of one layer (its scorer and its decay).
    std::vector<torch::Tensor> layer_parameters(int layer) const;

    /// Tensors by the engine's names (kvpop.{l}.mlstm.wq … and kvpop.{l}.log_gamma as the value of log γ).
    std::map<std::string, torch::Tensor> named_tensors() const;
    /// Writes them as F32 safetensors. Throws Error on I/O failure.
    void save_safetensors(const std::string& path) const;

    const KvpopScorerShape& shape() const { return shape_; }

private:
    struct Layer {
        torch::Tensor fc1, b1, fc2, b2;                    // mlp
        torch::Tensor wq, wk, wv, wi, bi, wf, bf, wo, bo;  // mlstm
        torch::Tensor a;                                   // decay logit [Hkv]
    };
    std::vector<Layer> layers_;
    KvpopScorerShape shape_;
    int hkv_ = 0, d_ = 0;
};
TORCH_MODULE(KvpopPredictor);

}  // namespace kvsieve::train
