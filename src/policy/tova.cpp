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
class TovaScorer : public StepScorer {
public:
    TovaScorer() : StepScorer(AttnStat::kMassLast, DecodeScope::kAllEntries) {}
    std::string name() const override { return "tova"; }
    void score_prefill(const StepEvent& ev, const std::vector<float*>& scores) const override {
        const LayerInputs& in = ev.step;
        const int G = in.n_head / in.n_head_kv;
        bool same = true;
        for (const auto& v : ev.heads) same = same && v.n == ev.heads[0].n;
        std::vector<double> mean_all;
        if (same) {
            mean_all.assign(ev.heads[0].n, 0.0);
            for (const auto& v : ev.heads)
                for (int g = 0; g < G; ++g)
                    for (int64_t i = 0; i < v.n; ++i) mean_all[i] += v.attn[g * v.n + i];
            for (auto& x : mean_all) x /= in.n_head;
        }
        float mx = -INFINITY;
        for (size_t h = 0; h < ev.heads.size(); ++h) {
            const HeadView& v = ev.heads[h];
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
        for (size_t h = 0; h < ev.heads.size(); ++h)
            if (ev.heads[h].n > 0) scores[h][ev.heads[h].n - 1] = (std::isfinite(mx) ? mx : 0.0f) + 1;
    }
    void score_decode(const StepEvent& ev, const std::vector<float*>& scores) const override {
        const std::vector<HeadView>& heads = ev.heads;
        const int group = ev.step.n_head / ev.step.n_head_kv;
        bool same = true;
        for (const auto& h : heads) same = same && h.n == heads[0].n && std::equal(h.pos, h.pos + h.n, heads[0].pos);
        if (!same) {  // per KV head: the mean over its G query heads
            for (size_t h = 0; h < heads.size(); ++h)
                for (int64_t i = 0; i < heads[h].n; ++i) {
                    double a = 0;
                    for (int g = 0; g < group; ++g) a += heads[h].attn[g * heads[h].n + i];
                    scores[h][i] = static_cast<float>(a / group);
                }
            return;
        }
        const int64_t n = heads[0].n;
        std::vector<double> mean(n, 0.0);
        int n_query = 0;
        for (const auto& h : heads) {
            for (int g = 0; g < group; ++g)
                for (int64_t i = 0; i < n; ++i) mean[i] += h.attn[g * n + i];
            n_query += group;
        }
        for (size_t h = 0; h < heads.size(); ++h)
            for (int64_t i = 0; i < n; ++i) scores[h][i] = static_cast<float>(mean[i] / n_query);
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
