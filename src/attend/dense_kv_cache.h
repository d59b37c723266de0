#pragma once
// The uncompressed KV cache: every entry of every layer kept, contiguous by position.
#include <cstdint>
#include <vector>

#include "cache/sequence_cache.h"

namespace kvsieve {

/// Keys (after RoPE) and values of one sequence, float32, for all layers:
/// K[l] and V[l] are [n_ctx][n_head_kv · head_dim] row-major; entry j holds position j. The reference
/// ("plain engine") cache: nothing is ever dropped.
class DenseKVCache : public SequenceCache {
public:
    /// Allocates n_ctx positions for n_layer layers; throws Error if the size overflows memory limits.
    DenseKVCache(int n_layer, int n_head_kv, int head_dim, int64_t n_ctx);

    int64_t n_ctx() const override { return n_ctx_; }
    /// Number of positions written so far (the next token's position).
    int64_t n_tokens() const override { return n_tokens_; }
    void attend(const LayerInputs& in, float* out) override;
    void finish_step(int64_t pos0, int64_t T, StepPhase) override { n_tokens_ = pos0 + T; }
    int64_t row_stride() const { return row_; }

    /// Writes T entries at positions pos..pos+T-1 of layer l (k, v: [T][n_head_kv·head_dim]).
    /// Throws Error if they do not fit in n_ctx.
    void write(int layer, int64_t pos, int64_t T, const float* k, const float* v);
    void clear() { n_tokens_ = 0; }

    const float* keys(int layer) const { return k_[layer].data(); }
    const float* values(int layer) const { return v_[layer].data(); }
    /// Bytes held by the cache (allocated size).
    uint64_t bytes() const;

private:
    int n_layer_;
    int64_t row_;
    int64_t n_ctx_;
    int64_t n_tokens_ = 0;
    std::vector<std::vector<float>> k_, v_;
};

}  // namespace kvsieve
