#pragma once
// The cache of one (layer, KV head): sink tokens, the local window ring and the ragged global region.
#include <array>
#include <cstdint>
#include <optional>

#include "cache/page_store.h"
#include "util/function_ref.h"

namespace kvsieve {

/// The three regions of a KV head's entries (HeadCache); their values are their order in attention (sinks, global,
/// window), the order in which every pass over a head's entries reads them.
enum class Region { kSinks = 0, kGlobal = 1, kWindow = 2 };
/// The regions in attention order, for loops over a head's entries.
inline constexpr std::array<Region, 3> kRegionsInOrder = {Region::kSinks, Region::kGlobal, Region::kWindow};

/// Entries of one KV head in three regions (docs/design.md §3):
///   sinks  — the first s entries written, always kept;
///   window — a ring of the w most recent entries, always kept;
///   global — entries kept beyond the window; its length differs per head.
/// An entry leaving a full window is offered to `admit(pos, score, &window, slot)`: kept in global if true, with
/// `score` (which admit may rewrite: a delayed readout), dropped (its slot reused) if false. With w = 0 a new
/// entry is offered as `admit(pos, score, nullptr, −1)` before it is stored. `admit` is a non-owning reference
/// (no allocation per append): the callable it names must live until append returns.
/// Page layouts: the sinks and the window take pages of `pool->local()`, the global region pages of `pool`; with
/// quantization at admission (KVQuantAt::kAdmission) the former are binary16 and the latter Q8_0 / Q4_0, so an entry
/// is quantized when it is admitted (PageStore::push_copy from the window, or push at w = 0).
class HeadCache {
public:
    using Admit = FunctionRef<bool(int32_t pos, float& score, const PageStore* store, int64_t slot)>;

    HeadCache(KVPool* pool, int sinks, int window);

    /// Where an entry sits: its region and its index there; no region: dropped (refused by the admission rule).
    struct Slot {
        std::optional<Region> region;
        int64_t index = 0;
    };
    /// Adds an entry (float32 k, v [d]) at position pos with a score and returns where it went. Throws
    /// KVPoolExhausted if a page is needed and none is left.
    Slot append(const float* k, const float* v, int32_t pos, float score, const Admit& admit);

    PageStore& sinks() { return sinks_; }
    PageStore& window() { return window_; }
    PageStore& global() { return global_; }
    const PageStore& sinks() const { return sinks_; }
    const PageStore& window() const { return window_; }
    const PageStore& global() const { return global_; }
    /// The store of region r (kRegionsInOrder lists them in the order attention reads them).
    const PageStore* region(Region r) const {
        return r == Region::kSinks ? &sinks_ : r == Region::kGlobal ? &global_ : &window_;
    }
    PageStore* region(Region r) { return r == Region::kSinks ? &sinks_ : r == Region::kGlobal ? &global_ : &window_; }

    /// Removes every entry at a position ≥ n (the window ring is rebuilt in position order).
    void truncate(int32_t n);

    /// Index in region r's store of the region's i-th entry in position order: the window is a ring whose oldest
    /// entry sits at the ring's head once it is full; the sinks and the global region are stored in position order.
    /// A pass that reads a head's entries oldest first (as one batch lays them out) reads them in this order.
    int64_t in_order(Region r, int64_t i) const {
        return r == Region::kWindow && window_.size() > 0 ? (ring_head_ + i) % window_.size() : i;
    }

    int64_t size() const { return sinks_.size() + window_.size() + global_.size(); }
    int window_capacity() const { return w_; }
    void clear();
    /// The three regions and the ring's position (PageStore::save each).
    void save(BinaryWriter& w) const;
    /// Restores what save() wrote for a head of the same sinks and window; at most max_entries per region.
    /// Throws Error for a record that does not fit these sizes, KVPoolExhausted if the pool runs out.
    void load(BinaryReader& r, int64_t max_entries);

private:
    int s_, w_;
    int64_t ring_head_ = 0;  // index in window_ of the oldest entry once the ring is full
    PageStore sinks_, window_, global_;
};

}  // namespace kvsieve
