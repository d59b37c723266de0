#pragma once
// Fitting KVzap surrogates: training pairs from the KVzip+ oracle, and the closed-form linear model.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "predict/trained_defaults.h"

namespace kvsieve {

class LlamaModel;
class Tokenizer;

/// The inference defaults a KVzap checkpoint records in its config.json (predict/trained_defaults.h): τ = −4 (KVzap
/// §3.3, the paper's value for Qwen3-8B), the local window w = 128 and no sinks (KVzap Alg. 1), what `kvzap` used
/// before checkpoints recorded them.
inline TrainedDefaults kvzap_inference_defaults() {
    TrainedDefaults d;
    d.tau = -4;
    d.window = 128;
    d.sinks = 0;
    return d;
}

/// Options of `kvsieve train kvzap` (KVzap paper §3.3 / App.: prompts of ~750–1250 tokens, 500 sampled tokens
/// per prompt, 5% held out).
struct KVzapFitOptions {
    int64_t prompts = 40;
    int64_t min_tokens = 750, max_tokens = 1250;  ///< prompt length range (clipped to the model's context)
    int64_t tokens_per_prompt = 500;
    double ridge = 1e-3;       ///< λ of the ridge penalty, relative to the mean diagonal of XᵀX
    double validation = 0.05;  ///< fraction of prompts held out for R²
    double log_eps = 1e-6;     ///< targets are log(ε + s⁺)
    uint64_t seed = 0;
    bool progress = true;
    /// τ, window, sinks and provenance written to the checkpoint's config.json (the policy's defaults when loaded).
    TrainedDefaults trained = kvzap_inference_defaults();
};

/// R² of the fitted model on the held-out pairs, per layer and KV head.
struct KVzapFitReport {
    std::vector<std::vector<double>> r2;       ///< [L][Hkv] 1 − SS_res/SS_tot
    std::vector<std::vector<double>> pearson;  ///< [L][Hkv] squared Pearson correlation (KVzap paper, Table 1)
    int64_t train_pairs = 0, val_pairs = 0;
    /// Thresholds for a target compression: {ratio, τ} where a fraction `ratio` of the held-out predictions (all
    /// layers and heads, log space) lie below τ, for ratios 0.25, 0.5, 0.75, 0.9, 0.95. A guide for choosing τ; the
    /// compression on real prompts is measured by `eval sweep --thresholds`, where sinks and the window are kept.
    std::vector<std::pair<double, double>> tau_for_ratio;
    double mean_r2() const;
    double mean_pearson() const;
    std::string table() const;
};

/// Training pairs of every layer: x = attention-input hidden state (after the input RMSNorm) [n × D] and
/// y = log(ε + s⁺) per KV head [n × H_kv] (KVzap §3.2: the surrogate regresses log KVzip+ scores), row-major,
/// split by prompt into train and validation.
struct KVzapPairs {
    int n_layer = 0, dim = 0, n_head_kv = 0;
    std::vector<std::vector<float>> x_train, y_train, x_val, y_val;  ///< [L] each
    int64_t n_train = 0, n_val = 0;                                  ///< pairs per layer
};

/// Collects pairs from prompts cut out of `corpus`: a prefill under kvzip_plus (its reconstruction scores every
/// entry), then
/// tokens_per_prompt sampled positions (sinks excluded) per prompt. Throws Error for an empty corpus or one
/// shorter than a prompt.
KVzapPairs collect_kvzap_pairs(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus,
                               const KVzapFitOptions& o);

/// R² = 1 − SS_res / SS_tot per layer and head of predictions `pred` ([L] × [n_val × H]) on the validation pairs.
std::vector<std::vector<double>> kvzap_r2(const KVzapPairs& p, const std::vector<std::vector<float>>& pred);
/// The squared Pearson correlation r² between targets and predictions per layer and head (what the KVzap paper
/// reports as R², Table 1): 1 for any prediction a·y + b with a ≠ 0, unlike 1 − SS_res/SS_tot. 0 when either side
/// is constant.
std::vector<std::vector<double>> kvzap_pearson_r2(const KVzapPairs& p, const std::vector<std::vector<float>>& pred);

/// Finishes a fit: R² of `pred` ([L] × [n_val × H]) on p's validation pairs, and the checkpoint written to out_dir
/// in kvpress's KVzapModel layout (config.json with hidden_dim, null when 0 = linear, and the trained defaults
/// `trained`; model.safetensors holding `tensors`). Throws Error on I/O failure.
KVzapFitReport finish_kvzap_fit(const KVzapPairs& p, const std::vector<std::vector<float>>& pred, int hidden_dim,
                                const std::map<std::string, SafeTensor>& tensors, const std::string& out_dir,
                                const TrainedDefaults& trained = kvzap_inference_defaults());

/// Fits one ridge-regression linear model per layer (closed form, bias unpenalised) and writes it to out_dir in
/// kvpress's KVzapModel layout (config.json + model.safetensors with layers.{i}.weight/bias).
KVzapFitReport fit_kvzap_linear(const KVzapPairs& p, const std::string& out_dir, const KVzapFitOptions& o);

}  // namespace kvsieve
