// knorm: score = −‖k‖₂ (Devoto et al. 2024, "A Simple and Effective L2 Norm-Based Strategy for KV Cache
// Compression", §3; kvpress KnormPress): keys with small norms draw more attention.
#include <cmath>

#include "policy/policy.h"

namespace kvsieve {

namespace {
class KnormScorer : public Scorer {
public:
    std::string name() const override { return "knorm"; }
    void score_prefill(const PrefillScoreInput& in, std::vector<std::vector<float>>& scores) const override {
        for (size_t h = 0; h < in.heads.size(); ++h) {
            const HeadView& v = in.heads[h];
            scores[h].resize(v.n);
            for (int64_t i = 0; i < v.n; ++i) {
                double s = 0;
                for (int c = 0; c < in.head_dim; ++c) s += double(v.k[i * in.head_dim + c]) * v.k[i * in.head_dim + c];
                scores[h][i] = -static_cast<float>(std::sqrt(s));
            }
        }
    }
    void score_decode(const DecodeScoreInput& in, float* scores) const override {
        double s = 0;
        for (int c = 0; c < in.head_dim; ++c) s += double(in.k[c]) * in.k[c];
        scores[in.n - 1] = -static_cast<float>(std::sqrt(s));
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
