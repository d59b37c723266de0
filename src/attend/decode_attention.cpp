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

/// One entry of a head's regions.
struct RegionIndex {
    Region region;
    int64_t i;
};
/// Every entry of a head in attention order (sinks, global, window).
std::vector<RegionIndex> flat_index(const HeadCache& hc) {
    std::vector<RegionIndex> idx;
    idx.reserve(hc.size());
    for (Region r : kRegionsInOrder)
        for (int64_t i = 0; i < hc.region(r)->size(); ++i) idx.push_back({r, i});
    return idx;
}
}  // namespace

void attend_decode(KVCache& cache, const LayerInputs& in, const float* write_scores, float* out) {
    const Policy& policy = cache.policy();
    const KVPool& pool = cache.pool();
    const StepScorer* step = cache.step_scorer();
    const int d = in.head_dim, G = in.n_head / in.n_head_kv;
    const auto pos = static_cast<int32_t>(in.pos0);
    // 1. Append the new entry to every head (serial: the pool is not thread-safe). At w = 0 the admission rule
    //    runs after scoring, below.
    std::vector<HeadCache::Slot> slots(in.n_head_kv);
    for (int h = 0; h < in.n_head_kv; ++h) {
        const float score = write_scores ? write_scores[h] : 0.0f;
        slots[h] = policy.window > 0 ? cache.append(in.layer, h, in.k + h * d, in.v + h * d, pos, score)
                                     : cache.append_unadmitted(in.layer, h, in.k + h * d, in.v + h * d, pos, score);
    }
    // 2. Attention per head over its pages, reading each page once for the G query heads.
    const KeyStat stat = key_stat(step);
    const DotKernels& dk = dot_kernels();
    // Each region's pages carry their own layout: under quantization at admission the sinks and the window are
    // binary16 (pool.local()) and the global region Q8_0 / Q4_0, so each page is attended with its own types and
    // the spans' partial softmax states merge as before.
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    std::vector<std::vector<float>> probs(stat != KeyStat::kNone ? in.n_head_kv : 0);
    std::vector<std::vector<PageRef>> pages(in.n_head_kv);
    // A rotated pool stores R_K·k and R_V·v (cache/kv_rotation.h): the pages are read as stored, so the query is
    // rotated once per head and step ((R_K q)·(R_K k) = q·k, also against Quest's bounds, which are kept in the
    // stored space) and the output rotated back once per head below (Σ p_j R_V v_j = R_V Σ p_j v_j).
    const KVRotation& rot = pool.rotation();
    std::vector<float> q_rot;
    const float* q_all = in.q;
    if (rot.keys()) {
        q_rot.assign(in.q, in.q + static_cast<int64_t>(in.n_head) * d);
        rot.rotate_keys(q_rot.data(), in.n_head, d);
        q_all = q_rot.data();
    }
    const bool select = policy.selection.active() && in.layer >= policy.selection.skip_layers;
    for (int h = 0; h < in.n_head_kv; ++h) {
        int64_t entries = 0;
        pages[h] = head_pages(cache.head(in.layer, h), pool.page_tokens(), policy.window, entries);
        if (stat != KeyStat::kNone) probs[h].assign(static_cast<size_t>(G) * entries, 0.0f);
    }
    if (select) {
        // One KV head's ranking per thread (each head's page stores keep their own bounds).
        int64_t read = 0, total = 0;
        const int page_tokens = pool.page_tokens();
#pragma omp parallel for schedule(dynamic) reduction(+ : read, total)
        for (int h = 0; h < in.n_head_kv; ++h)
            select_quest_pages(pages[h], page_tokens, policy.selection, q_all + static_cast<int64_t>(h) * G * d, G, d,
                               read, total);
        cache.count_selection(read, total);
    }
    // Flash-decoding work items: spans of kDecodeSpanPages consecutive pages of one head, whose partial softmax
    // states (m, l, o) are merged afterwards in span order. The spans depend only on how many pages each head holds,
    // never on the thread count, so the order of every sum (within a span, then across spans) is the same at any -t
    // and the output is bit-identical; dynamic scheduling of the items still balances heads of unequal lengths.
    std::vector<int> span0(in.n_head_kv + 1, 0);  // head h's spans are items span0[h] … span0[h+1) − 1
    for (int h = 0; h < in.n_head_kv; ++h) span0[h + 1] = span0[h] + decode_span_count(pages[h].size());
    const int items = span0.back();
    std::vector<float> part_m(static_cast<size_t>(items) * G, -INFINITY), part_l(static_cast<size_t>(items) * G, 0.0f),
        part_o(static_cast<size_t>(items) * G * d, 0.0f);
#pragma omp parallel for schedule(dynamic)
    for (int it = 0; it < items; ++it) {
        const int h = static_cast<int>(std::upper_bound(span0.begin(), span0.end(), it) - span0.begin()) - 1;
        const auto& pl = pages[h];
        const size_t b = static_cast<size_t>(it - span0[h]) * kDecodeSpanPages,
                     e = std::min(pl.size(), b + kDecodeSpanPages);
        float* pm = part_m.data() + static_cast<size_t>(it) * G;
        float* plsum = part_l.data() + static_cast<size_t>(it) * G;
        float* po = part_o.data() + static_cast<size_t>(it) * G * d;
        const int64_t n = static_cast<int64_t>(probs.empty() ? 0 : probs[h].size() / G);
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
                           q, G, scale, pm, plsum, po, probs.empty() ? nullptr : probs[h].data() + pl[i].off, n);
        }
    }
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
            if (!probs.empty()) {
                const int64_t n = static_cast<int64_t>(probs[h].size() / G);
                for (int64_t j = 0; j < n; ++j) probs[h][g * n + j] = std::exp(probs[h][g * n + j] - m) / l;
            }
        }
    // 3. Scores from the step's statistics, and at-write decisions on the new entry (a per-entry scorer scored it
    //    at write).
    const int n_layer = cache.config().n_layer;
    if (step && step->decode_scope() == DecodeScope::kNewEntry) {
        // Only the new entry is scored: no pass over the cache.
        StepEvent ev(in, n_layer, false, cache.scorer_state());
        std::vector<std::vector<float>> a(in.n_head_kv);
        std::vector<float> sc(in.n_head_kv);
        std::vector<float*> outs(in.n_head_kv);
        for (int h = 0; h < in.n_head_kv; ++h) {
            const HeadCache::Slot sl = slots[h];
            HeadCache& hc = cache.head(in.layer, h);
            if (!probs.empty()) {  // the new entry's weights
                const int64_t at = attention_index(hc, sl), n = hc.size();
                for (int g = 0; g < G; ++g) a[h].push_back(probs[h][g * n + at]);
            }
            ev.heads.push_back({1, nullptr, nullptr, &pos, a[h].empty() ? nullptr : a[h].data(), nullptr});
            sc[h] = hc.region(*sl.region)->scores()[sl.index];
            outs[h] = &sc[h];
        }
        step->score_decode(ev, outs);
        for (int h = 0; h < in.n_head_kv; ++h) {
            const HeadCache::Slot sl = slots[h];
            cache.head(in.layer, h).region(*sl.region)->scores()[sl.index] = sc[h];
        }
    } else if (step) {
        // Every head's entries in attention order with the new entry moved last (the scorer's convention), then one
        // call for the layer (a scorer may choose per layer, as TOVA).
        const int Hkv = in.n_head_kv;
        std::vector<std::vector<RegionIndex>> idx(Hkv);
        std::vector<std::vector<size_t>> order(Hkv);
        std::vector<std::vector<float>> s2(Hkv), a2(Hkv);
        std::vector<std::vector<int32_t>> p2(Hkv);
        StepEvent ev(in, n_layer, false, cache.scorer_state());
        std::vector<float*> outs;
        for (int h = 0; h < Hkv; ++h) {
            HeadCache& hc = cache.head(in.layer, h);
            idx[h] = flat_index(hc);
            const size_t n = idx[h].size(), new_at = static_cast<size_t>(attention_index(hc, slots[h]));
            order[h].reserve(n);
            for (size_t j = 0; j < n; ++j)
                if (j != new_at) order[h].push_back(j);
            order[h].push_back(new_at);
            s2[h].resize(n);
            p2[h].resize(n);
            a2[h].resize(stat != KeyStat::kNone ? G * n : 0);
            for (size_t j = 0; j < n; ++j) {
                const RegionIndex ri = idx[h][order[h][j]];
                const PageStore* ps = hc.region(ri.region);
                s2[h][j] = ps->scores()[ri.i];
                p2[h][j] = ps->positions()[ri.i];
                for (int g = 0; g < G && !a2[h].empty(); ++g) a2[h][g * n + j] = probs[h][g * n + order[h][j]];
            }
            ev.heads.push_back({static_cast<int64_t>(n), nullptr, nullptr, p2[h].data(),
                                a2[h].empty() ? nullptr : a2[h].data(), nullptr});
            outs.push_back(s2[h].data());
        }
        step->score_decode(ev, outs);
        for (int h = 0; h < Hkv; ++h) {
            HeadCache& hc = cache.head(in.layer, h);
            for (size_t j = 0; j < idx[h].size(); ++j) {
                const RegionIndex ri = idx[h][order[h][j]];
                hc.region(ri.region)->scores()[ri.i] = s2[h][j];
            }
        }
    }
    if (policy.window == 0) cache.admit_decoded(in.layer, pos);
}

}  // namespace kvsieve
