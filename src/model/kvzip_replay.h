#pragma once
// KVzip's context reconstruction, run after a prefill for policies that ask for it (policy.replay).
#include <cstdint>
#include <vector>

namespace kvsieve {

class KVCache;
class LlamaModel;
class Tokenizer;

/// Ends the prefill of `context` (the tokens the cache holds, positions 0 … n − 1): runs KVzip's context
/// reconstruction if the cache's policy asks for it (see policy/kvzip.cpp), then the policy's compression.
/// Every other policy just compresses (KVCache::end_prefill).
void finish_prefill(const LlamaModel& model, const Tokenizer& tok, KVCache& cache, const std::vector<int32_t>& context);

/// The reconstruction alone: for each chunk of ≤ spec.chunk context tokens, feeds "\n\nRepeat the previous
/// context exactly." (later chunks: "\n\nRepeat the part of the previous context exactly, starting with" and
/// the previous chunk's last 8 tokens), "\n", then the chunk, teacher-forced, over the cached context; scores
/// every cached entry (KVzip: max attention over the repeat queries and the GQA group, softmax over sinks ∪
/// chunk ∪ repeat; KVzip+: × ‖W_O,head v‖ / ‖h‖) and stores the scores in the cache entries, the first
/// `sinks` positions at max + 1. The cache is left with exactly the context's entries.
void kvzip_replay(const LlamaModel& model, const Tokenizer& tok, KVCache& cache, const std::vector<int32_t>& context);

}  // namespace kvsieve
