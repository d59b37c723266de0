// random: uniform random scores, the floor any method must beat (kvpress RandomPress).
#include <limits>
#include <random>

#include "policy/policy.h"

namespace kvsieve {

namespace {
class RandomScorer : public StepScorer {
public:
    explicit RandomScorer(uint64_t seed) : seed_(seed) {}
    std::string name() const override { return "random"; }
    void score_prefill(const StepEvent& ev, const std::vector<float*>& scores) const override {
        const LayerInputs& in = ev.step;
        for (size_t h = 0; h < ev.heads.size(); ++h) {
            std::mt19937_64 rng(seed_ * 1000003ull + static_cast<uint64_t>(in.layer) * 1009 + h + 31 * in.pos0);
            std::uniform_real_distribution<float> u(0.0f, 1.0f);
            for (int64_t i = 0; i < ev.heads[h].n; ++i) scores[h][i] = u(rng);
        }
    }

private:
    uint64_t seed_;
};
}  // namespace

void register_random() {
    register_preset(
        {"random", "uniform random scores (baseline)",
         merge_params(budget_rule_params(), {int_param("seed", 0, std::numeric_limits<int64_t>::max(), "0",
                                                       "seed of the random scores", "kvpress RandomPress")}),
         [](PolicyParams& p) {
             Policy pol;
             pol.scorer = std::make_shared<RandomScorer>(static_cast<uint64_t>(p.get_int("seed")));
             read_budget_rule(p, pol);
             return pol;
         }});
}

}  // namespace kvsieve
