// streaming_llm: attention sinks + recent tokens (Xiao et al. 2024, "Efficient Streaming Language Models
// with Attention Sinks", §3.2). Two forms:
//   streaming_llm:window=W[,sinks=4]  — a ring of W recent entries; entries leaving it are dropped, during
//                                        prefill and decode (the paper's rolling cache).
//   streaming_llm:ratio=R[,sinks=4]   — kvpress StreamingLLMPress: after prefill keep the first `sinks` and
//                                        the most recent ⌊n(1−R)⌋ − sinks entries of each head.
#include <algorithm>
#include <numeric>

#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

namespace {
/// kvpress StreamingLLMPress.score: 1 for kept positions, 0 for the n − ⌊n(1−R)⌋ oldest non-sink ones.
class RecencyScorer : public Scorer {
public:
    RecencyScorer(int sinks, double ratio) : sinks_(sinks), ratio_(ratio) {}
    std::string name() const override { return "recency"; }
    void score_prefill(const PrefillScoreInput& in, std::vector<std::vector<float>>& scores) const override {
        for (size_t h = 0; h < in.heads.size(); ++h) {
            const HeadView& v = in.heads[h];
            std::vector<int64_t> idx(v.n);
            std::iota(idx.begin(), idx.end(), 0);
            std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v.pos[a] < v.pos[b]; });
            const int64_t n_pruned = v.n - static_cast<int64_t>(v.n * (1.0 - ratio_));
            scores[h].assign(v.n, 1.0f);
            for (int64_t j = sinks_; j < std::min<int64_t>(v.n, sinks_ + n_pruned); ++j) scores[h][idx[j]] = 0.0f;
        }
    }

private:
    int sinks_;
    double ratio_;
};
}  // namespace

void register_streaming_llm() {
    register_preset({"streaming_llm", "sinks + recent window (Xiao et al. 2024)", [](PolicyParams& p) {
                         Policy pol;
                         pol.sinks = static_cast<int>(p.get_int("sinks", 4));
                         require(pol.sinks >= 0, "policy streaming_llm: sinks must be ≥ 0");
                         require(p.has("window") != p.has("ratio"),
                                 "policy streaming_llm: give window=<tokens> or ratio=<compression ratio>");
                         if (p.has("window")) {
                             const int64_t w = p.get_int("window", 0);
                             require(w > 0, "policy streaming_llm: window=", w, " must be positive");
                             pol.window = static_cast<int>(w);
                             pol.admission.kind = Rule::Kind::kDropAll;
                             pol.timing = Timing::kAtWindowExit;
                         } else {
                             const double r = p.get_ratio("ratio", 0);
                             pol.scorer = std::make_shared<RecencyScorer>(pol.sinks, r);
                             pol.compression.kind = Rule::Kind::kHeadBudget;
                             pol.compression.ratio = r;
                             pol.sinks = 0;  // sinks are protected by the scores, as kvpress does
                         }
                         return pol;
                     }});
}

}  // namespace kvsieve
