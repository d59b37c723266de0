#pragma once
// Rules turn scores into keep/drop decisions.
#include <cstdint>
#include <string>
#include <vector>

namespace kvsieve {

/// Which rule, and its parameters.
struct Rule {
    enum class Kind {
        kKeepAll,        ///< no decision: everything offered is kept
        kDropAll,        ///< everything offered is dropped (StreamingLLM's exits)
        kThreshold,      ///< keep iff score ≥ τ
        kHeadBudget,     ///< per KV head keep the k highest (k = budget, or (1 − ratio) × candidates)
        kLayerBudget,    ///< per layer keep H_kv·k highest across its heads, each head ≥ safeguard·k (AdaKV)
        kGlobalBudget,   ///< keep the (1 − ratio) highest over all layers and heads (or `budget` entries)
        kPyramidBudget,  ///< per KV head keep the k_l highest, k_l shrinking with depth (PyramidKV; see pyramid_keep)
    } kind = Kind::kKeepAll;
    double tau = 0;
    int64_t budget = -1;  ///< entries per head (head/layer rules) or in total (global rule); −1: use ratio
    double ratio = 0;     ///< compression ratio in [0, 1)
    double safeguard = 0.2;
    int64_t pyramid_window = 64;  ///< PyramidKV: the observation window w of its budget formula
    double pyramid_beta = 20;     ///< PyramidKV: β, the ratio of the first layer's budget to the last's

    /// Candidates one head may keep under a per-head budget: budget, or max(1, ⌊n_ref·(1 − ratio)⌋) as kvpress,
    /// where n_ref counts every token the ratio refers to (those already dropped included), at most n.
    int64_t head_keep(int64_t n, int64_t n_ref = -1) const;
    bool is_budget() const {
        return kind == Kind::kHeadBudget || kind == Kind::kLayerBudget || kind == Kind::kGlobalBudget ||
               kind == Kind::kPyramidBudget;
    }
    std::string describe() const;
};

/// Scores of the candidate entries of one head, and the decision written back.
struct HeadCandidates {
    int layer = 0, head = 0;
    const float* scores = nullptr;
    int64_t n = 0;
    int64_t n_reference = -1;  ///< entries a ratio refers to (tokens seen beyond sinks and window); −1: n
    std::vector<char> keep;    ///< out: [n]
    /// apply_rule's working space (an index per entry); reused when the caller reuses the candidates.
    std::vector<int64_t> order;
};

/// What the heads' cache has seen, for rules whose budgets depend on it.
struct RuleContext {
    int n_layer = 1;
    int64_t n_tokens = 0;  ///< tokens seen so far (kvpress's q_len), dropped ones included
};

/// PyramidKV's keep count of layer `layer` of n_layer after n tokens (Cai et al. 2024, §3.2, eqs. 6–7, with
/// kvpress PyramidKVPress's formula): max_capacity = w + n(1 − R), min = (max_capacity − w)/β,
/// max = 2(max_capacity − w) − min (clipped to n − w); layer l keeps round(max − l·(max − min)/(L − 1)); when the
/// pyramid does not fit, every layer keeps max(1, round(n(1 − R))).
int64_t pyramid_keep(const Rule& r, int layer, int n_layer, int64_t n);

/// One entry of a rule that ranks across heads (layer and global budgets): its score, its head's index in the
/// candidates and its own, and its rank before the sort (ties keep that order, as a stable sort would).
struct RankedEntry {
    float score;
    size_t head;
    int64_t i;
    int64_t seq;
};

/// apply_rule's working space across heads, kept by a caller that applies a rule at every decode step (a budget) so
/// that it allocates nothing once it has held the most entries it will hold.
struct RuleScratch {
    std::vector<RankedEntry> entries;
};

/// Applies a budget or threshold rule jointly to a set of heads (all heads of the cache, so layer and global
/// rules see what they need). Ties are broken toward the lower index, as a stable top-k. `scratch`: the caller's
/// working space (null: one made for the call).
void apply_rule(const Rule& r, std::vector<HeadCandidates>& heads, const RuleContext& ctx = {},
                RuleScratch* scratch = nullptr);

}  // namespace kvsieve
