#pragma once
// A policy's step after the prefill: it may run the model over extra tokens placed after the cached context and
// give the cached entries new scores (KVzip's context reconstruction, policy/kvzip.cpp). The policy layer only
// states what it needs (ModelAccess); the session layer (session/model_access.cpp) provides it over a model, its
// tokenizer and a sequence's cache, so policies never include the model or the cache.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/model_config.h"
#include "policy/scorer.h"

namespace kvsieve {

/// New scores for cached entries, per layer and KV head, keyed by position. An entry without one gets `missing`.
struct EntryScores {
    std::vector<std::vector<std::unordered_map<int32_t, float>>> by_pos;  ///< [L][Hkv]: position → score
    float missing = 0.0f;
};

/// What an after-prefill step may ask of the model that filled the cache.
class ModelAccess {
public:
    virtual ~ModelAccess() = default;
    virtual const ModelConfig& config() const = 0;
    /// Token ids of `text` (no BOS, special tokens not parsed).
    virtual std::vector<int32_t> encode(const std::string& text) const = 0;
    /// Tokens the cache holds (the context: positions 0 … n_tokens() − 1).
    virtual int64_t n_tokens() const = 0;
    /// Positions the cache may hold at most.
    virtual int64_t n_ctx() const = 0;
    /// Runs `ids` at positions n_tokens() … n_tokens() + |ids| − 1 through the model, each attending causally to
    /// every cached entry, and calls `observe` on every layer before the layer's new entries are stored. In that
    /// event (as a step scorer's prefill sees one), heads[h] holds the cached entries of KV head h whose position
    /// `wanted` accepts (float32; sinks, global, window order), followed by the |ids| new keys and values; scores and
    /// attn are null. Afterwards
    /// the replayed entries are removed: the cache holds exactly the context again. Throws Error if the
    /// positions do not fit in n_ctx().
    virtual void replay(const std::vector<int32_t>& ids, const std::function<bool(int32_t pos)>& wanted,
                        const std::function<void(const StepEvent& e)>& observe) = 0;
    /// The output projection W_O of `layer` as float32, row-major [D][Hq·d] (row r: output feature r).
    virtual std::vector<float> output_projection(int layer) const = 0;
};

/// Scores other policies' after-prefill steps would give, by their Policy::after_prefill_key.
using OtherEntryScores = std::map<std::string, EntryScores>;

/// The step: given the model and the context tokens (what the cache holds), returns new scores for every cached
/// entry; the session writes them into the cache, then the policy's compression rule runs. `also` (may be null)
/// names, by their after_prefill_key, other policies' steps over the same cache that the caller will need next; a
/// step that gets their scores from the same pass at little cost fills those entries in (KVzip and KVzip+ from
/// one replay), leaving the others out, and the caller computes what is left.
using AfterPrefill =
    std::function<EntryScores(ModelAccess& model, const std::vector<int32_t>& context, OtherEntryScores* also)>;

}  // namespace kvsieve
