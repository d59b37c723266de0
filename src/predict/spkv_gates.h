#pragma once
// SP-KV's utility predictor, inference side (Szilvasy, Faysse et al., "Self-Pruned Key-Value Attention", eq. 1 and
// App. I): per layer, u = σ(f(h)) ∈ (0, 1) per KV head from the layer's attention-input hidden state h [D], with f
// linear (W [Hkv, D], b [Hkv]) or an MLP D → hidden → Hkv with SiLU between. The tensors live in the model's GGUF
// under the predictor schema (predict/predictor_tensors.h, method "spkv"):
//   blk.<l>.spkv.fc1.weight [hidden, D] (ne {D, hidden}), blk.<l>.spkv.fc1.bias [hidden],
//   blk.<l>.spkv.fc2.weight [Hkv, hidden], blk.<l>.spkv.fc2.bias [Hkv]          (MLP)
//   blk.<l>.spkv.fc.weight [Hkv, D], blk.<l>.spkv.fc.bias [Hkv]                  (linear)
// or, for gates trained on a frozen model, in a predictor folder beside it (predict/learned_methods.h): the same
// tensors under the same names in DIR/model.safetensors (F32 or F16, shapes outermost first as above) and the trained
// defaults and model_digest in DIR/config.json (model_type "spkv"; predict/spkv_export.h writes it).
#include <cstdint>
#include <string>
#include <vector>

#include "predict/trained_defaults.h"

namespace kvsieve {

class GGUFFile;

/// True when `f` holds SP-KV gates (a tensor blk.0.spkv.*).
bool has_spkv_gates(const GGUFFile& f);

/// The gates of every layer of one model.
class SpkvGates {
public:
    /// Reads the gates of layers 0 … n_layer − 1 from `f`, and their trained defaults (the GGUF's
    /// kvsieve.predictor.spkv.{tau,window,sinks}, predict/trained_defaults.h). Throws Error naming the file if it
    /// holds no SP-KV gates (a model not trained with SP-KV), naming the first missing or mis-shaped tensor (every
    /// layer must have the same form), or naming the file and key of a trained default of the wrong type.
    static SpkvGates load(const GGUFFile& f, int n_layer, int n_embd, int n_head_kv);
    /// The gates at `path`: a predictor folder (DIR/model.safetensors with the trained defaults of DIR/config.json), a
    /// .safetensors file (no trained defaults), or a .gguf file (load(GGUFFile)). Throws Error as load(GGUFFile) does,
    /// naming the file, and naming config.json and the key of a malformed trained default.
    static SpkvGates load(const std::string& path, int n_layer, int n_embd, int n_head_kv);

    /// u[t·Hkv + h] ∈ (0, 1) for T hidden states x [T][D] of `layer`.
    void predict(int layer, const float* x, int64_t T, float* u) const;

    int hidden() const { return hidden_; }  ///< 0: linear
    /// τ, window and sinks the gates were trained with (empty fields: not recorded in the GGUF).
    const TrainedDefaults& trained_defaults() const { return trained_; }
    int n_layers() const { return static_cast<int>(layers_.size()); }

private:
    /// The gates from `layer_tensors(l)` (the tensors blk.<l>.spkv.<name>, keyed by <name>) of the file `source`.
    template <class LayerTensors>
    static SpkvGates from_layers(LayerTensors layer_tensors, const std::string& source, int n_layer, int n_embd,
                                 int n_head_kv);

    struct Layer {
        std::vector<float> w1, b1, w2, b2;  // MLP: w1 [hidden][D], w2 [Hkv][hidden]; linear: w2 [Hkv][D]
    };
    std::vector<Layer> layers_;
    int d_ = 0, hkv_ = 0, hidden_ = 0;
    TrainedDefaults trained_;
};

}  // namespace kvsieve
