#pragma once
// The paged, ragged KV cache of one sequence, run by a policy.
#include <cstdint>
#include <memory>
#include <vector>

#include "cache/head_cache.h"
#include "cache/kv_pool.h"
#include "cache/kv_stats.h"
#include "cache/prefill_stat_share.h"
#include "cache/sequence_cache.h"
#include "io/model_config.h"
#include "policy/policy.h"

namespace kvsieve {

/// All HeadCaches (L × H_kv) of one sequence over one KVPool (its sinks and windows on the pool's local() layout,
/// its global regions on the pool's own: docs/architecture.md, "Where quantization happens"), the policy that decides
/// what they keep, the
/// scorer's per-sequence state, and statistics. Per forward step and layer (docs/architecture.md):
///   a per-entry scorer scores the step's new entries first (EntryScorer::on_write);
///   decode (one token; the session sets the phase): the new entry is appended to every head (an entry leaving a full window goes through
///     on_window_exit and the admission rule), attention reads each head's pages once for its GQA group, then
///     a step scorer updates scores from the step's statistics (StepScorer::score_decode);
///   prefill: each head's kept entries are gathered, the chunk attends to them and causally to itself,
///     a step scorer scores every entry (StepScorer::score_prefill), and the chunk's entries are appended.
/// The compression rule runs on the global regions after the prompt (end_prefill) and, for
/// every_n_decode_steps, every n decode steps.
class KVCache : public SequenceCache {
public:
    /// Throws Error for a context ≤ 0; the pool must match the model's head dimension.
    KVCache(const ModelConfig& c, int64_t n_ctx, Policy policy, std::shared_ptr<KVPool> pool);

    int64_t n_tokens() const override { return n_tokens_; }
    int64_t n_ctx() const override { return n_ctx_; }
    void attend(const LayerInputs& in, float* out) override;
    void finish_step(int64_t pos0, int64_t T) override;

    /// Whether the next forward steps are prefill or decode steps. kAuto (the default, for callers outside a
    /// session such as benchmarks) takes a one-token step for a decode step; the session sets the phase itself.
    enum class Phase { kAuto, kPrefill, kDecode };
    void set_phase(Phase p) { phase_ = p; }
    Phase phase() const { return phase_; }

    /// A shadow cache stores each prefill step's entries and computes what its policy needs from the attention (its
    /// scores and statistics) but writes no attention output: another cache given the same step computes it
    /// (session/shared_prefill.h). Only for a policy without a gated prefill; a decode step in shadow mode throws Error.
    void set_shadow(bool on);
    bool shadow() const { return shadow_; }
    /// Prefill steps put the attention statistics this cache computes into `share` (null: none), and as a shadow
    /// take them from it when another cache of the step computed them over the same keys (cache/prefill_stat_share.h).
    /// The share must outlive the steps it is set for; the caller clears it between steps.
    void set_stat_share(PrefillStatShare* share) { stat_share_ = share; }

    /// Marks the end of the prompt: runs the compression rule for after_prefill and every_n policies.
    void end_prefill();
    /// Gives every cached entry the score `es` holds for its (layer, KV head, position), es.missing if none
    /// (the result of a policy's after-prefill step).
    void set_scores(const EntryScores& es);
    /// Runs the compression rule on every head's global region now.
    void compress();
    /// Appends n synthetic entries per head (positions n_tokens() …, unit-variance uniform random keys and values) as if
    /// n tokens had been processed, through the same admission path; for benchmarks of decode at a depth,
    /// where the values do not matter. Throws KVBudgetExhausted like append.
    void fill_synthetic(int64_t n, uint64_t seed);
    /// Removes every entry at a position ≥ n and rewinds to position n (entries dropped earlier stay dropped).
    void rollback(int64_t n);
    void clear();
    /// Appends everything this sequence's cache holds to w (record version 3): its shape (layers, KV heads, head
    /// dimension, the global region's key and value element types, the sinks' and the window's key and value element
    /// types, page size, the keys' and values' rotation), context, policy spec, position, every head's kept entries
    /// with their positions and scores (only what is kept: a compressed cache saves small), and the scorer's state.
    void save(BinaryWriter& w) const;
    /// Replaces the contents with a record of save() from a cache of the same shape, key and value types, rotation
    /// and policy spec (this one must be built with them); version-1 records (one element type for keys and values)
    /// and version-2 records (no types of the sinks and the window: quantization at write; no rotation) are read too.
    /// Throws Error naming what differs (for the types: the record's key and value types per region and this cache's;
    /// for the rotation: both rotations), or
    /// for a truncated or corrupted record;
    /// KVBudgetExhausted if the pool runs out (the cache is then cleared).
    void load(BinaryReader& r);

    KVStats stats() const;
    const Policy& policy() const { return policy_; }
    /// The scorer's state of this sequence (null if the scorer keeps none).
    const ScorerState* scorer_state() const { return state_.get(); }
    const KVPool& pool() const { return *pool_; }
    HeadCache& head(int layer, int h) { return heads_[static_cast<size_t>(layer) * n_head_kv_ + h]; }
    const HeadCache& head(int layer, int h) const { return heads_[static_cast<size_t>(layer) * n_head_kv_ + h]; }

private:
    void decode_layer(const LayerInputs& in, const float* write_scores, float* out);
    void prefill_layer(const LayerInputs& in, const float* write_scores, float* out);
    /// The admission decision for an entry of (layer, head) at position pos: offered at write (store null) or
    /// when it leaves the window (store = the window, slot its index) pushed out by the entry at `now`. Runs the
    /// scorer's on_window_exit first, which may rewrite `score`.
    bool is_decode(int64_t T) const { return phase_ == Phase::kAuto ? T == 1 : phase_ == Phase::kDecode; }
    bool admit(int layer, int head, int32_t pos, float& score, const PageStore* store, int64_t slot, int64_t now);
    /// The admission test of (layer, head) at step `now`, as a callable for HeadCache::append (passed as a
    /// temporary, so that the HeadCache::Admit reference to it lives through the call).
    auto admit_fn(int layer, int head, int64_t now) {
        return [this, layer, head, now](int32_t p, float& s, const PageStore* st, int64_t slot) {
            return admit(layer, head, p, s, st, slot, now);
        };
    }

    /// Bytes of the pages this sequence holds now (KVStats::kv_bytes_final without building the per-head
    /// tables: the peak is tracked after every step).
    uint64_t bytes_in_use() const;

    ModelConfig cfg_;
    int64_t n_ctx_;
    Policy policy_;
    std::shared_ptr<KVPool> pool_;
    int n_layer_, n_head_kv_;
    std::vector<HeadCache> heads_;
    std::unique_ptr<ScorerState> state_;  // the scorer's memory of this sequence (null if it keeps none)
    const EntryScorer* entry_ = nullptr;  // policy_.scorer's interface when it is a per-entry scorer
    const StepScorer* step_ = nullptr;    // policy_.scorer's interface when it is a step scorer
    int64_t n_tokens_ = 0;
    int64_t decode_steps_ = 0;
    int64_t selected_read_ = 0, selected_total_ = 0;  // entries read / kept at decode steps under a selection
    Phase phase_ = Phase::kAuto;
    bool shadow_ = false;
    PrefillStatShare* stat_share_ = nullptr;
    uint64_t peak_bytes_ = 0;
};

}  // namespace kvsieve
