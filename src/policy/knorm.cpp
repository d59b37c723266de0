// knorm: score = −‖k‖₂ (Devoto et al. 2024, "A Simple and Effective L2 Norm-Based Strategy for KV Cache
// Compression", §3; kvpress KnormPress): keys with small norms draw more attention.
#include <cmath>

#include "policy/policy.h"

namespace kvsieve {

namespace {
class KnormScorer : public StepScorer {
public:
    std::string name() const override { return "knorm"; }
    void score_prefill(const StepEvent& ev, const std::vector<float*>& scores) const override {
        const int d = ev.step.head_dim;
        for (size_t h = 0; h < ev.heads.size(); ++h)
            for (int64_t i = 0; i < ev.heads[h].n; ++i) scores[h][i] = neg_norm(ev.heads[h].k + i * d, d);
    }
    /// The new entry of each head gets −‖k‖ of its key.
    void score_decode(const StepEvent& ev, const std::vector<float*>& scores) const override {
        const int d = ev.step.head_dim;
        for (size_t h = 0; h < ev.heads.size(); ++h) scores[h][ev.heads[h].n - 1] = neg_norm(ev.step.k + h * d, d);
    }

private:
    /// −‖k‖₂ of a key of d elements (float64 sum).
    static float neg_norm(const float* k, int d) {
        double s = 0;
        for (int c = 0; c < d; ++c) s += double(k[c]) * k[c];
        return -static_cast<float>(std::sqrt(s));
    }
};
}  // namespace

void register_knorm() {
    register_preset({"knorm", "−‖k‖ (Devoto et al. 2024)", budget_rule_params(), [](PolicyParams& p) {
                         Policy pol;
                         pol.scorer = std::make_shared<KnormScorer>();
                         read_budget_rule(p, pol);
                         return pol;
                     }});
}

}  // namespace kvsieve
