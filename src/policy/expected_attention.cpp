// expected_attention: the attention future queries are expected to pay (Devoto et al. 2025, "Expected
// Attention: KV Cache Compression by Estimating Attention from Future Queries Distribution", §3, eq. 4–6;
// kvpress ExpectedAttentionPress). Queries before RoPE are modelled as Gaussian, mean μ and covariance Σ over
// the chunk's positions from scored_sinks on; both are moved by the mean RoPE rotation R̄ of the next n_future
// positions (μ' = R̄μ, Σ' = R̄ΣR̄ᵀ); then per query head s_i = softmax_i(kᵢ·μ'/√d + ½ kᵢᵀΣ'kᵢ/d), averaged
// over the G heads of the KV head and multiplied by ‖vᵢ‖ (plus ε). The first scored_sinks entries (kvpress n_sink,
// kept as a deprecated alias) get max + 1.
// R̄ uses the model's own RoPE (LayerInputs::rope: partial rotation, frequency factors, linear scaling).
#include <algorithm>
#include <cmath>
#include <limits>

#include <cblas.h>

#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

namespace {
class ExpectedAttentionScorer : public StepScorer {
public:
    ExpectedAttentionScorer(int n_future, int n_sink, bool cov, bool vnorm, double eps)
        : n_future_(n_future), n_sink_(n_sink), cov_(cov), vnorm_(vnorm), eps_(eps) {}
    std::string name() const override { return "expected_attention"; }

    void score_prefill(const StepEvent& ev, const std::vector<float*>& scores) const override {
        const LayerInputs& in = ev.step;
        const int d = in.head_dim, G = in.n_head / in.n_head_kv;
        const int64_t ldq = static_cast<int64_t>(in.n_head) * d;
        // Mean rotation over positions pos0+T … pos0+T+n_future−1 (R̄ = mean of cos·I + sin·P), with the model's
        // own angles (frequency factors, linear scaling, partial rotation: dimensions ≥ n_rot stay as they are).
        require(in.rope.inv_freq != nullptr && in.rope.n_rot <= d, "expected_attention: no RoPE description");
        std::vector<double> R(static_cast<size_t>(d) * d, 0.0);
        for (int c = in.rope.n_rot; c < d; ++c) R[c * d + c] = n_future_;
        for (int64_t p = in.pos0 + in.T; p < in.pos0 + in.T + n_future_; ++p)
            for (int i = 0; i < in.rope.n_rot / 2; ++i) {
                const double th = in.rope.theta(p, i);
                const int a = in.rope.first(i), b = in.rope.second(i);
                R[a * d + a] += std::cos(th);
                R[b * d + b] += std::cos(th);
                R[a * d + b] -= std::sin(th);
                R[b * d + a] += std::sin(th);
            }
        for (auto& x : R) x /= n_future_;

        const int64_t t0 = std::min<int64_t>(n_sink_, in.T), nq = in.T - t0;
        float mx = -INFINITY;
        // One KV head per iteration on kvsieve's threads, so that the BLAS calls inside run on one thread and the
        // scores do not depend on the thread count (docs/benchmarks.md); the maximum is exact in any order.
        const int n_heads = static_cast<int>(ev.heads.size());
#pragma omp parallel for schedule(dynamic) reduction(max : mx)
        for (int h = 0; h < n_heads; ++h) {
            const HeadView& v = ev.heads[h];
            const int64_t skip = std::min<int64_t>(n_sink_, v.n), m = v.n - skip;
            std::vector<double> acc(m, 0.0);
            std::vector<double> K(static_cast<size_t>(m) * d), KC(cov_ ? static_cast<size_t>(m) * d : 0);
            std::copy(v.k + skip * d, v.k + v.n * d, K.begin());
            std::vector<double> Qc(static_cast<size_t>(nq) * d);
            for (int g = 0; g < G && nq > 0; ++g) {
                const int qh = h * G + g;
                std::vector<double> mu(d, 0.0), cov(static_cast<size_t>(d) * d, 0.0);
                for (int64_t t = t0; t < in.T; ++t)
                    for (int c = 0; c < d; ++c) mu[c] += in.q_pre[t * ldq + qh * d + c];
                for (auto& x : mu) x /= nq;
                if (cov_) {  // Σ = Q̃ᵀQ̃ / nq over the centred queries Q̃ [nq][d]
                    for (int64_t t = t0; t < in.T; ++t)
                        for (int c = 0; c < d; ++c)
                            Qc[(t - t0) * d + c] = static_cast<double>(in.q_pre[t * ldq + qh * d + c]) - mu[c];
                    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, d, static_cast<int>(nq), 1.0 / nq, Qc.data(), d,
                                0.0, cov.data(), d);
                    for (int a = 0; a < d; ++a)
                        for (int b = 0; b < a; ++b) cov[a * d + b] = cov[b * d + a];
                }
                // μ' = R̄μ; Σ' = R̄ΣR̄ᵀ
                std::vector<double> mur(d, 0.0), tmp(static_cast<size_t>(d) * d, 0.0),
                    covr(static_cast<size_t>(d) * d, 0.0);
                for (int a = 0; a < d; ++a)
                    for (int c = 0; c < d; ++c) mur[a] += R[a * d + c] * mu[c];
                if (cov_) {
                    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d, d, d, 1.0, R.data(), d, cov.data(), d,
                                0.0, tmp.data(), d);
                    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d, d, d, 1.0, tmp.data(), d, R.data(), d, 0.0,
                                covr.data(), d);
                    // KC = K Σ'ᵀ, so that kᵢᵀΣ'kᵢ = Σ_a k_ia KC_ia
                    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), d, d, 1.0, K.data(), d,
                                covr.data(), d, 0.0, KC.data(), d);
                }
                std::vector<double> s(m);
                double smax = -INFINITY;
                for (int64_t i = 0; i < m; ++i) {
                    const double* k = K.data() + i * d;
                    double x = 0;
                    for (int c = 0; c < d; ++c) x += k[c] * mur[c];
                    x /= std::sqrt(static_cast<double>(d));
                    if (cov_) {
                        double quad = 0;
                        for (int a = 0; a < d; ++a) quad += k[a] * KC[i * d + a];
                        x += quad / d / 2;
                    }
                    s[i] = x;
                    smax = std::max(smax, x);
                }
                double sum = 0;
                for (auto& x : s) sum += (x = std::exp(x - smax));
                for (int64_t i = 0; i < m; ++i) acc[i] += s[i] / sum;
            }
            std::fill(scores[h], scores[h] + v.n, 0.0f);
            for (int64_t i = 0; i < m; ++i) {
                double sc = acc[i] / G;
                if (vnorm_) {
                    double vn = 0;
                    for (int c = 0; c < d; ++c) vn += double(v.v[(skip + i) * d + c]) * v.v[(skip + i) * d + c];
                    sc = (sc + eps_) * std::sqrt(vn);
                }
                scores[h][skip + i] = static_cast<float>(sc);
                mx = std::max(mx, scores[h][skip + i]);
            }
        }
        const float pad = (std::isfinite(mx) ? mx : 0.0f) + 1;
        for (size_t h = 0; h < ev.heads.size(); ++h)
            for (int64_t i = 0; i < std::min<int64_t>(n_sink_, ev.heads[h].n); ++i) scores[h][i] = pad;
    }

private:
    int n_future_, n_sink_;
    bool cov_, vnorm_;
    double eps_;
};
}  // namespace

namespace {
/// The keys of both presets; `default_rule` and `default_epsilon` differ between them.
std::vector<ParamDecl> expected_attention_params(const std::string& default_rule, const std::string& default_epsilon) {
    const std::string src = "Expected Attention §3 (kvpress ExpectedAttentionPress)";
    return merge_params(
        budget_rule_params("0.5", default_rule),
        {int_param("n_future", 1, kMaxTokens, "512",
                   "future positions whose mean RoPE rotation moves the query statistics",
                   "Expected Attention §3, eq. 5 (kvpress n_future_positions)"),
         with_alias(int_param("scored_sinks", 0, kMaxTokens, "4",
                              "first entries scored max + 1 (kept by the rule, inside its budget, unlike sinks s) and "
                              "left out of the query statistics",
                              "kvpress ExpectedAttentionPress n_sink"),
                    "n_sink"),
         flag_param("cov", "1", "use the queries' covariance Σ (0: the mean only)",
                    "Expected Attention §3, eq. 6 (kvpress use_covariance)"),
         flag_param("vnorm", "1", "multiply by ‖v‖ (plus ε)", "Expected Attention §3 (kvpress use_vnorm)"),
         real_param("epsilon", 0, std::numeric_limits<double>::infinity(), default_epsilon,
                    "ε added to the expected attention before the ‖v‖ factor", src)});
}

Policy make_expected_attention(PolicyParams& p) {
    Policy pol;
    const int64_t nf = p.get_int("n_future"), ns = p.get_int("scored_sinks");
    pol.scorer = std::make_shared<ExpectedAttentionScorer>(
        static_cast<int>(nf), static_cast<int>(ns), p.get_flag("cov"), p.get_flag("vnorm"), p.get_double("epsilon"));
    read_budget_rule(p, pol);
    return pol;
}
}  // namespace

void register_expected_attention() {
    // kvpress ExpectedAttentionPress's defaults (ε = 0, one budget per head).
    register_preset({"expected_attention", "expected attention of future queries (Devoto et al. 2025)",
                     expected_attention_params("head", "0"), make_expected_attention});
    // The kvpress leaderboard's configuration (kvpress evaluation/evaluate_registry.py:
    // adakv_expected_attention_e2 = AdaKVPress(ExpectedAttentionPress(epsilon=1e-2))): AdaKV layer budgets, ε = 1e-2.
    register_preset({"adakv_expected_attention_e2",
                     "Expected Attention as kvpress's leaderboard runs it (AdaKV, ε = 1e-2)",
                     expected_attention_params("layer", "0.01"), make_expected_attention});
}

}  // namespace kvsieve
