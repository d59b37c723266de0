#pragma once
// The one prefill driver: how a prompt enters a KV cache (one batch or chunks that keep what one batch keeps), and
// the policy's after-prefill step (KVzip's context reconstruction where the policy asks for it). The CLI, the
// NLL and RULER evaluations and chat turns all prefill through it, in the pieces of session/prefill_plan.h.
#include <cstdint>
#include <functional>
#include <vector>

#include "cache/sequence_cache.h"
#include "policy/after_prefill.h"

namespace kvsieve {

class KVCache;
class LlamaModel;
class Tokenizer;

/// How a prompt is fed.
struct PrefillPlan {
    /// tokens per forward (0: one batch); the policy compresses once, after the last chunk (after each chunk only
    /// under KVCache::compress_during_prefill)
    int64_t chunk = 0;
    bool all_logits = false;  ///< every token's logits per chunk ([n][V], e.g. for NLL), else the last token's [V]
    /// false: the tokens only extend the cache; no compression between chunks or at the end and no after-prefill
    /// step (a question fed after a compressed context, as kvpress feeds it after its press).
    bool compress = true;
    /// Called with each layer's inputs of every chunk before the cache stores them (e.g. to record hidden states).
    std::function<void(const LayerInputs&)> on_layer;
};

/// Called after each chunk's forward with the chunk's range [begin, end) in the prompt and its logits.
using ChunkFn = std::function<void(int64_t begin, int64_t end, const std::vector<float>& logits)>;

/// Runs `prompt` through `model` into `cache`, continuing what the cache holds: in one batch, or in chunks of
/// plan.chunk tokens, the admission of every chunk but the last held (KVCache::hold_admission) so that the cache
/// keeps what one batch keeps; then ends the prefill with finish_prefill (KVzip replay over `context` if the policy
/// asks, then the held admissions and the compression). Under KVCache::compress_during_prefill the policy instead
/// admits and compresses after each chunk (KVCache::end_prefill_chunk). `context` is every token the cache has been
/// given, ending with `prompt` (for a fresh cache, the prompt itself). On return `logits` holds the last chunk's
/// logits as plan.all_logits says. The pieces are those of the one chunk planner (session/prefill_plan.h
/// next_prefill_chunk). Throws Error if the prompt is empty, or for plan.chunk > 0 under a policy the planner feeds
/// in one piece (a step scorer; with compress_during_prefill, an after-prefill step): a plan that planned_chunk
/// never makes (callers that take a chunk size from their user pass it through planned_chunk).
void prefill(const LlamaModel& model, const Tokenizer& tok, KVCache& cache, const std::vector<int32_t>& prompt,
             const std::vector<int32_t>& context, const PrefillPlan& plan, std::vector<float>& logits,
             const ChunkFn& on_chunk = {});

/// Ends the prefill of `context` (the tokens the cache holds, positions 0 … n − 1): runs the policy's after-prefill
/// step if it has one (KVzip's context reconstruction, policy/kvzip.cpp) and writes its scores into the cache,
/// then offers the held entries to the admission rule and runs the policy's compression (KVCache::end_prefill). The one place a prefill ends: prefill(),
/// Session::end_step (the server's batched steps) and prefill_shared all end through it. `scores`, when given,
/// are the step's scores computed once for several caches like this one (prefill_shared) and are written instead
/// of running the step; Error if the policy has no after-prefill step.
void finish_prefill(const LlamaModel& model, const Tokenizer& tok, KVCache& cache, const std::vector<int32_t>& context,
                    const EntryScores* scores = nullptr);

}  // namespace kvsieve
