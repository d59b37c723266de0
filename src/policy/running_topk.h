#pragma once
// The running top-k of a fixed-budget eviction with static priorities (KVpop, App. C, Alg. 2). Entries become
// eligible for eviction one at a time (the one leaving the protected window at each step); a head keeps the k
// highest-priority eligible entries. When priorities never change after an entry is scored (KVpop's static
// priorities, eqs. 18–21: a per-head decay that shifts every score alike), greedy eviction of the lowest entry
// at each step keeps exactly the top-k of all entries eligible so far: an entry evicted once has k better ones
// that stay. So the kept set at every step is given by one cutoff rank, found in O(log n) with a Fenwick tree
// (Fenwick 1994) over the entries' ranks. The trainer builds its masks and its teacher's boundary tokens from it.
#include <cstdint>
#include <vector>

namespace kvsieve {

/// Fenwick (binary indexed) tree of counts over ranks 0 … n − 1.
class RankFenwick {
public:
    explicit RankFenwick(int64_t n);
    /// Adds one at rank r ∈ [0, n). Throws Error when r is out of range.
    void insert(int64_t r);
    /// Entries at ranks ≤ r (r < 0: 0).
    int64_t count_upto(int64_t r) const;
    /// The smallest rank R with count_upto(R) ≥ c (the c-th best inserted rank, c ≥ 1); −1 when fewer than c
    /// entries are inserted.
    int64_t kth(int64_t c) const;
    int64_t size() const { return total_; }

private:
    std::vector<int64_t> tree_;  // 1-based
    int64_t n_ = 0, total_ = 0, top_bit_ = 1;
};

/// Ranks of priorities: rank 0 is the highest; ties go to the lower index (a stable top-k, as policy/rule.h).
/// prio [n]; NaN is an error (Error).
std::vector<int64_t> priority_ranks(const std::vector<float>& prio);

/// The running top-k: entries 0 … n − 1 become eligible in index order; after entry i is inserted, cutoff[i] is the
/// index of the k-th best eligible entry (the boundary: it and every eligible entry ranked above it are kept), or
/// −1 while fewer than k entries are eligible (all kept). k ≥ 1 (Error otherwise).
std::vector<int64_t> running_topk_cutoff(const std::vector<float>& prio, int64_t k);

}  // namespace kvsieve
