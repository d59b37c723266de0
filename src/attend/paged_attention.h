#pragma once
// The forward pass's view of a paged KV cache: each layer's entries stored and attended over, prefill or decode as
// the step says.
#include <cstdint>

#include "attend/decode_scratch.h"
#include "attend/prefill_attention.h"
#include "cache/kv_cache.h"
#include "cache/sequence_cache.h"

namespace kvsieve {

/// Runs attention over a KVCache (the storage, not owned: it must outlive this view) for the forward pass
/// (LlamaModel::forward). Per layer of a step: a per-entry scorer scores the step's new entries first
/// (EntryScorer::on_write), then the step runs as its LayerInputs::phase says: a decode step (one token,
/// attend/decode_attention.h) or a prefill chunk (attend/prefill_attention.h). Holds no entries itself: any number
/// of views of one cache may exist, one at a time in a step. Keeps a decode step's buffers (attend/decode_scratch.h)
/// from step to step, so a long-lived view (a Session's) decodes without allocating. Not thread-safe.
class PagedAttention : public SequenceCache {
public:
    /// A view of `cache`; `sharing` says how its prefill steps relate to other caches of a shared prefill (default:
    /// none). Throws Error for a shadow (sharing.shadow) over a cache whose policy has a gated prefill.
    explicit PagedAttention(KVCache& cache, const PrefillSharing& sharing = {});

    int64_t n_tokens() const override { return cache_.n_tokens(); }
    int64_t n_ctx() const override { return cache_.n_ctx(); }
    /// Throws Error for a step beyond the context, a decode step of T ≠ 1 tokens, or a decode step of a shadow;
    /// KVPoolExhausted if the pool runs out of pages.
    void attend(const LayerInputs& in, float* out) override;
    void finish_step(int64_t pos0, int64_t T, StepPhase phase) override { cache_.finish_step(pos0, T, phase); }

    /// The storage this view attends over.
    KVCache& cache() { return cache_; }
    const KVCache& cache() const { return cache_; }

private:
    KVCache& cache_;
    PrefillSharing sharing_;
    DecodeScratch scratch_;  // a decode step's buffers, reused across layers and steps
};

}  // namespace kvsieve
