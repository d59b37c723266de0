#pragma once
// Scores waiting for the entry at a position to claim them (a delayed readout's scores, or an admission score, until
// the entry leaves the window): a flat list sorted by position rather than a hash map, so that adding and taking one
// allocates nothing once the list has held as many as it holds at most (one window's worth, or one prefill chunk's).
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "util/binary_io.h"

namespace kvsieve {

/// Position → score. Entries leave the local window oldest first, so the list is kept sorted by position and taken
/// from its front: adding a newer position and taking the oldest are O(1), any other lookup a binary search
/// (O(log n)), adding or taking in the middle a shift. Its capacity only grows, and the taken front is reused.
class PositionScores {
public:
    /// Sets the score of `pos` (replacing one it had).
    void set(int32_t pos, float score);
    /// Moves the score of `pos` into `score` and forgets it; false (score unchanged) if it has none.
    bool take(int32_t pos, float& score);
    size_t size() const { return v_.size() - begin_; }
    void clear() {
        v_.clear();
        begin_ = 0;
    }
    /// A saved record: the count (uint64), then (position int32, score float32) sorted by position.
    void save(BinaryWriter& w) const;
    /// Reads a record of save(). Throws Error for a truncated record.
    void load(BinaryReader& r);

private:
    using Item = std::pair<int32_t, float>;
    /// The first live item at or after `pos` (by position).
    std::vector<Item>::iterator find(int32_t pos);
    /// Moves the live items to the front when the buffer is full, so that an append reuses the taken front.
    void make_room();

    std::vector<Item> v_;  // v_[begin_ …] live, sorted by position; v_[0 … begin_) taken
    size_t begin_ = 0;
};

}  // namespace kvsieve
