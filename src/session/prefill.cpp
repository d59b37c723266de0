#include "session/prefill.h"

#include <algorithm>

#include "cache/kv_cache.h"
#include "model/kvzip_replay.h"
#include "model/llama_model.h"
#include "util/error.h"

namespace kvsieve {

void prefill(const LlamaModel& model, const Tokenizer& tok, KVCache& cache, const std::vector<int32_t>& prompt,
             const std::vector<int32_t>& context, const PrefillPlan& plan, std::vector<float>& logits,
             const ChunkFn& on_chunk) {
    require(!prompt.empty(), "prefill: the prompt is empty");
    require(plan.chunk >= 0, "prefill: chunk must be ≥ 0, got ", plan.chunk);
    require(plan.chunk == 0 || cache.policy().replay.kind == ReplaySpec::Kind::kNone, "policy ", cache.policy().name,
            " scores the whole prompt after the prefill; a chunked prefill cannot be used with it");
    const int64_t n = static_cast<int64_t>(prompt.size());
    const int64_t step = plan.chunk > 0 ? plan.chunk : n;
    for (int64_t b = 0; b < n; b += step) {
        const int64_t e = std::min(n, b + step);
        if (b == 0 && e == n) {
            model.forward(prompt, cache, logits, plan.all_logits);
        } else {
            model.forward(std::vector<int32_t>(prompt.begin() + b, prompt.begin() + e), cache, logits, plan.all_logits);
        }
        if (on_chunk) on_chunk(b, e, logits);
        if (e < n) cache.end_prefill();
    }
    finish_prefill(model, tok, cache, context);
}

}  // namespace kvsieve
