#pragma once
// The Llama-family forward pass (llama/Mistral, qwen2, qwen3) for prefill and decode on the CPU.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attend/dense_kv_cache.h"
#include "cache/kv_cache.h"
#include "io/gguf.h"
#include "io/model_config.h"
#include "model/forward_scratch.h"
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

    /// Runs T = tokens.size() tokens at positions cache.n_tokens() … + T − 1 in one batch as a step of kind
    /// `phase` (a prefill step, or a decode step of one token), handing each layer's keys and values to the cache.
    /// logits becomes [T][n_vocab] (all_logits) or [n_vocab] for the last token; raw logits (no softmax). Throws
    /// Error for an out-of-vocabulary id, a full cache, or a decode step of T ≠ 1 tokens.
    void forward(StepPhase phase, const std::vector<int32_t>& tokens, SequenceCache& cache, std::vector<float>& logits,
                 bool all_logits = false) const;
    /// The same over a paged KV cache, attended through attend/'s PagedAttention.
    void forward(StepPhase phase, const std::vector<int32_t>& tokens, KVCache& cache, std::vector<float>& logits,
                 bool all_logits = false) const;

    /// One sequence's part of a batched forward step: its tokens, run at positions cache->n_tokens() onwards.
    struct Segment {
        const std::vector<int32_t>* tokens = nullptr;  ///< T_s ≥ 1 ids
        StepPhase phase = StepPhase::kPrefill;         ///< the kind of step (a decode step: T_s = 1)
        SequenceCache* cache = nullptr;  ///< the sequence's cache (distinct for each segment; for a paged KVCache,
                                         ///< an attend/PagedAttention over it)
        std::vector<float>* logits = nullptr;  ///< becomes [T_s][n_vocab] (all_logits) or the last token's [n_vocab]
        bool all_logits = false;
    };
    /// Runs several sequences in one step: the weight matrices are applied once to the Σ T_s rows of every
    /// segment (decode steps of many sequences and prefill chunks share each GEMM), while RoPE, the cache store
    /// and attention run per segment over its own cache. Each segment's logits equal forward() of it alone: short
    /// segments (< kGemmMinTokens rows: decode steps, small chunks) share one row-exact GEMV product (every weight
    /// read once for all of them), each long chunk gets an SGEMM of its own (compute-bound; SGEMM's rounding depends
    /// on the row count); the one difference is a short multi-token segment of an F32-weight model, which alone
    /// would take SGEMM (float rounding only). Throws Error for an
    /// empty batch or segment, a cache given twice, an out-of-vocabulary id or a full cache (checked before any
    /// cache changes), or a decode segment of T_s ≠ 1 tokens; a KVPoolExhausted from a cache leaves the step
    /// half-done for every segment.
    void forward_batch(const std::vector<Segment>& segments) const;

    /// Bytes of weights read by one decode step (every matrix once, plus one embedding row).
    uint64_t weight_bytes_per_token() const;

private:
    /// forward_batch over segs[0 … S), S ≥ 1, in the model's scratch (model/forward_scratch.h).
    void forward_segments(const Segment* segs, size_t S) const;
    /// The step's row layout (sc.rows, sc.len, sc.pos0), its activations sized, the token embeddings in sc.x and
    /// every row's RoPE angles.
    void embed_rows(const Segment* segs, size_t S, ForwardScratch& sc) const;
    /// Layer l over every row: attention (each segment over its own cache) and the feed-forward block, in place in
    /// sc.x.
    void forward_layer(int l, const Segment* segs, size_t S, const RopeAngles& angles, ForwardScratch& sc) const;
    /// The output norm and head on the rows whose logits each segment wants, into its logits.
    void output_head(const Segment* segs, size_t S, ForwardScratch& sc) const;

    std::unique_ptr<GGUFFile> file_;
    ModelConfig cfg_;
    ModelWeights w_;
    std::unique_ptr<Rope> rope_;
    /// The forward steps' buffers, reused from step to step (lent to one step at a time).
    std::unique_ptr<ForwardScratchSlot> scratch_;
};

/// y[t] = x[t] / √(mean(x[t]²) + eps) ⊙ w for T rows of n values (in place allowed).
void rms_norm(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps);

}  // namespace kvsieve
