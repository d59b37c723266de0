#include "policy/position_scores.h"

#include <algorithm>

namespace kvsieve {

void PositionScores::set(int32_t pos, float score) {
    for (auto& [p, s] : v_)
        if (p == pos) {
            s = score;
            return;
        }
    v_.emplace_back(pos, score);
}

bool PositionScores::take(int32_t pos, float& score) {
    for (size_t i = 0; i < v_.size(); ++i)
        if (v_[i].first == pos) {
            score = v_[i].second;
            v_[i] = v_.back();
            v_.pop_back();
            return true;
        }
    return false;
}

void PositionScores::save(BinaryWriter& w) const {
    std::vector<std::pair<int32_t, float>> sorted = v_;
    std::sort(sorted.begin(), sorted.end());
    w.pod<uint64_t>(sorted.size());
    for (const auto& [p, x] : sorted) {
        w.pod(p);
        w.pod(x);
    }
}

void PositionScores::load(BinaryReader& r) {
    v_.clear();
    const uint64_t n = r.count(1u << 26);
    for (uint64_t i = 0; i < n; ++i) {
        const int32_t p = r.pod<int32_t>();
        set(p, r.pod<float>());
    }
}

}  // namespace kvsieve
