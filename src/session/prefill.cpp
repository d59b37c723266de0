#include "session/prefill.h"

#include <algorithm>

#include "attend/paged_attention.h"
#include "cache/kv_cache.h"
#include "session/model_access.h"
#include "session/prefill_plan.h"
#include "model/llama_model.h"
#include "util/error.h"

namespace kvsieve {

namespace {
/// Passes each layer's inputs to a callback, then to the real cache.
class LayerTap : public SequenceCache {
public:
    LayerTap(SequenceCache& real, const std::function<void(const LayerInputs&)>& fn) : real_(real), fn_(fn) {}
    int64_t n_tokens() const override { return real_.n_tokens(); }
    int64_t n_ctx() const override { return real_.n_ctx(); }
    void attend(const LayerInputs& in, float* out) override {
        fn_(in);
        real_.attend(in, out);
    }
    void finish_step(int64_t pos0, int64_t T, StepPhase phase) override { real_.finish_step(pos0, T, phase); }

private:
    SequenceCache& real_;
    const std::function<void(const LayerInputs&)>& fn_;
};
}  // namespace

void prefill(const LlamaModel& model, const Tokenizer& tok, KVCache& cache, const std::vector<int32_t>& prompt,
             const std::vector<int32_t>& context, const PrefillPlan& plan, std::vector<float>& logits,
             const ChunkFn& on_chunk) {
    require(!prompt.empty(), "prefill: the prompt is empty");
    require(plan.chunk >= 0, "prefill: chunk must be ≥ 0, got ", plan.chunk);
    // A plan the planner (session/prefill_plan.h) never makes: it feeds such a prompt in one piece.
    require(!chunk_overruled(cache.policy(), plan.chunk, plan.compress, cache.compress_during_prefill()), "policy ",
            cache.policy().name,
            cache.policy().after_prefill
                ? " scores the whole prompt after the prefill; a chunked prefill cannot be used with it"
                : " scores its entries from each chunk's queries; a chunked prefill cannot be used with it",
            " (planned_chunk feeds its prompt in one piece)");
    const int64_t n = static_cast<int64_t>(prompt.size());
    PagedAttention attention(cache);
    LayerTap tap(attention, plan.on_layer);
    SequenceCache& target = plan.on_layer ? static_cast<SequenceCache&>(tap) : attention;
    for (int64_t done = 0; done < n;) {
        const PrefillChunk c = next_prefill_chunk(n, done, plan.chunk);
        cache.hold_admission(plan.compress && !c.last);  // judged at the prompt's end, as one batch would be
        if (c.begin == 0 && c.last) {
            model.forward(StepPhase::kPrefill, prompt, target, logits, plan.all_logits);
        } else {
            model.forward(StepPhase::kPrefill, std::vector<int32_t>(prompt.begin() + c.begin, prompt.begin() + c.end),
                          target, logits, plan.all_logits);
        }
        if (on_chunk) on_chunk(c.begin, c.end, logits);
        if (!c.last && plan.compress) cache.end_prefill_chunk();
        done = c.end;
    }
    if (plan.compress) finish_prefill(model, tok, cache, context);
}

}  // namespace kvsieve

namespace kvsieve {

void finish_prefill(const LlamaModel& model, const Tokenizer& tok, KVCache& cache, const std::vector<int32_t>& context,
                    const EntryScores* scores) {
    if (scores) {
        require(static_cast<bool>(cache.policy().after_prefill), "policy ", cache.policy().spec,
                " has no after-prefill step to take scores for");
        cache.set_scores(*scores);
    } else {
        run_after_prefill(model, tok, cache, context);
    }
    cache.end_prefill();
}

}  // namespace kvsieve
