#include "train/kvpop_mask.h"

#include "util/error.h"

namespace kvsieve::train {

std::vector<int64_t> eviction_steps(const std::vector<BoundaryPair>& decisions, int64_t T) {
    require(T >= 0, "eviction steps: T must be ≥ 0");
    std::vector<int64_t> evict(static_cast<size_t>(T), T);
    for (const auto& p : decisions) {
        const int64_t gone = p.keep ? p.t_bnd : p.t_new;
        require(gone >= 0 && gone < T && p.q >= 0 && p.q < T, "eviction steps: decision at step ", p.q, " evicts ",
                gone, ", outside a sequence of ", T, " tokens");
        evict[gone] = p.q;
    }
    return evict;
}

std::vector<int64_t> streaming_eviction_steps(int64_t T, int64_t sinks, int64_t window, int64_t k) {
    require(T >= 0 && sinks >= 0 && window >= 0 && k >= 0 && window + k >= 1,
            "StreamingLLM eviction steps: T, s, w and k must be ≥ 0 and w + k ≥ 1");
    std::vector<int64_t> evict(static_cast<size_t>(T), T);
    for (int64_t t = sinks; t < T; ++t) evict[t] = std::min(T, t + window + k - 1);
    return evict;
}

torch::Tensor eviction_keep_mask(const torch::Tensor& evict) {
    require(evict.dim() == 3 && evict.scalar_type() == torch::kInt64, "eviction keep-mask: evict [B, H, T] int64 ",
            "expected, got ", evict.sizes(), " ", evict.scalar_type());
    const int64_t T = evict.size(2);
    const auto pos = torch::arange(T, torch::kInt64);
    const auto d = pos.view({1, 1, T, 1}), t = pos.view({1, 1, 1, T});
    return (t <= d) & (d <= evict.unsqueeze(2));
}

}  // namespace kvsieve::train
