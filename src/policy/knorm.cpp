// knorm: score = −‖k‖₂ (Devoto et al. 2024, "A Simple and Effective L2 Norm-Based Strategy for KV Cache
// Compression", §3; kvpress KnormPress): keys with small norms draw more attention.
#include <cmath>

#include "policy/policy.h"

namespace kvsieve {

namespace {
class KnormScorer : public StepScorer {
public:
    std::string name() const override { return "knorm"; }
    void score_prefill(const StepEvent& ev, std::vector<std::vector<float>>& scores) const override {
        const LayerInputs& in = ev.step;
        for (size_t h = 0; h < ev.heads.size(); ++h) {
            const HeadView& v = ev.heads[h];
            scores[h].resize(v.n);
            for (int64_t i = 0; i < v.n; ++i) {
                double s = 0;
                for (int c = 0; c < in.head_dim; ++c) s += double(v.k[i * in.head_dim + c]) * v.k[i * in.head_dim + c];
                scores[h][i] = -static_cast<float>(std::sqrt(s));
            }
        }
    }
    /// The new entry of each head gets −‖k‖ of its key.
    void score_decode(const StepEvent& ev, const std::vector<float*>& scores) const override {
        const int d = ev.step.head_dim;
        for (size_t h = 0; h < ev.heads.size(); ++h) {
            const float* k = ev.step.k + h * d;
            double s = 0;
            for (int c = 0; c < d; ++c) s += double(k[c]) * k[c];
            scores[h][ev.heads[h].n - 1] = -static_cast<float>(std::sqrt(s));
        }
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
