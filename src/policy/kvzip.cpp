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
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <unordered_map>

#include <cblas.h>

#include "kernels/dot.h"
#include "policy/after_prefill.h"
#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

namespace {

struct KVzipSpec {
    bool plus = false;              ///< KVzip+ (‖W_O,head vᵢ‖ / ‖h_j‖), else KVzip
    int sinks = 4;                  ///< first positions never evicted
    int64_t chunk = 2048;           ///< context tokens per reconstruction chunk
    bool repeat_rows_only = false;  ///< max over the rows repeating the context only, not the instruction's
};

/// Scores the cached entries at positions [start, end) from one reconstruction forward, for KVzip (out[0], if
/// set) and KVzip+ (out[1], if set) at once: per KV head (in parallel) and per group member, blocks of kRows
/// replayed rows at a time, one SGEMM for q·k over the keys the block sees (the fixed entries — sinks before the
/// chunk and the chunk — and the replay up to the block's last row), the causal row softmax (DotKernels::softmax,
/// float32), and the running max of a_ji (KVzip) and of a_ji · ‖W_O,head vᵢ‖ / ‖h_j‖ (KVzip+, whose
/// ‖W_O,head vᵢ‖ is one SGEMM per group member).
void score_chunk(const StepEvent& ev, int64_t start, int64_t first_row, const std::vector<float>& wo,
                 std::array<std::vector<std::unordered_map<int32_t, float>>*, 2> out) {
    const LayerInputs& in = ev.step;
    const int d = in.head_dim, G = in.n_head / in.n_head_kv;
    const int64_t T = in.T, ldq = static_cast<int64_t>(in.n_head) * d;
    const int64_t D = in.n_embd;
    const bool plain = out[0] != nullptr, plus = out[1] != nullptr;
    constexpr int64_t kRows = 256;  // replayed rows per score block: the block's scores stay a few MiB
    std::vector<float> inv_hnorm(T, 1.0f);
    if (plus)
        for (int64_t t = 0; t < T; ++t) {
            double s = 0;
            for (int64_t c = 0; c < D; ++c) s += double(in.hidden[t * D + c]) * in.hidden[t * D + c];
            inv_hnorm[t] = static_cast<float>(1.0 / std::sqrt(s));
        }
    const DotKernels& dk = dot_kernels();
    std::array<std::vector<std::vector<std::pair<int32_t, float>>>, 2> found;
    found[0].resize(in.n_head_kv);
    found[1].resize(in.n_head_kv);
#pragma omp parallel for schedule(dynamic)
    for (int h = 0; h < in.n_head_kv; ++h) {
        const HeadView& v = ev.heads[h];
        const int64_t nk = v.n, n_fixed = nk - T;
        std::vector<float> best(plain ? n_fixed : 0, 0.0f), best_plus(plus ? n_fixed : 0, 0.0f), won(n_fixed), P;
        // Scores of one block; every element the block reads is written by its SGEMM first (β = 0).
        const std::unique_ptr<float[]> S(new float[static_cast<size_t>(std::min(kRows, T)) * nk]);
        for (int g = 0; g < G; ++g) {
            const int hq = h * G + g;
            if (plus && n_fixed > 0) {  // ‖W_O,hq vᵢ‖: [n_fixed][d] × [d][D]
                P.resize(static_cast<size_t>(n_fixed) * D);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n_fixed), static_cast<int>(D), d,
                            1.0f, v.v, d, wo.data() + hq * d, static_cast<int>(ldq), 0.0f, P.data(),
                            static_cast<int>(D));
                for (int64_t i = 0; i < n_fixed; ++i) {
                    double s2 = 0;
                    for (int64_t c = 0; c < D; ++c) s2 += double(P[i * D + c]) * P[i * D + c];
                    won[i] = static_cast<float>(std::sqrt(s2));
                }
            }
            for (int64_t t0 = first_row; t0 < T; t0 += kRows) {
                const int64_t nt = std::min(kRows, T - t0), ncol = n_fixed + t0 + nt;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nt), static_cast<int>(ncol), d,
                            1.0f / std::sqrt(static_cast<float>(d)), in.q + t0 * ldq + hq * d, static_cast<int>(ldq),
                            v.k, d, 0.0f, S.get(), static_cast<int>(ncol));
                for (int64_t i = 0; i < nt; ++i) {
                    float* row = S.get() + i * ncol;
                    dk.softmax(row, n_fixed + t0 + i + 1);  // row t sees the fixed entries and the replay up to t
                    if (plain)
                        for (int64_t j = 0; j < n_fixed; ++j) best[j] = std::max(best[j], row[j]);
                    if (plus) {
                        const float r = inv_hnorm[t0 + i];
                        for (int64_t j = 0; j < n_fixed; ++j)
                            best_plus[j] = std::max(best_plus[j], row[j] * r * won[j]);
                    }
                }
            }
        }
        for (int64_t j = 0; j < n_fixed; ++j)  // sinks before the chunk are scored with it, not kept here
            if (v.pos[j] >= start) {
                if (plain) found[0][h].emplace_back(v.pos[j], best[j]);
                if (plus) found[1][h].emplace_back(v.pos[j], best_plus[j]);
            }
    }
    for (int variant = 0; variant < 2; ++variant)
        if (out[variant] != nullptr)
            for (int h = 0; h < in.n_head_kv; ++h)
                for (const auto& [p, a] : found[variant][h]) (*out[variant])[h][p] = std::max((*out[variant])[h][p], a);
}

/// The reconstruction: for each chunk of ≤ spec.chunk context tokens, feeds "\n\nRepeat the previous context
/// exactly." (later chunks: "\n\nRepeat the part of the previous context exactly, starting with" and the
/// previous chunk's last 8 tokens), "\n", then the chunk, teacher-forced over the cached context. Returns the
/// scores of spec's variant, and if `other` is set those of the other variant (KVzip+ for KVzip and back) from
/// the same replay.
EntryScores reconstruct(ModelAccess& m, const std::vector<int32_t>& context, const KVzipSpec& spec,
                        EntryScores* other) {
    const ModelConfig& c = m.config();
    const int64_t n = static_cast<int64_t>(context.size());
    require(m.n_tokens() == n, "KVzip replay: the cache holds ", m.n_tokens(), " tokens, the context ", n);
    EntryScores es;
    es.by_pos.assign(c.n_layer, std::vector<std::unordered_map<int32_t, float>>(c.n_head_kv));
    if (other != nullptr) *other = es;
    EntryScores* plain = spec.plus ? other : &es;
    EntryScores* plus = spec.plus ? &es : other;
    const auto suffix = m.encode("\n");
    std::vector<std::vector<float>> wo(c.n_layer);  // W_O per layer, taken on first use and shared by the chunks
    for (int64_t start = 0; start < n; start += spec.chunk) {
        const int64_t end = std::min(n, start + spec.chunk);
        std::vector<int32_t> ids;
        if (start == 0) {
            ids = m.encode("\n\nRepeat the previous context exactly.");
        } else {
            ids = m.encode("\n\nRepeat the part of the previous context exactly, starting with");
            ids.insert(ids.end(), context.begin() + std::max<int64_t>(start - spec.chunk, start - 8),
                       context.begin() + start);
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
            [&](const StepEvent& ev) {
                const LayerInputs& in = ev.step;
                if (plus != nullptr && wo[in.layer].empty()) wo[in.layer] = m.output_projection(in.layer);
                score_chunk(ev, start, first_row, wo[in.layer],
                            {plain ? &plain->by_pos[in.layer] : nullptr, plus ? &plus->by_pos[in.layer] : nullptr});
            });
    }
    // The sinks score max + 1 over every layer and head (kvpress KVzipPress), so any budget keeps them.
    for (EntryScores* v : {plain, plus}) {
        if (v == nullptr) continue;
        float mx = -INFINITY;
        for (const auto& layer : v->by_pos)
            for (const auto& head : layer)
                for (const auto& [pos, s] : head) mx = std::max(mx, s);
        for (auto& layer : v->by_pos)
            for (auto& head : layer)
                for (int32_t p = 0; p < std::min<int64_t>(spec.sinks, n); ++p) head[p] = mx + 1;
    }
    return es;
}

/// The after-prefill key of a KVzip variant: everything its scores depend on besides the context and the cache.
std::string kvzip_key(bool plus, const KVzipSpec& spec, const std::string& rows, const Policy& pol) {
    return std::string(plus ? "kvzip_plus" : "kvzip") + ":chunk=" + std::to_string(spec.chunk) + ",rows=" + rows +
           ",score_sinks=" + std::to_string(spec.sinks) + ",sinks=" + std::to_string(pol.sinks) +
           ",window=" + std::to_string(pol.window);
}

Policy make_kvzip(PolicyParams& p, bool plus) {
    Policy pol;
    read_budget_rule(p, pol);  // sinks (4 by default) are then moved into the reconstruction
    require(pol.timing == Timing::kAfterPrefill, "policy ", p.preset(),
            ": KVzip scores once, after the prefill (every=0)");
    KVzipSpec spec;
    spec.plus = plus;
    spec.chunk = p.get_int("chunk");
    const std::string rows = p.get_string("rows");
    spec.repeat_rows_only = rows == "repeat";
    spec.sinks = pol.sinks;
    pol.sinks = 0;  // protected by their scores (max + 1, as kvpress), not held in a separate region
    pol.after_prefill_key = kvzip_key(plus, spec, rows, pol);
    // The other variant with the same settings replays the same tokens over the same cache: its scores come from
    // this replay at the price of their running max (and for KVzip+ the ‖W_O v‖), when a caller asks for them.
    const std::string other_key = kvzip_key(!plus, spec, rows, pol);
    pol.after_prefill = [spec, other_key](ModelAccess& m, const std::vector<int32_t>& context, OtherEntryScores* also) {
        const bool want_other = also != nullptr && also->count(other_key) > 0;
        EntryScores other;
        EntryScores es = reconstruct(m, context, spec, want_other ? &other : nullptr);
        if (want_other) (*also)[other_key] = std::move(other);
        return es;
    };
    return pol;
}

std::vector<ParamDecl> kvzip_params() {
    return merge_params(
        budget_rule_params("0.5", "global", "4"),
        {int_param("chunk", 1, kMaxTokens, "2048", "context tokens repeated per reconstruction chunk",
                   "KVzip §3.2 (kvpress KVzipPress chunk_size)"),
         enum_param("rows", {"all", "repeat"}, "all",
                    "rows the max runs over: every replayed token (kvpress) or the repeated context only",
                    "KVzap paper eq. 3 (repeat)")});
}
}  // namespace

void register_kvzip() {
    register_preset({"kvzip", "context-reconstruction attention (Kim et al. 2025)", kvzip_params(),
                     [](PolicyParams& p) { return make_kvzip(p, false); }});
    register_preset({"kvzip_plus", "KVzip with ‖W_O v‖ / ‖h‖ normalisation (KVzap paper §3.2)", kvzip_params(),
                     [](PolicyParams& p) { return make_kvzip(p, true); }});
}

}  // namespace kvsieve
