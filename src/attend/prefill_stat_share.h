#pragma once
// Attention statistics of a prefill step computed once for several caches that hold the same keys.
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "kernels/attention.h"
#include "cache/kv_pool.h"

namespace kvsieve {

/// The per-key attention statistics of one prefill step (KeyStat::kSum: Σ over the step's queries of their softmax
/// weight, H2O; kLast: the last query's weights, TOVA), kept per (layer, KV head) so that caches given the same
/// step by a shared prefill (session/shared_prefill.h) compute them once: H2O at four compression ratios holds
/// the same keys until its compression runs after the prompt, and its four caches would otherwise each run the
/// whole T × n softmax. A cache reuses what another stored only if the statistic, the element types of the stored
/// keys (the global region's and the sinks' and window's, which differ under quantization at admission) and the key positions in attention order (so also the step's length, the chunk being the last T) are
/// the same; the queries are the step's, shared by every cache. Layout of a stored entry: [G][n] floats, G the
/// GQA group size, n the keys in attention order (sinks, global, window, then the step's own). Thread-safe (a
/// cache's heads run in parallel). Cleared by the owner after each step.
class PrefillStatShare {
public:
    /// The statistics stored for (layer, KV head) if they were computed with `stat` over keys of element type
    /// `type` in the global region and `local_type` in the sinks and the window (KVPool::local) at exactly the
    /// positions `pos` (attention order), else null. Counts a hit.
    const std::vector<float>* find(int layer, int head, KeyStat stat, KVType type, KVType local_type,
                                   const std::vector<int32_t>& pos);
    /// Stores `a` ([G][n]) as the statistics of (layer, head, stat, type, local_type) over the keys at `pos`,
    /// replacing any.
    void put(int layer, int head, KeyStat stat, KVType type, KVType local_type, const std::vector<int32_t>& pos,
             const std::vector<float>& a);
    void clear();
    /// Number of finds that returned stored statistics since construction.
    int64_t hits() const;

private:
    struct Entry {
        std::vector<int32_t> pos;
        std::vector<float> a;
    };
    using Key = std::tuple<int, int, int, int, int>;  // layer, head, stat, element type, local element type
    mutable std::mutex mu_;
    std::map<Key, Entry> entries_;
    int64_t hits_ = 0;
};

}  // namespace kvsieve
