#include "attend/paged_attention.h"

#include <vector>

#include "attend/decode_attention.h"
#include "util/error.h"

namespace kvsieve {

PagedAttention::PagedAttention(KVCache& cache, const PrefillSharing& sharing) : cache_(cache), sharing_(sharing) {
    require(!sharing.shadow || !cache.policy().gated_prefill, "policy ", cache.policy().spec,
            " has a gated prefill; its cache cannot be a shadow");
}

void PagedAttention::attend(const LayerInputs& in, float* out) {
    require(in.pos0 + in.T <= cache_.n_ctx(), "the sequence needs ", in.pos0 + in.T,
            " positions but the context holds ", cache_.n_ctx());
    const bool decode = in.phase == StepPhase::kDecode;
    require(!decode || in.T == 1, "a decode step takes one token, got ", in.T);
    require(!decode || !sharing_.shadow, "a shadow cache takes prefill steps only");
    const EntryScorer* entry = cache_.entry_scorer();
    std::vector<float>& ws = scratch_.write_scores;  // write-time scores [T][Hkv]
    if (entry) {
        ws.resize(static_cast<size_t>(in.T) * in.n_head_kv);
        entry->on_write(StepEvent(in, cache_.config().n_layer, cache_.scorer_state()), ws.data());
    }
    const float* scores = entry ? ws.data() : nullptr;
    if (decode)
        attend_decode(cache_, in, scores, out, scratch_);
    else
        attend_prefill(cache_, in, scores, out, sharing_);
}

}  // namespace kvsieve
