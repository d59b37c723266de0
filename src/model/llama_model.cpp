#include "model/llama_model.h"

#include <cmath>

#include "kernels/matmul.h"
#include "util/error.h"

namespace kvsieve {

void rms_norm(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps) {
    for (int64_t t = 0; t < T; ++t) {
        const float* xr = x + t * n;
        float* yr = y + t * n;
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
        const float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * w[i];
    }
}

LlamaModel::LlamaModel(const std::string& path) : file_(std::make_unique<GGUFFile>(path)) {
    cfg_ = ModelConfig::from_gguf(*file_);
    w_ = ModelWeights::from_gguf(*file_, cfg_);
    rope_ = std::make_unique<Rope>(cfg_, w_.rope_freqs);
}

DenseKVCache LlamaModel::make_cache(int64_t n_ctx) const {
    return DenseKVCache(cfg_.n_layer, cfg_.n_head_kv, cfg_.head_dim, n_ctx);
}

uint64_t LlamaModel::weight_bytes_per_token() const {
    uint64_t b = w_.output.nbytes() + w_.tok_embd.row_bytes;
    for (const auto& L : w_.layers)
        b += L.wq.nbytes() + L.wk.nbytes() + L.wv.nbytes() + L.wo.nbytes() + L.w_gate.nbytes() + L.w_up.nbytes() +
             L.w_down.nbytes();
    return b;
}

namespace {
void add_bias(float* x, const std::vector<float>& b, int64_t T) {
    const int64_t n = static_cast<int64_t>(b.size());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < n; ++i) x[t * n + i] += b[i];
}
}  // namespace

void LlamaModel::forward(const std::vector<int32_t>& tokens, SequenceCache& cache, std::vector<float>& logits,
                         bool all_logits) const {
    const ModelConfig& c = cfg_;
    const int64_t T = static_cast<int64_t>(tokens.size());
    require(T > 0, "forward: no tokens");
    const int64_t pos0 = cache.n_tokens();
    require(pos0 + T <= cache.n_ctx(), "the sequence needs ", pos0 + T, " positions but the context holds ",
            cache.n_ctx());
    const int64_t D = c.n_embd, d = c.head_dim, q_dim = int64_t(c.n_head) * d, kv_dim = int64_t(c.n_head_kv) * d;

    std::vector<float> x(T * D), xn(T * D), q(T * q_dim), k(T * kv_dim), v(T * kv_dim), att(T * q_dim);
    std::vector<float> g(T * c.n_ff), u(T * c.n_ff), tmp(T * D), q_pre(T * q_dim), k_pre(T * kv_dim);

    for (int64_t t = 0; t < T; ++t) {
        require(tokens[t] >= 0 && tokens[t] < c.n_vocab, "token id ", tokens[t], " is outside the vocabulary of ",
                c.n_vocab);
        dequantize_weight_row(w_.tok_embd, tokens[t], x.data() + t * D);
    }
    const Rope::Table rt = rope_->table(pos0, T);
    const RopeAngles angles = rope_->angles();

    for (int l = 0; l < c.n_layer; ++l) {
        const LayerWeights& L = w_.layers[l];
        rms_norm(x.data(), L.attn_norm.data(), xn.data(), T, D, c.rms_eps);
        matmul_shared_input({{&L.wq, q.data()}, {&L.wk, k.data()}, {&L.wv, v.data()}}, xn.data(), T);
        if (c.qkv_bias) {
            add_bias(q.data(), L.bq, T);
            add_bias(k.data(), L.bk, T);
            add_bias(v.data(), L.bv, T);
        }
        if (c.qk_norm) {
            rms_norm(q.data(), L.q_norm.data(), q.data(), T * c.n_head, d, c.rms_eps);
            rms_norm(k.data(), L.k_norm.data(), k.data(), T * c.n_head_kv, d, c.rms_eps);
        }
        q_pre = q;
        k_pre = k;
        rope_->apply(rt, q.data(), c.n_head);
        rope_->apply(rt, k.data(), c.n_head_kv);
        LayerInputs in;
        in.layer = l;
        in.pos0 = pos0;
        in.T = T;
        in.n_head = c.n_head;
        in.n_head_kv = c.n_head_kv;
        in.head_dim = c.head_dim;
        in.n_embd = c.n_embd;
        in.hidden = xn.data();
        in.q_pre = q_pre.data();
        in.k_pre = k_pre.data();
        in.q = q.data();
        in.k = k.data();
        in.v = v.data();
        in.rope = angles;
        cache.attend(in, att.data());
        matmul(L.wo, att.data(), T, tmp.data());
        for (int64_t i = 0; i < T * D; ++i) x[i] += tmp[i];

        rms_norm(x.data(), L.ffn_norm.data(), xn.data(), T, D, c.rms_eps);
        matmul_shared_input({{&L.w_gate, g.data()}, {&L.w_up, u.data()}}, xn.data(), T);
        for (int64_t i = 0; i < T * c.n_ff; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        matmul(L.w_down, g.data(), T, tmp.data());
        for (int64_t i = 0; i < T * D; ++i) x[i] += tmp[i];
    }
    cache.finish_step(pos0, T);

    const int64_t n_out = all_logits ? T : 1;
    const float* last = x.data() + (T - n_out) * D;
    rms_norm(last, w_.output_norm.data(), xn.data(), n_out, D, c.rms_eps);
    logits.resize(static_cast<size_t>(n_out * c.n_vocab));
    matmul(w_.output, xn.data(), n_out, logits.data());
}

}  // namespace kvsieve
