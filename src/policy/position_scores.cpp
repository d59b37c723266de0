#include "policy/position_scores.h"

#include <algorithm>

namespace kvsieve {

std::vector<PositionScores::Item>::iterator PositionScores::find(int32_t pos) {
    return std::lower_bound(v_.begin() + static_cast<std::ptrdiff_t>(begin_), v_.end(), pos,
                            [](const Item& a, int32_t p) { return a.first < p; });
}

void PositionScores::make_room() {
    if (begin_ == 0 || v_.size() < v_.capacity()) return;
    v_.erase(v_.begin(), v_.begin() + static_cast<std::ptrdiff_t>(begin_));
    begin_ = 0;
}

void PositionScores::set(int32_t pos, float score) {
    if (size() == 0 || v_.back().first < pos) {  // the usual case: a newer position
        make_room();
        v_.emplace_back(pos, score);
        return;
    }
    auto it = find(pos);
    if (it != v_.end() && it->first == pos) {
        it->second = score;
        return;
    }
    make_room();
    v_.insert(find(pos), Item(pos, score));
}

bool PositionScores::take(int32_t pos, float& score) {
    auto it = find(pos);
    if (it == v_.end() || it->first != pos) return false;
    score = it->second;
    if (it == v_.begin() + static_cast<std::ptrdiff_t>(begin_)) {  // the usual case: the oldest leaves
        if (++begin_ == v_.size()) clear();
    } else {
        v_.erase(it);
    }
    return true;
}

void PositionScores::save(BinaryWriter& w) const {
    w.pod<uint64_t>(size());
    for (size_t i = begin_; i < v_.size(); ++i) {
        w.pod(v_[i].first);
        w.pod(v_[i].second);
    }
}

void PositionScores::load(BinaryReader& r) {
    clear();
    const uint64_t n = r.count(1u << 26);
    for (uint64_t i = 0; i < n; ++i) {
        const int32_t p = r.pod<int32_t>();
        set(p, r.pod<float>());
    }
}

}  // namespace kvsieve
