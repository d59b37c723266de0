#include "session/shared_prefill.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "session/model_access.h"
#include "session/prefill.h"
#include "session/session.h"
#include "session/shared_prefill_cache.h"
#include "util/error.h"

namespace kvsieve {

bool shares_dense_prefill(const Policy& p) { return !p.gated_prefill; }

namespace {
/// The forward pass's cache: every layer's entries go to each cache; the first one computes the attention output
/// that goes on to the next layer, the others are shadows that compute only what their policies need from it.
class FanOutCache : public SequenceCache {
public:
    /// The caches share the attention statistics of each step (attend/prefill_stat_share.h); all but the first are
    /// shadows (session/shared_prefill_cache.h). Throws Error if one of those has a gated prefill.
    explicit FanOutCache(const std::vector<KVCache*>& caches) {
        members_.reserve(caches.size());
        for (size_t i = 0; i < caches.size(); ++i)
            members_.push_back(std::make_unique<SharedPrefillCache>(*caches[i], &share_, i > 0));
    }
    FanOutCache(const FanOutCache&) = delete;
    FanOutCache& operator=(const FanOutCache&) = delete;
    int64_t n_tokens() const override { return members_[0]->n_tokens(); }
    int64_t n_ctx() const override {
        int64_t n = members_[0]->n_ctx();
        for (const auto& c : members_) n = std::min(n, c->n_ctx());
        return n;
    }
    void attend(const LayerInputs& in, float* out) override {
        for (auto& c : members_) c->attend(in, out);  // shadows leave out as it is
    }
    void finish_step(int64_t pos0, int64_t T, StepPhase phase) override {
        for (auto& c : members_) c->finish_step(pos0, T, phase);
        share_.clear();
    }
    int64_t stat_hits() const { return share_.hits(); }

private:
    PrefillStatShare share_;
    std::vector<std::unique_ptr<SharedPrefillCache>> members_;
};
}  // namespace

int64_t prefill_shared(const std::vector<Session*>& sessions, const std::vector<int32_t>& prompt,
                       std::vector<float>& logits) {
    require(!sessions.empty(), "shared prefill: no sessions");
    require(!prompt.empty(), "shared prefill: the prompt is empty");
    const LlamaModel& model = sessions[0]->model();
    std::vector<KVCache*> caches;
    for (Session* s : sessions) {
        require(&s->model() == &model, "shared prefill: the sessions run different models");
        require(s->n_tokens() == 0, "shared prefill: a session already holds ", s->n_tokens(), " tokens");
        require(static_cast<int64_t>(prompt.size()) <= s->n_ctx(), "the prompt needs ", prompt.size(),
                " positions but the context holds ", s->n_ctx());
        require(shares_dense_prefill(s->cache().policy()), "shared prefill: policy '", s->cache().policy().spec,
                "' has a gated prefill, which is not the dense one");
        for (const KVCache* c : caches) require(c != &s->cache(), "shared prefill: two sessions share one cache");
        caches.push_back(&s->cache());
    }
    int64_t shared_stats = 0;
    try {
        {
            FanOutCache fan(caches);
            model.forward(StepPhase::kPrefill, prompt, fan, logits, false);
            shared_stats = fan.stat_hits();
        }
        // Each after-prefill step once per key (KVzip's replay at several ratios: one replay), then compression.
        // The replay runs over a cache: its element type and context are part of what the scores depend on.
        auto cache_key = [](const KVCache& c) {
            return "|" + std::to_string(static_cast<int>(c.pool().key_type())) + "|" +
                   std::to_string(static_cast<int>(c.pool().value_type())) + "|" +
                   std::to_string(static_cast<int>(c.pool().local().key_type())) + "|" +
                   std::to_string(static_cast<int>(c.pool().local().value_type())) + "|" + std::to_string(c.n_ctx());
        };
        auto shares_step = [](const KVCache& c) {
            return c.policy().after_prefill && !c.policy().after_prefill_key.empty();
        };
        std::map<std::string, EntryScores> by_key;
        for (Session* s : sessions) {
            KVCache& c = s->cache();
            const std::string key = c.policy().after_prefill_key + cache_key(c);
            if (shares_step(c)) {
                auto it = by_key.find(key);
                if (it == by_key.end()) {
                    // Other steps over a cache like this one still to run: this step may give their scores too.
                    OtherEntryScores also;
                    for (Session* o : sessions) {
                        const KVCache& oc = o->cache();
                        if (shares_step(oc) && cache_key(oc) == cache_key(c) &&
                            oc.policy().after_prefill_key != c.policy().after_prefill_key &&
                            by_key.count(oc.policy().after_prefill_key + cache_key(c)) == 0)
                            also[oc.policy().after_prefill_key];
                    }
                    std::vector<std::string> asked;
                    for (const auto& [k, es] : also) asked.push_back(k);
                    it = by_key.emplace(key, after_prefill_scores(model, s->tokenizer(), c, prompt, &also)).first;
                    for (auto& [k, es] : also)  // only what was asked for, and was given
                        if (std::find(asked.begin(), asked.end(), k) != asked.end() && !es.by_pos.empty())
                            by_key.emplace(k + cache_key(c), std::move(es));
                }
                finish_prefill(model, s->tokenizer(), c, prompt, &it->second);
            } else {
                finish_prefill(model, s->tokenizer(), c, prompt);
            }
            s->restore_tokens(prompt);
        }
    } catch (...) {
        for (Session* s : sessions) s->reset();
        throw;
    }
    return shared_stats;
}

}  // namespace kvsieve
