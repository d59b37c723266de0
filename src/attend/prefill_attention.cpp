#include "attend/prefill_attention.h"

#include <algorithm>
#include <vector>

#include "attend/step_stat.h"
#include "kernels/attention.h"
#include "kernels/quant.h"

namespace kvsieve {

void attend_prefill(KVCache& cache, const LayerInputs& in, const float* write_scores, float* out,
                    const PrefillSharing& sharing) {
    const Policy& policy = cache.policy();
    const KVPool& pool = cache.pool();
    const StepScorer* step = cache.step_scorer();
    const bool shadow = sharing.shadow;
    PrefillStatShare* const stat_share = sharing.stats;
    const int d = in.head_dim, G = in.n_head / in.n_head_kv, Hkv = in.n_head_kv;
    const int64_t T = in.T, ldq = static_cast<int64_t>(in.n_head) * d, kvd = static_cast<int64_t>(Hkv) * d;
    const KeyStat stat = key_stat(step);
    const bool scored = step != nullptr;  // scored after attention
    // Gated prefill: each query sees its window plus the keys that are or will be admitted, as a decode step would.
    const bool gated = policy.gated_prefill && stat == KeyStat::kNone;
    const Rule& adm = policy.admission;
    auto will_keep = [&](float score) {
        return adm.kind == Rule::Kind::kKeepAll || (adm.kind == Rule::Kind::kThreshold && score >= adm.tau);
    };
    const KVPool& lp = pool.local();  // the sinks' and the window's layout (binary16 under quantization at admission)
    const bool kq = kv_type_block(pool.key_type()) > 1;
    // Quantized keys: the chunk's queries are scored as the decode kernel and llama.cpp's flash attention score them
    // (docs/kv_quant_reference.md, step 1): each head's query quantized to Q8_0 blocks (ties to even) in the keys'
    // stored space, i.e. q ← R_Kᵀ·deq(Q8_0(R_K·q)) with the pool's key rotation R_K (identity when unrotated).
    std::vector<float> q_seen;
    const float* qp = in.q;
    if (kq) {
        q_seen.assign(in.q, in.q + T * ldq);
        const KVRotation& rot = pool.rotation();
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
        const HeadCache& hc = cache.head(in.layer, h);
        const int64_t no = hc.size(), n = no + T;
        n_old[h] = no;
        K[h].resize(static_cast<size_t>(n) * d);
        V[h].resize(static_cast<size_t>(n) * d);
        P[h].resize(n);
        int64_t j = 0;
        std::vector<char> open(gated ? n : 0);
        // Oldest first (the window's ring unwound), so that the keys are laid out, and every sum over them taken,
        // in the order one batch of the whole prompt takes them: a chunked prefill is that batch bit for bit.
        for (Region r : kRegionsInOrder) {
            const PageStore* ps = hc.region(r);
            for (int64_t i = 0; i < ps->size(); ++i, ++j) {
                const int64_t at = hc.in_order(r, i);
                ps->read(at, K[h].data() + j * d, V[h].data() + j * d);
                P[h][j] = ps->positions()[at];
                if (scored) S_old[h].push_back(ps->scores()[at]);
                if (gated)
                    open[j] = r != Region::kWindow || will_keep(ps->scores()[at]);  // sinks and global are kept already
            }
        }
        for (int64_t t = 0; t < T; ++t, ++j) {
            std::copy_n(in.k + t * kvd + h * d, d, K[h].data() + j * d);
            std::copy_n(in.v + t * kvd + h * d, d, V[h].data() + j * d);
            // Pages not in float32: the chunk's own keys and values are seen as they will be stored (as llama.cpp, which
            // writes the batch into its cache before attending), so a chunked and a one-batch prefill, the decode
            // steps and every prefill statistic read the same dequantized entries. An entry is written to the sinks
            // or the window (their layout), or without a window straight to the global region. (At admission, a
            // later chunk reads the entries an earlier one pushed out of the window quantized, as a decode step
            // would, where one batch reads them in F16: the two then differ by the quantization of those entries.)
            // Rotated pages: the round trip goes through the rotation as the store does (stored_view).
            const KVPool& dst = hc.sinks().size() + t < policy.sinks || policy.window > 0 ? lp : pool;
            stored_view(dst, K[h].data() + j * d, V[h].data() + j * d);
            P[h][j] = static_cast<int32_t>(in.pos0 + t);
            if (gated)  // the first s entries become sinks
                open[j] =
                    hc.sinks().size() + t < policy.sinks || will_keep(write_scores ? write_scores[t * Hkv + h] : 0.0f);
        }
        if (stat != KeyStat::kNone) A[h].resize(static_cast<size_t>(G) * n);
        if (gated)
            attention_prefill_gated(qp + static_cast<int64_t>(h) * G * d, ldq, G, d, T, K[h].data(), V[h].data(), no,
                                    P[h].data(), open.data(), in.pos0, policy.window,
                                    out + static_cast<int64_t>(h) * G * d, ldq);
        else if (!shadow || stat != KeyStat::kNone) {  // a shadow cache computes only the statistics its policy reads
            // A shadow takes the statistics another cache of this step computed over the same keys.
            const std::vector<float>* had =
                shadow && stat_share ? stat_share->find(in.layer, h, stat, pool.key_type(), lp.key_type(), P[h])
                                     : nullptr;
            if (had != nullptr) {
                A[h] = *had;
            } else {
                attention_prefill_group(qp + static_cast<int64_t>(h) * G * d, ldq, G, d, T, K[h].data(), V[h].data(),
                                        no, shadow ? nullptr : out + static_cast<int64_t>(h) * G * d, ldq, stat,
                                        A[h].data());
                if (stat_share && stat != KeyStat::kNone)
                    stat_share->put(in.layer, h, stat, pool.key_type(), lp.key_type(), P[h], A[h]);
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
        StepEvent si(in, cache.config().n_layer, cache.scorer_state());
        std::vector<float*> out(Hkv);
        for (int h = 0; h < Hkv; ++h) {
            si.heads.push_back({n_old[h] + T, K[h].data(), V[h].data(), P[h].data(),
                                A[h].empty() ? nullptr : A[h].data(), S_old[h].data()});
            scores[h].resize(static_cast<size_t>(n_old[h] + T));
            out[h] = scores[h].data();
        }
        step->score_prefill(si, out);
    }
    // 3. Write back the scores of kept entries, append the chunk (serial: the pool is not thread-safe).
    for (int h = 0; h < Hkv; ++h) {
        HeadCache& hc = cache.head(in.layer, h);
        if (scored) {
            int64_t j = 0;
            for (Region r : kRegionsInOrder) {
                PageStore* ps = hc.region(r);
                for (int64_t i = 0; i < ps->size(); ++i) ps->scores()[hc.in_order(r, i)] = scores[h][j++];
            }
        }
        for (int64_t t = 0; t < T; ++t)
            cache.append(in.layer, h, in.k + t * kvd + h * d, in.v + t * kvd + h * d, static_cast<int32_t>(in.pos0 + t),
                         write_scores ? write_scores[t * Hkv + h]
                         : scored     ? scores[h][n_old[h] + t]
                                      : 0.0f);
    }
}

}  // namespace kvsieve
