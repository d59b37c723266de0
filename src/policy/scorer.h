#pragma once
// Scorers: anything that gives a KV entry an importance score (higher = more worth keeping). Any scorer can
// drive any rule (policy/rule.h) at any timing (policy/policy.h): kvpress's scorer/press split, generalised.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "util/binary_io.h"

#include "io/model_config.h"
#include "kernels/rope_angles.h"

namespace kvsieve {

struct Policy;

/// Attention statistics a scorer asks the attention kernels for (nothing is computed when nobody asks).
enum class AttnStat {
    kNone,
    kMassSum,   ///< per key: Σ over the step's queries of the softmax weight, per query head of the group
    kMassLast,  ///< per key: the softmax weight of the step's last query, per query head of the group
};

/// A map of position → score as a saved record (sorted by position), and back.
void save_position_scores(BinaryWriter& w, const std::unordered_map<int32_t, float>& m);
void load_position_scores(BinaryReader& r, std::unordered_map<int32_t, float>& m);

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

/// One KV head's view after a prefill chunk: every entry it can see (cached entries first, then the chunk's
/// T new ones), as float32.
struct HeadView {
    int64_t n = 0;                 ///< entries (cached + new)
    const float* k = nullptr;      ///< [n][d] keys after RoPE
    const float* v = nullptr;      ///< [n][d] values
    const int32_t* pos = nullptr;  ///< [n] positions
    const float* attn = nullptr;   ///< [G][n] the statistic asked for by stat(), else nullptr
    const float* scores = nullptr; ///< [n − T] scores the cached entries had before this chunk
};

/// One layer after a prefill chunk of T tokens at positions pos0 … pos0 + T − 1.
struct PrefillScoreInput {
    int layer = 0, n_layer = 0;
    int n_head = 0, n_head_kv = 0, head_dim = 0;  ///< Hq, Hkv, d; query head h reads KV head h / (Hq/Hkv)
    int64_t T = 0, pos0 = 0;
    const float* q = nullptr;      ///< [T][Hq·d] queries after RoPE
    const float* q_pre = nullptr;  ///< [T][Hq·d] queries before RoPE
    const float* k_pre = nullptr;  ///< [T][Hkv·d] the chunk's keys before RoPE (after QK-norm for Qwen3)
    int64_t n_embd = 0;
    const float* hidden = nullptr; ///< [T][D] attention inputs
    RopeAngles rope;               ///< the model's rotation (q = RoPE(q_pre))
    std::vector<HeadView> heads;   ///< [Hkv]
    ScorerState* state = nullptr;  ///< the sequence's state (null if the scorer keeps none)
};

/// A layer's T new entries (positions pos0 … pos0 + T − 1), before they are stored and before attention runs:
/// what write-time scorers (KVzap, SP-KV, WG-KV) see.
struct WriteEvent {
    int layer = 0, n_layer = 0;
    int n_head_kv = 0, head_dim = 0;
    int64_t T = 0, pos0 = 0;
    bool prefill = true;           ///< false at a decode step
    int64_t n_embd = 0;
    const float* hidden = nullptr; ///< [T][D] attention inputs (after the input RMSNorm)
    const float* k_pre = nullptr;  ///< [T][Hkv·d] keys before RoPE (after QK-norm for Qwen3)
    const float* k = nullptr;      ///< [T][Hkv·d] keys after RoPE
    const float* v = nullptr;      ///< [T][Hkv·d] values
};

/// One entry leaving the local window of (layer, head) when a newer one takes its slot.
struct WindowExitEvent {
    int layer = 0, head = 0, head_dim = 0;
    int32_t pos = 0;               ///< the leaving entry's position
    int64_t now = 0;               ///< position of the entry that pushes it out
    float score = 0;               ///< its stored score
    const float* k = nullptr;      ///< [d] its key after RoPE (float32), if the scorer reads_at_window_exit()
    const float* v = nullptr;      ///< [d] its value, likewise
};

/// One KV head at a decode step, after the new entry was appended (it is the last).
struct DecodeScoreInput {
    int layer = 0, head = 0, group = 1;
    int64_t n = 0;                   ///< entries
    int64_t pos = 0;                 ///< position of the new token
    const int32_t* positions = nullptr;  ///< [n]
    const float* attn = nullptr;     ///< [G][n] statistic asked for by stat()
    const float* k = nullptr;        ///< [d] the new entry's key after RoPE
    const float* k_pre = nullptr;    ///< [d] the same before RoPE
    const float* v = nullptr;        ///< [d] its value
    const float* hidden = nullptr;   ///< [D] the token's attention input
    int head_dim = 0;
    int64_t n_embd = 0;
    ScorerState* state = nullptr;    ///< the sequence's state (null if the scorer keeps none)
};

/// Gives entries scores. A method is a small file: a docstring with its source and the formula.
///
/// Events of one entry, in order (docs/architecture.md): on_write (write-time scorers) before attention;
/// score_prefill / score_decode after attention (attention-statistics scorers); on_window_exit when it leaves
/// the local window, before the admission rule; effective_score whenever a budget rule compares it.
class Scorer {
public:
    virtual ~Scorer() = default;
    virtual std::string name() const = 0;
    virtual AttnStat stat() const { return AttnStat::kNone; }
    /// Called once when a cache is built for a model; throws Error if the scorer cannot serve it (e.g. a
    /// learned predictor trained for another shape).
    virtual void bind(const ModelConfig& c) { (void)c; }
    /// Called by the cache right after bind, before it lays out its heads: a scorer whose hyperparameters travel
    /// with the model (SP-KV's trained window and sinks, in the GGUF) sets the policy's values that the spec left at
    /// their defaults. Never changes what the spec gave; throws Error where the two cannot work together.
    virtual void adjust_policy(Policy& p) const { (void)p; }
    /// The per-sequence state of a new cache for a model of config c (null: the scorer keeps none).
    virtual std::unique_ptr<ScorerState> new_state(const ModelConfig& c) const {
        (void)c;
        return nullptr;
    }

    /// True if on_write gives new entries their scores before attention; then score_prefill and score_decode are
    /// not called and entries keep their write-time scores (KVzap eq. 5: one prediction per token and head).
    virtual bool scores_at_write() const { return false; }
    /// Writes scores[t·Hkv + h] for the event's T new entries of every KV head (called only if scores_at_write()).
    virtual void on_write(const WriteEvent& e, ScorerState* state, float* scores) const {
        (void)e, (void)state, (void)scores;
    }
    /// True if on_window_exit needs the leaving entry's key and value (they are converted to float32 for it).
    virtual bool reads_at_window_exit() const { return false; }
    /// The score the admission rule judges a leaving entry by, and that it keeps in the global region (a delayed
    /// readout, KVpop eqs. 41–42). The default keeps the stored score.
    virtual float on_window_exit(const WindowExitEvent& e, ScorerState* state) const {
        (void)state;
        return e.score;
    }
    /// True if effective_score differs from the stored score.
    virtual bool decays() const { return false; }
    /// The score a budget rule compares when `now` tokens have been seen, for an entry of (layer, head) stored with
    /// score `stored` at position `pos` (e.g. a per-head decayed priority, KVpop eq. 5). The default is the stored
    /// score.
    virtual float effective_score(float stored, int32_t pos, int64_t now, int layer, int head) const {
        (void)pos, (void)now, (void)layer, (void)head;
        return stored;
    }

    /// Writes scores[h][i] for every entry i of every KV head h after a prefill chunk (kvpress rescores all
    /// keys at each step). scores has Hkv vectors sized like the heads' views.
    virtual void score_prefill(const PrefillScoreInput& in, std::vector<std::vector<float>>& scores) const = 0;
    /// True if score_decode updates the scores of old entries too (accumulated or last-query attention); then
    /// it sees every entry of the head. Otherwise it is called with n = 1, the new entry alone.
    virtual bool rescore_on_decode() const { return false; }
    /// Updates one head's scores [n] at a decode step (old values in; the new entry is last). The default
    /// gives the new entry +∞ (kept until a later prefill rescoring) and leaves the others.
    virtual void score_decode(const DecodeScoreInput& in, float* scores) const;
    /// For scorers that rescore_on_decode(): updates every KV head of a layer at once (heads[h], scores[h] as in
    /// score_decode), so a scorer can make one choice per layer. The default calls score_decode per head.
    virtual void score_decode_layer(const std::vector<DecodeScoreInput>& heads, const std::vector<float*>& scores) const;
};

}  // namespace kvsieve
