#pragma once
// Rules turn scores into keep/drop decisions.
#include <cstdint>
#include <string>
#include <vector>

namespace kvsieve {

/// Which rule, and its parameters.
struct Rule {
    enum class Kind {
        kKeepAll,       ///< no decision: everything offered is kept
        kDropAll,       ///< everything offered is dropped (StreamingLLM's exits)
        kThreshold,     ///< keep iff score ≥ τ
        kHeadBudget,    ///< per KV head keep the k highest (k = budget, or (1 − ratio) × candidates)
        kLayerBudget,   ///< per layer keep H_kv·k highest across its heads, each head ≥ safeguard·k (AdaKV)
        kGlobalBudget,  ///< keep the (1 − ratio) highest over all layers and heads (or `budget` entries)
    } kind = Kind::kKeepAll;
    double tau = 0;
    int64_t budget = -1;   ///< entries per head (head/layer rules) or in total (global rule); −1: use ratio
    double ratio = 0;      ///< compression ratio in [0, 1)
    double safeguard = 0.2;

    /// Candidates one head may keep under a per-head budget: budget, or max(1, ⌊n_ref·(1 − ratio)⌋) as kvpress,
    /// where n_ref counts every token the ratio refers to (those already dropped included), at most n.
    int64_t head_keep(int64_t n, int64_t n_ref = -1) const;
    bool is_budget() const { return kind == Kind::kHeadBudget || kind == Kind::kLayerBudget || kind == Kind::kGlobalBudget; }
    std::string describe() const;
};

/// Scores of the candidate entries of one head, and the decision written back.
struct HeadCandidates {
    int layer = 0, head = 0;
    const float* scores = nullptr;
    int64_t n = 0;
    int64_t n_reference = -1;    ///< entries a ratio refers to (tokens seen beyond sinks and window); −1: n
    int64_t keep_override = -1;  ///< per-head keep count set by a preset (PyramidKV's layer budgets)
    std::vector<char> keep;      ///< out: [n]
};

/// Applies a budget or threshold rule jointly to a set of heads (all heads of the cache, so layer and global
/// rules see what they need). Ties are broken toward the lower index, as a stable top-k.
void apply_rule(const Rule& r, std::vector<HeadCandidates>& heads);

}  // namespace kvsieve
