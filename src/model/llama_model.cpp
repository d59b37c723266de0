#include "model/llama_model.h"

#include <algorithm>
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
    forward_batch({Segment{&tokens, &cache, &logits, all_logits}});
}

void LlamaModel::forward_batch(const std::vector<Segment>& segs) const {
    const ModelConfig& c = cfg_;
    require(!segs.empty(), "forward: no sequences");
    const int64_t D = c.n_embd, d = c.head_dim, q_dim = int64_t(c.n_head) * d, kv_dim = int64_t(c.n_head_kv) * d;
    const size_t S = segs.size();
    std::vector<int64_t> row0(S + 1, 0), pos0(S);
    for (size_t s = 0; s < S; ++s) {
        const Segment& g = segs[s];
        require(g.tokens && g.cache && g.logits, "forward: segment ", s, " lacks its tokens, cache or logits");
        const int64_t T = static_cast<int64_t>(g.tokens->size());
        require(T > 0, "forward: no tokens");
        for (size_t r = 0; r < s; ++r) require(segs[r].cache != g.cache, "forward: one cache is given twice in a batch");
        pos0[s] = g.cache->n_tokens();
        require(pos0[s] + T <= g.cache->n_ctx(), "the sequence needs ", pos0[s] + T,
                " positions but the context holds ", g.cache->n_ctx());
        for (int32_t id : *g.tokens)
            require(id >= 0 && id < c.n_vocab, "token id ", id, " is outside the vocabulary of ", c.n_vocab);
        row0[s + 1] = row0[s] + T;
    }
    const int64_t N = row0[S];  // rows of every segment together

    std::vector<float> x(N * D), xn(N * D), q(N * q_dim), k(N * kv_dim), v(N * kv_dim), att(N * q_dim);
    std::vector<float> g(N * c.n_ff), u(N * c.n_ff), tmp(N * D), q_pre(N * q_dim), k_pre(N * kv_dim);

    // One RoPE table for all rows: each segment's rows at its own positions.
    Rope::Table rt;
    for (size_t s = 0; s < S; ++s) {
        const int64_t T = row0[s + 1] - row0[s];
        for (int64_t t = 0; t < T; ++t) dequantize_weight_row(w_.tok_embd, (*segs[s].tokens)[t], x.data() + (row0[s] + t) * D);
        Rope::Table part = rope_->table(pos0[s], T);
        if (S == 1) {
            rt = std::move(part);
        } else {
            rt.T += part.T;
            rt.cos.insert(rt.cos.end(), part.cos.begin(), part.cos.end());
            rt.sin.insert(rt.sin.end(), part.sin.begin(), part.sin.end());
        }
    }
    const RopeAngles angles = rope_->angles();

    for (int l = 0; l < c.n_layer; ++l) {
        const LayerWeights& L = w_.layers[l];
        rms_norm(x.data(), L.attn_norm.data(), xn.data(), N, D, c.rms_eps);
        matmul_shared_input({{&L.wq, q.data()}, {&L.wk, k.data()}, {&L.wv, v.data()}}, xn.data(), N);
        if (c.qkv_bias) {
            add_bias(q.data(), L.bq, N);
            add_bias(k.data(), L.bk, N);
            add_bias(v.data(), L.bv, N);
        }
        if (c.qk_norm) {
            rms_norm(q.data(), L.q_norm.data(), q.data(), N * c.n_head, d, c.rms_eps);
            rms_norm(k.data(), L.k_norm.data(), k.data(), N * c.n_head_kv, d, c.rms_eps);
        }
        q_pre = q;
        k_pre = k;
        rope_->apply(rt, q.data(), c.n_head);
        rope_->apply(rt, k.data(), c.n_head_kv);
        for (size_t s = 0; s < S; ++s) {
            const int64_t r = row0[s];
            LayerInputs in;
            in.layer = l;
            in.pos0 = pos0[s];
            in.T = row0[s + 1] - r;
            in.n_head = c.n_head;
            in.n_head_kv = c.n_head_kv;
            in.head_dim = c.head_dim;
            in.n_embd = c.n_embd;
            in.hidden = xn.data() + r * D;
            in.q_pre = q_pre.data() + r * q_dim;
            in.k_pre = k_pre.data() + r * kv_dim;
            in.q = q.data() + r * q_dim;
            in.k = k.data() + r * kv_dim;
            in.v = v.data() + r * kv_dim;
            in.rope = angles;
            segs[s].cache->attend(in, att.data() + r * q_dim);
        }
        matmul(L.wo, att.data(), N, tmp.data());
        for (int64_t i = 0; i < N * D; ++i) x[i] += tmp[i];

        rms_norm(x.data(), L.ffn_norm.data(), xn.data(), N, D, c.rms_eps);
        matmul_shared_input({{&L.w_gate, g.data()}, {&L.w_up, u.data()}}, xn.data(), N);
        for (int64_t i = 0; i < N * c.n_ff; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        matmul(L.w_down, g.data(), N, tmp.data());
        for (int64_t i = 0; i < N * D; ++i) x[i] += tmp[i];
    }
    for (size_t s = 0; s < S; ++s) segs[s].cache->finish_step(pos0[s], row0[s + 1] - row0[s]);

    // The output head runs on the rows whose logits are wanted, all segments in one matmul.
    std::vector<int64_t> out_rows;
    for (size_t s = 0; s < S; ++s)
        for (int64_t t = segs[s].all_logits ? row0[s] : row0[s + 1] - 1; t < row0[s + 1]; ++t) out_rows.push_back(t);
    const int64_t n_out = static_cast<int64_t>(out_rows.size());
    std::vector<float> last(n_out * D);
    for (int64_t i = 0; i < n_out; ++i) std::copy_n(x.data() + out_rows[i] * D, D, last.data() + i * D);
    rms_norm(last.data(), w_.output_norm.data(), last.data(), n_out, D, c.rms_eps);
    if (S == 1) {
        segs[0].logits->resize(static_cast<size_t>(n_out * c.n_vocab));
        matmul(w_.output, last.data(), n_out, segs[0].logits->data());
        return;
    }
    std::vector<float> all(n_out * c.n_vocab);
    matmul(w_.output, last.data(), n_out, all.data());
    int64_t i = 0;
    for (size_t s = 0; s < S; ++s) {
        const int64_t n = segs[s].all_logits ? row0[s + 1] - row0[s] : 1;
        segs[s].logits->assign(all.begin() + i * c.n_vocab, all.begin() + (i + n) * c.n_vocab);
        i += n;
    }
}

}  // namespace kvsieve
