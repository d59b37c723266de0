#pragma once
// Hyperparameters of a Llama-family model, read from GGUF metadata.
#include <cstdint>
#include <string>

namespace kvsieve {

class GGUFFile;
class GGUFWriter;

/// How RoPE pairs the dimensions of a head: kNormal rotates adjacent pairs (x[2i], x[2i+1]) (ggml's
/// mode 0, llama); kNeox rotates halves (x[i], x[i + n_rot/2]) (ggml's NEOX mode, qwen2/qwen3).
enum class RopeLayout { kNormal, kNeox };

/// Architecture family. Mistral GGUFs use "llama".
enum class Arch { kLlama, kQwen2, kQwen3 };

/// Everything the forward pass needs to know about the shape of a model.
struct ModelConfig {
    Arch arch = Arch::kLlama;
    std::string arch_name;  ///< general.architecture
    int n_layer = 0;        ///< L
    int n_embd = 0;         ///< D
    int n_head = 0;         ///< H_q
    int n_head_kv = 0;      ///< H_kv
    int head_dim = 0;       ///< d (key_length, default D / H_q)
    int n_ff = 0;           ///< FFN hidden size
    int n_vocab = 0;
    int64_t n_ctx_train = 0;  ///< context_length
    float rms_eps = 1e-5f;
    float rope_base = 10000.0f;      ///< rope.freq_base
    int n_rot = 0;                   ///< rope.dimension_count (≤ d)
    float rope_linear_scale = 1.0f;  ///< positions are multiplied by this (1 / rope.scaling.factor, linear)
    RopeLayout rope_layout = RopeLayout::kNormal;
    bool qkv_bias = false;  ///< qwen2
    bool qk_norm = false;   ///< qwen3
    std::string path;       ///< the GGUF file it was read from (empty if built by hand); predictors stored
                            ///< in the same file (predict/predictor_tensors.h) are loaded from it

    int gqa_group() const { return n_head / n_head_kv; }
    /// Reads and validates the config; throws Error naming an unknown architecture or a missing or
    /// inconsistent key.
    static ModelConfig from_gguf(const GGUFFile& f);
    /// Writes the keys from_gguf reads (general.architecture = arch_name, default "llama", and the
    /// `<arch>.*` shape keys), so that from_gguf gives back this config.
    void to_gguf(GGUFWriter& w) const;
    /// One-line summary ("qwen3: L=28 D=1024 Hq=16 Hkv=8 d=128 ff=3072 vocab=151936 ctx=40960").
    std::string summary() const;
};

}  // namespace kvsieve
