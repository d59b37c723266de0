// kvzip / kvzip_plus: query-agnostic importance from context reconstruction (Kim et al. 2025, "KVzip:
// Query-Agnostic KV Cache Compression with Context Reconstruction", §3; KVzip+ normalisation from the KVzap
// paper §3.2; kvpress KVzipPress). After the prefill the model is asked to repeat the context; entry i of a
// KV head scores s_i = max over the repeated tokens j and the G query heads of a_ji (softmax over sinks, the
// chunk being repeated and the repeat itself), times ‖W_O,head vᵢ‖ / ‖h_j‖ for KVzip+. The first `sinks`
// entries score max + 1 over every layer and head (kvpress), so any budget keeps them.
// rows=repeat takes the max over the rows that repeat the context only, not over the instruction's (KVzap eq. 3,
// the target of the KVzap fit); rows=all (default) over every replayed token, as kvpress.
//   kvzip[_plus]:ratio=R[,rule=global|layer|head|threshold,tau=T][,sinks=4][,chunk=2048][,rows=all|repeat]
#include <algorithm>
#include <cmath>

#include <cblas.h>

#include "policy/after_prefill.h"
#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

namespace {

struct KVzipSpec {
    bool plus = false;
    int sinks = 4;         ///< first positions never evicted
    int64_t chunk = 2048;  ///< context tokens per reconstruction chunk
    bool repeat_rows_only = false;  ///< max over the rows repeating the context only, not the instruction's
};

/// Scores the cached entries at positions [start, end) from one reconstruction forward: per KV head (in
/// parallel) and per group member one SGEMM for q·k, a causal row softmax over the scored subset (sinks before
/// the chunk, the chunk, the repeat), and for KVzip+ one SGEMM for W_O,head · v of every scored entry.
void score_chunk(const PrefillScoreInput& in, const KVzipSpec& spec, int64_t start, int64_t first_row,
                 const std::vector<float>& wo, std::vector<std::unordered_map<int32_t, float>>& out) {
    const int d = in.head_dim, G = in.n_head / in.n_head_kv;
    const int64_t T = in.T, ldq = static_cast<int64_t>(in.n_head) * d;
    const int64_t D = in.n_embd;
    std::vector<double> hnorm(T);
    for (int64_t t = 0; t < T; ++t) {
        double s = 0;
        for (int64_t c = 0; c < D; ++c) s += double(in.hidden[t * D + c]) * in.hidden[t * D + c];
        hnorm[t] = std::sqrt(s);
    }
    std::vector<std::vector<std::pair<int32_t, float>>> found(in.n_head_kv);
#pragma omp parallel for schedule(dynamic)
    for (int h = 0; h < in.n_head_kv; ++h) {
        const HeadView& v = in.heads[h];
        const int64_t nk = v.n, n_fixed = nk - T;
        std::vector<float> best(n_fixed, 0.0f), S(static_cast<size_t>(T) * nk), won(n_fixed, 1.0f), P;
        for (int g = 0; g < G; ++g) {
            const int hq = h * G + g;
            if (spec.plus && n_fixed > 0) {  // ‖W_O,hq vᵢ‖: [n_fixed][d] × [d][D]
                P.resize(static_cast<size_t>(n_fixed) * D);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n_fixed), static_cast<int>(D), d, 1.0f,
                            v.v, d, wo.data() + hq * d, static_cast<int>(ldq), 0.0f, P.data(), static_cast<int>(D));
                for (int64_t i = 0; i < n_fixed; ++i) {
                    double s2 = 0;
                    for (int64_t c = 0; c < D; ++c) s2 += double(P[i * D + c]) * P[i * D + c];
                    won[i] = static_cast<float>(std::sqrt(s2));
                }
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(nk), d,
                        1.0f / std::sqrt(static_cast<float>(d)), in.q + hq * d, static_cast<int>(ldq), v.k, d, 0.0f, S.data(),
                        static_cast<int>(nk));
            for (int64_t t = first_row; t < T; ++t) {
                float* row = S.data() + t * nk;
                const int64_t visible = n_fixed + t + 1;
                float mx = -INFINITY;
                for (int64_t j = 0; j < visible; ++j) mx = std::max(mx, row[j]);
                double sum = 0;
                for (int64_t j = 0; j < visible; ++j) sum += (row[j] = std::exp(row[j] - mx));
                const float scale = static_cast<float>(1.0 / sum / (spec.plus ? hnorm[t] : 1.0));
                for (int64_t j = 0; j < n_fixed; ++j) best[j] = std::max(best[j], row[j] * scale * won[j]);
            }
        }
        for (int64_t j = 0; j < n_fixed; ++j)  // sinks before the chunk are scored with it, not kept here
            if (v.pos[j] >= start) found[h].emplace_back(v.pos[j], best[j]);
    }
    for (int h = 0; h < in.n_head_kv; ++h)
        for (const auto& [p, a] : found[h]) out[h][p] = std::max(out[h][p], a);
}

/// The reconstruction: for each chunk of ≤ spec.chunk context tokens, feeds "\n\nRepeat the previous context
/// exactly." (later chunks: "\n\nRepeat the part of the previous context exactly, starting with" and the
/// previous chunk's last 8 tokens), "\n", then the chunk, teacher-forced over the cached context.
EntryScores reconstruct(ModelAccess& m, const std::vector<int32_t>& context, const KVzipSpec& spec) {
    const ModelConfig& c = m.config();
    const int64_t n = static_cast<int64_t>(context.size());
    require(m.n_tokens() == n, "KVzip replay: the cache holds ", m.n_tokens(), " tokens, the context ", n);
    EntryScores es;
    es.by_pos.assign(c.n_layer, std::vector<std::unordered_map<int32_t, float>>(c.n_head_kv));
    const auto suffix = m.encode("\n");
    std::vector<std::vector<float>> wo(c.n_layer);  // W_O per layer, taken on first use and shared by the chunks
    for (int64_t start = 0; start < n; start += spec.chunk) {
        const int64_t end = std::min(n, start + spec.chunk);
        std::vector<int32_t> ids;
        if (start == 0) {
            ids = m.encode("\n\nRepeat the previous context exactly.");
        } else {
            ids = m.encode("\n\nRepeat the part of the previous context exactly, starting with");
            ids.insert(ids.end(), context.begin() + std::max<int64_t>(start - spec.chunk, start - 8), context.begin() + start);
        }
        ids.insert(ids.end(), suffix.begin(), suffix.end());
        ids.insert(ids.end(), context.begin() + start, context.begin() + end);
        require(n + static_cast<int64_t>(ids.size()) <= m.n_ctx(), "KVzip replay needs ", n + ids.size(),
                " positions but the context holds ", m.n_ctx(), " (give a larger -c)");
        const int64_t sink = std::min<int64_t>(spec.sinks, start);
        // Rows that score: every replayed token (kvpress), or only those repeating the context (KVzap eq. 3).
        const int64_t first_row = spec.repeat_rows_only ? static_cast<int64_t>(ids.size()) - (end - start) : 0;
        m.replay(
            ids, [&](int32_t p) { return p < sink || (p >= start && p < end); },
            [&](const PrefillScoreInput& in) {
                if (spec.plus && wo[in.layer].empty()) wo[in.layer] = m.output_projection(in.layer);
                score_chunk(in, spec, start, first_row, wo[in.layer], es.by_pos[in.layer]);
            });
    }
    // The sinks score max + 1 over every layer and head (kvpress KVzipPress), so any budget keeps them.
    float mx = -INFINITY;
    for (const auto& layer : es.by_pos)
        for (const auto& head : layer)
            for (const auto& [pos, s] : head) mx = std::max(mx, s);
    for (auto& layer : es.by_pos)
        for (auto& head : layer)
            for (int32_t p = 0; p < std::min<int64_t>(spec.sinks, n); ++p) head[p] = mx + 1;
    return es;
}

Policy make_kvzip(PolicyParams& p, bool plus) {
    Policy pol;
    pol.sinks = 4;  // read by read_budget_rule as sinks=…, then moved into the reconstruction
    read_budget_rule(p, pol, 0.5, "global");
    require(pol.timing == Timing::kAfterPrefill, "policy ", p.preset(), ": KVzip scores once, after the prefill (every=0)");
    KVzipSpec spec;
    spec.plus = plus;
    spec.chunk = p.get_int("chunk", 2048);
    const std::string rows = p.get_string("rows", "all");
    require(rows == "all" || rows == "repeat", "policy ", p.preset(), ": rows='", rows, "' is not all or repeat");
    spec.repeat_rows_only = rows == "repeat";
    require(spec.chunk > 0, "policy ", p.preset(), ": chunk must be positive");
    spec.sinks = pol.sinks;
    pol.sinks = 0;  // protected by their scores (max + 1, as kvpress), not held in a separate region
    pol.after_prefill = [spec](ModelAccess& m, const std::vector<int32_t>& context) { return reconstruct(m, context, spec); };
    pol.after_prefill_key = std::string(plus ? "kvzip_plus" : "kvzip") + ":chunk=" + std::to_string(spec.chunk) +
                            ",rows=" + rows + ",score_sinks=" + std::to_string(spec.sinks) +
                            ",sinks=" + std::to_string(pol.sinks) + ",window=" + std::to_string(pol.window);
    return pol;
}
}  // namespace

void register_kvzip() {
    register_preset({"kvzip", "context-reconstruction attention (Kim et al. 2025)",
                     [](PolicyParams& p) { return make_kvzip(p, false); }});
    register_preset({"kvzip_plus", "KVzip with ‖W_O v‖ / ‖h‖ normalisation (KVzap paper §3.2)",
                     [](PolicyParams& p) { return make_kvzip(p, true); }});
}

}  // namespace kvsieve
