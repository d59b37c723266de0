#pragma once
// One sequence being run: a model, its tokenizer, a KV cache run by a policy, and every token given so far.
// Every prompt and every generated token goes through it, so it is the session that says whether a step is a
// prefill or a decode step, not the step's length.
#include <cstdint>
#include <vector>

#include "attend/paged_attention.h"
#include "model/llama_model.h"
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
    /// that does not fit, or a chunked plan for a policy the planner feeds in one piece (session/prefill_plan.h).
    void prefill(const std::vector<int32_t>& prompt, const PrefillPlan& plan, std::vector<float>& logits,
                 const ChunkFn& on_chunk = {});
    /// Feeds one token as a decode step; logits becomes the next token's [V]. Throws Error when the context is
    /// full or the token is out of the vocabulary.
    void decode(int32_t token, std::vector<float>& logits);
    /// Empties the cache and the history.
    void reset();
    /// Forgets positions n and after: the history keeps its first n tokens and the cache its entries of earlier
    /// positions (entries a compressing policy already dropped stay dropped: the result is a compressed cache of
    /// the first n tokens, not necessarily the one running them alone gives). Throws Error when n is outside
    /// 0..n_tokens() or the policy's scorer keeps a per-sequence state (it cannot be rewound).
    void rollback(int64_t n);
    /// Sets the history after the cache has been loaded from a saved sequence (session/cache_file.h). Throws
    /// Error unless the cache holds exactly tokens.size() positions.
    void restore_tokens(const std::vector<int32_t>& tokens);

    /// What a batched step does for this sequence: a chunk of its prompt (its admissions held until the prompt ends,
    /// KVCache::hold_admission; compressed after it only under KVCache::compress_during_prefill), the
    /// prompt's last chunk (then the prefill ends: after-prefill step and compression), tokens that only extend the
    /// cache (a prefill with PrefillPlan::compress false: no compression, no after-prefill step; e.g. a question fed
    /// after a compressed context), or one decode token.
    enum class StepKind { kPrefillChunk, kPrefillLast, kExtend, kDecode };
    /// The forward pass's kind of step for a step of this kind: kDecode for a decode step, kPrefill for the others.
    static StepPhase phase_of(StepKind kind) {
        return kind == StepKind::kDecode ? StepPhase::kDecode : StepPhase::kPrefill;
    }
    /// The batched form of prefill() and decode(), for a caller that runs many sequences in one
    /// LlamaModel::forward_batch: begin_step() appends `ids` to the history and returns this sequence's segment
    /// (logits land in `logits`); after the batch has run, end_step() does what prefill()/decode() do after their
    /// forward; if the batch failed, abort_step() makes the history what the cache holds again. A chunked prompt
    /// is kPrefillChunk … kPrefillChunk, kPrefillLast (one kPrefillLast for a prompt in one piece). Throws Error
    /// when `ids` is empty, does not fit in the context, or is a decode step of more than one token. `all_logits`:
    /// `logits` becomes [ids.size()][n_vocab], every row's next-token logits (else the last row's only).
    LlamaModel::Segment begin_step(const std::vector<int32_t>& ids, StepKind kind, std::vector<float>& logits,
                                   bool all_logits = false);
    void end_step(StepKind kind);
    void abort_step();

    /// Every token given, in order (the cache's positions 0 … n − 1).
    const std::vector<int32_t>& tokens() const { return tokens_; }
    int64_t n_tokens() const;
    int64_t n_ctx() const;
    KVCache& cache() { return cache_; }
    const KVCache& cache() const { return cache_; }
    const LlamaModel& model() const { return model_; }
    const Tokenizer& tokenizer() const { return tok_; }

private:
    const LlamaModel& model_;
    const Tokenizer& tok_;
    KVCache& cache_;
    PagedAttention attention_;         // the forward pass's view of cache_ (the segments of begin_step)
    std::vector<int32_t> tokens_;      // reserved for the whole context: a decode step does not reallocate it
    std::vector<int32_t> step_token_;  // a decode step's token, as forward takes it
};

}  // namespace kvsieve
