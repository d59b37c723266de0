#include "session/shared_prefill.h"

#include <algorithm>
#include <map>
#include <string>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "session/model_access.h"
#include "session/prefill.h"
#include "session/session.h"
#include "util/error.h"

namespace kvsieve {

bool shares_dense_prefill(const Policy& p) { return !p.gated_prefill; }

namespace {
/// The forward pass's cache: every layer's entries go to each cache; the first one computes the attention output
/// that goes on to the next layer, the others are shadows that compute only what their policies need from it.
class FanOutCache : public SequenceCache {
public:
    explicit FanOutCache(std::vector<KVCache*> caches) : caches_(std::move(caches)) {}
    int64_t n_tokens() const override { return caches_[0]->n_tokens(); }
    int64_t n_ctx() const override {
        int64_t n = caches_[0]->n_ctx();
        for (const KVCache* c : caches_) n = std::min(n, c->n_ctx());
        return n;
    }
    void attend(const LayerInputs& in, float* out) override {
        for (KVCache* c : caches_) c->attend(in, out);  // shadows leave out as it is
    }
    void finish_step(int64_t pos0, int64_t T) override {
        for (KVCache* c : caches_) c->finish_step(pos0, T);
    }

private:
    std::vector<KVCache*> caches_;
};
}  // namespace

void prefill_shared(const std::vector<Session*>& sessions, const std::vector<int32_t>& prompt, std::vector<float>& logits) {
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
        for (const KVCache* c : caches)
            require(c != &s->cache(), "shared prefill: two sessions share one cache");
        caches.push_back(&s->cache());
    }
    for (KVCache* c : caches) c->set_phase(KVCache::Phase::kPrefill);
    for (size_t i = 1; i < caches.size(); ++i) caches[i]->set_shadow(true);
    try {
        FanOutCache fan(caches);
        model.forward(prompt, fan, logits, false);
        for (KVCache* c : caches) c->set_shadow(false);
        // Each after-prefill step once per key (KVzip's replay at several ratios: one replay), then compression.
        std::map<std::string, EntryScores> by_key;
        for (Session* s : sessions) {
            KVCache& c = s->cache();
            // The replay runs over this cache: its element type and context are part of what the scores depend on.
            const std::string key = c.policy().after_prefill_key + "|" + std::to_string(static_cast<int>(c.pool().type())) +
                                    "|" + std::to_string(c.n_ctx());
            if (c.policy().after_prefill && !c.policy().after_prefill_key.empty()) {
                auto it = by_key.find(key);
                if (it == by_key.end()) it = by_key.emplace(key, after_prefill_scores(model, s->tokenizer(), c, prompt)).first;
                c.set_scores(it->second);
                c.end_prefill();
            } else {
                finish_prefill(model, s->tokenizer(), c, prompt);
            }
            s->restore_tokens(prompt);  // also sets the decode phase
        }
    } catch (...) {
        for (KVCache* c : caches) c->set_shadow(false);
        for (Session* s : sessions) s->reset();
        for (KVCache* c : caches) c->set_phase(KVCache::Phase::kDecode);
        throw;
    }
}

}  // namespace kvsieve
