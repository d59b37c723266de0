#pragma once
// A set of KV entries of one head, stored in pool pages, with per-entry position and score.
#include <cstdint>
#include <vector>

#include "cache/kv_pool.h"
#include "kernels/tensor_types.h"
#include "util/binary_io.h"

namespace kvsieve {

/// Entries live in pages of the pool: entry i in page pages()[i / P], slot i % P (P = page_tokens). The order
/// of entries carries no meaning (each keeps its original position; RoPE was applied before caching), so
/// removal moves the last entry into the hole and an emptied last page goes back to the pool at once.
class PageStore {
public:
    explicit PageStore(KVPool* pool) : pool_(pool) {}
    ~PageStore() { clear(); }
    PageStore(const PageStore&) = delete;
    PageStore& operator=(const PageStore&) = delete;
    PageStore(PageStore&& o) noexcept;
    PageStore& operator=(PageStore&&) = delete;

    int64_t size() const { return static_cast<int64_t>(pos_.size()); }
    bool empty() const { return pos_.empty(); }

    /// Appends an entry from float32 k, v [d]; throws KVPoolExhausted if a page is needed and none is left
    /// (the store is unchanged then).
    void push(const float* k, const float* v, int32_t pos, float score);
    /// Appends a copy of entry j of `src`: its bytes when `src` has this store's key and value types, else its
    /// row converted to float32 and stored through store_row in this store's types (quantization at admission: a
    /// window entry in F16 becomes a Q8_0 / Q4_0 global entry here). With the same rotation as this store's (a pool
    /// and its local layout) the row is converted as stored, in the rotated space; with another, through the
    /// model's space (read, then push). Throws KVPoolExhausted like push (the store is unchanged then).
    void push_copy(const PageStore& src, int64_t j);
    /// Overwrites entry i.
    void set(int64_t i, const float* k, const float* v, int32_t pos, float score);
    /// Removes entry i (the last entry takes its index).
    void remove(int64_t i);
    /// Keeps the entries with keep[i] != 0, in one pass (survivors may change index).
    void retain(const std::vector<char>& keep);
    /// Returns every page to the pool.
    void clear();
    /// Appends the entries to `w`: count, positions, scores, then each entry's key and value bytes as stored.
    void save(BinaryWriter& w) const;
    /// Replaces the contents with entries saved by save() from a store of the same page layout (at most
    /// max_entries). Throws Error for a truncated or corrupted record, KVPoolExhausted if the pool runs out.
    void load(BinaryReader& r, int64_t max_entries);

    /// Entry i converted to float32 (dequantized for Q8_0 / Q4_0) in the model's space: with a rotated pool
    /// (KVPool::rotation) the stored rows are rotated back, k = R_Kᵀ·load(stored key), v = R_Vᵀ·load(stored value).
    /// What every reader outside the decode kernels (scorers, gathers, replays) sees.
    void read(int64_t i, float* k, float* v) const;
    /// Entry i's key as stored: pool().key_row_bytes() bytes of pool().key_type() (load_row converts it), in the
    /// rotated space when pool().rotation().keys() (decode attention rotates its query instead).
    const uint8_t* key_ptr(int64_t i) const;
    /// Entry i's value as stored: pool().value_row_bytes() bytes of pool().value_type() (rotated likewise).
    const uint8_t* value_ptr(int64_t i) const;

    const std::vector<int32_t>& pages() const { return pages_; }
    const std::vector<int32_t>& positions() const { return pos_; }
    std::vector<float>& scores() { return score_; }
    const std::vector<float>& scores() const { return score_; }
    const KVPool& pool() const { return *pool_; }

    /// Quest's per-page key bounds (Tang et al. 2024, "Quest", §3): the channel-wise minimum and maximum [d] of the
    /// keys as stored (in the rotated space of a pool that rotates keys: rank them with the rotated query) of the store's page p (an index into pages()), over the entries it holds now, as IEEE binary16 rounded
    /// outwards (kmin ≤ every key ≤ kmax still holds exactly; fp32_to_fp16_down/up; Quest keeps them in the KV's
    /// 16-bit type too). Kept beside the pages once asked for: appends extend a page's bounds when next asked
    /// (reading only the new keys), and an entry overwritten or moved into a page (eviction) or taken out of it
    /// makes that page's bounds be recomputed. The pointers stay valid while the store holds no more pages than now
    /// (asking for another page's bounds does not move them). Not thread-safe, even though const.
    void key_bounds(size_t p, const uint16_t** kmin, const uint16_t** kmax) const;
    /// Bytes the key bounds take (2 · d binary16 per page that has been asked for), outside the pool.
    size_t bounds_bytes() const { return (bmin_.size() + bmax_.size()) * sizeof(uint16_t); }

private:
    uint8_t* kslot(int64_t i) {
        return pool_->keys(pages_[i / pool_->page_tokens()]) + (i % pool_->page_tokens()) * pool_->key_row_bytes();
    }
    uint8_t* vslot(int64_t i) {
        return pool_->values(pages_[i / pool_->page_tokens()]) + (i % pool_->page_tokens()) * pool_->value_row_bytes();
    }
    void move_entry(int64_t from, int64_t to);
    /// Writes k, v [d] into slot i: rotated by the pool's rotation, then converted (store_row).
    void store_entry(const float* k, const float* v, int64_t i);
    /// Appends a slot for an entry at `pos` with `score` (a new page when the last is full) and returns its index;
    /// the caller writes its key and value. Throws KVPoolExhausted before changing anything.
    int64_t open_slot(int32_t pos, float score);
    /// Entry i was written in place: its page's bounds, if they cover it, are recomputed when next asked.
    void touch(int64_t i);
    /// After entries were taken off the end: drops the bounds of released pages and stale bounds of the last page.
    void trim_bounds();

    KVPool* pool_;
    std::vector<int32_t> pages_;
    std::vector<int32_t> pos_;
    std::vector<float> score_;
    mutable std::vector<uint16_t> bmin_, bmax_;  // key bounds [pages][d] (binary16), see key_bounds()
    mutable std::vector<int32_t> bound_rows_;    // per page: how many of its leading entries the bounds cover
};

/// float32 [n] → one cached row of type t (kv_row_bytes(t, n) bytes), by the row's from_float (kernels/kv_types.h):
/// rounding to nearest even for F16/BF16; for the block types ggml's reference quantizers (n a multiple of the
/// block), after clamping every element to ±kv_quant_limit(t) so the binary16 block scale stays finite: a block of
/// zeros stores d = 0 and reads back zeros, a block of huge finite values (or ±inf) reads back ±limit, never NaN or
/// inf. Bound per block (values within the limit): |x − x̂| ≤ d/2 for Q8_0 (d = max|x|/127 rounded to binary16,
/// plus the binary16 rounding of d times |q| ≤ 127), |x − x̂| ≤ |d| for Q4_0 (half a step, a whole step where the
/// +8 level is clipped to 7). Throws Error for a type outside the table or n not whole blocks.
void store_row(KVType t, const float* src, uint8_t* dst, int n);
/// One cached row of type t → float32 [n] by the row's to_float (x̂_j = d·q_j for Q8_0, d·(q_j − 8) for Q4_0).
/// Throws Error for a type outside the table.
void load_row(KVType t, const uint8_t* src, float* dst, int n);
/// dst ← the row a reader sees after src [n] is stored as type t: load_row(t, store_row(t, src)). dst may be src.
void round_trip_row(KVType t, const float* src, float* dst, int n);
/// k, v [pool.head_dim()] ← what PageStore::read returns after the entry is stored in `pool`: R·load(store(R·x)) with
/// the pool's rotation R for every half not stored in float32 (the Q8_0 / Q4_0 error in the rotated space, F16 /
/// BF16 rounding); float32 halves are left as given. A prefill chunk attends to its own entries through this, as
/// llama.cpp writes the batch into its cache before attending, so one batch and a prompt fed in pieces (which read
/// the earlier pieces from their pages) see the same keys and values.
void stored_view(const KVPool& pool, float* k, float* v);
/// Largest magnitude store_row keeps: the row's limit (kernels/kv_types.h; 65504·127 for Q8_0, 65504·8 for Q4_0,
/// +inf for the float types).
float kv_quant_limit(KVType t);

}  // namespace kvsieve
