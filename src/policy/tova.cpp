// tova: attention of the last query (Oren et al. 2024, "Transformers are Multi-State RNNs", §3.3, TOVA).
// Prefill follows kvpress TOVAPress: the last query's softmax weights averaged over all query heads of the
// layer, the same score for every KV head, and the last key protected (max + 1). When the heads' entries
// differ (after compression) the mean is taken over the G query heads of each KV head. At decode steps the
// score is the new query's weight, so with a budget (tova:budget=512) the least attended entry is evicted.
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
    register_preset({"tova", "last-query attention (Oren et al. 2024)", [](PolicyParams& p) {
                         Policy pol;
                         pol.scorer = std::make_shared<TovaScorer>();
                         read_budget_rule(p, pol, 0.5);
                         return pol;
                     }});
}

}  // namespace kvsieve
