// h2o: accumulated attention, "heavy hitters" (Zhang et al. 2023, "H2O: Heavy-Hitter Oracle", §3.2 and
// Alg. 1). Prefill scores follow kvpress ObservedAttentionPress: the mean softmax weight a key receives
// from the queries that see it, s_j = (1/|Q_j|) Σ_{i ∈ Q_j} a_ij, averaged over the G query heads of its KV
// head; over several prefill chunks the mean runs over every query so far. At each decode step the running mean is updated with the new query's weight, so with a per-head
// budget (h2o:budget=512) the lowest-scored entry is evicted as in the paper's greedy policy; the budget is split
// as in Alg. 1 into a recent window of K/2 entries and K/2 heavy hitters (window=W to change it).
#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

namespace {
class H2OScorer : public Scorer {
public:
    std::string name() const override { return "h2o"; }
    AttnStat stat() const override { return AttnStat::kMassSum; }
    void score_prefill(const PrefillScoreInput& in, std::vector<std::vector<float>>& scores) const override {
        const int G = in.n_head / in.n_head_kv;
        for (size_t h = 0; h < in.heads.size(); ++h) {
            const HeadView& v = in.heads[h];
            const int64_t n_old = v.n - in.T;
            scores[h].resize(v.n);
            for (int64_t i = 0; i < v.n; ++i) {
                double s = 0;
                for (int g = 0; g < G; ++g) s += v.attn[g * v.n + i];
                s /= G;
                if (i < n_old) {  // carry the mean over earlier chunks: it was seen by pos0 − pos_i queries
                    const double before = static_cast<double>(in.pos0 - v.pos[i]);
                    scores[h][i] = static_cast<float>((v.scores[i] * before + s) / (before + in.T));
                } else {
                    scores[h][i] = static_cast<float>(s / static_cast<double>(in.T - (i - n_old)));
                }
            }
        }
    }
    bool rescore_on_decode() const override { return true; }
    void score_decode(const DecodeScoreInput& in, float* scores) const override {
        for (int64_t i = 0; i < in.n; ++i) {
            double a = 0;
            for (int g = 0; g < in.group; ++g) a += in.attn[g * in.n + i];
            a /= in.group;
            if (i == in.n - 1) {
                scores[i] = static_cast<float>(a);
            } else {
                const double seen = static_cast<double>(in.pos - in.positions[i] + 1);
                scores[i] = static_cast<float>(scores[i] + (a - scores[i]) / seen);
            }
        }
    }
};
}  // namespace

void register_h2o() {
    register_preset({"h2o", "accumulated attention (Zhang et al. 2023)",
                     merge_params(budget_rule_params(),
                                  {with_note(int_param("window", 0, kMaxTokens, "",
                                                       "w: recent entries always kept; with budget=K they are part of K",
                                                       "H2O Alg. 1 (recent half of the budget)"),
                                             "K/2 with budget=K, else 0; 128 with timing=at_window_exit")}),
                     [](PolicyParams& p) {
                         Policy pol;
                         pol.scorer = std::make_shared<H2OScorer>();
                         read_budget_rule(p, pol);
                         // A budget K keeps the K/2 most recent entries (a local window, H2O Alg. 1's recent
                         // half) and K − K/2 heavy hitters beyond it: B = s + w + k. window=W sets the recent
                         // part (0: heavy hitters only). Ratios follow kvpress (no window) unless window is given.
                         if (pol.timing != Timing::kAtWindowExit && pol.timing != Timing::kAtWrite) {
                             const int64_t K = pol.compression.budget;
                             const int64_t w = p.get_int("window", K > 0 ? K / 2 : 0);
                             require(K <= 0 || w < K, "policy h2o: window=", w, " leaves no room for heavy hitters in budget=", K);
                             pol.window = static_cast<int>(w);
                             if (K > 0) pol.compression.budget = K - w;
                         }
                         return pol;
                     }});
}

}  // namespace kvsieve
