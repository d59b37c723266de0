#pragma once
// A prefill chunk's attention over a paged KV cache: the kept entries gathered, the chunk attending to them and
// causally to itself (densely, or gated as a decode step would see them), then every entry scored and the chunk
// stored.
#include "cache/kv_cache.h"
#include "attend/prefill_stat_share.h"
#include "policy/layer_inputs.h"

namespace kvsieve {

/// How one cache's prefill step relates to other caches given the same step (a shared prefill,
/// session/shared_prefill.h). The default is a cache on its own.
struct PrefillSharing {
    /// A shadow writes no attention output (another cache of the step computes it) and computes only the
    /// statistics its policy reads; not for a policy with a gated prefill.
    bool shadow = false;
    /// Where the step's attention statistics are put and, for a shadow, taken from when another cache of the step
    /// computed them over the same keys (null: none). Must outlive the step.
    PrefillStatShare* stats = nullptr;
};

/// Runs one layer of a prefill chunk (in.T ≥ 1 tokens at positions in.pos0 …) over `cache` (docs/architecture.md):
///   1. per KV head, the kept entries (sinks, global, window; dequantized to float32) and the chunk's own (seen as
///      they will be stored: quantized and rotated round trip, cache/page_store.h stored_view) are gathered and the
///      chunk's G = Hq / Hkv queries attend to them, causally among the chunk; with quantized keys each query is
///      first rounded to Q8_0 in the keys' stored space, as the decode kernel and llama.cpp score it. A gated
///      prefill (Policy::gated_prefill, a policy reading no attention statistic) lets each query see its window plus
///      the keys that are or will be admitted, as a decode step would;
///   2. a step scorer scores every entry (StepScorer::score_prefill) from the statistic it asks for;
///   3. the kept entries take their new scores and the chunk's entries are appended through the admission path,
///      each with its write-time score (write_scores [T][Hkv] from a per-entry scorer; null: the step scorer's
///      score, or 0).
/// Writes out [T][Hq·d] (float32), except as a shadow (`sharing`). Throws KVPoolExhausted if a page is needed and
/// none is left.
void attend_prefill(KVCache& cache, const LayerInputs& in, const float* write_scores, float* out,
                    const PrefillSharing& sharing = {});

}  // namespace kvsieve
