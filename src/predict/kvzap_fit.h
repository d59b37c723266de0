#pragma once
// Fitting KVzap surrogates: training pairs from the KVzip+ oracle, and the closed-form linear model.
#include <cstdint>
#include <string>
#include <vector>

namespace kvsieve {

class LlamaModel;
class Tokenizer;

/// Options of `kvsieve train kvzap` (KVzap paper §3.3 / App.: prompts of ~750–1250 tokens, 500 sampled tokens
/// per prompt, 5% held out).
struct KVzapFitOptions {
    int64_t prompts = 40;
    int64_t min_tokens = 750, max_tokens = 1250;  ///< prompt length range (clipped to the model's context)
    int64_t tokens_per_prompt = 500;
    double ridge = 1e-3;        ///< λ of the ridge penalty, relative to the mean diagonal of XᵀX
    double validation = 0.05;   ///< fraction of prompts held out for R²
    double log_eps = 1e-6;      ///< targets are log(ε + s⁺)
    uint64_t seed = 0;
    bool progress = true;
};

/// R² of the fitted model on the held-out pairs, per layer and KV head.
struct KVzapFitReport {
    std::vector<std::vector<double>> r2;  ///< [L][Hkv]
    int64_t train_pairs = 0, val_pairs = 0;
    double mean_r2() const;
    std::string table() const;
};

/// Collects (attention-input hidden state, log KVzip+ score) pairs from prompts cut out of `corpus`, fits
/// one ridge-regression linear model per layer (closed form, bias unpenalised) and writes it to out_dir in
/// kvpress's KVzapModel layout (config.json + model.safetensors with layers.{i}.weight/bias). Throws Error for
/// an empty corpus or one shorter than a prompt.
KVzapFitReport fit_kvzap_linear(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus,
                                const std::string& out_dir, const KVzapFitOptions& o);

}  // namespace kvsieve
