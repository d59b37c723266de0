#include "attend/prefill_attention.h"

#include <algorithm>
#include <vector>

#include "attend/step_stat.h"
#include "kernels/attention.h"
#include "kernels/quant.h"

namespace kvsieve {

namespace {
/// What every head of one prefill step shares: the layer's inputs, the policy's reading of them and the queries as
/// the kernels score them.
struct PrefillStep {
    KVCache& cache;
    const LayerInputs& in;
    const float* write_scores;  ///< [T][Hkv] per-entry scores given at write, or null
    const PrefillSharing& sharing;
    const float* q;  ///< the queries [T][Hq·d] as scored (quantized_queries)
    float* out;      ///< [T][Hq·d]
    KeyStat stat;
    bool scored;  ///< a step scorer scores every entry after attention
    bool gated;   ///< gated prefill: each query sees its window plus the keys that are or will be admitted
    int d, G, Hkv;
    int64_t T, ldq, kvd;

    /// Whether an entry with this score will be kept when it leaves the window (the admission rule).
    bool will_keep(float score) const {
        const Rule& adm = cache.policy().admission;
        return adm.kind == Rule::Kind::kKeepAll || (adm.kind == Rule::Kind::kThreshold && score >= adm.tau);
    }
};

/// One head's gathered keys and values: the kept entries (oldest first) followed by the chunk's, their positions,
/// the kept ones' scores, and the attention statistic the step scorer reads.
struct HeadGather {
    std::vector<float> K, V, A, S_old;
    std::vector<int32_t> P;
    int64_t n_old = 0;
};

/// The queries as the kernels score them. Quantized keys: the chunk's queries are scored as the decode kernel and
/// llama.cpp's flash attention score them (docs/kv_quant_reference.md, step 1): each head's query quantized to Q8_0
/// blocks (ties to even) in the keys' stored space, i.e. q ← R_Kᵀ·deq(Q8_0(R_K·q)) with the pool's key rotation R_K
/// (identity when unrotated), into `buf`. Else in.q itself.
const float* quantized_queries(const KVPool& pool, const LayerInputs& in, std::vector<float>& buf) {
    if (kv_type_block(pool.key_type()) <= 1) return in.q;
    const int d = in.head_dim;
    const int64_t ldq = static_cast<int64_t>(in.n_head) * d;
    buf.assign(in.q, in.q + in.T * ldq);
    const KVRotation& rot = pool.rotation();
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < in.T; ++t) {
        float* row = buf.data() + t * ldq;
        std::vector<BlockQ8_0> blocks(static_cast<size_t>(d / QK8_0));
        rot.rotate_keys(row, in.n_head, d);
        for (int hq = 0; hq < in.n_head; ++hq) {
            quantize_row_q8_0_activations(row + static_cast<int64_t>(hq) * d, blocks.data(), d);
            dequantize_row(TensorType::Q8_0, blocks.data(), row + static_cast<int64_t>(hq) * d, d);
        }
        rot.rotate_keys(row, in.n_head, d);
    }
    return buf.data();
}

/// Gathers head h's kept entries and the chunk's into g (float32), and for a gated prefill which of them each query
/// may see (`open`).
void gather_head(const PrefillStep& st, int h, HeadGather& g, std::vector<char>& open) {
    const Policy& policy = st.cache.policy();
    const KVPool& lp = st.cache.pool().local();  // the sinks' and the window's layout (binary16 at admission)
    const HeadCache& hc = st.cache.head(st.in.layer, h);
    const int d = st.d;
    const int64_t no = hc.size(), n = no + st.T;
    g.n_old = no;
    g.K.resize(static_cast<size_t>(n) * d);
    g.V.resize(static_cast<size_t>(n) * d);
    g.P.resize(n);
    open.assign(st.gated ? n : 0, 0);
    int64_t j = 0;
    // Oldest first (the window's ring unwound), so that the keys are laid out, and every sum over them taken, in the
    // order one batch of the whole prompt takes them: a chunked prefill is that batch bit for bit.
    for (Region r : kRegionsInOrder) {
        const PageStore* ps = hc.region(r);
        for (int64_t i = 0; i < ps->size(); ++i, ++j) {
            const int64_t at = hc.in_order(r, i);
            ps->read(at, g.K.data() + j * d, g.V.data() + j * d);
            g.P[j] = ps->positions()[at];
            if (st.scored) g.S_old.push_back(ps->scores()[at]);
            if (st.gated) open[j] = r != Region::kWindow || st.will_keep(ps->scores()[at]);  // sinks, global: kept
        }
    }
    for (int64_t t = 0; t < st.T; ++t, ++j) {
        std::copy_n(st.in.k + t * st.kvd + h * d, d, g.K.data() + j * d);
        std::copy_n(st.in.v + t * st.kvd + h * d, d, g.V.data() + j * d);
        // Pages not in float32: the chunk's own keys and values are seen as they will be stored (as llama.cpp, which
        // writes the batch into its cache before attending), so a chunked and a one-batch prefill, the decode steps
        // and every prefill statistic read the same dequantized entries. An entry is written to the sinks or the
        // window (their layout), or without a window straight to the global region. (At admission, a later chunk
        // reads the entries an earlier one pushed out of the window quantized, as a decode step would, where one
        // batch reads them in F16: the two then differ by the quantization of those entries.) Rotated pages: the
        // round trip goes through the rotation as the store does (stored_view).
        const KVPool& dst = hc.sinks().size() + t < policy.sinks || policy.window > 0 ? lp : st.cache.pool();
        stored_view(dst, g.K.data() + j * d, g.V.data() + j * d);
        g.P[j] = static_cast<int32_t>(st.in.pos0 + t);
        if (st.gated)  // the first s entries become sinks
            open[j] = hc.sinks().size() + t < policy.sinks ||
                      st.will_keep(st.write_scores ? st.write_scores[t * st.Hkv + h] : 0.0f);
    }
}

/// Head h's attention over its gathered entries: gated, or dense with the statistic its scorer reads (a shadow cache
/// computes only that statistic, or takes it from another cache of this step over the same keys).
void attend_head(const PrefillStep& st, int h, HeadGather& g, const std::vector<char>& open) {
    const Policy& policy = st.cache.policy();
    const KVPool& pool = st.cache.pool();
    const int d = st.d, G = st.G;
    const int64_t n = g.n_old + st.T;
    const bool shadow = st.sharing.shadow;
    PrefillStatShare* const share = st.sharing.stats;
    const float* q = st.q + static_cast<int64_t>(h) * G * d;
    float* out = st.out + static_cast<int64_t>(h) * G * d;
    if (st.stat != KeyStat::kNone) g.A.resize(static_cast<size_t>(G) * n);
    if (st.gated) {
        attention_prefill_gated(q, st.ldq, G, d, st.T, g.K.data(), g.V.data(), g.n_old, g.P.data(), open.data(),
                                st.in.pos0, policy.window, out, st.ldq);
        return;
    }
    if (shadow && st.stat == KeyStat::kNone) return;
    const std::vector<float>* had =
        shadow && share ? share->find(st.in.layer, h, st.stat, pool.key_type(), pool.local().key_type(), g.P) : nullptr;
    if (had != nullptr) {
        g.A = *had;
        return;
    }
    attention_prefill_group(q, st.ldq, G, d, st.T, g.K.data(), g.V.data(), g.n_old, shadow ? nullptr : out, st.ldq,
                            st.stat, g.A.data());
    if (share && st.stat != KeyStat::kNone)
        share->put(st.in.layer, h, st.stat, pool.key_type(), pool.local().key_type(), g.P, g.A);
}

/// 2. The step scorer's score of every entry of every head (kept ones first, then the chunk's), into scores[h].
void score_prefill_step(const PrefillStep& st, const StepScorer& step, std::vector<HeadGather>& heads,
                        std::vector<std::vector<float>>& scores) {
    StepEvent si(st.in, st.cache.config().n_layer, st.cache.scorer_state());
    std::vector<float*> out(st.Hkv);
    for (int h = 0; h < st.Hkv; ++h) {
        HeadGather& g = heads[h];
        si.heads.push_back(
            {g.n_old + st.T, g.K.data(), g.V.data(), g.P.data(), g.A.empty() ? nullptr : g.A.data(), g.S_old.data()});
        scores[h].resize(static_cast<size_t>(g.n_old + st.T));
        out[h] = scores[h].data();
    }
    step.score_prefill(si, out);
}

/// 3. Writes back the scores of the kept entries and appends the chunk (serial: the pool is not thread-safe).
void write_back_and_append(const PrefillStep& st, const std::vector<HeadGather>& heads,
                           const std::vector<std::vector<float>>& scores) {
    for (int h = 0; h < st.Hkv; ++h) {
        HeadCache& hc = st.cache.head(st.in.layer, h);
        if (st.scored) {
            int64_t j = 0;
            for (Region r : kRegionsInOrder) {
                PageStore* ps = hc.region(r);
                for (int64_t i = 0; i < ps->size(); ++i) ps->scores()[hc.in_order(r, i)] = scores[h][j++];
            }
        }
        for (int64_t t = 0; t < st.T; ++t)
            st.cache.append(st.in.layer, h, st.in.k + t * st.kvd + h * st.d, st.in.v + t * st.kvd + h * st.d,
                            static_cast<int32_t>(st.in.pos0 + t),
                            st.write_scores ? st.write_scores[t * st.Hkv + h]
                            : st.scored     ? scores[h][heads[h].n_old + t]
                                            : 0.0f);
    }
}
}  // namespace

void attend_prefill(KVCache& cache, const LayerInputs& in, const float* write_scores, float* out,
                    const PrefillSharing& sharing) {
    const StepScorer* step = cache.step_scorer();
    const KeyStat stat = key_stat(step);
    std::vector<float> q_buf;
    const int d = in.head_dim, Hkv = in.n_head_kv;
    const PrefillStep st{cache,
                         in,
                         write_scores,
                         sharing,
                         quantized_queries(cache.pool(), in, q_buf),
                         out,
                         stat,
                         step != nullptr,
                         cache.policy().gated_prefill && stat == KeyStat::kNone,
                         d,
                         in.n_head / Hkv,
                         Hkv,
                         in.T,
                         static_cast<int64_t>(in.n_head) * d,
                         static_cast<int64_t>(Hkv) * d};
    // 1. Per head: gather the kept entries (float32) followed by the chunk's, attend.
    std::vector<HeadGather> heads(Hkv);
#pragma omp parallel for schedule(dynamic)
    for (int h = 0; h < Hkv; ++h) {
        std::vector<char> open;
        gather_head(st, h, heads[h], open);
        attend_head(st, h, heads[h], open);
        if (!st.scored) {  // nothing else needs the gathered copy
            std::vector<float>().swap(heads[h].K);
            std::vector<float>().swap(heads[h].V);
        }
    }
    std::vector<std::vector<float>> scores(Hkv);
    if (st.scored) score_prefill_step(st, *step, heads, scores);
    write_back_and_append(st, heads, scores);
}

}  // namespace kvsieve
