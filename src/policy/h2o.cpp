// h2o: accumulated attention, "heavy hitters" (Zhang et al. 2023, "H2O: Heavy-Hitter Oracle", §3.2 and
// Alg. 1). Prefill scores follow kvpress ObservedAttentionPress: the mean softmax weight a key receives
// from the queries that see it, s_j = (1/|Q_j|) Σ_{i ∈ Q_j} a_ij, averaged over the G query heads of its KV
// head; over several prefill chunks the mean runs over every query so far. At each decode step the running mean is updated with the new query's weight, so with a per-head
// capacity (h2o:capacity=512, formerly budget=512) the lowest-scored entry is evicted as in the paper's greedy policy;
// the capacity is split as in Alg. 1 into a recent window of K/2 entries and K/2 heavy hitters (window=W to change it),
// K being the capacity less the sinks (none by default).
#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

namespace {
class H2OScorer : public StepScorer {
public:
    H2OScorer() : StepScorer(AttnStat::kMassSum, DecodeScope::kAllEntries) {}
    std::string name() const override { return "h2o"; }
    void score_prefill(const StepEvent& ev, const std::vector<float*>& scores) const override {
        const LayerInputs& in = ev.step;
        const int G = in.n_head / in.n_head_kv;
        for (size_t h = 0; h < ev.heads.size(); ++h) {
            const HeadView& v = ev.heads[h];
            const int64_t n_old = v.n - in.T;
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
    void score_decode(const StepEvent& ev, const std::vector<float*>& out) const override {
        const int group = ev.step.n_head / ev.step.n_head_kv;
        const int64_t pos = ev.step.pos0;
        for (size_t h = 0; h < ev.heads.size(); ++h) {
            const HeadView& in = ev.heads[h];
            float* scores = out[h];
            for (int64_t i = 0; i < in.n; ++i) {
                double a = 0;
                for (int g = 0; g < group; ++g) a += in.attn[g * in.n + i];
                a /= group;
                if (i == in.n - 1) {
                    scores[i] = static_cast<float>(a);
                } else {
                    const double seen = static_cast<double>(pos - in.pos[i] + 1);
                    scores[i] = static_cast<float>(scores[i] + (a - scores[i]) / seen);
                }
            }
        }
    }
};
}  // namespace

namespace {
/// The budget rule keys with H2O's capacity in place of budget: H2O's cache size K counts the recent window too.
std::vector<ParamDecl> h2o_params() {
    std::vector<ParamDecl> v;
    for (const ParamDecl& d : budget_rule_params())
        if (d.key != "budget") v.push_back(d);
    return merge_params(
        v,
        {with_alias(with_note(int_param("capacity", 1, kMaxTokens, "",
                                        "B = s + w + k: entries each KV head keeps, the recent window included "
                                        "(the deprecated budget=K counts all but the sinks: B = s + K); not with ratio",
                                        "H2O Alg. 1 (KV cache budget K); KVpop eq. 1"),
                              "none (ratio applies)"),
                    "budget"),
         with_note(
             int_param("window", 0, kMaxTokens, "", "w: recent entries always kept; with capacity=B they are part of B",
                       "H2O Alg. 1 (recent half of the budget)"),
             "(B − s)/2 with capacity=B, else 0; 128 with timing=at_window_exit")});
}
}  // namespace

void register_h2o() {
    register_preset({"h2o", "accumulated attention (Zhang et al. 2023)", h2o_params(), [](PolicyParams& p) {
                         Policy pol;
                         pol.scorer = std::make_shared<H2OScorer>();
                         read_budget_rule(p, pol);
                         // A capacity B keeps the s sinks, the K/2 most recent entries of the K = B − s beyond them (a
                         // local window, H2O Alg. 1's recent half) and K − K/2 heavy hitters beyond it: B = s + w + k.
                         // window=W sets the recent part (0: heavy hitters only). Ratios follow kvpress (no window)
                         // unless window is given. The deprecated budget=K is K = B − s.
                         if (pol.timing != Timing::kAtWindowExit && pol.timing != Timing::kAtWrite) {
                             int64_t K = pol.compression.budget;
                             if (K > 0 && !p.given_as_alias("capacity")) {
                                 K -= pol.sinks;
                                 require(K > 0, "policy h2o: capacity=", K + pol.sinks,
                                         " leaves no entries beyond sinks=", pol.sinks);
                             }
                             const int64_t w = p.get_int("window", K > 0 ? K / 2 : 0);
                             require(K <= 0 || w < K, "policy h2o: window=", w,
                                     " leaves no room for heavy hitters in capacity=", K + pol.sinks,
                                     " with sinks=", pol.sinks);
                             pol.window = static_cast<int>(w);
                             if (K > 0) pol.compression.budget = K - w;
                         }
                         return pol;
                     }});
}

}  // namespace kvsieve
