#pragma once
// The Llama-family forward pass (llama/Mistral, qwen2, qwen3) for prefill and decode on the CPU.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/dense_kv_cache.h"
#include "io/gguf.h"
#include "io/model_config.h"
#include "model/rope.h"
#include "model/weights.h"

namespace kvsieve {

/// A loaded model: the mapped GGUF file, its config and weight views.
///
/// Per block (Touvron et al. 2023, Llama; Qwen2/Qwen3 technical reports):
///   h = x + W_o · Attn(RoPE(W_q·n), RoPE(W_k·n), W_v·n),  n = RMSNorm(x)   (qwen2: + biases; qwen3:
///       per-head RMSNorm of q and k before RoPE)
///   x' = h + W_down · (SiLU(W_gate·m) ⊙ W_up·m),          m = RMSNorm(h)
/// RMSNorm(x) = x / √(mean(x²) + ε) ⊙ w (Zhang & Sennrich 2019, eq. 4). Logits = W_out · RMSNorm(x_L).
class LlamaModel {
public:
    /// Opens, maps and validates the file; throws Error naming the first problem (unknown architecture,
    /// missing tensor, wrong shape, unsupported type, truncated file).
    explicit LlamaModel(const std::string& path);

    const ModelConfig& config() const { return cfg_; }
    const GGUFFile& file() const { return *file_; }
    const ModelWeights& weights() const { return w_; }

    /// A cache with room for n_ctx positions.
    DenseKVCache make_cache(int64_t n_ctx) const;

    /// Runs T = tokens.size() tokens at positions cache.n_tokens() … + T − 1 in one batch, handing each
    /// layer's keys and values to the cache. logits becomes [T][n_vocab] (all_logits) or [n_vocab] for the
    /// last token; raw logits (no softmax). Throws Error for an out-of-vocabulary id or a full cache.
    void forward(const std::vector<int32_t>& tokens, SequenceCache& cache, std::vector<float>& logits,
                 bool all_logits = false) const;

    /// Bytes of weights read by one decode step (every matrix once, plus one embedding row).
    uint64_t weight_bytes_per_token() const;

private:
    std::unique_ptr<GGUFFile> file_;
    ModelConfig cfg_;
    ModelWeights w_;
    std::unique_ptr<Rope> rope_;
};

/// y[t] = x[t] / √(mean(x[t]²) + eps) ⊙ w for T rows of n values (in place allowed).
void rms_norm(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps);

}  // namespace kvsieve
