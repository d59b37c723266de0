#pragma once
// One cache's part in a prefill shared by several caches: its attention statistics shared with the others and, as a
// shadow, no attention output of its own.
#include <cstdint>

#include "attend/paged_attention.h"
#include "attend/prefill_stat_share.h"
#include "cache/kv_cache.h"
#include "cache/sequence_cache.h"

namespace kvsieve {

/// A KVCache (not owned) as one member of a shared prefill (session/shared_prefill.h): every prefill step puts the
/// attention statistics this cache computes into `share` (null: none); a shadow stores each prefill step's entries
/// and computes what its policy needs from the attention (its scores and statistics, taken from `share` when another
/// cache of the step computed them over the same keys) but writes no attention output: another cache given the same
/// step computes it. Decorates attend/'s PagedAttention (attend/prefill_attention.h, PrefillSharing); the share
/// must outlive the steps, and its owner clears it between steps.
class SharedPrefillCache : public SequenceCache {
public:
    /// Throws Error for a shadow over a cache whose policy has a gated prefill (its prefill is not the dense one).
    SharedPrefillCache(KVCache& cache, PrefillStatShare* share, bool shadow)
        : attention_(cache, PrefillSharing{shadow, share}) {}

    int64_t n_tokens() const override { return attention_.n_tokens(); }
    int64_t n_ctx() const override { return attention_.n_ctx(); }
    /// Throws Error for a decode step of a shadow (and as PagedAttention::attend).
    void attend(const LayerInputs& in, float* out) override { attention_.attend(in, out); }
    void finish_step(int64_t pos0, int64_t T, StepPhase phase) override { attention_.finish_step(pos0, T, phase); }

private:
    PagedAttention attention_;
};

}  // namespace kvsieve
