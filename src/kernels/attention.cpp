#include "kernels/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/dot.h"

namespace kvsieve {
namespace {

void attention_small_t(const float* q, int64_t T, int64_t pos0, const float* k, const float* v, int64_t ld_kv,
                       const AttnShape& s, float* out) {
    const DotKernels& dk = dot_kernels();
    const int G = s.n_head / s.n_head_kv, d = s.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
#pragma omp parallel
    {
        std::vector<float> sc;
#pragma omp for collapse(2) schedule(static)
        for (int64_t t = 0; t < T; ++t)
            for (int g = 0; g < s.n_head_kv; ++g) {
                const int64_t n = pos0 + t + 1;
                sc.resize(static_cast<size_t>(n) * G);
                const float* kg = k + g * d;
                const float* vg = v + g * d;
                for (int64_t j = 0; j < n; ++j) {
                    const float* kj = kg + j * ld_kv;
                    for (int i = 0; i < G; ++i)
                        sc[i * n + j] = dk.f32(q + (t * s.n_head + g * G + i) * d, kj, d) * scale;
                }
                for (int i = 0; i < G; ++i) {
                    float* p = sc.data() + i * n;
                    dot_kernels().softmax(p, n);
                    float* o = out + (t * s.n_head + g * G + i) * d;
                    std::fill(o, o + d, 0.0f);
                    for (int64_t j = 0; j < n; ++j) {
                        const float pj = p[j];
                        const float* vj = vg + j * ld_kv;
                        for (int c = 0; c < d; ++c) o[c] += pj * vj[c];
                    }
                }
            }
    }
}

void attention_blocked(const float* q, int64_t T, int64_t pos0, const float* k, const float* v, int64_t ld_kv,
                       const AttnShape& s, float* out) {
    const int G = s.n_head / s.n_head_kv, d = s.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    constexpr int64_t kBlock = 128;  // queries per SGEMM block
    const int64_t n_blocks = (T + kBlock - 1) / kBlock;
    const int64_t ldq = static_cast<int64_t>(s.n_head) * d;
#pragma omp parallel
    {
        std::vector<float> S;
#pragma omp for collapse(2) schedule(dynamic)
        for (int h = 0; h < s.n_head; ++h)
            for (int64_t b = 0; b < n_blocks; ++b) {
                const int64_t t0 = b * kBlock, nt = std::min(kBlock, T - t0);
                const int64_t n = pos0 + t0 + nt;  // keys visible to the last query of the block
                S.resize(static_cast<size_t>(nt * n));
                const float* qh = q + t0 * ldq + h * d;
                const float* kg = k + (h / G) * d;
                const float* vg = v + (h / G) * d;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nt), static_cast<int>(n), d,
                            scale, qh, static_cast<int>(ldq), kg, static_cast<int>(ld_kv), 0.0f, S.data(),
                            static_cast<int>(n));
                for (int64_t i = 0; i < nt; ++i) {
                    float* row = S.data() + i * n;
                    const int64_t visible = pos0 + t0 + i + 1;
                    dot_kernels().softmax(row, visible);
                    std::fill(row + visible, row + n, 0.0f);
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nt), d, static_cast<int>(n),
                            1.0f, S.data(), static_cast<int>(n), vg, static_cast<int>(ld_kv), 0.0f,
                            out + t0 * ldq + h * d, static_cast<int>(ldq));
            }
    }
}

}  // namespace

void attention_prefill_group(const float* q, int64_t ldq, int G, int d, int64_t T, const float* k, const float* v,
                             int64_t n_prefix, float* out, int64_t ldo, KeyStat stat, float* stat_out) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const int64_t n = n_prefix + T;
    constexpr int64_t kBlock = kPrefillQueryBlock;
    if (stat != KeyStat::kNone) std::fill(stat_out, stat_out + G * n, 0.0f);
    // Blocks of queries at fixed key indices [b·128, (b+1)·128), whose products read keys up to the block's end (the
    // scores past the visible ones zero, the values past n zero): each product, and so each output, has the same
    // shape whether the keys before the chunk were cached by earlier chunks or come in the same batch.
    const int64_t n_pad = (n + kBlock - 1) / kBlock * kBlock;
    thread_local std::vector<float> S, v_pad;
    const float* vp = v;
    if (out != nullptr && n_pad > n) {
        v_pad.resize(static_cast<size_t>(n_pad * d));
        std::copy_n(v, n * d, v_pad.begin());
        std::fill(v_pad.begin() + n * d, v_pad.end(), 0.0f);
        vp = v_pad.data();
    }
    auto block_end = [&](int64_t t0) { return std::min(T, (n_prefix + t0) / kBlock * kBlock + kBlock - n_prefix); };
    // Statistics only, of the last query: its block alone.
    int64_t first = 0;
    if (out == nullptr && stat == KeyStat::kLast)
        first = std::max<int64_t>(0, (n_prefix + T - 1) / kBlock * kBlock - n_prefix);
    for (int g = 0; g < G; ++g)
        for (int64_t t0 = first; t0 < T; t0 = block_end(t0)) {
            const int64_t nt = block_end(t0) - t0, nk = n_prefix + t0 + nt;
            const int64_t ld = (nk + kBlock - 1) / kBlock * kBlock;  // the block's end in keys
            S.resize(static_cast<size_t>(nt * ld));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nt), static_cast<int>(nk), d, scale,
                        q + t0 * ldq + g * d, static_cast<int>(ldq), k, d, 0.0f, S.data(), static_cast<int>(ld));
            for (int64_t i = 0; i < nt; ++i) {
                float* row = S.data() + i * ld;
                const int64_t visible = n_prefix + t0 + i + 1;
                dot_kernels().softmax(row, visible);
                std::fill(row + visible, row + ld, 0.0f);
                if (stat == KeyStat::kSum)
                    for (int64_t j = 0; j < visible; ++j) stat_out[g * n + j] += row[j];
                else if (stat == KeyStat::kLast && t0 + i == T - 1)
                    for (int64_t j = 0; j < visible; ++j) stat_out[g * n + j] = row[j];
            }
            if (out != nullptr)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nt), d, static_cast<int>(ld),
                            1.0f, S.data(), static_cast<int>(ld), vp, d, 0.0f, out + t0 * ldo + g * d,
                            static_cast<int>(ldo));
        }
}

void attention_prefill_gated(const float* q, int64_t ldq, int G, int d, int64_t T, const float* k, const float* v,
                             int64_t n_prefix, const int32_t* pos_k, const char* open, int64_t pos_q0, int64_t window,
                             float* out, int64_t ldo) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    // Positions are int32, so a window of 2^32 already holds every key; the clamp keeps pos + w in range.
    const int64_t w = std::clamp<int64_t>(window, 1, int64_t{1} << 32);
    constexpr int64_t kBlock = kPrefillQueryBlock;
    constexpr int64_t kNever = std::numeric_limits<int32_t>::max();
    constexpr int64_t kScoreFloats = int64_t{1} << 22;  // score scratch per SGEMM (16 MiB): caps the heads batched
    std::vector<int64_t> idx;
    // Per gathered key c: the first query of the block that may see it causally (block-local index), and the last
    // query position that sees it (its position + w − 1 if closed: it leaves the window after; never if open).
    std::vector<int32_t> first, last;
    std::vector<float> Kb, Vb, Qb, S, Ob;
    for (int64_t t0 = 0; t0 < T; t0 += kBlock) {
        const int64_t nt = std::min(kBlock, T - t0), nk = n_prefix + t0 + nt;
        // The keys some query of the block may see: open ones, and those inside the window of its first query.
        const int64_t lo = pos_q0 + t0 - w + 1;
        idx.clear();
        for (int64_t j = 0; j < nk; ++j)
            if (open[j] || pos_k[j] >= lo) idx.push_back(j);
        const int64_t m = static_cast<int64_t>(idx.size());
        Kb.resize(static_cast<size_t>(m) * d);
        Vb.resize(static_cast<size_t>(m) * d);
        first.resize(m);
        last.resize(m);
        for (int64_t c = 0; c < m; ++c) {
            const int64_t j = idx[c];
            std::copy_n(k + j * d, d, Kb.data() + c * d);
            std::copy_n(v + j * d, d, Vb.data() + c * d);
            first[c] = static_cast<int32_t>(std::max<int64_t>(0, j - n_prefix - t0));
            last[c] = static_cast<int32_t>(open[j] ? kNever : std::min<int64_t>(pos_k[j] + w - 1, kNever - 1));
        }
        // Heads g0 … g0+gb−1 of the group as one matrix: row i·gb + (g − g0) is query t0 + i of head g. As many
        // heads per SGEMM as keep the scores within kScoreFloats (all G for any m below 10k at G = 3).
        const int64_t gb = std::clamp<int64_t>(kScoreFloats / std::max<int64_t>(nt * m, 1), 1, G);
        for (int64_t g0 = 0; g0 < G; g0 += gb) {
            const int64_t ng = std::min<int64_t>(gb, G - g0), rows = nt * ng;
            Qb.resize(static_cast<size_t>(rows) * d);
            for (int64_t i = 0; i < nt; ++i) std::copy_n(q + (t0 + i) * ldq + g0 * d, ng * d, Qb.data() + i * ng * d);
            S.resize(static_cast<size_t>(rows * m));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(m), d, scale,
                        Qb.data(), d, Kb.data(), d, 0.0f, S.data(), static_cast<int>(m));
            for (int64_t r = 0; r < rows; ++r) {
                float* row = S.data() + r * m;
                const int32_t i = static_cast<int32_t>(r / ng);
                const int32_t pq = static_cast<int32_t>(std::min<int64_t>(pos_q0 + t0 + i, kNever - 1));
                const int32_t* f = first.data();
                const int32_t* l = last.data();
                // Hidden keys get −∞ before the softmax (its exponential clamps, so they come out ~1e-38) and an
                // exact 0 after it. The query's own key (position pos_q0 + t) is always visible, so no row is empty.
                for (int64_t c = 0; c < m; ++c) row[c] = (i >= f[c] && pq <= l[c]) ? row[c] : -INFINITY;
                dot_kernels().softmax(row, m);
                for (int64_t c = 0; c < m; ++c) row[c] = (i >= f[c] && pq <= l[c]) ? row[c] : 0.0f;
            }
            Ob.resize(static_cast<size_t>(rows) * d);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), d, static_cast<int>(m), 1.0f,
                        S.data(), static_cast<int>(m), Vb.data(), d, 0.0f, Ob.data(), d);
            for (int64_t i = 0; i < nt; ++i) std::copy_n(Ob.data() + i * ng * d, ng * d, out + (t0 + i) * ldo + g0 * d);
        }
    }
}

void attention_dense_causal(const float* q, int64_t T, int64_t pos0, const float* k, const float* v, int64_t ld_kv,
                            const AttnShape& s, float* out) {
    if (T < 8)
        attention_small_t(q, T, pos0, k, v, ld_kv, s, out);
    else
        attention_blocked(q, T, pos0, k, v, ld_kv, s, out);
}

void attention_reference(const float* q, int64_t T, int64_t pos0, const float* k, const float* v, int64_t ld_kv,
                         const AttnShape& s, float* out) {
    const int G = s.n_head / s.n_head_kv, d = s.head_dim;
    for (int64_t t = 0; t < T; ++t)
        for (int h = 0; h < s.n_head; ++h) {
            const int64_t n = pos0 + t + 1;
            std::vector<double> p(n);
            const float* qh = q + (t * s.n_head + h) * d;
            double m = -INFINITY;
            for (int64_t j = 0; j < n; ++j) {
                double dot = 0;
                for (int c = 0; c < d; ++c) dot += double(qh[c]) * k[j * ld_kv + (h / G) * d + c];
                p[j] = dot / std::sqrt(double(d));
                m = std::max(m, p[j]);
            }
            double sum = 0;
            for (auto& x : p) sum += (x = std::exp(x - m));
            for (int c = 0; c < d; ++c) {
                double o = 0;
                for (int64_t j = 0; j < n; ++j) o += p[j] / sum * v[j * ld_kv + (h / G) * d + c];
                out[(t * s.n_head + h) * d + c] = static_cast<float>(o);
            }
        }
}

}  // namespace kvsieve
