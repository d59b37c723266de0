#include "policy/running_topk.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace kvsieve {

RankFenwick::RankFenwick(int64_t n) : tree_(static_cast<size_t>(std::max<int64_t>(n, 0)) + 1, 0), n_(n) {
    require(n >= 0, "Fenwick tree over ", n, " ranks");
    while (top_bit_ * 2 <= n_) top_bit_ *= 2;
}

void RankFenwick::insert(int64_t r) {
    require(r >= 0 && r < n_, "rank ", r, " outside [0, ", n_, ")");
    for (int64_t i = r + 1; i <= n_; i += i & -i) ++tree_[i];
    ++total_;
}

int64_t RankFenwick::count_upto(int64_t r) const {
    int64_t c = 0;
    for (int64_t i = std::min(r + 1, n_); i > 0; i -= i & -i) c += tree_[i];
    return c;
}

int64_t RankFenwick::kth(int64_t c) const {
    if (c < 1 || c > total_) return -1;
    // Descend the implicit tree: the largest position p with prefix(p) < c; the answer is rank p (1-based p + 1).
    int64_t p = 0;
    for (int64_t b = top_bit_; b > 0; b /= 2)
        if (p + b <= n_ && tree_[p + b] < c) {
            p += b;
            c -= tree_[p];
        }
    return p;
}

std::vector<int64_t> priority_ranks(const std::vector<float>& prio) {
    for (size_t i = 0; i < prio.size(); ++i) require(!std::isnan(prio[i]), "priority ", i, " is NaN");
    std::vector<int64_t> order(prio.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return prio[a] > prio[b]; });
    std::vector<int64_t> rank(prio.size());
    for (size_t r = 0; r < order.size(); ++r) rank[order[r]] = static_cast<int64_t>(r);
    return rank;
}

std::vector<int64_t> running_topk_cutoff(const std::vector<float>& prio, int64_t k) {
    require(k >= 1, "running top-k needs k ≥ 1, got ", k);
    const int64_t n = static_cast<int64_t>(prio.size());
    const std::vector<int64_t> rank = priority_ranks(prio);
    std::vector<int64_t> by_rank(n);
    for (int64_t i = 0; i < n; ++i) by_rank[rank[i]] = i;
    RankFenwick fw(n);
    std::vector<int64_t> cutoff(n, -1);
    for (int64_t i = 0; i < n; ++i) {
        fw.insert(rank[i]);
        const int64_t r = fw.kth(k);
        cutoff[i] = r < 0 ? -1 : by_rank[r];
    }
    return cutoff;
}

}  // namespace kvsieve
