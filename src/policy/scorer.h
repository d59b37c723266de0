#pragma once
// Scorers: anything that gives a KV entry an importance score (higher = more worth keeping). Any scorer can
// drive any rule (policy/rule.h) at any timing (policy/policy.h): kvpress's scorer/press split, generalised.
//
// Two kinds, two small interfaces (docs/architecture.md, "Scorers"):
//   EntryScorer      scores each entry once, from the entry itself, when it is written (before attention); may
//                    rewrite the score when the entry leaves the local window and give a decayed score at eviction;
//                    may keep a per-sequence state (KVzap, SP-KV, WG-KV, KVpop, hybrid heads, "A>B" stacks);
//   StepScorer       rescores the cached entries after attention at every prefill chunk and scores (or rescores)
//                    at every decode step, optionally from attention statistics the kernels compute for it (H2O,
//                    TOVA, SnapKV/PyramidKV, Expected Attention, KNorm, random, recency).
// The cache asks Scorer::entry() / Scorer::step() which one it holds. Every scorer is const once constructed: what
// depends on the model (a learned predictor's weights, shape checks) is done by Scorer::for_model, which returns a
// new scorer; what depends on the sequence lives in its ScorerState.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "util/binary_io.h"

#include "io/model_config.h"
#include "policy/layer_inputs.h"
#include "util/function_ref.h"

namespace kvsieve {

struct Policy;
class EntryScorer;
class StepScorer;

/// Attention statistics a step scorer asks the attention kernels for (nothing is computed when nobody asks).
enum class AttnStat {
    kNone,
    kMassSum,   ///< per key: Σ over the step's queries of the softmax weight, per query head of the group
    kMassLast,  ///< per key: the softmax weight of the step's last query, per query head of the group
};

/// A scorer's memory for one sequence (e.g. a recurrent state per layer and KV head). Scorer::new_state makes
/// one for each cache; the cache owns it and hands it to every event of that sequence, so one Scorer (shared,
/// const) serves any number of sequences.
class ScorerState {
public:
    virtual ~ScorerState() = default;
    /// Bytes this state holds (reported beside the cache's pages: a recurrent scorer's memory costs as entries do).
    virtual uint64_t bytes() const { return 0; }
    /// Appends the state to w (a saved cache), and reads it back into a state made by the same scorer for the
    /// same model. Throws Error for a record that does not fit.
    virtual void save(BinaryWriter& w) const {}
    virtual void load(BinaryReader& r) {}
};

/// One KV head's entries in a step event, as float32.
struct HeadView {
    int64_t n = 0;                  ///< entries
    const float* k = nullptr;       ///< [n][d] keys after RoPE (null at a decode step)
    const float* v = nullptr;       ///< [n][d] values (null at a decode step)
    const int32_t* pos = nullptr;   ///< [n] positions
    const float* attn = nullptr;    ///< [G][n] the statistic the scorer asked for (StepScorer::stat), else nullptr
    const float* scores = nullptr;  ///< prefill: [n − T] scores the cached entries had before this chunk
};

/// One layer of a forward step of T tokens at positions pos0 … pos0 + T − 1, as every scorer sees it: the step's
/// tensors (a view of the forward's, never a copy) and, for a step scorer, every KV head's entries.
///   EntryScorer::on_write: before the step's entries are stored and before attention; heads is empty.
///   StepScorer::score_prefill: after attention; heads[h] holds every entry KV head h can see, cached entries first,
///     then the chunk's T new ones (n = cached + T).
///   StepScorer::score_decode: after attention, T = 1; heads[h] holds the entries scored, the new one last (every
///     entry of the head for a scorer with DecodeScope::kAllEntries, else the new entry alone, n = 1); k and v are
///     null (the new entry's are step.k, step.v at head h).
struct StepEvent {
    StepEvent(const LayerInputs& s, int n_layer_, ScorerState* state_) : step(s), n_layer(n_layer_), state(state_) {}
    const LayerInputs& step;  ///< the layer's tensors (query head q reads KV head q / (Hq/Hkv))
    int n_layer = 0;
    /// False at a decode step: the step's kind is the one LayerInputs::phase carries, never a second copy.
    bool prefill() const { return step.phase == StepPhase::kPrefill; }
    ScorerState* state = nullptr;  ///< the sequence's state (null if the scorer keeps none)
    std::vector<HeadView> heads;   ///< [Hkv] (step scorers only)
};

/// One entry leaving the local window of (layer, head) when a newer one takes its slot.
struct WindowExitEvent {
    int layer = 0, head = 0, head_dim = 0;
    int32_t pos = 0;  ///< the leaving entry's position
    int64_t now = 0;  ///< position of the entry that pushes it out
    float score = 0;  ///< its stored score
    /// Reads its key after RoPE and its value, [d] each, as float32 into k and v (converted from the page's type
    /// only when a scorer asks); valid during the on_window_exit call only (a non-owning reference: no allocation).
    const FunctionRef<void(float* k, float* v)>* read = nullptr;
    ScorerState* state = nullptr;  ///< the sequence's state (null if the scorer keeps none)
};

/// Gives entries scores. A method is a small file: a docstring with its source and the formula. Derive from
/// EntryScorer or StepScorer, never from Scorer itself, and make it with std::make_shared (for_model may return it).
class Scorer : public std::enable_shared_from_this<Scorer> {
public:
    virtual ~Scorer() = default;
    virtual std::string name() const = 0;
    /// The per-entry interface, if this is a per-entry scorer (else null).
    virtual const EntryScorer* entry() const { return nullptr; }
    /// The step interface, if this is a step scorer (else null).
    virtual const StepScorer* step() const { return nullptr; }
    /// The scorer that serves a model of config c, called once when a cache is built (and by a server checking a
    /// predictor): one that loads or checks something against the model returns a new scorer holding it; the
    /// default, for scorers that serve any model, returns this one. Throws Error if the scorer cannot serve the
    /// model (e.g. a learned predictor trained for another shape).
    virtual std::shared_ptr<const Scorer> for_model(const ModelConfig& c) const {
        (void)c;
        return shared_from_this();
    }
    /// Called by the cache on the scorer for_model returned, before it lays out its heads: a scorer whose
    /// hyperparameters travel with the model (SP-KV's trained window and sinks, in the GGUF) sets the policy's values
    /// that the spec left at their defaults. Never changes what the spec gave; throws Error where the two cannot work
    /// together.
    virtual void adjust_policy(Policy& p) const { (void)p; }
    /// The per-sequence state of a new cache for a model of config c (null: the scorer keeps none).
    virtual std::unique_ptr<ScorerState> new_state(const ModelConfig& c) const {
        (void)c;
        return nullptr;
    }
};

/// A per-entry scorer: each entry gets its score once, when it is written, before attention (KVzap eq. 5: one
/// prediction per token and head), and keeps it, except where on_window_exit rewrites it; a budget rule compares
/// effective_score. Events of one entry, in order: on_write, on_window_exit when it leaves the local window (before
/// the admission rule), effective_score whenever a budget rule compares it.
class EntryScorer : public Scorer {
public:
    const EntryScorer* entry() const final { return this; }
    /// Writes scores[t·Hkv + h] for the step's T new entries of every KV head (e.heads is empty).
    virtual void on_write(const StepEvent& e, float* scores) const = 0;
    /// The score the admission rule judges a leaving entry by, and that it keeps in the global region (a delayed
    /// readout, KVpop eqs. 41–42). The default keeps the stored score.
    virtual float on_window_exit(const WindowExitEvent& e) const { return e.score; }
    /// The score a budget rule compares when `now` tokens have been seen, for an entry of (layer, head) stored with
    /// score `stored` at position `pos` (e.g. a per-head decayed priority, KVpop eq. 5). The default is the stored
    /// score.
    virtual float effective_score(float stored, int32_t pos, int64_t now, int layer, int head) const {
        (void)pos, (void)now, (void)layer, (void)head;
        return stored;
    }
};

/// Which entries a step scorer sees at a decode step.
enum class DecodeScope {
    kNewEntry,    ///< the new entry alone (n = 1): the others keep their scores, no pass over the cache
    kAllEntries,  ///< every entry of the head, the new one last: accumulated or last-query attention
};

/// A step scorer: after attention it rescores every entry of every KV head at each prefill chunk (kvpress rescores
/// all keys at each step) and updates scores at each decode step, from the step's tensors, the entries and, if it
/// asks, an attention statistic. What it asks for is fixed at construction.
class StepScorer : public Scorer {
public:
    /// stat: the statistic the kernels compute for it (HeadView::attn); scope: what score_decode sees.
    explicit StepScorer(AttnStat stat = AttnStat::kNone, DecodeScope scope = DecodeScope::kNewEntry)
        : stat_(stat), scope_(scope) {}
    const StepScorer* step() const final { return this; }
    AttnStat stat() const { return stat_; }
    DecodeScope decode_scope() const { return scope_; }
    /// Writes scores[h][i] for every entry i < e.heads[h].n of every KV head h after a prefill chunk. scores: Hkv
    /// pointers, each to e.heads[h].n floats the caller owns (the same shape score_decode updates).
    virtual void score_prefill(const StepEvent& e, const std::vector<float*>& scores) const = 0;
    /// Updates the scores of a layer's KV heads at a decode step: scores[h] [e.heads[h].n] holds the entries' old
    /// values (the new entry's last), updated in place; one call per layer, so a scorer can make one choice per layer
    /// (TOVA). The default gives the new entry +∞ (kept until a later prefill rescoring) and leaves the others.
    virtual void score_decode(const StepEvent& e, const std::vector<float*>& scores) const;

private:
    AttnStat stat_;
    DecodeScope scope_;
};

}  // namespace kvsieve
