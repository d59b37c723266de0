#include "eval/kept_positions.h"

#include <algorithm>
#include <memory>

#include "cache/kv_cache.h"
#include "cache/kv_pool.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "session/session.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {

std::vector<HeadKept> kept_after_prefill(const LlamaModel& model, const std::vector<int32_t>& ids,
                                         const std::string& policy_spec, const std::string& kv_types,
                                         const std::string& kv_rotate) {
    const ModelConfig& c = model.config();
    require(!ids.empty(), "kept positions: the prompt is empty");
    require(static_cast<int64_t>(ids.size()) <= c.n_ctx_train, "kept positions: a prompt of ", ids.size(),
            " tokens is beyond the model's context of ", c.n_ctx_train);
    const Policy policy = parse_policy(policy_spec);
    auto pool = make_kv_pool(c.head_dim, parse_kv_types(kv_types), parse_kv_rotate_mode(kv_rotate));
    // Room for a policy that replays the context (KVzip's reconstruction prompt).
    KVCache cache(c, 2 * static_cast<int64_t>(ids.size()) + 64, policy, pool);
    // The session's prefill in one piece: the forward, then the policy's after-prefill step (KVzip's replay, which
    // encodes its prompt with the model's tokenizer) and its compression.
    const auto tok = Tokenizer::from_gguf(model.file());
    Session session(model, *tok, cache);
    std::vector<float> logits;
    session.prefill(ids, PrefillPlan{}, logits);
    std::vector<HeadKept> out;
    for (int l = 0; l < c.n_layer; ++l)
        for (int h = 0; h < c.n_head_kv; ++h) {
            const HeadCache& hc = cache.head(l, h);
            std::vector<std::pair<int32_t, float>> e;
            for (Region reg : kRegionsInOrder)
                for (int64_t i = 0; i < hc.region(reg)->size(); ++i)
                    e.emplace_back(hc.region(reg)->positions()[static_cast<size_t>(i)],
                                   hc.region(reg)->scores()[static_cast<size_t>(i)]);
            std::sort(e.begin(), e.end());
            HeadKept k;
            k.layer = l;
            k.head = h;
            for (const auto& pe : e) {
                k.positions.push_back(pe.first);
                k.scores.push_back(pe.second);
            }
            out.push_back(std::move(k));
        }
    return out;
}

}  // namespace kvsieve
