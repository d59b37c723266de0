#include "cache/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention.h"
#include "kernels/dot.h"
#include "kernels/quant.h"
#include "util/error.h"

namespace kvsieve {

namespace {
KeyStat key_stat(const StepScorer* s) {
    if (!s) return KeyStat::kNone;
    switch (s->stat()) {
        case AttnStat::kMassSum: return KeyStat::kSum;
        case AttnStat::kMassLast: return KeyStat::kLast;
        default: return KeyStat::kNone;
    }
}

/// Pages per span of the flash-decoding split of a decode step: each KV head's pages are cut into spans of this
/// many consecutive pages (the last one shorter), attended independently (in parallel) and merged in span order.
/// The split is fixed by the number of pages alone, never by the thread count, so a decode step's output, and the
/// logits after it, are bit-identical whatever the number of threads. 16 pages (256 entries at the default page
/// size) keep the merge (G·d floats per span) negligible beside the span's reads and still give a 4k-token head 16
/// spans to spread over the threads.
constexpr size_t kDecodeSpanPages = 16;

/// Spans of a head holding `pages` pages in a decode step: ⌈pages / kDecodeSpanPages⌉, at least 1.
int decode_span_count(size_t pages) {
    return static_cast<int>(std::max<size_t>(1, (pages + kDecodeSpanPages - 1) / kDecodeSpanPages));
}

/// Flat index over a head's regions in attention order (sinks, global, window).
struct RegionIndex {
    int region;
    int64_t i;
};
/// Index of the entry at `slot` in attention order.
int64_t attention_index(const HeadCache& hc, HeadCache::Slot slot) {
    int64_t at = slot.index;
    for (int r = 0; r < slot.region; ++r) at += hc.region(r)->size();
    return at;
}

std::vector<RegionIndex> flat_index(const HeadCache& hc) {
    std::vector<RegionIndex> idx;
    idx.reserve(hc.size());
    for (int r = 0; r < 3; ++r)
        for (int64_t i = 0; i < hc.region(r)->size(); ++i) idx.push_back({r, i});
    return idx;
}
}  // namespace

KVCache::KVCache(const ModelConfig& c, int64_t n_ctx, Policy policy, std::shared_ptr<KVPool> pool)
    : cfg_(c), n_ctx_(n_ctx), policy_(std::move(policy)), pool_(std::move(pool)), n_layer_(c.n_layer),
      n_head_kv_(c.n_head_kv) {
    require(n_ctx > 0, "context size must be positive, got ", n_ctx);
    require(pool_ && pool_->head_dim() == c.head_dim, "KV pool head dimension does not match the model");
    check_kv_head_dim(pool_->key_type(), c.head_dim);
    check_kv_head_dim(pool_->value_type(), c.head_dim);
    require(c.head_dim <= 256, "head dimension ", c.head_dim, " above 256 is not supported by the paged kernels");
    if (policy_.scorer) {
        policy_.scorer = policy_.scorer->for_model(c);
        policy_.scorer->adjust_policy(policy_);
        state_ = policy_.scorer->new_state(c);
        entry_ = policy_.scorer->entry();
        step_ = policy_.scorer->step();
    }
    heads_.reserve(static_cast<size_t>(n_layer_) * n_head_kv_);
    for (int i = 0; i < n_layer_ * n_head_kv_; ++i) heads_.emplace_back(pool_.get(), policy_.sinks, policy_.window);
}

bool KVCache::admit(int layer, int head, int32_t pos, float& score, const PageStore* store, int64_t slot, int64_t now) {
    if (store && entry_) {
        WindowExitEvent e;
        e.layer = layer;
        e.head = head;
        e.head_dim = cfg_.head_dim;
        e.pos = pos;
        e.now = now;
        e.score = score;
        const std::function<void(float*, float*)> read = [store, slot](float* k, float* v) { store->read(slot, k, v); };
        e.read = &read;
        e.state = state_.get();
        score = entry_->on_window_exit(e);
    }
    switch (policy_.admission.kind) {
        case Rule::Kind::kDropAll: return false;
        case Rule::Kind::kThreshold: return score >= policy_.admission.tau;
        default: return true;
    }
}

void KVCache::attend(const LayerInputs& in, float* out) {
    require(in.pos0 + in.T <= n_ctx_, "the sequence needs ", in.pos0 + in.T, " positions but the context holds ",
            n_ctx_);
    const bool decode = is_decode(in.T);
    require(!decode || in.T == 1, "a decode step takes one token, got ", in.T);
    require(!decode || !shadow_, "a shadow cache takes prefill steps only");
    std::vector<float> ws;  // write-time scores [T][Hkv]
    if (entry_) {
        ws.resize(static_cast<size_t>(in.T) * in.n_head_kv);
        entry_->on_write(StepEvent(in, n_layer_, !decode, state_.get()), ws.data());
    }
    if (decode)
        decode_layer(in, ws.empty() ? nullptr : ws.data(), out);
    else
        prefill_layer(in, ws.empty() ? nullptr : ws.data(), out);
}

namespace {
/// Quest's read-time selection over one KV head's pages (policy/selection.h): the pages not marked `always` are
/// ranked by the bound of their keys for the group's queries q [G][d], and the best ceil(budget / page) kept. The
/// bounds are the ones each page store keeps beside its pages (PageStore::key_bounds).
template <class PageRef>
void select_quest_pages(std::vector<PageRef>& pl, const KVPool& pool, const Selection& sel, const float* q, int G,
                        int d, int64_t& read, int64_t& total) {
    std::vector<int> cand;
    for (size_t i = 0; i < pl.size(); ++i) {
        total += pl[i].cnt;
        if (!pl[i].always) cand.push_back(static_cast<int>(i));
    }
    const int keep = static_cast<int>((sel.budget + pool.page_tokens() - 1) / pool.page_tokens());
    if (static_cast<int>(cand.size()) > keep) {
        std::vector<const uint16_t*> kmin(cand.size()), kmax(cand.size());
        for (size_t c = 0; c < cand.size(); ++c) pl[cand[c]].store->key_bounds(pl[cand[c]].index, &kmin[c], &kmax[c]);
        const std::vector<int> chosen =
            quest_rank_pages(q, G, d, kmin.data(), kmax.data(), static_cast<int>(cand.size()), keep, sel.group_max);
        std::vector<char> keep_page(pl.size(), 0);
        for (size_t i = 0; i < pl.size(); ++i) keep_page[i] = pl[i].always;
        for (int c : chosen) keep_page[cand[c]] = 1;
        std::vector<PageRef> out;
        for (size_t i = 0; i < pl.size(); ++i)
            if (keep_page[i]) out.push_back(pl[i]);
        pl.swap(out);
    }
    for (const auto& p : pl) read += p.cnt;
}
}  // namespace

void KVCache::decode_layer(const LayerInputs& in, const float* write_scores, float* out) {
    const int d = in.head_dim, G = in.n_head / in.n_head_kv;
    const auto pos = static_cast<int32_t>(in.pos0);
    const auto keep_all = [](int32_t, float&, const PageStore*, int64_t) { return true; };
    // 1. Append the new entry to every head (serial: the pool is not thread-safe). At w = 0 the admission rule
    //    runs after scoring, below.
    std::vector<HeadCache::Slot> slots(in.n_head_kv);
    for (int h = 0; h < in.n_head_kv; ++h)
        slots[h] =
            head(in.layer, h)
                .append(in.k + h * d, in.v + h * d, pos, write_scores ? write_scores[h] : 0.0f,
                        policy_.window > 0 ? HeadCache::Admit(admit_fn(in.layer, h, pos)) : HeadCache::Admit(keep_all));
    // 2. Attention per head over its pages, reading each page once for the G query heads.
    const KeyStat stat = key_stat(step_);
    const DotKernels& dk = dot_kernels();
    // Each region's pages carry their own layout: under quantization at admission the sinks and the window are
    // binary16 (pool_->local()) and the global region Q8_0 / Q4_0, so each page is attended with its own types and
    // the spans' partial softmax states merge as before.
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    std::vector<std::vector<float>> probs(stat != KeyStat::kNone ? in.n_head_kv : 0);
    // Work items: spans of a head's pages, whose partial softmax states (m, l, o) are merged afterwards
    // (flash-decoding).
    struct PageRef {
        int32_t page;
        const KVPool* pool;  // the layout of its region (types, row bytes)
        int cnt;
        int64_t off;  // index of its first entry in the head's attention order
        bool always;  // read whatever a read-time selection chooses (sinks, window, the current token's page)
        const PageStore* store;  // the region holding it, and its index there (for the key bounds)
        size_t index;
    };
    std::vector<std::vector<PageRef>> pages(in.n_head_kv);
    // A rotated pool stores R_K·k and R_V·v (cache/kv_rotation.h): the pages are read as stored, so the query is
    // rotated once per head and step ((R_K q)·(R_K k) = q·k, also against Quest's bounds, which are kept in the
    // stored space) and the output rotated back once per head below (Σ p_j R_V v_j = R_V Σ p_j v_j).
    const KVRotation& rot = pool_->rotation();
    std::vector<float> q_rot;
    const float* q_all = in.q;
    if (rot.keys()) {
        q_rot.assign(in.q, in.q + static_cast<int64_t>(in.n_head) * d);
        rot.rotate_keys(q_rot.data(), in.n_head, d);
        q_all = q_rot.data();
    }
    const bool select = policy_.selection.active() && in.layer >= policy_.selection.skip_layers;
    for (int h = 0; h < in.n_head_kv; ++h) {
        const HeadCache& hc = head(in.layer, h);
        int64_t off = 0;
        for (int r = 0; r < 3; ++r) {
            const PageStore* ps = hc.region(r);
            const int P = pool_->page_tokens();
            for (size_t pi = 0; pi < ps->pages().size(); ++pi) {
                const int cnt = static_cast<int>(std::min<int64_t>(P, ps->size() - static_cast<int64_t>(pi) * P));
                pages[h].push_back({ps->pages()[pi], &ps->pool(), cnt, off, r != 1, ps, pi});
                off += cnt;
            }
            // Without a window the newest entry is the last of the global region.
            if (r == 1 && policy_.window == 0 && !ps->pages().empty()) pages[h].back().always = true;
        }
        if (stat != KeyStat::kNone) probs[h].assign(static_cast<size_t>(G) * off, 0.0f);
    }
    if (select) {
        // One KV head's ranking per thread (each head's page stores keep their own bounds).
        int64_t read = 0, total = 0;
#pragma omp parallel for schedule(dynamic) reduction(+ : read, total)
        for (int h = 0; h < in.n_head_kv; ++h)
            select_quest_pages(pages[h], *pool_, policy_.selection, q_all + static_cast<int64_t>(h) * G * d, G, d, read,
                               total);
        selected_read_ += read;
        selected_total_ += total;
    }
    // Flash-decoding work items: spans of kSpanPages consecutive pages of one head, whose partial softmax states
    // (m, l, o) are merged afterwards in span order. The spans depend only on how many pages each head holds, never
    // on the thread count, so the order of every sum (within a span, then across spans) is the same at any -t and the
    // output is bit-identical; dynamic scheduling of the items still balances heads of unequal lengths.
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
            dk.attend_rows(kv_tensor_type(pp.key_type()), pp.keys(pl[i].page), kv_tensor_type(pp.value_type()),
                           pp.values(pl[i].page), pl[i].cnt, d, q, G, scale, pm, plsum, po,
                           probs.empty() ? nullptr : probs[h].data() + pl[i].off, n);
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
    if (step_ && step_->decode_scope() == DecodeScope::kNewEntry) {
        // Only the new entry is scored: no pass over the cache.
        StepEvent ev(in, n_layer_, false, state_.get());
        std::vector<std::vector<float>> a(in.n_head_kv);
        std::vector<float> sc(in.n_head_kv);
        std::vector<float*> outs(in.n_head_kv);
        for (int h = 0; h < in.n_head_kv; ++h) {
            const HeadCache::Slot sl = slots[h];
            HeadCache& hc = head(in.layer, h);
            if (!probs.empty()) {  // the new entry's weights
                const int64_t at = attention_index(hc, sl), n = hc.size();
                for (int g = 0; g < G; ++g) a[h].push_back(probs[h][g * n + at]);
            }
            ev.heads.push_back({1, nullptr, nullptr, &pos, a[h].empty() ? nullptr : a[h].data(), nullptr});
            sc[h] = hc.region(sl.region)->scores()[sl.index];
            outs[h] = &sc[h];
        }
        step_->score_decode(ev, outs);
        for (int h = 0; h < in.n_head_kv; ++h) {
            const HeadCache::Slot sl = slots[h];
            head(in.layer, h).region(sl.region)->scores()[sl.index] = sc[h];
        }
    } else if (step_) {
        // Every head's entries in attention order with the new entry moved last (the scorer's convention), then one
        // call for the layer (a scorer may choose per layer, as TOVA).
        const int Hkv = in.n_head_kv;
        std::vector<std::vector<RegionIndex>> idx(Hkv);
        std::vector<std::vector<size_t>> order(Hkv);
        std::vector<std::vector<float>> s2(Hkv), a2(Hkv);
        std::vector<std::vector<int32_t>> p2(Hkv);
        StepEvent ev(in, n_layer_, false, state_.get());
        std::vector<float*> outs;
        for (int h = 0; h < Hkv; ++h) {
            HeadCache& hc = head(in.layer, h);
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
        step_->score_decode(ev, outs);
        for (int h = 0; h < Hkv; ++h) {
            HeadCache& hc = head(in.layer, h);
            for (size_t j = 0; j < idx[h].size(); ++j) {
                const RegionIndex ri = idx[h][order[h][j]];
                hc.region(ri.region)->scores()[ri.i] = s2[h][j];
            }
        }
    }
    if (policy_.window == 0 && policy_.admission.kind != Rule::Kind::kKeepAll)
        for (int h = 0; h < in.n_head_kv; ++h) {
            PageStore& g = head(in.layer, h).global();
            if (!g.empty() && g.positions().back() == pos &&
                !admit(in.layer, h, pos, g.scores().back(), nullptr, -1, pos))
                g.remove(g.size() - 1);
        }
}

void KVCache::prefill_layer(const LayerInputs& in, const float* write_scores, float* out) {
    const int d = in.head_dim, G = in.n_head / in.n_head_kv, Hkv = in.n_head_kv;
    const int64_t T = in.T, ldq = static_cast<int64_t>(in.n_head) * d, kvd = static_cast<int64_t>(Hkv) * d;
    const KeyStat stat = key_stat(step_);
    const bool scored = step_ != nullptr;  // scored after attention
    // Gated prefill: each query sees its window plus the keys that are or will be admitted, as a decode step would.
    const bool gated = policy_.gated_prefill && stat == KeyStat::kNone;
    const Rule& adm = policy_.admission;
    auto will_keep = [&](float score) {
        return adm.kind == Rule::Kind::kKeepAll || (adm.kind == Rule::Kind::kThreshold && score >= adm.tau);
    };
    const KVPool& lp = pool_->local();  // the sinks' and the window's layout (binary16 under quantization at admission)
    const bool kq = kv_type_block(pool_->key_type()) > 1;
    // Quantized keys: the chunk's queries are scored as the decode kernel and llama.cpp's flash attention score them
    // (docs/kv_quant_reference.md, step 1): each head's query quantized to Q8_0 blocks (ties to even) in the keys'
    // stored space, i.e. q ← R_Kᵀ·deq(Q8_0(R_K·q)) with the pool's key rotation R_K (identity when unrotated).
    std::vector<float> q_seen;
    const float* qp = in.q;
    if (kq) {
        q_seen.assign(in.q, in.q + T * ldq);
        const KVRotation& rot = pool_->rotation();
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < T; ++t) {
            float* row = q_seen.data() + t * ldq;
            std::vector<BlockQ8_0> blocks(static_cast<size_t>(d / QK8_0));
            rot.rotate_keys(row, in.n_head, d);
            for (int hq = 0; hq < in.n_head; ++hq) {
                quantize_row_q8_0_activations(row + static_cast<int64_t>(hq) * d, blocks.data(), d);
                dequantize_row(TensorType::Q8_0, blocks.data(), row + static_cast<int64_t>(hq) * d, d);
            }
            rot.rotate_keys(row, in.n_head, d);
        }
        qp = q_seen.data();
    }
    // 1. Per head: gather the kept entries (float32) followed by the chunk's, attend.
    std::vector<std::vector<float>> K(Hkv), V(Hkv), A(Hkv);
    std::vector<std::vector<int32_t>> P(Hkv);
    std::vector<std::vector<float>> S_old(Hkv);
    std::vector<int64_t> n_old(Hkv);
#pragma omp parallel for schedule(dynamic)
    for (int h = 0; h < Hkv; ++h) {
        const HeadCache& hc = head(in.layer, h);
        const int64_t no = hc.size(), n = no + T;
        n_old[h] = no;
        K[h].resize(static_cast<size_t>(n) * d);
        V[h].resize(static_cast<size_t>(n) * d);
        P[h].resize(n);
        int64_t j = 0;
        std::vector<char> open(gated ? n : 0);
        for (int r = 0; r < 3; ++r) {
            const PageStore* ps = hc.region(r);
            for (int64_t i = 0; i < ps->size(); ++i, ++j) {
                ps->read(i, K[h].data() + j * d, V[h].data() + j * d);
                P[h][j] = ps->positions()[i];
                if (scored) S_old[h].push_back(ps->scores()[i]);
                if (gated) open[j] = r != 2 || will_keep(ps->scores()[i]);  // sinks and global are kept already
            }
        }
        for (int64_t t = 0; t < T; ++t, ++j) {
            std::copy_n(in.k + t * kvd + h * d, d, K[h].data() + j * d);
            std::copy_n(in.v + t * kvd + h * d, d, V[h].data() + j * d);
            // Quantized pages: the chunk's own keys and values are seen as they will be stored (as llama.cpp, which
            // writes the batch into its cache before attending), so a chunked and a one-batch prefill, the decode
            // steps and every prefill statistic read the same dequantized entries. An entry is written to the sinks
            // or the window (their layout), or without a window straight to the global region. (At admission, a
            // later chunk reads the entries an earlier one pushed out of the window quantized, as a decode step
            // would, where one batch reads them in F16: the two then differ by the quantization of those entries.)
            // Rotated pages: the round trip goes through the rotation as the store does (stored_view).
            const KVPool& dst = hc.sinks().size() + t < policy_.sinks || policy_.window > 0 ? lp : *pool_;
            stored_view(dst, K[h].data() + j * d, V[h].data() + j * d);
            P[h][j] = static_cast<int32_t>(in.pos0 + t);
            if (gated)  // the first s entries become sinks
                open[j] =
                    hc.sinks().size() + t < policy_.sinks || will_keep(write_scores ? write_scores[t * Hkv + h] : 0.0f);
        }
        if (stat != KeyStat::kNone) A[h].resize(static_cast<size_t>(G) * n);
        if (gated)
            attention_prefill_gated(qp + static_cast<int64_t>(h) * G * d, ldq, G, d, T, K[h].data(), V[h].data(), no,
                                    P[h].data(), open.data(), in.pos0, policy_.window,
                                    out + static_cast<int64_t>(h) * G * d, ldq);
        else if (!shadow_ || stat != KeyStat::kNone) {  // a shadow cache computes only the statistics its policy reads
            // A shadow takes the statistics another cache of this step computed over the same keys.
            const std::vector<float>* had =
                shadow_ && stat_share_ ? stat_share_->find(in.layer, h, stat, pool_->key_type(), lp.key_type(), P[h])
                                       : nullptr;
            if (had != nullptr) {
                A[h] = *had;
            } else {
                attention_prefill_group(qp + static_cast<int64_t>(h) * G * d, ldq, G, d, T, K[h].data(), V[h].data(),
                                        no, shadow_ ? nullptr : out + static_cast<int64_t>(h) * G * d, ldq, stat,
                                        A[h].data());
                if (stat_share_ && stat != KeyStat::kNone)
                    stat_share_->put(in.layer, h, stat, pool_->key_type(), lp.key_type(), P[h], A[h]);
            }
        }
        if (!scored) {  // nothing else needs the gathered copy
            std::vector<float>().swap(K[h]);
            std::vector<float>().swap(V[h]);
        }
    }
    // 2. Scores of every entry.
    std::vector<std::vector<float>> scores(Hkv);
    if (scored) {
        StepEvent si(in, n_layer_, true, state_.get());
        for (int h = 0; h < Hkv; ++h)
            si.heads.push_back({n_old[h] + T, K[h].data(), V[h].data(), P[h].data(),
                                A[h].empty() ? nullptr : A[h].data(), S_old[h].data()});
        step_->score_prefill(si, scores);
    }
    // 3. Write back the scores of kept entries, append the chunk (serial: the pool is not thread-safe).
    for (int h = 0; h < Hkv; ++h) {
        HeadCache& hc = head(in.layer, h);
        if (scored) {
            int64_t j = 0;
            for (int r = 0; r < 3; ++r) {
                PageStore* ps = hc.region(r);
                for (int64_t i = 0; i < ps->size(); ++i) ps->scores()[i] = scores[h][j++];
            }
        }
        for (int64_t t = 0; t < T; ++t)
            hc.append(in.k + t * kvd + h * d, in.v + t * kvd + h * d, static_cast<int32_t>(in.pos0 + t),
                      write_scores ? write_scores[t * Hkv + h]
                      : scored     ? scores[h][n_old[h] + t]
                                   : 0.0f,
                      admit_fn(in.layer, h, in.pos0 + t));
    }
}

void KVCache::set_shadow(bool on) {
    require(!on || !policy_.gated_prefill, "policy ", policy_.spec,
            " has a gated prefill; its cache cannot be a shadow");
    shadow_ = on;
}

void KVCache::finish_step(int64_t pos0, int64_t T) {
    n_tokens_ = pos0 + T;
    if (is_decode(T)) {
        ++decode_steps_;
        if (policy_.timing == Timing::kEveryNDecodeSteps && decode_steps_ % policy_.every_n == 0) compress();
    }
    peak_bytes_ = std::max(peak_bytes_, bytes_in_use());
}

void KVCache::end_prefill() {
    if (policy_.timing == Timing::kAfterPrefill || policy_.timing == Timing::kEveryNDecodeSteps) compress();
}

void KVCache::set_scores(const EntryScores& es) {
    require(static_cast<int>(es.by_pos.size()) == n_layer_, "scores for ", es.by_pos.size(), " layers, the cache has ",
            n_layer_);
    for (int l = 0; l < n_layer_; ++l) {
        require(static_cast<int>(es.by_pos[l].size()) == n_head_kv_, "scores for ", es.by_pos[l].size(),
                " KV heads, the cache has ", n_head_kv_);
        for (int h = 0; h < n_head_kv_; ++h) {
            const auto& m = es.by_pos[l][h];
            HeadCache& hc = head(l, h);
            for (int r = 0; r < 3; ++r) {
                PageStore* ps = hc.region(r);
                for (int64_t i = 0; i < ps->size(); ++i) {
                    auto it = m.find(ps->positions()[i]);
                    ps->scores()[i] = it == m.end() ? es.missing : it->second;
                }
            }
        }
    }
}

void KVCache::compress() {
    if (policy_.compression.kind == Rule::Kind::kKeepAll) return;
    std::vector<HeadCandidates> cands;
    cands.reserve(heads_.size());
    std::vector<std::vector<float>> effective(heads_.size());
    for (int l = 0; l < n_layer_; ++l)
        for (int h = 0; h < n_head_kv_; ++h) {
            HeadCache& hc = head(l, h);
            HeadCandidates c;
            c.layer = l;
            c.head = h;
            c.scores = hc.global().scores().data();
            c.n = hc.global().size();
            if (entry_) {  // the scores the rule compares now
                effective[static_cast<size_t>(l) * n_head_kv_ + h].resize(c.n);
                float* e = effective[static_cast<size_t>(l) * n_head_kv_ + h].data();
                for (int64_t i = 0; i < c.n; ++i)
                    e[i] = entry_->effective_score(c.scores[i], hc.global().positions()[i], n_tokens_, l, h);
                c.scores = e;
            }
            c.n_reference = std::max<int64_t>(c.n, n_tokens_ - hc.sinks().size() - hc.window().size());
            cands.push_back(std::move(c));
        }
    apply_rule(policy_.compression, cands, RuleContext{n_layer_, n_tokens_});
    size_t i = 0;
    for (int l = 0; l < n_layer_; ++l)
        for (int h = 0; h < n_head_kv_; ++h) head(l, h).global().retain(cands[i++].keep);
}

void KVCache::fill_synthetic(int64_t n, uint64_t seed) {
    require(n_tokens_ + n <= n_ctx_, "synthetic fill of ", n, " tokens exceeds the context of ", n_ctx_);
    const int d = cfg_.head_dim;
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    auto uniform = [&state] {  // splitmix64 → uniform in [−√3, √3): unit variance, fast
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        return 1.7320508f * (2.0f * static_cast<float>(z >> 40) / 16777216.0f - 1.0f);
    };
    std::vector<float> k(d), v(d);
    for (int64_t t = 0; t < n; ++t) {
        for (size_t hi = 0; hi < heads_.size(); ++hi) {
            HeadCache& hc = heads_[hi];
            for (int c = 0; c < d; ++c) {
                k[c] = uniform();
                v[c] = uniform();
            }
            hc.append(k.data(), v.data(), static_cast<int32_t>(n_tokens_), 0.0f,
                      admit_fn(static_cast<int>(hi) / n_head_kv_, static_cast<int>(hi) % n_head_kv_, n_tokens_));
        }
        ++n_tokens_;
    }
    peak_bytes_ = std::max(peak_bytes_, bytes_in_use());
}

void KVCache::rollback(int64_t n) {
    for (auto& hc : heads_)
        hc.truncate(static_cast<int32_t>(std::min<int64_t>(n, std::numeric_limits<int32_t>::max())));
    n_tokens_ = std::min(n_tokens_, n);
}

void KVCache::clear() {
    for (auto& hc : heads_) hc.clear();
    if (policy_.scorer) state_ = policy_.scorer->new_state(cfg_);
    n_tokens_ = 0;
    decode_steps_ = 0;
    selected_read_ = selected_total_ = 0;
    peak_bytes_ = 0;
    phase_ = Phase::kAuto;
}

uint64_t KVCache::bytes_in_use() const {
    size_t local = 0, global = 0;
    for (const HeadCache& hc : heads_) {
        local += hc.sinks().pages().size() + hc.window().pages().size();
        global += hc.global().pages().size();
    }
    return static_cast<uint64_t>(local) * pool_->local().page_bytes() +
           static_cast<uint64_t>(global) * pool_->page_bytes();
}

KVStats KVCache::stats() const {
    KVStats s;
    s.policy = policy_.spec.empty() ? policy_.name : policy_.spec;
    if (s.policy.empty()) s.policy = "full";
    s.kv_type = kv_types_spec({pool_->key_type(), pool_->value_type()});
    s.kv_quant_at = kv_quant_at_name(pool_->quant_at());
    s.kv_type_local = kv_types_spec({pool_->local().key_type(), pool_->local().value_type()});
    s.tokens = n_tokens_;
    s.sinks = policy_.sinks;
    s.window = policy_.window;
    s.entries.assign(n_layer_, std::vector<int64_t>(n_head_kv_));
    s.beyond.assign(n_layer_, std::vector<int64_t>(n_head_kv_));
    int64_t kept = 0, kept_beyond = 0;
    for (int l = 0; l < n_layer_; ++l)
        for (int h = 0; h < n_head_kv_; ++h) {
            const HeadCache& hc = head(l, h);
            s.entries[l][h] = hc.size();
            s.beyond[l][h] = hc.sinks().size() + hc.global().size();
            kept += hc.size();
            kept_beyond += s.beyond[l][h];
            s.selection_bytes += hc.global().bounds_bytes();
        }
    const int64_t heads = static_cast<int64_t>(n_layer_) * n_head_kv_;
    const int64_t total = n_tokens_ * heads;
    const int64_t total_beyond = std::max<int64_t>(0, n_tokens_ - policy_.window) * heads;
    s.compression_ratio = total > 0 ? 1.0 - static_cast<double>(kept) / total : 0.0;
    s.density = total_beyond > 0 ? static_cast<double>(kept_beyond) / total_beyond : 1.0;
    s.kv_bytes_final = bytes_in_use();
    for (const HeadCache& hc : heads_) {
        s.kv_bytes_local +=
            static_cast<uint64_t>(hc.sinks().pages().size() + hc.window().pages().size()) * pool_->local().page_bytes();
        s.kv_bytes_global += static_cast<uint64_t>(hc.global().pages().size()) * pool_->page_bytes();
    }
    s.kv_bytes_peak = std::max(peak_bytes_, s.kv_bytes_final);
    s.kv_bytes_full = static_cast<uint64_t>(total) * 2 * cfg_.head_dim * 2;
    s.scorer_state_bytes = state_ ? state_->bytes() : 0;
    if (selected_total_ > 0)
        s.read_fraction = static_cast<double>(selected_read_) / static_cast<double>(selected_total_);
    return s;
}

namespace {
/// 3: the global region's key and value types, then the sinks' and the window's (int32 each, KVType; they differ
/// under quantization at admission), and after the page size the Walsh–Hadamard sizes of the keys' and the values'
/// rotation (int32 each, 0: not rotated; cache/kv_rotation.h); 2 (still read, as quantization at write, no
/// rotation): the key type and the value type; 1 (still read, likewise): one type for both.
constexpr uint32_t kCacheRecordVersion = 3;
}  // namespace

void KVCache::save(BinaryWriter& w) const {
    w.pod(kCacheRecordVersion);
    w.pod<int32_t>(n_layer_);
    w.pod<int32_t>(n_head_kv_);
    w.pod<int32_t>(pool_->head_dim());
    w.pod<int32_t>(static_cast<int32_t>(pool_->key_type()));
    w.pod<int32_t>(static_cast<int32_t>(pool_->value_type()));
    w.pod<int32_t>(static_cast<int32_t>(pool_->local().key_type()));
    w.pod<int32_t>(static_cast<int32_t>(pool_->local().value_type()));
    w.pod<int32_t>(pool_->page_tokens());
    w.pod<int32_t>(pool_->rotation().key_n());
    w.pod<int32_t>(pool_->rotation().value_n());
    w.pod(n_ctx_);
    w.str(policy_.spec);
    w.pod(n_tokens_);
    w.pod(decode_steps_);
    w.pod(selected_read_);
    w.pod(selected_total_);
    for (const HeadCache& h : heads_) h.save(w);
    w.pod<uint8_t>(state_ ? 1 : 0);
    if (state_) state_->save(w);
}

void KVCache::load(BinaryReader& r) {
    const std::string& what = r.what();
    const uint32_t version = r.pod<uint32_t>();
    require(version >= 1 && version <= kCacheRecordVersion, what, " has cache record version ", version,
            "; this build reads versions 1 to ", kCacheRecordVersion);
    const int32_t L = r.pod<int32_t>(), H = r.pod<int32_t>(), d = r.pod<int32_t>(), ktype = r.pod<int32_t>();
    const int32_t vtype = version == 1 ? ktype : r.pod<int32_t>();
    // Versions 1 and 2 quantized every entry at write: the sinks and the window hold the global region's types.
    const int32_t lktype = version < 3 ? ktype : r.pod<int32_t>();
    const int32_t lvtype = version < 3 ? vtype : r.pod<int32_t>();
    const int32_t page = r.pod<int32_t>();
    const int32_t rot_k = version >= 3 ? r.pod<int32_t>() : 0, rot_v = version >= 3 ? r.pod<int32_t>() : 0;
    require(L == n_layer_ && H == n_head_kv_ && d == pool_->head_dim(), what, " holds a cache of ", L, " layers × ", H,
            " KV heads × d ", d, "; this model has ", n_layer_, " × ", n_head_kv_, " × ", pool_->head_dim());
    auto type_name = [](int32_t t) {
        return t >= 0 && t <= static_cast<int32_t>(KVType::kQ4_0) ? kv_type_name(static_cast<KVType>(t))
                                                                  : "unknown type " + std::to_string(t);
    };
    const KVPool& lp = pool_->local();
    // The sinks' and the window's types are named where they differ from the global region's (quantization at
    // admission).
    auto local_note = [&type_name](int32_t k, int32_t v, int32_t lk, int32_t lv) {
        return lk == k && lv == v ? std::string()
                                  : " (sinks and window: keys " + type_name(lk) + ", values " + type_name(lv) + ")";
    };
    const auto pk = static_cast<int32_t>(pool_->key_type()), pv = static_cast<int32_t>(pool_->value_type()),
               plk = static_cast<int32_t>(lp.key_type()), plv = static_cast<int32_t>(lp.value_type());
    require(ktype == pk && vtype == pv && lktype == plk && lvtype == plv, what, " holds keys of type ",
            type_name(ktype), " and values of type ", type_name(vtype), local_note(ktype, vtype, lktype, lvtype),
            "; this cache stores keys as ", kv_type_name(pool_->key_type()), " and values as ",
            kv_type_name(pool_->value_type()), local_note(pk, pv, plk, plv),
            " (--cache-type-k / --cache-type-v, or --kv-type for both; --kv-quant-at)");
    const KVRotation& rot = pool_->rotation();
    if (rot_k != rot.key_n() || rot_v != rot.value_n()) {
        auto name = [](int32_t n, const char* half) {
            return n == 0 ? std::string() : std::string(half) + " H_" + std::to_string(n);
        };
        std::string saved = name(rot_k, "keys");
        const std::string sv = name(rot_v, "values");
        saved += saved.empty() || sv.empty() ? sv : ", " + sv;
        fail(what, " holds entries stored with rotation ", saved.empty() ? "none" : saved,
             "; this cache stores them with rotation ", rot.describe(), " (--kv-rotate)");
    }
    require(page == pool_->page_tokens(), what, " holds pages of ", page, " entries; this cache's pages hold ",
            pool_->page_tokens());
    const int64_t n_ctx = r.pod<int64_t>();
    require(n_ctx <= n_ctx_, what, " holds a sequence of context ", n_ctx, ", larger than this cache's ", n_ctx_);
    const std::string spec = r.str(1 << 16);
    require(spec == policy_.spec, what, " was saved under policy '", spec, "', this cache runs '", policy_.spec, "'");
    clear();
    try {
        n_tokens_ = r.pod<int64_t>();
        decode_steps_ = r.pod<int64_t>();
        selected_read_ = r.pod<int64_t>();
        selected_total_ = r.pod<int64_t>();
        if (n_tokens_ < 0 || n_tokens_ > n_ctx_) fail(what, " is corrupted (position ", n_tokens_, ")");
        for (HeadCache& h : heads_) h.load(r, n_tokens_);
        const bool has_state = r.pod<uint8_t>() != 0;
        if (has_state != (state_ != nullptr)) fail(what, " does not hold the scorer state this policy keeps");
        if (state_) state_->load(r);
    } catch (...) {
        clear();
        throw;
    }
    peak_bytes_ = bytes_in_use();
}

}  // namespace kvsieve
