#include "policy/rule.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace kvsieve {

int64_t Rule::head_keep(int64_t n, int64_t n_ref) const {
    if (budget >= 0) return std::min(budget, n);
    if (n_ref < 0) n_ref = n;
    return std::min<int64_t>(n, std::max<int64_t>(1, static_cast<int64_t>(std::floor(n_ref * (1.0 - ratio)))));
}

std::string Rule::describe() const {
    auto amount = [&] {
        return budget >= 0 ? "budget=" + std::to_string(budget) : "ratio=" + std::to_string(ratio).substr(0, 5);
    };
    switch (kind) {
        case Kind::kKeepAll: return "keep_all";
        case Kind::kDropAll: return "drop_all";
        case Kind::kThreshold: return "threshold tau=" + std::to_string(tau);
        case Kind::kHeadBudget: return "head_budget " + amount();
        case Kind::kLayerBudget:
            return "layer_budget " + amount() + " safeguard=" + std::to_string(safeguard).substr(0, 4);
        case Kind::kGlobalBudget: return "global_budget " + amount();
        case Kind::kPyramidBudget:
            return "pyramid_budget " + amount() + " beta=" + std::to_string(pyramid_beta).substr(0, 4);
    }
    return "?";
}

namespace {
/// A score as the rules compare it: NaN ranks last.
float rank_score(float s) { return std::isnan(s) ? -INFINITY : s; }

/// h.order becomes the indices of h.scores ordered by score descending, lower index first on ties (NaN last): a
/// total order, so std::sort gives what a stable sort gives, without its buffer.
void order_desc(HeadCandidates& h) {
    std::vector<int64_t>& idx = h.order;
    idx.resize(h.n);
    std::iota(idx.begin(), idx.end(), 0);
    const float* s = h.scores;
    std::sort(idx.begin(), idx.end(), [s](int64_t a, int64_t b) {
        const float x = rank_score(s[a]), y = rank_score(s[b]);
        return x > y || (x == y && a < b);
    });
}

/// Sorts entries by score descending, earlier seq first on ties (NaN last).
void sort_ranked(std::vector<RankedEntry>& v) {
    std::sort(v.begin(), v.end(), [](const RankedEntry& a, const RankedEntry& b) {
        const float x = rank_score(a.score), y = rank_score(b.score);
        return x > y || (x == y && a.seq < b.seq);
    });
}

/// Keeps the k best of one head: the first k of order_desc, found by selection in O(n) rather than a sort (the
/// per-decode-step eviction of a budget policy evicts one or two entries of n). The order (score descending, NaN
/// last, lower index first) is total, so the kept set is the sort's.
void keep_top(HeadCandidates& h, int64_t k) {
    if (k >= h.n) {
        std::fill(h.keep.begin(), h.keep.end(), 1);
        return;
    }
    if (k <= 0) return;
    std::vector<int64_t>& idx = h.order;
    idx.resize(h.n);
    std::iota(idx.begin(), idx.end(), 0);
    const float* s = h.scores;
    std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), [s](int64_t a, int64_t b) {
        const float x = rank_score(s[a]), y = rank_score(s[b]);
        return x > y || (x == y && a < b);
    });
    for (int64_t i = 0; i < k; ++i) h.keep[idx[i]] = 1;
}
}  // namespace

int64_t pyramid_keep(const Rule& r, int layer, int n_layer, int64_t n) {
    const double w = static_cast<double>(r.pyramid_window), beta = r.pyramid_beta, ratio = r.ratio;
    const double max_cap = w + n * (1 - ratio);
    double min_num = (max_cap - w) / beta;
    double max_num = (max_cap - w) * 2 - min_num;
    if (max_num >= n - w) {
        max_num = static_cast<double>(n - w);
        min_num = (max_cap - w) * 2 - max_num;
    }
    if (!(n >= max_num && max_num >= min_num && min_num >= w))
        return std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(n * (1 - ratio))));
    const double steps = n_layer > 1 ? (max_num - min_num) / (n_layer - 1) : 0.0;
    return static_cast<int64_t>(std::nearbyint(max_num - layer * steps));
}

void apply_rule(const Rule& r, std::vector<HeadCandidates>& heads, const RuleContext& ctx, RuleScratch* scratch) {
    RuleScratch own;
    RuleScratch& sc = scratch ? *scratch : own;
    for (auto& h : heads) {
        // Geometric growth: a head whose entries wander upwards (a global budget, an admission before a budget)
        // reallocates a logarithmic number of times, not at every new maximum.
        if (h.keep.capacity() < static_cast<size_t>(h.n)) h.keep.reserve(std::max<size_t>(h.n, 2 * h.keep.capacity()));
        h.keep.assign(h.n, r.kind == Rule::Kind::kKeepAll ? 1 : 0);
    }
    switch (r.kind) {
        case Rule::Kind::kKeepAll:
        case Rule::Kind::kDropAll: return;
        case Rule::Kind::kThreshold:
            for (auto& h : heads)
                for (int64_t i = 0; i < h.n; ++i) h.keep[i] = h.scores[i] >= r.tau;
            return;
        case Rule::Kind::kHeadBudget:
            for (auto& h : heads) keep_top(h, r.head_keep(h.n, h.n_reference));
            return;
        case Rule::Kind::kPyramidBudget:
            // Layer budgets from the tokens seen, not the entries left: chunks do not compound.
            for (auto& h : heads) keep_top(h, std::min(h.n, pyramid_keep(r, h.layer, ctx.n_layer, ctx.n_tokens)));
            return;
        case Rule::Kind::kLayerBudget: {
            // AdaKV (Feng et al. 2024, Alg. 1): per layer, the H·k best entries over all its heads, after each
            // head receives its own best ⌊safeguard·k⌋.
            // Layers in increasing order, each layer's heads in the order given.
            if (heads.empty()) return;
            int lo = heads[0].layer, hi_layer = heads[0].layer;
            for (const auto& h : heads) lo = std::min(lo, h.layer), hi_layer = std::max(hi_layer, h.layer);
            for (int layer = lo; layer <= hi_layer; ++layer) {
                int64_t total = 0;
                std::vector<RankedEntry>& rest = sc.entries;
                rest.clear();
                for (size_t hi = 0; hi < heads.size(); ++hi) {
                    HeadCandidates& h = heads[hi];
                    if (h.layer != layer) continue;
                    const int64_t k = r.head_keep(h.n, h.n_reference);
                    total += k;
                    const int64_t guard = static_cast<int64_t>(std::floor(r.safeguard * k));
                    order_desc(h);
                    const std::vector<int64_t>& idx = h.order;
                    for (int64_t j = 0; j < h.n; ++j) {
                        if (j < guard) {
                            h.keep[idx[j]] = 1;
                            --total;
                        } else {
                            rest.push_back({h.scores[idx[j]], hi, idx[j], static_cast<int64_t>(rest.size())});
                        }
                    }
                }
                sort_ranked(rest);
                for (int64_t j = 0; j < std::min<int64_t>(total, static_cast<int64_t>(rest.size())); ++j)
                    heads[rest[j].head].keep[rest[j].i] = 1;
            }
            return;
        }
        case Rule::Kind::kGlobalBudget: {
            std::vector<RankedEntry>& all = sc.entries;
            all.clear();
            int64_t n = 0, n_ref = 0;
            for (size_t hi = 0; hi < heads.size(); ++hi) {
                n += heads[hi].n;
                n_ref += heads[hi].n_reference >= 0 ? heads[hi].n_reference : heads[hi].n;
                for (int64_t i = 0; i < heads[hi].n; ++i)
                    all.push_back({heads[hi].scores[i], hi, i, static_cast<int64_t>(all.size())});
            }
            const int64_t k =
                r.budget >= 0 ? std::min(r.budget, n)
                              : std::min<int64_t>(
                                    n, std::max<int64_t>(1, static_cast<int64_t>(std::floor(n_ref * (1.0 - r.ratio)))));
            sort_ranked(all);
            for (int64_t j = 0; j < std::min<int64_t>(k, n); ++j) heads[all[j].head].keep[all[j].i] = 1;
            return;
        }
    }
}

}  // namespace kvsieve
