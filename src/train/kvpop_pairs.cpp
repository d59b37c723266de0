#include "train/kvpop_pairs.h"

#include <cmath>

#include "policy/running_topk.h"
#include "util/error.h"

namespace kvsieve::train {

std::vector<BoundaryPair> boundary_pairs(const std::vector<float>& prio, int64_t sinks, int64_t window, int64_t k) {
    require(k >= 1, "boundary pairs need a budget k ≥ 1, got ", k);
    require(sinks >= 0 && window >= 0, "boundary pairs: sinks and window must be ≥ 0");
    const int64_t T = static_cast<int64_t>(prio.size());
    std::vector<BoundaryPair> out;
    if (sinks >= T - window) return out;
    // Eligible entries in the order they become eligible: t = s, s + 1, …, T − w − 1.
    const std::vector<float> elig(prio.begin() + sinks, prio.end() - window);
    const std::vector<int64_t> rank = priority_ranks(elig);
    std::vector<int64_t> by_rank(elig.size());
    for (size_t i = 0; i < elig.size(); ++i) by_rank[rank[i]] = static_cast<int64_t>(i);
    RankFenwick fw(static_cast<int64_t>(elig.size()));
    for (size_t i = 0; i < elig.size(); ++i) {
        fw.insert(rank[i]);
        if (fw.size() <= k) continue;
        BoundaryPair p;
        p.t_new = static_cast<int32_t>(sinks + static_cast<int64_t>(i));
        p.q = static_cast<int32_t>(p.t_new + window);
        const int64_t kth = fw.kth(k);
        p.keep = rank[i] <= kth;
        const int64_t b = by_rank[p.keep ? fw.kth(k + 1) : kth];
        p.t_bnd = static_cast<int32_t>(sinks + b);
        p.margin = std::abs(elig[i] - elig[b]);
        out.push_back(p);
    }
    return out;
}

}  // namespace kvsieve::train
