#pragma once
// One sequence being run: a model, its tokenizer, a KV cache run by a policy, and every token given so far.
// Every prompt and every generated token goes through it, so it is the session that says whether a step is a
// prefill or a decode step, not the step's length.
#include <cstdint>
#include <vector>

#include "session/prefill.h"

namespace kvsieve {

class KVCache;
class LlamaModel;
class Tokenizer;

/// A sequence over `cache` (not owned; the session owns its contents). Not thread-safe.
class Session {
public:
    Session(const LlamaModel& model, const Tokenizer& tok, KVCache& cache);

    /// Feeds `prompt` after what the sequence holds, through prefill() (session/prefill.h) with the whole token
    /// history as the policy's context; logits as plan.all_logits says. Throws Error for an empty prompt, a prompt
    /// that does not fit in the context, or a chunked prefill with a policy that rescores the whole context.
    void prefill(const std::vector<int32_t>& prompt, const PrefillPlan& plan, std::vector<float>& logits,
                 const ChunkFn& on_chunk = {});
    /// Feeds one token as a decode step; logits becomes the next token's [V]. Throws Error when the context is
    /// full or the token is out of the vocabulary.
    void decode(int32_t token, std::vector<float>& logits);
    /// Empties the cache and the history.
    void reset();

    /// Every token given, in order (the cache's positions 0 … n − 1).
    const std::vector<int32_t>& tokens() const { return tokens_; }
    int64_t n_tokens() const;
    int64_t n_ctx() const;
    KVCache& cache() { return cache_; }
    const KVCache& cache() const { return cache_; }
    const LlamaModel& model() const { return model_; }

private:
    const LlamaModel& model_;
    const Tokenizer& tok_;
    KVCache& cache_;
    std::vector<int32_t> tokens_;
};

}  // namespace kvsieve
