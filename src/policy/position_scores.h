#pragma once
// Scores waiting for the entry at a position to claim them (a delayed readout's scores, until the entry leaves
// the window): a flat list rather than a hash map, so that adding and taking one allocates nothing once the list has
// held as many as it holds at most (one window's worth).
#include <cstdint>
#include <utility>
#include <vector>

#include "util/binary_io.h"

namespace kvsieve {

/// Position → score, few at a time (a window's worth), looked up by a linear search. Its capacity only grows.
class PositionScores {
public:
    /// Sets the score of `pos` (replacing one it had).
    void set(int32_t pos, float score);
    /// Moves the score of `pos` into `score` and forgets it; false (score unchanged) if it has none.
    bool take(int32_t pos, float& score);
    size_t size() const { return v_.size(); }
    void clear() { v_.clear(); }
    /// The record of save_position_scores (policy/scorer.h): the count, then (position, score) sorted by position.
    void save(BinaryWriter& w) const;
    /// Reads a record of save(). Throws Error for a truncated record.
    void load(BinaryReader& r);

private:
    std::vector<std::pair<int32_t, float>> v_;
};

}  // namespace kvsieve
