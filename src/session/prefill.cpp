#include "session/prefill.h"

#include <algorithm>

#include "cache/kv_cache.h"
#include "session/model_access.h"
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
    void finish_step(int64_t pos0, int64_t T) override { real_.finish_step(pos0, T); }

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
    require(plan.chunk == 0 || !plan.compress || !cache.policy().after_prefill, "policy ", cache.policy().name,
            " scores the whole prompt after the prefill; a chunked prefill cannot be used with it");
    const int64_t n = static_cast<int64_t>(prompt.size());
    const int64_t step = plan.chunk > 0 ? plan.chunk : n;
    LayerTap tap(cache, plan.on_layer);
    SequenceCache& target = plan.on_layer ? static_cast<SequenceCache&>(tap) : cache;
    for (int64_t b = 0; b < n; b += step) {
        const int64_t e = std::min(n, b + step);
        if (b == 0 && e == n) {
            model.forward(prompt, target, logits, plan.all_logits);
        } else {
            model.forward(std::vector<int32_t>(prompt.begin() + b, prompt.begin() + e), target, logits, plan.all_logits);
        }
        if (on_chunk) on_chunk(b, e, logits);
        if (e < n && plan.compress) cache.end_prefill();
    }
    if (plan.compress) finish_prefill(model, tok, cache, context);
}

}  // namespace kvsieve

namespace kvsieve {

void finish_prefill(const LlamaModel& model, const Tokenizer& tok, KVCache& cache, const std::vector<int32_t>& context) {
    run_after_prefill(model, tok, cache, context);
    cache.end_prefill();
}

}  // namespace kvsieve
