#pragma once
// The KVzap surrogate (KVzap paper §3.3): per layer, a linear map or a 2-layer MLP from the attention-input
// hidden state to one log-score per KV head. Loads kvpress's KVzapModel checkpoints as they are.
#include <cstdint>
#include <string>
#include <vector>

#include "predict/trained_defaults.h"

namespace kvsieve {

/// Per-layer predictors f_l: R^D → R^{H_kv}. Linear: y = W x + b. MLP: y = W2 · GELU(W1 x + b1) + b2 with
/// the exact (erf) GELU, hidden width D/8 in the published checkpoints.
class KVzapModel {
public:
    /// Loads DIR/config.json (model_type "kvzap", input_dim, output_dim, n_modules, hidden_dim null for
    /// linear; optionally the trained defaults tau, window, sinks and provenance, predict/trained_defaults.h) and
    /// DIR/model.safetensors (layers.{i}.weight/bias or layers.{i}.0.* and layers.{i}.2.*).
    /// Throws Error naming a missing file, key or tensor, a tensor of the wrong shape, or a trained default of the
    /// wrong type (naming config.json and the key).
    static KVzapModel load(const std::string& dir);

    int n_layers() const { return n_modules_; }
    int input_dim() const { return input_dim_; }
    int output_dim() const { return output_dim_; }
    bool is_mlp() const { return hidden_dim_ > 0; }
    /// τ, window, sinks and provenance recorded in config.json by `kvsieve train kvzap` (empty fields: not recorded).
    const TrainedDefaults& trained_defaults() const { return trained_; }

    /// out[t][j] = f_layer(x[t])_j for T rows x [T][input_dim]; out [T][output_dim].
    void predict(int layer, const float* x, int64_t T, float* out) const;

private:
    struct Layer {
        std::vector<float> w1, b1, w2, b2;  // linear: w1 [out][in], b1 [out]
    };
    int input_dim_ = 0, output_dim_ = 0, hidden_dim_ = 0, n_modules_ = 0;
    std::vector<Layer> layers_;
    TrainedDefaults trained_;
};

}  // namespace kvsieve
