#include "attend/dense_kv_cache.h"

#include <cstring>

#include "kernels/attention.h"
#include "util/error.h"

namespace kvsieve {

DenseKVCache::DenseKVCache(int n_layer, int n_head_kv, int head_dim, int64_t n_ctx)
    : n_layer_(n_layer), row_(static_cast<int64_t>(n_head_kv) * head_dim), n_ctx_(n_ctx) {
    require(n_ctx > 0, "context size must be positive, got ", n_ctx);
    k_.resize(n_layer);
    v_.resize(n_layer);
    for (int l = 0; l < n_layer; ++l) {
        k_[l].resize(static_cast<size_t>(n_ctx * row_));
        v_[l].resize(static_cast<size_t>(n_ctx * row_));
    }
}

void DenseKVCache::write(int layer, int64_t pos, int64_t T, const float* k, const float* v) {
    require(pos >= 0 && pos + T <= n_ctx_, "KV cache full: positions ", pos, "..", pos + T - 1,
            " do not fit in a context of ", n_ctx_);
    std::memcpy(k_[layer].data() + pos * row_, k, sizeof(float) * T * row_);
    std::memcpy(v_[layer].data() + pos * row_, v, sizeof(float) * T * row_);
}

void DenseKVCache::attend(const LayerInputs& in, float* out) {
    write(in.layer, in.pos0, in.T, in.k, in.v);
    attention_dense_causal(in.q, in.T, in.pos0, keys(in.layer), values(in.layer), row_,
                           {in.n_head, in.n_head_kv, in.head_dim}, out);
}

uint64_t DenseKVCache::bytes() const { return 2ull * n_layer_ * n_ctx_ * row_ * sizeof(float); }

}  // namespace kvsieve
