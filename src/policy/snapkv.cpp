// snapkv: observation-window attention with pooling (see policy/snapkv.h).
#include "policy/snapkv.h"

#include <algorithm>
#include <cmath>

#include <cblas.h>

#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

void snapkv_scores(const StepEvent& ev, int window, int kernel, const std::vector<float*>& scores) {
    const LayerInputs& in = ev.step;
    // A chunk no longer than the observation window (chunked prefill) observes with its own queries but the
    // last, which kvpress would refuse.
    if (in.T <= window && in.T >= 2) window = static_cast<int>(in.T - 1);
    const int G = in.n_head / in.n_head_kv, d = in.head_dim;
    const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
    const int64_t ldq = static_cast<int64_t>(in.n_head) * d;
    float mx = -INFINITY;
    // One KV head per iteration on kvsieve's threads: the DGEMM inside then runs on one thread (OpenBLAS does inside
    // an active OpenMP region), so the scores do not depend on the thread count (a multi-threaded DGEMM's last bits
    // may; docs/benchmarks.md). The maximum is exact in any order.
    const int n_heads = static_cast<int>(ev.heads.size());
#pragma omp parallel for schedule(dynamic) reduction(max : mx)
    for (int h = 0; h < n_heads; ++h) {
        const HeadView& v = ev.heads[h];
        std::fill(scores[h], scores[h] + v.n, 1.0f);
        if (in.T <= window || v.n <= window) continue;
        const int64_t n_old = v.n - in.T, m = v.n - window;  // keys scored: 0 … m − 1
        std::vector<double> mean(m, 0.0);
        // The window's logits in double, Q_w Kᵀ as one product per query head: [window][n].
        std::vector<double> K(static_cast<size_t>(v.n) * d), Q(static_cast<size_t>(window) * d),
            S(static_cast<size_t>(window) * v.n);
        std::copy(v.k, v.k + v.n * d, K.begin());
        for (int g = 0; g < G; ++g) {
            const int qh = h * G + g;
            std::vector<double> acc(m, 0.0);
            for (int64_t t = in.T - window; t < in.T; ++t)
                std::copy_n(in.q + t * ldq + qh * d, d, Q.begin() + (t - in.T + window) * d);
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, window, static_cast<int>(v.n), d, inv_sqrt_d, Q.data(),
                        d, K.data(), d, 0.0, S.data(), static_cast<int>(v.n));
            for (int64_t t = in.T - window; t < in.T; ++t) {
                double* row = S.data() + (t - in.T + window) * v.n;
                const int64_t visible = n_old + t + 1;
                double mxr = -INFINITY;
                for (int64_t j = 0; j < visible; ++j) mxr = std::max(mxr, row[j]);
                double sum = 0;
                for (int64_t j = 0; j < visible; ++j) sum += (row[j] = std::exp(row[j] - mxr));
                for (int64_t j = 0; j < std::min(visible, m); ++j) acc[j] += row[j] / sum;
            }
            // mean over the window's queries, then average pooling (kernel, zero padding kernel/2)
            const int pad = kernel / 2;
            for (int64_t j = 0; j < m; ++j) {
                double s = 0;
                for (int64_t u = j - pad; u <= j + pad; ++u)
                    if (u >= 0 && u < m) s += acc[u] / window;
                mean[j] += s / kernel;
            }
        }
        for (int64_t j = 0; j < m; ++j) {
            scores[h][j] = static_cast<float>(mean[j] / G);
            mx = std::max(mx, scores[h][j]);
        }
    }
    if (std::isfinite(mx))
        for (size_t h = 0; h < ev.heads.size(); ++h) {
            const HeadView& v = ev.heads[h];
            if (in.T <= window || v.n <= window) continue;
            for (int64_t j = v.n - window; j < v.n; ++j) scores[h][j] = mx + 1;
        }
}

namespace {
class SnapKVScorer : public StepScorer {
public:
    SnapKVScorer(int window, int kernel) : window_(window), kernel_(kernel) {}
    std::string name() const override { return "snapkv"; }
    void score_prefill(const StepEvent& ev, const std::vector<float*>& scores) const override {
        snapkv_scores(ev, window_, kernel_, scores);
    }

private:
    int window_, kernel_;
};
}  // namespace

std::shared_ptr<const Scorer> make_snapkv_scorer(int window, int kernel) {
    return std::make_shared<SnapKVScorer>(window, kernel);
}

std::vector<ParamDecl> snapkv_params() {
    return {with_alias(int_param("obs_window", 1, kMaxTokens, "64",
                                 "observation window: the last queries whose attention is scored",
                                 "SnapKV §4.2 (kvpress SnapKVPress window_size)"),
                       "window_size"),
            int_param("kernel", 1, kMaxTokens, "5", "width of the average pooling of the scores (odd)",
                      "SnapKV §4.2, eq. 3 (kvpress kernel_size)")};
}

void register_snapkv() {
    register_preset({"snapkv", "observation-window attention, pooled (Li et al. 2024)",
                     merge_params(budget_rule_params(), snapkv_params()), [](PolicyParams& p) {
                         Policy pol;
                         const int64_t w = p.get_int("obs_window"), k = p.get_int("kernel");
                         require(k % 2 == 1, "policy snapkv: kernel=", k, " must be odd");
                         pol.scorer = make_snapkv_scorer(static_cast<int>(w), static_cast<int>(k));
                         read_budget_rule(p, pol);
                         return pol;
                     }});
}

}  // namespace kvsieve
