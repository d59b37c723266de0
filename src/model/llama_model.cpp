#include "model/llama_model.h"

#include <algorithm>
#include <cmath>

#include "attend/paged_attention.h"
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

LlamaModel::LlamaModel(const std::string& path)
    : file_(std::make_unique<GGUFFile>(path)), scratch_(std::make_unique<ForwardScratchSlot>()) {
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
bool is_short(int64_t rows) { return rows < kGemmMinTokens; }
/// Lays out blocks of `sizes[0 … n)` rows short ones first (ShortFirst, model/forward_scratch.h) into `l`.
void short_first(const int64_t* sizes, size_t n, ShortFirst& l) {
    l.order.clear();
    l.offset.resize(n);
    l.n_short = l.total = 0;
    for (int pass = 0; pass < 2; ++pass)
        for (size_t b = 0; b < n; ++b)
            if (is_short(sizes[b]) == (pass == 0)) {
                l.order.push_back(b);
                l.offset[b] = l.total;
                l.total += sizes[b];
                if (pass == 0) l.n_short += sizes[b];
            }
}
}  // namespace

void LlamaModel::forward(StepPhase phase, const std::vector<int32_t>& tokens, SequenceCache& cache,
                         std::vector<float>& logits, bool all_logits) const {
    const Segment seg{&tokens, phase, &cache, &logits, all_logits};
    forward_segments(&seg, 1);
}

void LlamaModel::forward(StepPhase phase, const std::vector<int32_t>& tokens, KVCache& cache,
                         std::vector<float>& logits, bool all_logits) const {
    PagedAttention attention(cache);
    forward(phase, tokens, attention, logits, all_logits);
}

void LlamaModel::forward_batch(const std::vector<Segment>& segs) const {
    require(!segs.empty(), "forward: no sequences");
    forward_segments(segs.data(), segs.size());
}

namespace {
/// Checks every segment before any cache changes: tokens, cache and logits given, T ≥ 1 (T = 1 for a decode step),
/// no cache twice, room in the context, ids in the vocabulary. Throws Error naming the first problem.
void check_segments(const LlamaModel::Segment* segs, size_t S, int n_vocab) {
    for (size_t s = 0; s < S; ++s) {
        const LlamaModel::Segment& g = segs[s];
        require(g.tokens && g.cache && g.logits, "forward: segment ", s, " lacks its tokens, cache or logits");
        const int64_t T = static_cast<int64_t>(g.tokens->size());
        require(T > 0, "forward: no tokens");
        require(g.phase != StepPhase::kDecode || T == 1, "a decode step takes one token, got ", T);
        for (size_t r = 0; r < s; ++r)
            require(segs[r].cache != g.cache, "forward: one cache is given twice in a batch");
        require(g.cache->n_tokens() + T <= g.cache->n_ctx(), "the sequence needs ", g.cache->n_tokens() + T,
                " positions but the context holds ", g.cache->n_ctx());
        for (int32_t id : *g.tokens)
            require(id >= 0 && id < n_vocab, "token id ", id, " is outside the vocabulary of ", n_vocab);
    }
}

/// Y = X·Wᵀ over all rows of a step laid out by sc.rows: the short rows in one row-exact product (one segment alone:
/// the path its length picks), each long segment in a product of its own (SGEMM's rounding depends on the number of
/// rows, so a long chunk gets exactly the numbers it gets alone). X: [N][cols].
void step_matmul(ForwardScratch& sc, size_t S, std::initializer_list<MatmulTarget> list, const float* X, int64_t cols) {
    const ShortFirst& rows = sc.rows;
    const std::vector<MatmulTarget>& targets = sc.targets;
    sc.targets.assign(list);
    if (rows.n_short > 0)
        matmul_shared_input(targets, X, rows.n_short, S == 1 ? MatmulPath::kAuto : MatmulPath::kRowExact);
    for (size_t s : rows.order) {
        if (is_short(sc.len[s])) continue;
        std::vector<MatmulTarget>& part = sc.part;
        part.assign(targets.begin(), targets.end());
        for (auto& t : part) t.Y += rows.offset[s] * t.W->rows;
        matmul_shared_input(part, X + rows.offset[s] * cols, sc.len[s]);
    }
}
}  // namespace

void LlamaModel::forward_segments(const Segment* segs, size_t S) const {
    // The model's scratch, or one of this step's own while another thread runs the model.
    ForwardScratch* lent = scratch_->borrow();
    struct Return {
        ForwardScratchSlot& slot;
        bool lent;
        ~Return() {
            if (lent) slot.release();
        }
    } give_back{*scratch_, lent != nullptr};
    ForwardScratch own;
    ForwardScratch& sc = lent ? *lent : own;
    check_segments(segs, S, cfg_.n_vocab);
    embed_rows(segs, S, sc);
    const RopeAngles angles = rope_->angles();
    for (int l = 0; l < cfg_.n_layer; ++l) forward_layer(l, segs, S, angles, sc);
    for (size_t s = 0; s < S; ++s) segs[s].cache->finish_step(sc.pos0[s], sc.len[s], segs[s].phase);
    output_head(segs, S, sc);
}

void LlamaModel::embed_rows(const Segment* segs, size_t S, ForwardScratch& sc) const {
    const ModelConfig& c = cfg_;
    const int64_t D = c.n_embd, q_dim = int64_t(c.n_head) * c.head_dim, kv_dim = int64_t(c.n_head_kv) * c.head_dim;
    // Rows are laid out segment after segment, short segments (decode steps, small chunks) first: their rows take
    // the row-exact GEMV path together, so each gets the numbers it would get alone; long prefill chunks follow
    // and take the path their length picks, as alone. A single segment is exactly forward() of it.
    sc.len.resize(S);
    sc.pos0.resize(S);
    for (size_t s = 0; s < S; ++s) {
        sc.len[s] = static_cast<int64_t>(segs[s].tokens->size());
        sc.pos0[s] = segs[s].cache->n_tokens();
    }
    short_first(sc.len.data(), S, sc.rows);
    const int64_t N = sc.rows.total;
    // Every buffer is fully written before it is read, so resize (which keeps the capacity) is enough.
    for (std::vector<float>* b : {&sc.x, &sc.xn, &sc.tmp}) b->resize(N * D);
    // The attention output is [N][Hq·d], wider than [N][D] where Hq·d > D (Qwen3-0.6B: 2048 against 1024).
    for (std::vector<float>* b : {&sc.q, &sc.q_pre, &sc.att}) b->resize(N * q_dim);
    for (std::vector<float>* b : {&sc.k, &sc.k_pre, &sc.v}) b->resize(N * kv_dim);
    for (std::vector<float>* b : {&sc.g, &sc.u}) b->resize(N * c.n_ff);
    // One RoPE table for all rows: each segment's rows at its own positions.
    Rope::Table& rt = sc.rope;
    rt.T = 0;
    for (size_t s : sc.rows.order) {
        for (int64_t t = 0; t < sc.len[s]; ++t)
            dequantize_weight_row(w_.tok_embd, (*segs[s].tokens)[t], sc.x.data() + (sc.rows.offset[s] + t) * D);
        rope_->append_table(sc.pos0[s], sc.len[s], rt);
    }
}

void LlamaModel::forward_layer(int l, const Segment* segs, size_t S, const RopeAngles& angles,
                               ForwardScratch& sc) const {
    const ModelConfig& c = cfg_;
    const LayerWeights& L = w_.layers[l];
    const int64_t D = c.n_embd, d = c.head_dim, q_dim = int64_t(c.n_head) * d, kv_dim = int64_t(c.n_head_kv) * d;
    const int64_t N = sc.rows.total;
    std::vector<float>&x = sc.x, &xn = sc.xn, &q = sc.q, &k = sc.k, &v = sc.v, &att = sc.att, &g = sc.g, &u = sc.u,
    &tmp = sc.tmp;
    rms_norm(x.data(), L.attn_norm.data(), xn.data(), N, D, c.rms_eps);
    step_matmul(sc, S, {{&L.wq, q.data()}, {&L.wk, k.data()}, {&L.wv, v.data()}}, xn.data(), D);
    if (c.qkv_bias) {
        add_bias(q.data(), L.bq, N);
        add_bias(k.data(), L.bk, N);
        add_bias(v.data(), L.bv, N);
    }
    if (c.qk_norm) {
        rms_norm(q.data(), L.q_norm.data(), q.data(), N * c.n_head, d, c.rms_eps);
        rms_norm(k.data(), L.k_norm.data(), k.data(), N * c.n_head_kv, d, c.rms_eps);
    }
    std::copy(q.begin(), q.end(), sc.q_pre.begin());
    std::copy(k.begin(), k.end(), sc.k_pre.begin());
    rope_->apply(sc.rope, q.data(), c.n_head);
    rope_->apply(sc.rope, k.data(), c.n_head_kv);
    for (size_t s = 0; s < S; ++s) {
        const int64_t r = sc.rows.offset[s];
        LayerInputs in;
        in.layer = l;
        in.pos0 = sc.pos0[s];
        in.T = sc.len[s];
        in.phase = segs[s].phase;
        in.n_head = c.n_head;
        in.n_head_kv = c.n_head_kv;
        in.head_dim = c.head_dim;
        in.n_embd = c.n_embd;
        in.hidden = xn.data() + r * D;
        in.q_pre = sc.q_pre.data() + r * q_dim;
        in.k_pre = sc.k_pre.data() + r * kv_dim;
        in.q = q.data() + r * q_dim;
        in.k = k.data() + r * kv_dim;
        in.v = v.data() + r * kv_dim;
        in.rope = angles;
        segs[s].cache->attend(in, att.data() + r * q_dim);
    }
    step_matmul(sc, S, {{&L.wo, tmp.data()}}, att.data(), q_dim);
    for (int64_t i = 0; i < N * D; ++i) x[i] += tmp[i];

    rms_norm(x.data(), L.ffn_norm.data(), xn.data(), N, D, c.rms_eps);
    step_matmul(sc, S, {{&L.w_gate, g.data()}, {&L.w_up, u.data()}}, xn.data(), D);
    for (int64_t i = 0; i < N * c.n_ff; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    step_matmul(sc, S, {{&L.w_down, tmp.data()}}, g.data(), c.n_ff);
    for (int64_t i = 0; i < N * D; ++i) x[i] += tmp[i];
}

void LlamaModel::output_head(const Segment* segs, size_t S, ForwardScratch& sc) const {
    const ModelConfig& c = cfg_;
    const int64_t D = c.n_embd;
    // The output head on the rows whose logits are wanted: segments with few such rows first (row-exact), then
    // each that wants every row of a long chunk, on its own.
    std::vector<int64_t>& n_out = sc.n_out;
    n_out.resize(S);
    for (size_t s = 0; s < S; ++s) n_out[s] = segs[s].all_logits ? sc.len[s] : 1;
    short_first(n_out.data(), S, sc.outs);
    const ShortFirst& outs = sc.outs;
    const std::vector<int64_t>& out0 = outs.offset;
    const int64_t n_rows = outs.total, n_out_small = outs.n_short;
    std::vector<float>& last = sc.last;
    last.resize(n_rows * D);
    for (size_t s = 0; s < S; ++s)
        std::copy_n(sc.x.data() + (sc.rows.offset[s] + sc.len[s] - n_out[s]) * D, n_out[s] * D,
                    last.data() + out0[s] * D);
    rms_norm(last.data(), w_.output_norm.data(), last.data(), n_rows, D, c.rms_eps);
    if (S == 1) {
        segs[0].logits->resize(static_cast<size_t>(n_rows * c.n_vocab));
        matmul(w_.output, last.data(), n_rows, segs[0].logits->data());
        return;
    }
    std::vector<float>& all = sc.all;
    all.resize(n_rows * c.n_vocab);
    if (n_out_small > 0) matmul(w_.output, last.data(), n_out_small, all.data(), -1, MatmulPath::kRowExact);
    for (size_t s = 0; s < S; ++s)
        if (!is_short(n_out[s]))
            matmul(w_.output, last.data() + out0[s] * D, n_out[s], all.data() + out0[s] * c.n_vocab);
    for (size_t s = 0; s < S; ++s)
        segs[s].logits->assign(all.begin() + out0[s] * c.n_vocab, all.begin() + (out0[s] + n_out[s]) * c.n_vocab);
}

}  // namespace kvsieve
