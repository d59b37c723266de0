#pragma once
// Training-time attention masks of a fixed-budget eviction (Hauzenberger et al., KVpop App. C; docs/design.md
// §5.5). With static priorities an entry, once evicted, never returns, so the whole eviction of one head over a
// sequence is one number per entry: the step at whose end it is evicted. Query d sees key t iff
//   t ≤ d ≤ evict_t                                                                            (causal + eviction)
// which covers the sinks (never evicted), the protected window (an entry is eligible only from step t + w on) and the
// long-range entries kept so far. This is the engine's decode-time cache, one token per step (tested against it):
//   KVpop         at step q the entry q − w leaves the window into the long-range region; query q reads the cache
//                 (s + w + k + 1 entries once the budget is reached); then the lowest of the k + 1 is evicted, so a
//                 head holds B = s + w + k between steps (eq. 1). evict_t comes from the running top-k of the scorer's
//                 static priorities (train/kvpop_pairs.h): the newcomer if it is not kept, else its boundary.
//   StreamingLLM  a ring: the sinks and the w + k most recent, so evict_t = t + w + k − 1 for t ≥ s (same B).
// The engine evicts after each prefill *chunk*, so queries inside a chunk may see a few entries more; the mask is the
// decode semantics, the one a long generation lives in. The ranking is the engine's exactly when the decay step n is
// 1 (the default): static priorities r − ⌊t/n⌋ log γ order entries as the engine's r + ⌊(q − t)/n⌋ log γ only up to
// one decay step when n > 1.
// The full-distillation and StreamingLLM+ modes of `kvsieve train kvpop` fine-tune the model under these masks.
// Only src/train and its tests include this header (it pulls in libtorch).
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "train/kvpop_pairs.h"

namespace kvsieve::train {

/// Eviction steps [T] of one head from its teacher (or student) decisions: a newcomer that is not kept is evicted at
/// the end of its own step q, a kept newcomer pushes its boundary out then; entries never evicted within the sequence
/// get T.
/// Throws Error when a decision names a position outside [0, T).
std::vector<int64_t> eviction_steps(const std::vector<BoundaryPair>& decisions, int64_t T);

/// StreamingLLM's eviction steps [T] at budget B = s + w + k: sinks never (T), entry t ≥ s at the end of step
/// t + w + k − 1 (clamped to T). Throws Error for negative sizes or w + k < 1.
std::vector<int64_t> streaming_eviction_steps(int64_t T, int64_t sinks, int64_t window, int64_t k);

/// Keep-mask [B, H, T, T] (bool; [b, h, d, t] = t ≤ d ≤ evict[b, h, t]) from eviction steps evict [B, H, T] (int64).
/// Throws Error for another shape.
torch::Tensor eviction_keep_mask(const torch::Tensor& evict);

}  // namespace kvsieve::train
