// tova: attention of the last query (Oren et al. 2024, "Transformers are Multi-State RNNs", §3.3, TOVA).
// The last query's softmax weights averaged over all query heads of the layer: one score per position for every
// KV head, so the layer makes one choice (the paper's eviction and kvpress TOVAPress); in prefill the last key is
// protected (max + 1, kvpress). At decode steps the score is the new query's weight averaged the same way, so
// with a budget (tova:budget=512) the least attended position of the layer is evicted from every head. Only if
// the heads hold different positions (a rule other than the per-head budget made them differ) is the mean taken
// over the G query heads of each KV head.
#include <algorithm>
#include <cmath>

#include "policy/policy.h"

namespace kvsieve {

namespace {
class TovaScorer : public Scorer {
public:
    std::string name() const override { return "tova"; }
    AttnStat stat() const override { return AttnStat::kMassLast; }
    void score_prefill(const PrefillScoreInput& in, std::vector<std::vector<float>>& scores) const override {
        const int G = in.n_head / in.n_head_kv;
        bool same = true;
        for (const auto& v : in.heads) same = same && v.n == in.heads[0].n;
        std::vector<double> mean_all;
        if (same) {
            mean_all.assign(in.heads[0].n, 0.0);
            for (const auto& v : in.heads)
                for (int g = 0; g < G; ++g)
                    for (int64_t i = 0; i < v.n; ++i) mean_all[i] += v.attn[g * v.n + i];
            for (auto& x : mean_all) x /= in.n_head;
        }
        float mx = -INFINITY;
        for (size_t h = 0; h < in.heads.size(); ++h) {
            const HeadView& v = in.heads[h];
            scores[h].resize(v.n);
            for (int64_t i = 0; i + 1 < v.n; ++i) {
                double s = 0;
                if (same) {
                    s = mean_all[i];
                } else {
                    for (int g = 0; g < G; ++g) s += v.attn[g * v.n + i];
                    s /= G;
                }
                scores[h][i] = static_cast<float>(s);
                mx = std::max(mx, scores[h][i]);
            }
        }
        for (size_t h = 0; h < in.heads.size(); ++h)
            if (in.heads[h].n > 0) scores[h][in.heads[h].n - 1] = (std::isfinite(mx) ? mx : 0.0f) + 1;
    }
    bool rescore_on_decode() const override { return true; }
    void score_decode_layer(const std::vector<DecodeScoreInput>& heads, const std::vector<float*>& scores) const override {
        bool same = true;
        for (const auto& h : heads)
            same = same && h.n == heads[0].n && std::equal(h.positions, h.positions + h.n, heads[0].positions);
        if (!same) {
            Scorer::score_decode_layer(heads, scores);
            return;
        }
        const int64_t n = heads[0].n;
        std::vector<double> mean(n, 0.0);
        int n_query = 0;
        for (const auto& h : heads) {
            for (int g = 0; g < h.group; ++g)
                for (int64_t i = 0; i < n; ++i) mean[i] += h.attn[g * n + i];
            n_query += h.group;
        }
        for (size_t h = 0; h < heads.size(); ++h)
            for (int64_t i = 0; i < n; ++i) scores[h][i] = static_cast<float>(mean[i] / n_query);
    }
    void score_decode(const DecodeScoreInput& in, float* scores) const override {
        for (int64_t i = 0; i < in.n; ++i) {
            double a = 0;
            for (int g = 0; g < in.group; ++g) a += in.attn[g * in.n + i];
            scores[i] = static_cast<float>(a / in.group);
        }
    }
};
}  // namespace

void register_tova() {
    register_preset({"tova", "last-query attention (Oren et al. 2024)", budget_rule_params(), [](PolicyParams& p) {
                         Policy pol;
                         pol.scorer = std::make_shared<TovaScorer>();
                         read_budget_rule(p, pol);
                         return pol;
                     }});
}

}  // namespace kvsieve
