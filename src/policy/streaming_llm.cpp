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
/// Recency: an entry's score is its position, the first `sinks` entries score above every other. One prefill:
/// the head budget ⌊n(1−R)⌋ then keeps the sinks and the most recent rest, exactly kvpress StreamingLLMPress
/// (whose 1/0 scores mark the same set). Chunked prefill: the budget counts every token seen, more than the
/// entries left, and position scores still keep the sinks and the newest, where 1/0 scores computed over the
/// remaining entries would tie and keep scattered old ones.
class RecencyScorer : public StepScorer {
public:
    explicit RecencyScorer(int sinks) : sinks_(sinks) {}
    std::string name() const override { return "recency"; }
    void score_prefill(const StepEvent& ev, const std::vector<float*>& scores) const override {
        for (size_t h = 0; h < ev.heads.size(); ++h) {
            const HeadView& v = ev.heads[h];
            std::vector<int64_t> idx(v.n);
            std::iota(idx.begin(), idx.end(), 0);
            std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v.pos[a] < v.pos[b]; });
            const float top = v.n > 0 ? static_cast<float>(v.pos[idx.back()]) + 1.0f : 0.0f;
            for (int64_t j = 0; j < v.n; ++j) scores[h][idx[j]] = j < sinks_ ? top : static_cast<float>(v.pos[idx[j]]);
        }
    }

private:
    int sinks_;
};
}  // namespace

void register_streaming_llm() {
    register_preset(
        {"streaming_llm",
         "sinks + recent window (Xiao et al. 2024)",
         {int_param("sinks", 0, kMaxTokens, "4", "s: first entries always kept (attention sinks)",
                    "StreamingLLM §3.2 (4 sinks)"),
          with_note(int_param("window", 1, kMaxTokens, "", "w: recent entries kept in a ring; older ones dropped",
                              "StreamingLLM §3.2 (rolling cache)"),
                    "required unless ratio is given"),
          with_note(ratio_param("ratio", "", "compression ratio after the prompt: keep the sinks and the newest",
                                "kvpress StreamingLLMPress"),
                    "required unless window is given")},
         [](PolicyParams& p) {
             Policy pol;
             pol.sinks = static_cast<int>(p.get_int("sinks"));
             require(p.has("window") != p.has("ratio"),
                     "policy streaming_llm: give window=<tokens> or ratio=<compression ratio>");
             if (p.has("window")) {
                 pol.window = static_cast<int>(p.get_int("window", 0));
                 pol.admission.kind = Rule::Kind::kDropAll;
                 pol.timing = Timing::kAtWindowExit;
             } else {
                 const double r = p.get_double("ratio", 0);
                 pol.scorer = std::make_shared<RecencyScorer>(pol.sinks);
                 pol.compression.kind = Rule::Kind::kHeadBudget;
                 pol.compression.ratio = r;
                 pol.sinks = 0;  // sinks are protected by the scores, as kvpress does
             }
             return pol;
         }});
}

}  // namespace kvsieve
