#pragma once
// The tensors of a Llama-family model, as views into a mapped GGUF file (matrices) or small owned float32
// vectors (norm weights, biases).
#include <memory>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/repack.h"
#include "io/model_config.h"

namespace kvsieve {

class GGUFFile;

/// Tensors of one transformer block. Matrices map inputs (cols) to outputs (rows):
/// wq [Hq·d × D], wk, wv [Hkv·d × D], wo [D × Hq·d], w_gate, w_up [ff × D], w_down [D × ff].
struct LayerWeights {
    std::vector<float> attn_norm, ffn_norm;  ///< [D]
    WeightMatrix wq, wk, wv, wo;
    std::vector<float> bq, bk, bv;      ///< qwen2 biases ([Hq·d], [Hkv·d], [Hkv·d]); empty otherwise
    std::vector<float> q_norm, k_norm;  ///< qwen3 per-head RMSNorm weights [d]; empty otherwise
    WeightMatrix w_gate, w_up, w_down;
};

/// All tensors of the model. `output` aliases `tok_embd` when the file ties them (no output.weight).
struct ModelWeights {
    WeightMatrix tok_embd;           ///< [n_vocab × D]
    WeightMatrix output;             ///< [n_vocab × D]
    std::vector<float> output_norm;  ///< [D]
    std::vector<float> rope_freqs;   ///< Llama 3.1 frequency factors [n_rot/2]; empty if absent
    std::vector<LayerWeights> layers;
    bool tied_output = false;
    /// Q8_0 matrices are re-laid at load into the split layout (kernels/repack.h) for the GEMV kernels;
    /// these buffers hold them (the same size as the file's Q8_0 data).
    std::vector<std::shared_ptr<AlignedBuffer>> owned;

    /// Binds every tensor the config needs; throws Error naming a missing tensor, a wrong shape
    /// ("tensor 'blk.0.attn_q.weight' has shape [256, 128], expected [256, 256]") or an unsupported type.
    static ModelWeights from_gguf(const GGUFFile& f, const ModelConfig& c);
};

}  // namespace kvsieve
