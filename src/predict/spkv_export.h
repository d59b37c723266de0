#pragma once
// SP-KV gates as a predictor folder of their own (predict/spkv_gates.h): the gates a trainer wrote into a model's GGUF
// (tensors blk.<l>.spkv.*, metadata kvsieve.predictor.spkv.*), copied out into
//   DIR/model.safetensors   the same tensors under the same names, shapes outermost first, F32 or F16
//   DIR/config.json         model_type "spkv", mode, hidden, n_layer, n_embd, n_head_kv, dtype, the trained defaults
//                           (tau, window, sinks; predict/trained_defaults.h), model_digest and base_model of the model
//                           the gates serve, provenance, and "default" when asked
// so that gates trained on a frozen model travel without the model's weights and are found by its digest
// (predict/bundled_predictors.h) as the other learned methods' predictors are.
#include <string>

namespace kvsieve {

/// What export_spkv_gates records beside the gates.
struct SpkvExportOptions {
    /// The GGUF of the model the gates serve, whose tensor digest (io/model_digest.h) is recorded: the frozen model
    /// the gates were trained on (its weights unchanged by training). Empty: the trained GGUF itself, whose digest
    /// then covers the gates too (a model trained together with its gates is only that file).
    std::string base_model;
    std::string provenance;  ///< the command or config that made the gates ("" keeps the GGUF's, if any)
    bool f16 = false;        ///< store the weights as binary16 (rounded to nearest) instead of F32
    bool is_default = true;  ///< config.json "default": the predictor a spec without model= takes for that model
};

/// Writes the gates of `trained_gguf` as the predictor folder `out_dir` (created if missing; both files replaced).
/// Throws Error naming the file when it holds no SP-KV gates, when the base model's layer count, width or KV heads
/// differ from the gates' (SpkvGates::load checks every tensor's shape), or on I/O failure.
void export_spkv_gates(const std::string& trained_gguf, const std::string& out_dir, const SpkvExportOptions& o);

}  // namespace kvsieve
