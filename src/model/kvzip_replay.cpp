#include "model/kvzip_replay.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <cblas.h>

#include "cache/kv_cache.h"
#include "kernels/matmul.h"
#include "model/llama_model.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {

namespace {

/// Wraps the real cache during a reconstruction pass: attention runs on the real cache (so hidden states
/// are the model's true ones); meanwhile the KVzip scores of the chunk's entries are computed.
class ScoringCache : public SequenceCache {
public:
    ScoringCache(const LlamaModel& m, KVCache& real, std::vector<std::vector<std::map<int32_t, float>>>& scores,
                 std::vector<std::vector<float>>& wo, int64_t start, int64_t end, int sinks, bool plus)
        : m_(m), real_(real), scores_(scores), wo_(wo), start_(start), end_(end), sinks_(sinks), plus_(plus) {}

    int64_t n_tokens() const override { return real_.n_tokens(); }
    int64_t n_ctx() const override { return real_.n_ctx(); }
    void finish_step(int64_t pos0, int64_t T) override { real_.finish_step(pos0, T); }

    void attend(const LayerInputs& in, float* out) override {
        const int d = in.head_dim, G = in.n_head / in.n_head_kv, Hq = in.n_head;
        const int64_t T = in.T, ldq = static_cast<int64_t>(Hq) * d, kvd = static_cast<int64_t>(in.n_head_kv) * d;
        const int D = in.hidden_dim;
        // W_O as float [D][Hq·d] for the value-output norms (KVzip+).
        std::vector<float>& wo = wo_[in.layer];  // dequantized once per replay, shared by its chunks
        if (plus_ && wo.empty()) {
            const WeightMatrix& W = m_.weights().layers[in.layer].wo;
            wo.resize(static_cast<size_t>(W.rows) * W.cols);
            for (int64_t r = 0; r < W.rows; ++r) dequantize_weight_row(W, r, wo.data() + r * W.cols);
        }
        std::vector<double> hnorm(T);
        for (int64_t t = 0; t < T; ++t) {
            double s = 0;
            for (int c = 0; c < D; ++c) s += double(in.hidden[t * D + c]) * in.hidden[t * D + c];
            hnorm[t] = std::sqrt(s);
        }
        const int64_t sink = std::min<int64_t>(sinks_, start_);
        // Per KV head (in parallel): gather the scored subset, then per group member one SGEMM for the scores,
        // a row softmax, and (KVzip+) one SGEMM for W_O,head · v of every scored key.
        std::vector<std::vector<std::pair<int32_t, float>>> found(in.n_head_kv);
#pragma omp parallel for schedule(dynamic)
        for (int h = 0; h < in.n_head_kv; ++h) {
            const HeadCache& hc = real_.head(in.layer, h);
            std::vector<int32_t> pos;
            std::vector<float> K, V, k(d), v(d);
            for (int r = 0; r < 3; ++r)
                for (int64_t i = 0; i < hc.region(r)->size(); ++i) {
                    const int32_t p = hc.region(r)->positions()[i];
                    if (!(p < sink || (p >= start_ && p < end_))) continue;
                    hc.region(r)->read(i, k.data(), v.data());
                    pos.push_back(p);
                    K.insert(K.end(), k.begin(), k.end());
                    V.insert(V.end(), v.begin(), v.end());
                }
            const int64_t n_fixed = static_cast<int64_t>(pos.size());
            for (int64_t t = 0; t < T; ++t) K.insert(K.end(), in.k + t * kvd + h * d, in.k + t * kvd + (h + 1) * d);
            const int64_t nk = n_fixed + T;
            std::vector<float> best(n_fixed, 0.0f), S(static_cast<size_t>(T) * nk), won(n_fixed, 1.0f), P;
            for (int g = 0; g < G; ++g) {
                const int hq = h * G + g;
                if (plus_ && n_fixed > 0) {  // ‖W_O,hq vᵢ‖: [n_fixed][d] × [d][D]
                    P.resize(static_cast<size_t>(n_fixed) * D);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n_fixed), D, d, 1.0f, V.data(), d,
                                wo.data() + hq * d, static_cast<int>(ldq), 0.0f, P.data(), D);
                    for (int64_t i = 0; i < n_fixed; ++i) {
                        double s2 = 0;
                        for (int c = 0; c < D; ++c) s2 += double(P[i * D + c]) * P[i * D + c];
                        won[i] = static_cast<float>(std::sqrt(s2));
                    }
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(nk), d,
                            1.0f / std::sqrt(static_cast<float>(d)), in.q + hq * d, static_cast<int>(ldq), K.data(), d, 0.0f,
                            S.data(), static_cast<int>(nk));
                for (int64_t t = 0; t < T; ++t) {
                    float* row = S.data() + t * nk;
                    const int64_t visible = n_fixed + t + 1;
                    float mx = -INFINITY;
                    for (int64_t j = 0; j < visible; ++j) mx = std::max(mx, row[j]);
                    double sum = 0;
                    for (int64_t j = 0; j < visible; ++j) sum += (row[j] = std::exp(row[j] - mx));
                    const float scale = static_cast<float>(1.0 / sum / (plus_ ? hnorm[t] : 1.0));
                    for (int64_t j = 0; j < n_fixed; ++j)  // sinks outside the chunk (pos < start) are not kept below
                        best[j] = std::max(best[j], row[j] * scale * won[j]);
                }
            }
            for (int64_t j = 0; j < n_fixed; ++j)
                if (pos[j] >= start_) found[h].emplace_back(pos[j], best[j]);
        }
        for (int h = 0; h < in.n_head_kv; ++h) {
            auto& head_scores = scores_[in.layer][h];
            for (const auto& [p, a] : found[h]) head_scores[p] = std::max(head_scores[p], a);
        }
        real_.attend(in, out);
    }

private:
    const LlamaModel& m_;
    KVCache& real_;
    std::vector<std::vector<std::map<int32_t, float>>>& scores_;
    std::vector<std::vector<float>>& wo_;  // [L] W_O as float [D][Hq·d], filled on first use
    int64_t start_, end_;
    int sinks_;
    bool plus_;
};

}  // namespace

void kvzip_replay(const LlamaModel& model, const Tokenizer& tok, KVCache& cache, const std::vector<int32_t>& context) {
    const Policy& p = cache.policy();
    const ModelConfig& c = model.config();
    const int64_t n = static_cast<int64_t>(context.size());
    require(cache.n_tokens() == n, "KVzip replay: the cache holds ", cache.n_tokens(), " tokens, the context ", n);
    std::vector<std::vector<std::map<int32_t, float>>> scores(c.n_layer, std::vector<std::map<int32_t, float>>(c.n_head_kv));
    const auto suffix = tok.encode("\n", false, false);
    const int64_t chunk = p.replay.chunk;
    std::vector<std::vector<float>> wo(c.n_layer);
    std::vector<float> logits;
    for (int64_t start = 0; start < n; start += chunk) {
        const int64_t end = std::min(n, start + chunk);
        std::vector<int32_t> ids;
        if (start == 0) {
            ids = tok.encode("\n\nRepeat the previous context exactly.", false, false);
        } else {
            ids = tok.encode("\n\nRepeat the part of the previous context exactly, starting with", false, false);
            ids.insert(ids.end(), context.begin() + std::max<int64_t>(start - chunk, start - 8), context.begin() + start);
        }
        ids.insert(ids.end(), suffix.begin(), suffix.end());
        ids.insert(ids.end(), context.begin() + start, context.begin() + end);
        require(n + static_cast<int64_t>(ids.size()) <= cache.n_ctx(), "KVzip replay needs ", n + ids.size(),
                " positions but the context holds ", cache.n_ctx(), " (give a larger -c)");
        ScoringCache sc(model, cache, scores, wo, start, end, p.replay.sinks, p.replay.kind == ReplaySpec::Kind::kKVzipPlus);
        model.forward(ids, sc, logits);
        cache.rollback(n);
    }
    float mx = -INFINITY;
    for (const auto& layer : scores)
        for (const auto& head : layer)
            for (const auto& [pos, s] : head) mx = std::max(mx, s);
    for (int l = 0; l < c.n_layer; ++l)
        for (int h = 0; h < c.n_head_kv; ++h) {
            HeadCache& hc = cache.head(l, h);
            for (int r = 0; r < 3; ++r) {
                PageStore* ps = hc.region(r);
                for (int64_t i = 0; i < ps->size(); ++i) {
                    const int32_t pos = ps->positions()[i];
                    auto it = scores[l][h].find(pos);
                    ps->scores()[i] = pos < p.replay.sinks ? mx + 1 : (it == scores[l][h].end() ? 0.0f : it->second);
                }
            }
        }
}

void finish_prefill(const LlamaModel& model, const Tokenizer& tok, KVCache& cache, const std::vector<int32_t>& context) {
    if (cache.policy().replay.kind != ReplaySpec::Kind::kNone) kvzip_replay(model, tok, cache, context);
    cache.end_prefill();
}

}  // namespace kvsieve
