#include "policy/scorer.h"

#include <algorithm>

#include <cmath>

namespace kvsieve {

void StepScorer::score_decode(const StepEvent& e, const std::vector<float*>& scores) const {
    for (size_t h = 0; h < e.heads.size(); ++h) scores[h][e.heads[h].n - 1] = INFINITY;
}

void save_position_scores(BinaryWriter& w, const std::unordered_map<int32_t, float>& m) {
    std::vector<std::pair<int32_t, float>> v(m.begin(), m.end());
    std::sort(v.begin(), v.end());
    w.pod<uint64_t>(v.size());
    for (const auto& [p, x] : v) {
        w.pod(p);
        w.pod(x);
    }
}

void load_position_scores(BinaryReader& r, std::unordered_map<int32_t, float>& m) {
    m.clear();
    const uint64_t n = r.count(1u << 26);
    for (uint64_t i = 0; i < n; ++i) {
        const int32_t p = r.pod<int32_t>();
        m[p] = r.pod<float>();
    }
}

}  // namespace kvsieve
