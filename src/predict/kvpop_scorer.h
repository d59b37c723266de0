#pragma once
// KVpop's learned eviction scorers, inference side (Hauzenberger et al., "KVpop — Key-Value Cache Compression with
// Predictive Online Pruning", §3 and App. E; docs/design.md §5.5). Per layer and KV head h, on an entry's own
// key (after RoPE) and value, normalised as x = [RMSNorm(k); RMSNorm(v)] ∈ R^{2d} (ε = 1e-6, no weight):
//
// Stateless (KVpop_mlp, eqs. 35–36):   r = w2_h · SiLU(W1_h x + b1_h) + b2_h
//
// Stateful (KVpop, an mLSTM per head, eqs. 10–11 and 37–42, the xLSTM mLSTM of Beck et al. 2024 with the hedgehog
// feature map of Zhang et al. 2024), for each token t in order:
//   q̃_t = Wq_h x_t,  k̃_t = Wk_h x_t ∈ R^f,   ṽ_t = Wv_h x_t ∈ R^dv,   φ(z) = [softmax(z); softmax(−z)] ∈ R^{2f}
//   ĩ_t = wi_h·x_t + bi_h (exponential input gate, log space),  log f_t = log σ(wf_h·x_t + bf_h) (forget gate)
//   m_t = max(log f_t + m_{t−1}, ĩ_t)                                                    (stabiliser, m_{−1} = −∞)
//   C_t = e^{log f_t + m_{t−1} − m_t} C_{t−1} + e^{ĩ_t − m_t} φ(k̃_t) ṽ_tᵀ,   n_t = (same) n_{t−1} + e^{ĩ_t − m_t} φ(k̃_t)
// read *delayed* (eqs. 41–42): the entry u leaving the window at step q = u + w is scored with its own query
// against the state at q,
//   h = C_qᵀ φ(q̃_u) / max(|n_qᵀ φ(q̃_u)|, e^{−m_q}),   r = c · tanh((wo_h·h + bo_h) / c)   (soft-cap c)
// ("immediate" scoring, Fig. 5's ablation, reads at q = u instead).
//
// Both give a log-space-like priority r (higher = keep); the budget rule compares r + ⌊(q − t)/n⌋ · log γ_h (eqs. 5,
// 18–21) with the per-head decay log γ_h ∈ [log 0.999999, log 0.999] stored with the scorer.
//
// Where the papers leave a value open we chose it and say so (docs/results/kvpop/README.md): the input norm, the
// widths (MLP hidden 2d; f = dv = d/2), the soft-cap c = 10 and the decay step n = 1 (the floor vanishes, so
// priorities are exactly static).
//
// File: safetensors (model.safetensors in a directory, with config.json), tensors per layer l, stacked over heads:
//   kvpop.{l}.mlp.fc1.weight [Hkv, hidden, 2d]   kvpop.{l}.mlp.fc1.bias [Hkv, hidden]
//   kvpop.{l}.mlp.fc2.weight [Hkv, hidden]       kvpop.{l}.mlp.fc2.bias [Hkv]
// or
//   kvpop.{l}.mlstm.wq [Hkv, f, 2d]  .wk [Hkv, f, 2d]  .wv [Hkv, dv, 2d]  .wi [Hkv, 2d]  .bi [Hkv]  .wf [Hkv, 2d]
//   .bf [Hkv]  .wo [Hkv, dv]  .bo [Hkv]
// and kvpop.{l}.log_gamma [Hkv] (the value of log γ_h).
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "predict/trained_defaults.h"

namespace kvsieve {

struct SafeTensor;

/// RMSNorm ε of the scorer's input.
inline constexpr float kKvpopNormEps = 1e-6f;
/// Bounds of the learned decay γ (KVpop eqs. 18–21).
inline constexpr double kKvpopGammaMin = 0.999, kKvpopGammaMax = 0.999999;

/// "kvpop.{layer}.{name}".
std::string kvpop_tensor_name(int layer, const std::string& name);

/// Settings saved beside the weights (config.json): what the scorer was trained for.
struct KvpopConfig {
    std::string kind;         ///< "mlp" (KVpop_mlp) or "mlstm" (KVpop); empty: what the tensors hold
    int64_t window = 256;     ///< protected window w
    int64_t sinks = 4;        ///< sink tokens s
    int64_t decay_every = 1;  ///< n of ⌊(q − t)/n⌋ (tokens)
    double softcap = 10;      ///< c of the mLSTM readout's soft-cap
    bool delayed = true;      ///< mLSTM read at window exit (true) or at write
    /// The trained defaults block of the same config.json (window, sinks, delayed, budget_k as recorded, empty where
    /// absent; window, sinks and delayed above are these or the paper's defaults).
    TrainedDefaults trained;
};

/// The config.json of a scorer directory (`path` a directory holding one); defaults (kind empty) otherwise. Throws
/// Error if it is not JSON or a value has the wrong type (a trained default: naming the file and the key).
KvpopConfig read_kvpop_config(const std::string& path);

/// One KV head's mLSTM memory. C [2f][dv] row-major, n [2f], m the stabiliser.
struct MlstmState {
    std::vector<float> C, n;
    float m = -INFINITY;
};

/// The projections of one token for one head's mLSTM.
struct MlstmInputs {
    std::vector<float> q_raw;     ///< q̃ [f] (what a delayed readout keeps: φ(q̃) is recomputed from it)
    std::vector<float> q, k, v;   ///< φ(q̃) [2f], φ(k̃) [2f], ṽ [dv]
    float log_i = 0, log_f = 0;   ///< ĩ and log σ(f̃)
    std::vector<float> x, k_raw;  ///< working space: the scorer input [2d] and k̃ [f] (reused from token to token)
};

/// The scorers of every layer of one model.
class KvpopScorerNet {
public:
    /// Reads a safetensors file, or DIR/model.safetensors and DIR/config.json when `path` is a directory. Throws
    /// Error naming the file and the first missing or mis-shaped tensor (every layer must fit Hkv heads of size d),
    /// or a config.json that is not JSON or whose kind differs from the tensors'.
    static KvpopScorerNet load(const std::string& path, int n_layer, int n_head_kv, int head_dim);
    /// The same from tensors already read (`source` names them in errors); cfg.kind is set from the tensors.
    static KvpopScorerNet from_tensors(const std::map<std::string, SafeTensor>& t, const std::string& source,
                                       int n_layer, int n_head_kv, int head_dim, KvpopConfig cfg = {});

    const KvpopConfig& config() const { return cfg_; }
    /// sinks, window, delayed and budget_k of the training (config.json; empty fields: not recorded).
    const TrainedDefaults& trained_defaults() const { return cfg_.trained; }
    bool stateful() const { return cfg_.kind == "mlstm"; }
    int feature_dim() const { return f_; }  ///< f (φ has 2f entries)
    int value_dim() const { return dv_; }   ///< dv
    int hidden() const { return hidden_; }  ///< MLP hidden width
    float log_gamma(int layer, int head) const { return layers_.at(layer).log_gamma.at(head); }

    /// KVpop_mlp: r[t·Hkv + h] for T entries of `layer`; k, v [T][Hkv·d] (keys after RoPE). Error if stateful().
    void score_mlp(int layer, const float* k, const float* v, int64_t T, float* r) const;

    /// mLSTM: a fresh state of one head (C = 0, n = 0, m = −∞).
    MlstmState new_state() const;
    /// mLSTM: the projections of one token (k, v [d] of head `head`).
    void inputs(int layer, int head, const float* k, const float* v, MlstmInputs& out) const;
    /// mLSTM: one recurrent step (the update above) with a token's inputs.
    void step(const MlstmInputs& in, MlstmState& s) const;
    /// mLSTM: φ(z) = [softmax(z); softmax(−z)] of z [f] into out [2f].
    void features(const float* z, float* out) const;
    /// mLSTM: the soft-capped score of query φ(q̃) [2f] against state s (an empty state scores 0).
    float readout(int layer, int head, const float* phi_q, const MlstmState& s) const;

private:
    struct Layer {
        std::vector<float> fc1, b1, fc2, b2;                    // MLP
        std::vector<float> wq, wk, wv, wi, bi, wf, bf, wo, bo;  // mLSTM
        std::vector<float> log_gamma;                           // [Hkv]
    };
    std::vector<Layer> layers_;
    KvpopConfig cfg_;
    int hkv_ = 0, d_ = 0, hidden_ = 0, f_ = 0, dv_ = 0;
};

}  // namespace kvsieve
