#pragma once
// A decode step's attention over a paged KV cache: the new entry stored, every kept page read once per GQA group,
// and the step scorer's update from the step's attention weights.
#include "attend/decode_scratch.h"
#include "cache/kv_cache.h"
#include "policy/layer_inputs.h"

namespace kvsieve {

/// Runs one layer of a decode step (in.T = 1, position in.pos0) over `cache` (docs/architecture.md):
///   1. the new entry (in.k, in.v: [Hkv·d]) is appended to every KV head with its write-time score (write_scores
///      [Hkv], from a per-entry scorer's on_write; null: 0), through the admission path (KVCache::append; without a
///      window it is stored first and admitted after scoring, KVCache::admit_decoded);
///   2. each head's pages (attend/page_plan.h; Quest's read-time selection when the policy has one) are cut into
///      flash-decoding spans (decode_span_count: fixed by the page count, so the output is bit-identical at any
///      thread count), attended in parallel for the head's G = Hq / Hkv queries and merged in span order
///      (Dao et al. 2023, Flash-Decoding: m = max_i m_i, l = Σ_i l_i·e^{m_i − m}, o = Σ_i o_i·e^{m_i − m} / l);
///      a rotated pool's query is rotated once per head and the output rotated back (cache/kv_rotation.h);
///   3. a step scorer (StepScorer::score_decode) updates the scores from the step's attention weights
///      (only the new entry's under DecodeScope::kNewEntry).
/// Writes out [Hq·d] (float32, head-major). Works in `scratch` (reused by every layer and step: it allocates only
/// when the step needs more room than any step before). Throws KVPoolExhausted if a page is needed and none is
/// left.
void attend_decode(KVCache& cache, const LayerInputs& in, const float* write_scores, float* out,
                   DecodeScratch& scratch);

}  // namespace kvsieve
