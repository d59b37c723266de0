#include "attend/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attend/page_plan.h"
#include "attend/step_stat.h"
#include "kernels/dot.h"
#include "kernels/quant.h"

namespace kvsieve {

namespace {
/// Index of the entry at `slot` (a stored entry) in attention order (sinks, global, window).
int64_t attention_index(const HeadCache& hc, HeadCache::Slot slot) {
    int64_t at = slot.index;
    for (Region r : kRegionsInOrder) {
        if (r == *slot.region) break;
        at += hc.region(r)->size();
    }
    return at;
}

/// `v` holding at least n buffers (those it holds keep their capacity from earlier steps).
template <class T>
void ensure_count(std::vector<T>& v, size_t n) {
    if (v.size() < n) v.resize(n);
}
}  // namespace

namespace {
/// 1. Appends the step's entry to every head of the layer (serial: the pool is not thread-safe); sc.slots[h] is where
/// head h's went. At w = 0 the admission rule runs after scoring (attend_decode's end).
void append_step_entries(KVCache& cache, const LayerInputs& in, const float* write_scores, DecodeScratch& sc) {
    const int d = in.head_dim;
    const auto pos = static_cast<int32_t>(in.pos0);
    std::vector<HeadCache::Slot>& slots = sc.slots;
    slots.resize(in.n_head_kv);
    for (int h = 0; h < in.n_head_kv; ++h) {
        const float score = write_scores ? write_scores[h] : 0.0f;
        slots[h] = cache.policy().window > 0
                       ? cache.append(in.layer, h, in.k + h * d, in.v + h * d, pos, score)
                       : cache.append_unadmitted(in.layer, h, in.k + h * d, in.v + h * d, pos, score);
    }
}

/// The step's queries [Hq][d] as the pages are read: a rotated pool stores R_K·k and R_V·v (cache/kv_rotation.h), so
/// the query is rotated once per head and step ((R_K q)·(R_K k) = q·k, also against Quest's bounds, which are kept in
/// the stored space) into sc.q_rot; the output is rotated back once per head (merge_spans: Σ p_j R_V v_j = R_V Σ p_j
/// v_j).
const float* stored_space_queries(const KVRotation& rot, const LayerInputs& in, DecodeScratch& sc) {
    if (!rot.keys()) return in.q;
    sc.q_rot.assign(in.q, in.q + static_cast<int64_t>(in.n_head) * in.head_dim);
    rot.rotate_keys(sc.q_rot.data(), in.n_head, in.head_dim);
    return sc.q_rot.data();
}

/// Each head's pages in attention order (sc.pages), its probability rows zeroed when the step scorer reads them
/// (sc.probs: [G][entries]), and under a read-time selection the pages Quest keeps (one KV head per thread; each
/// head's page stores keep their own bounds).
void plan_head_pages(KVCache& cache, const LayerInputs& in, bool with_probs, const float* q_all, DecodeScratch& sc) {
    const Policy& policy = cache.policy();
    const KVPool& pool = cache.pool();
    const int d = in.head_dim, G = in.n_head / in.n_head_kv;
    ensure_count(sc.probs, in.n_head_kv);
    ensure_count(sc.pages, in.n_head_kv);
    for (int h = 0; h < in.n_head_kv; ++h) {
        int64_t entries = 0;
        head_pages(cache.head(in.layer, h), pool.page_tokens(), policy.window, sc.pages[h], entries);
        if (with_probs) sc.probs[h].assign(static_cast<size_t>(G) * entries, 0.0f);
    }
    if (!policy.selection.active() || in.layer < policy.selection.skip_layers) return;
    int64_t read = 0, total = 0;
    const int page_tokens = pool.page_tokens();
    ensure_count(sc.quest, in.n_head_kv);
    std::vector<std::vector<PageRef>>& pages = sc.pages;
#pragma omp parallel for schedule(dynamic) reduction(+ : read, total)
    for (int h = 0; h < in.n_head_kv; ++h)
        select_quest_pages(pages[h], page_tokens, policy.selection, q_all + static_cast<int64_t>(h) * G * d, G, d,
                           sc.quest[h], read, total);
    cache.count_selection(read, total);
}

/// 2. Attention per head over its pages, each page read once for the G query heads. Flash-decoding work items:
/// spans of kDecodeSpanPages consecutive pages of one head, each leaving its partial softmax state (m, l, o) in
/// sc.part_m, part_l, part_o (merged by merge_spans in span order). The spans depend only on how many pages each
/// head holds, never on the thread count, so the order of every sum (within a span, then across spans) is the same
/// at any -t and the output is bit-identical; dynamic scheduling of the items still balances heads of unequal
/// lengths. Each region's pages carry their own layout (under quantization at admission the sinks and the window are
/// binary16 and the global region Q8_0 / Q4_0), so each page is attended with its own types.
void attend_spans(const LayerInputs& in, bool with_probs, const float* q_all, DecodeScratch& sc) {
    const int d = in.head_dim, G = in.n_head / in.n_head_kv;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const DotKernels& dk = dot_kernels();
    std::vector<std::vector<float>>& probs = sc.probs;
    std::vector<std::vector<PageRef>>& pages = sc.pages;
    std::vector<int>& span0 = sc.span0;  // head h's spans are items span0[h] … span0[h+1) − 1
    span0.assign(in.n_head_kv + 1, 0);
    for (int h = 0; h < in.n_head_kv; ++h) span0[h + 1] = span0[h] + decode_span_count(pages[h].size());
    const int items = span0[in.n_head_kv];
    std::vector<float>&part_m = sc.part_m, &part_l = sc.part_l, &part_o = sc.part_o;
    part_m.assign(static_cast<size_t>(items) * G, -INFINITY);
    part_l.assign(static_cast<size_t>(items) * G, 0.0f);
    part_o.assign(static_cast<size_t>(items) * G * d, 0.0f);
#pragma omp parallel for schedule(dynamic)
    for (int it = 0; it < items; ++it) {
        const int h = static_cast<int>(std::upper_bound(span0.begin(), span0.end(), it) - span0.begin()) - 1;
        const auto& pl = pages[h];
        const size_t b = static_cast<size_t>(it - span0[h]) * kDecodeSpanPages,
                     e = std::min(pl.size(), b + kDecodeSpanPages);
        float* pm = part_m.data() + static_cast<size_t>(it) * G;
        float* plsum = part_l.data() + static_cast<size_t>(it) * G;
        float* po = part_o.data() + static_cast<size_t>(it) * G * d;
        const int64_t n = static_cast<int64_t>(with_probs ? probs[h].size() / G : 0);
        const float* q = q_all + static_cast<int64_t>(h) * G * d;
        for (size_t i = b; i < e; ++i) {
            // Pages are not contiguous: touch the first lines of the keys and values of the page two ahead so
            // the hardware streamers are already running when it is read. (Prefetching whole pages filled the
            // line-fill buffers and measured 15-25% slower at 16k tokens.)
            if (i + 2 < e) {
                const KVPool& np = *pl[i + 2].pool;
                const size_t half = np.key_page_bytes();
                const char* nk = reinterpret_cast<const char*>(np.keys(pl[i + 2].page));
                for (size_t off = 0; off < 256 && off < half; off += 64) {
                    __builtin_prefetch(nk + off, 0, 3);
                    __builtin_prefetch(nk + half + off, 0, 3);
                }
            }
            const KVPool& pp = *pl[i].pool;
            kv_attend_rows(dk, pp.key_type(), pp.keys(pl[i].page), pp.value_type(), pp.values(pl[i].page), pl[i].cnt, d,
                           q, G, scale, pm, plsum, po, with_probs ? probs[h].data() + pl[i].off : nullptr, n);
        }
    }
}

/// Merges each head's spans into out [Hq][d] (rotated back into the model's space) and, when the scorer reads them,
/// turns the probability rows into the softmax's weights.
void merge_spans(const LayerInputs& in, bool with_probs, const KVRotation& rot, float* out, DecodeScratch& sc) {
    const int d = in.head_dim, G = in.n_head / in.n_head_kv;
    const std::vector<int>& span0 = sc.span0;
    const std::vector<float>&part_m = sc.part_m, &part_l = sc.part_l, &part_o = sc.part_o;
    std::vector<std::vector<float>>& probs = sc.probs;
    for (int h = 0; h < in.n_head_kv; ++h)
        for (int g = 0; g < G; ++g) {
            float m = -INFINITY, l = 0;
            for (int it = span0[h]; it < span0[h + 1]; ++it) m = std::max(m, part_m[static_cast<size_t>(it) * G + g]);
            float* dst = out + static_cast<int64_t>(h * G + g) * d;
            std::fill(dst, dst + d, 0.0f);
            for (int it = span0[h]; it < span0[h + 1]; ++it) {
                const float mi = part_m[static_cast<size_t>(it) * G + g];
                if (mi == -INFINITY) continue;
                const float w = std::exp(mi - m);
                l += part_l[static_cast<size_t>(it) * G + g] * w;
                const float* o = part_o.data() + (static_cast<size_t>(it) * G + g) * d;
                for (int c = 0; c < d; ++c) dst[c] += o[c] * w;
            }
            for (int c = 0; c < d; ++c) dst[c] /= l;
            rot.rotate_values(dst, 1, d);
            if (with_probs) {
                const int64_t n = static_cast<int64_t>(probs[h].size() / G);
                for (int64_t j = 0; j < n; ++j) probs[h][g * n + j] = std::exp(probs[h][g * n + j] - m) / l;
            }
        }
}

/// 3. The step scorer's scores from the step's statistics, written into each head's entries: kNewEntry scores only
/// the new entry (no pass over the cache); kAllEntries every entry in attention order with the new entry moved last
/// (the scorer's convention).
void score_decode_step(KVCache& cache, const LayerInputs& in, const StepScorer& step, bool with_probs,
                       DecodeScratch& sc) {
    const int G = in.n_head / in.n_head_kv, Hkv = in.n_head_kv;
    const auto pos = static_cast<int32_t>(in.pos0);
    const bool new_only = step.decode_scope() == DecodeScope::kNewEntry;
    std::vector<std::vector<float>>& probs = sc.probs;
    ensure_count(sc.positions, Hkv);
    ensure_count(sc.stat, Hkv);
    ensure_count(sc.scores, Hkv);
    ensure_count(sc.from, Hkv);
    sc.outs.resize(Hkv);
    StepEvent ev(in, cache.config().n_layer, cache.scorer_state());
    ev.heads = std::move(sc.views);  // the scratch's capacity, handed back after the call
    ev.heads.clear();
    for (int h = 0; h < Hkv; ++h) {
        HeadCache& hc = cache.head(in.layer, h);
        std::vector<int32_t>& p2 = sc.positions[h];
        std::vector<float>&s2 = sc.scores[h], &a2 = sc.stat[h];
        std::vector<HeadCache::Slot>& from = sc.from[h];
        const int64_t n = hc.size(), new_at = attention_index(hc, sc.slots[h]);
        const int64_t m = new_only ? 1 : n;
        p2.resize(m);
        s2.resize(m);
        from.resize(m);
        a2.resize(with_probs ? static_cast<size_t>(G) * m : 0);
        auto put = [&](int64_t j, Region r, int64_t i, int64_t at) {
            const PageStore* ps = hc.region(r);
            s2[j] = ps->scores()[i];
            p2[j] = ps->positions()[i];
            from[j] = {r, i};
            for (int g = 0; g < G && with_probs; ++g) a2[g * m + j] = probs[h][g * n + at];
        };
        if (!new_only) {
            int64_t j = 0, at = 0;
            for (Region r : kRegionsInOrder)
                for (int64_t i = 0; i < hc.region(r)->size(); ++i, ++at)
                    if (at != new_at) put(j++, r, i, at);
        }
        put(m - 1, *sc.slots[h].region, sc.slots[h].index, new_at);
        ev.heads.push_back(
            {m, nullptr, nullptr, new_only ? &pos : p2.data(), with_probs ? a2.data() : nullptr, nullptr});
        sc.outs[h] = s2.data();
    }
    step.score_decode(ev, sc.outs);
    sc.views = std::move(ev.heads);
    for (int h = 0; h < Hkv; ++h) {
        HeadCache& hc = cache.head(in.layer, h);
        const std::vector<HeadCache::Slot>& from = sc.from[h];
        for (size_t j = 0; j < from.size(); ++j) hc.region(*from[j].region)->scores()[from[j].index] = sc.scores[h][j];
    }
}
}  // namespace

void attend_decode(KVCache& cache, const LayerInputs& in, const float* write_scores, float* out, DecodeScratch& sc) {
    const StepScorer* step = cache.step_scorer();
    const bool with_probs = key_stat(step) != KeyStat::kNone;
    append_step_entries(cache, in, write_scores, sc);
    const KVRotation& rot = cache.pool().rotation();
    const float* q_all = stored_space_queries(rot, in, sc);
    plan_head_pages(cache, in, with_probs, q_all, sc);
    attend_spans(in, with_probs, q_all, sc);
    merge_spans(in, with_probs, rot, out, sc);
    // At-write decisions on the new entry were made when it was appended (a per-entry scorer scored it at write).
    if (step) score_decode_step(cache, in, *step, with_probs, sc);
    if (cache.policy().window == 0) cache.admit_decoded(in.layer, static_cast<int32_t>(in.pos0));
}

}  // namespace kvsieve
