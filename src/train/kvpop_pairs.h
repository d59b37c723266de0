#pragma once
// The teacher's eviction decisions that KVpop's boundary loss learns from (Hauzenberger et al., KVpop §3, eqs. 5–7,
// App. B–C; docs/design.md §5.5). For one KV head of one sequence, entry t (s ≤ t) becomes eligible at step
// q = t + w, when it leaves the protected window. The teacher keeps the k eligible entries of highest static
// priority p_t = y_t − ⌊t/n⌋ · log γ (its future-attention target y_t = log(ε + m_t), eq. 3, decayed by γ as the
// effective score r + ⌊(q − t)/n⌋ log γ of eq. 5, whose q-dependent part is the same for every entry) — the running
// top-k of policy/running_topk.h. At each step where more than k are eligible the one decision that changes the cache
// is whether the newcomer t_new = q − w enters the top-k (label keep, eq. 6): if it does, the entry it pushes out
// (the (k+1)-th) is its boundary; if not, the k-th (the weakest kept). The loss (eq. 7) asks the student to order
// the newcomer and its boundary as the teacher does. This header does not include libtorch.
#include <cstdint>
#include <vector>

namespace kvsieve::train {

/// One teacher decision.
struct BoundaryPair {
    int32_t q = 0;      ///< the step (query position) at which t_new became eligible
    int32_t t_new = 0;  ///< the newcomer, q − w
    int32_t t_bnd = 0;  ///< its boundary: the (k+1)-th if the newcomer is kept, else the k-th
    bool keep = false;  ///< the teacher keeps the newcomer
    float margin = 0;   ///< |p_new − p_bnd| (teacher priorities)
};

/// Every decision of one head's sequence: prio [T] the teacher's static priorities of positions 0 … T − 1, s sinks,
/// window w, budget k ≥ 1 long-range entries. Steps q with at most k eligible entries make no decision. Ties rank the
/// older entry first (policy/running_topk.h). Throws Error for k < 1, s or w < 0, or a NaN priority.
std::vector<BoundaryPair> boundary_pairs(const std::vector<float>& prio, int64_t sinks, int64_t window, int64_t k);

}  // namespace kvsieve::train
