#pragma once
// The paged, ragged KV cache of one sequence: its entries per (layer, KV head), kept as its policy decides.
#include <cstdint>
#include <memory>
#include <vector>

#include "cache/head_cache.h"
#include "cache/kv_pool.h"
#include "cache/kv_stats.h"
#include "io/model_config.h"
#include "policy/layer_inputs.h"
#include "policy/policy.h"

namespace kvsieve {

/// The storage of one sequence's KV cache: all HeadCaches (L × H_kv) over one KVPool (their sinks and windows on the
/// pool's local() layout, their global regions on the pool's own: docs/architecture.md, "Where quantization
/// happens"), the policy that decides what they keep, the scorer's per-sequence state, and statistics. It stores;
/// it does not attend: attention over it is attend/'s (attend/paged_attention.h), which appends each step's entries
/// through append() (the admission path) and calls finish_step() after each step.
///   admission: an entry leaving a full window is offered to the policy's admission rule, after a per-entry scorer's
///     EntryScorer::on_window_exit (a delayed readout) has rewritten its score; without a window the new entry is
///     offered at write;
///   compression: the rule runs on the global regions after the prompt (end_prefill) and, for every_n_decode_steps,
///     every n decode steps (finish_step).
/// A prompt fed in several pieces leaves every compression point where one piece puts it: while admission is held
/// (hold_admission, set by the prefill driver for each piece but the last) the entries leaving the window enter the
/// global region unjudged, so that the later pieces attend to the whole prompt as one batch would; end_prefill offers
/// them to the admission rule (in position order, each with the position that pushed it out) before it compresses.
/// set_compress_during_prefill(true) instead judges and compresses after every piece (memory bounded by the policy
/// while a long prompt is read, but the result then depends on the piece size).
class KVCache {
public:
    /// Throws Error for a context ≤ 0, a pool of another head dimension than the model's, a head dimension the
    /// pool's element types cannot hold, or d > 256.
    KVCache(const ModelConfig& c, int64_t n_ctx, Policy policy, std::shared_ptr<KVPool> pool);

    /// Position of the next token (tokens processed so far).
    int64_t n_tokens() const { return n_tokens_; }
    /// Most positions the sequence may reach.
    int64_t n_ctx() const { return n_ctx_; }
    /// The model's hyperparameters this cache is shaped for (layers, KV heads, head dimension).
    const ModelConfig& config() const { return cfg_; }

    /// Stores the entry (float32 k, v [d]) of (layer, KV head) at position pos with a score, through the admission
    /// path (HeadCache::append: a full window pushes its oldest entry out, offered to the admission rule; without a
    /// window this entry is offered at write). Returns where it went (Slot::region empty: dropped). Throws
    /// KVPoolExhausted if a page is needed and none is left.
    HeadCache::Slot append(int layer, int head, const float* k, const float* v, int32_t pos, float score);
    /// As append, but without a window the entry is stored in the global region unconditionally: a decode step
    /// scores it first and then calls admit_decoded.
    HeadCache::Slot append_unadmitted(int layer, int head, const float* k, const float* v, int32_t pos, float score);
    /// Without a window: offers every KV head's entry at `pos` of `layer` (the last of its global region, stored by
    /// append_unadmitted) to the admission rule with its current score, and drops it if refused. Nothing happens
    /// with a window or under a keep-all admission.
    void admit_decoded(int layer, int32_t pos);
    /// After every layer of a forward step (positions pos0 … pos0 + T − 1) has been stored: advances to position
    /// pos0 + T, counts a decode step (running the compression rule every n of them for every_n_decode_steps) and
    /// tracks the peak bytes.
    void finish_step(int64_t pos0, int64_t T, StepPhase phase);
    /// Adds a decode step's read-time selection counts: entries read and entries kept (KVStats::read_fraction).
    void count_selection(int64_t read, int64_t total) {
        selected_read_ += read;
        selected_total_ += total;
    }

    /// Marks the end of the prompt: offers the entries held by hold_admission to the admission rule (as they would
    /// have been when they left the window), then runs the compression rule for after_prefill and every_n policies.
    void end_prefill();
    /// Marks the end of a piece of the prompt that is not its last: nothing happens (the entries wait for
    /// end_prefill), except under compress_during_prefill, where this is end_prefill.
    void end_prefill_chunk();
    /// Called by the prefill driver before each forward step of a prompt: `hold` for a piece that is not the prompt's
    /// last. While held, an entry leaving the window (without a window: a written entry) is stored in the global region
    /// without the admission rule and remembered for end_prefill. Ignored (never held) under compress_during_prefill
    /// and for a policy with a gated prefill (Policy::gated_prefill: its queries already see only what the admission
    /// rule keeps, per token, so admitting at window exit does not depend on the pieces).
    void hold_admission(bool hold) { hold_ = hold && !compress_during_prefill_ && !policy_.gated_prefill; }
    /// Memory-bounded prefill (off by default): the admission rule and the compression run after each piece of a
    /// chunked prompt, so the later pieces attend to an already pruned past and the kept entries depend on the piece
    /// size. Off, a prompt keeps the same entries whatever its pieces (docs/architecture.md, "Where compression
    /// happens").
    void set_compress_during_prefill(bool on) {
        compress_during_prefill_ = on;
        if (on) hold_ = false;
    }
    bool compress_during_prefill() const { return compress_during_prefill_; }
    /// Entries stored unjudged by hold_admission and not yet offered to the admission rule (all heads).
    int64_t n_held() const;
    /// Gives every cached entry the score `es` holds for its (layer, KV head, position), es.missing if none
    /// (the result of a policy's after-prefill step). Throws Error if es is not shaped L × H_kv.
    void set_scores(const EntryScores& es);
    /// Runs the compression rule on every head's global region now.
    void compress();
    /// Removes every entry at a position ≥ n and rewinds to position n (entries dropped earlier stay dropped).
    void rollback(int64_t n);
    /// Removes every entry, makes the scorer's state afresh and rewinds to position 0.
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
    /// for the rotation: both rotations), or for a truncated or corrupted record; KVPoolExhausted if the pool runs
    /// out (the cache is then cleared).
    void load(BinaryReader& r);

    /// What the cache holds now: entries per (layer, KV head), density, bytes per region, peak bytes, read fraction.
    KVStats stats() const;
    /// The policy as run (its scorer adapted to the model: Scorer::for_model, Scorer::adjust_policy).
    const Policy& policy() const { return policy_; }
    /// The scorer's state of this sequence (null if the scorer keeps none).
    const ScorerState* scorer_state() const { return state_.get(); }
    ScorerState* scorer_state() { return state_.get(); }
    /// The policy's scorer as a per-entry scorer (null if it is none).
    const EntryScorer* entry_scorer() const { return entry_; }
    /// The policy's scorer as a step scorer (null if it is none).
    const StepScorer* step_scorer() const { return step_; }
    /// The pool whose pages hold the entries (its local() layout: the sinks' and the windows').
    const KVPool& pool() const { return *pool_; }
    /// The cache of (layer, KV head h); layer < L, h < H_kv (not checked).
    HeadCache& head(int layer, int h) { return heads_[static_cast<size_t>(layer) * n_head_kv_ + h]; }
    const HeadCache& head(int layer, int h) const { return heads_[static_cast<size_t>(layer) * n_head_kv_ + h]; }

private:
    /// The admission decision for an entry of (layer, head) at position pos: offered at write (store null) or
    /// when it leaves the window (store = the window, slot its index) pushed out by the entry at `now`. Runs the
    /// scorer's on_window_exit first, which may rewrite `score`.
    bool admit(int layer, int head, int32_t pos, float& score, const PageStore* store, int64_t slot, int64_t now);
    /// Offers every held entry (hold_admission) to the admission rule and removes those it refuses.
    void settle_held();
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
    uint64_t peak_bytes_ = 0;
    bool compress_during_prefill_ = false;
    bool hold_ = false;
    /// An entry stored unjudged while admission was held: its position, the position of the entry that pushed it
    /// out of the window (`now` of its admission), and whether it left a window (false: written without one).
    struct Held {
        int32_t pos;
        int64_t now;
        bool from_window;
    };
    std::vector<std::vector<Held>> held_;  // [L·H_kv], in position order
    // compress()'s candidates and effective scores, reused from call to call (sized by the first, grown with the
    // context).
    std::vector<HeadCandidates> compress_candidates_;
    std::vector<std::vector<float>> compress_effective_;
    RuleScratch compress_rule_;  // the layer and global budgets' ranking across heads
};

}  // namespace kvsieve
