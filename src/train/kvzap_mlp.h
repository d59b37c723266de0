#pragma once
// The KVzap-MLP surrogate (KVzap §3.2: D → D/8, GELU, → H_kv per layer) fitted to log KVzip+ scores with the
// training stack. Header free of libtorch.
#include <cstdint>
#include <string>

#include "fit/kvzap_fit.h"

namespace kvsieve::train {

/// KVzap's recipe: MSE, AdamW lr 5e-3, 15 epochs, batch 512, cosine schedule, gradient clip 1.0.
struct KVzapMlpOptions {
    int epochs = 15;
    int64_t batch = 512;
    double lr = 5e-3;
    double weight_decay = 0.01;
    double clip = 1.0;
    uint64_t seed = 0;
    bool progress = true;
    /// τ, window, sinks and provenance written to the checkpoint's config.json (predict/trained_defaults.h).
    TrainedDefaults trained = kvzap_inference_defaults();
};

/// Fits one MLP per layer on p's training pairs, reports R² on its validation pairs, and writes out_dir in
/// kvpress's layout (config.json with hidden_dim = D/8 and the trained defaults o.trained; layers.{i}.0.weight [D/8, D], .0.bias, .2.weight
/// [H_kv, D/8], .2.bias). Throws Error if there are no training pairs.
KVzapFitReport fit_kvzap_mlp(const KVzapPairs& p, const std::string& out_dir, const KVzapMlpOptions& o);

}  // namespace kvsieve::train
