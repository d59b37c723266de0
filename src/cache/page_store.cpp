#include "cache/page_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/fp16.h"

namespace kvsieve {

float kv_quant_limit(KVType t) { return kv_type_traits(t).limit; }

void store_row(KVType t, const float* src, uint8_t* dst, int n) {
    const KVTypeTraits& row = kv_type_traits(t);
    if (row.block == 1) {
        row.from_float(src, dst, n);
        return;
    }
    require(n % row.block == 0, "KV cache type ", row.name, ": row of ", n, " elements is not whole blocks of ",
            row.block);
    // Clamped so the block's binary16 scale (and minimum) stays finite; NaN stays NaN.
    const float lim = row.limit;
    const size_t block_bytes = static_cast<size_t>(row.block_bytes);
    float buf[256];
    for (int c0 = 0; c0 < n; c0 += 256) {
        const int m = std::min(256, n - c0);
        for (int j = 0; j < m; ++j) {
            const float x = src[c0 + j];
            buf[j] = x > lim ? lim : x < -lim ? -lim : x;
        }
        row.from_float(buf, dst + static_cast<size_t>(c0 / row.block) * block_bytes, m);
    }
}

void load_row(KVType t, const uint8_t* src, float* dst, int n) { kv_type_traits(t).to_float(src, dst, n); }

void round_trip_row(KVType t, const float* src, float* dst, int n) {
    uint8_t buf[4 * 256];
    require(n <= 256, "round_trip_row: rows of at most 256 elements, got ", n);
    store_row(t, src, buf, n);
    load_row(t, buf, dst, n);
}

PageStore::PageStore(PageStore&& o) noexcept
    : pool_(o.pool_), pages_(std::move(o.pages_)), pos_(std::move(o.pos_)), score_(std::move(o.score_)),
      bmin_(std::move(o.bmin_)), bmax_(std::move(o.bmax_)), bound_rows_(std::move(o.bound_rows_)) {
    o.pages_.clear();
    o.pos_.clear();
    o.score_.clear();
    o.bmin_.clear();
    o.bmax_.clear();
    o.bound_rows_.clear();
}

void PageStore::touch(int64_t i) {
    const auto p = static_cast<size_t>(i / pool_->page_tokens());
    if (p < bound_rows_.size() && i % pool_->page_tokens() < bound_rows_[p]) bound_rows_[p] = 0;
}

void PageStore::trim_bounds() {
    if (bound_rows_.size() > pages_.size()) {
        bound_rows_.resize(pages_.size());
        bmin_.resize(pages_.size() * static_cast<size_t>(pool_->head_dim()));
        bmax_.resize(pages_.size() * static_cast<size_t>(pool_->head_dim()));
    }
    if (!pages_.empty() && bound_rows_.size() == pages_.size()) {
        const int64_t in_last = size() - static_cast<int64_t>(pages_.size() - 1) * pool_->page_tokens();
        if (bound_rows_.back() > in_last) bound_rows_.back() = 0;
    }
}

void PageStore::key_bounds(size_t p, const uint16_t** kmin, const uint16_t** kmax) const {
    const int d = pool_->head_dim(), P = pool_->page_tokens();
    if (bound_rows_.size() < pages_.size()) {
        bound_rows_.resize(pages_.size(), 0);
        bmin_.resize(pages_.size() * static_cast<size_t>(d));
        bmax_.resize(pages_.size() * static_cast<size_t>(d));
    }
    uint16_t* lo = bmin_.data() + p * d;
    uint16_t* hi = bmax_.data() + p * d;
    const auto cnt = static_cast<int32_t>(std::min<int64_t>(P, size() - static_cast<int64_t>(p) * P));
    if (bound_rows_[p] < cnt) {  // fold in the keys written since the bounds were last asked for
        // Folded in float32, then rounded outwards (the rounding is monotone, so this is the rounded min / max).
        std::vector<float> row(d), fl(d, INFINITY), fh(d, -INFINITY);
        if (bound_rows_[p] > 0)
            for (int c = 0; c < d; ++c) fl[c] = fp16_to_fp32(lo[c]), fh[c] = fp16_to_fp32(hi[c]);
        for (int32_t r = bound_rows_[p]; r < cnt; ++r) {
            load_row(pool_->key_type(), key_ptr(static_cast<int64_t>(p) * P + r), row.data(), d);
            for (int c = 0; c < d; ++c) {
                fl[c] = std::min(fl[c], row[c]);
                fh[c] = std::max(fh[c], row[c]);
            }
        }
        for (int c = 0; c < d; ++c) lo[c] = fp32_to_fp16_down(fl[c]), hi[c] = fp32_to_fp16_up(fh[c]);
        bound_rows_[p] = cnt;
    }
    *kmin = lo;
    *kmax = hi;
}

namespace {
/// Room for n elements in v, doubling its capacity when it grows (as push_back would).
template <class T>
void room_for(std::vector<T>& v, size_t n) {
    if (v.capacity() < n) v.reserve(std::max(n, 2 * v.capacity()));
}
}  // namespace

int64_t PageStore::open_slot(int32_t pos, float score) {
    const int64_t i = size();
    if (i % pool_->page_tokens() == 0) {
        pages_.push_back(pool_->alloc());  // may throw: nothing changed yet
        // The positions and scores grow with the pages, so an entry that finds room in its page allocates nothing.
        const size_t rows = pages_.size() * static_cast<size_t>(pool_->page_tokens());
        room_for(pos_, rows);
        room_for(score_, rows);
    }
    pos_.push_back(pos);
    score_.push_back(score);
    touch(i);
    return i;
}

void PageStore::push(const float* k, const float* v, int32_t pos, float score) {
    store_entry(k, v, open_slot(pos, score));
}

void PageStore::push_copy(const PageStore& src, int64_t j) {
    if (src.pool_->key_type() != pool_->key_type() || src.pool_->value_type() != pool_->value_type()) {
        const int d = pool_->head_dim();
        float k[256], v[256];  // head dimensions above 256 are refused by KVCache
        require(d <= 256, "PageStore: rows of at most 256 elements, got ", d);
        if (src.pool_->rotation() != pool_->rotation()) {
            src.read(j, k, v);  // into the model's space, and push rotates into this store's
            push(k, v, src.pos_[j], src.score_[j]);
            return;
        }
        // The same rotated space (a pool and its local layout share one rotation): converted as stored, without
        // rotating back and forth (two Walsh–Hadamard transforms per row, and their float32 rounding).
        load_row(src.pool_->key_type(), src.key_ptr(j), k, d);
        load_row(src.pool_->value_type(), src.value_ptr(j), v, d);
        const int64_t i = open_slot(src.pos_[j], src.score_[j]);
        store_row(pool_->key_type(), k, kslot(i), d);
        store_row(pool_->value_type(), v, vslot(i), d);
        return;
    }
    const int64_t i = open_slot(src.pos_[j], src.score_[j]);
    std::memcpy(kslot(i), src.key_ptr(j), pool_->key_row_bytes());
    std::memcpy(vslot(i), src.value_ptr(j), pool_->value_row_bytes());
}

void PageStore::save(BinaryWriter& w) const {
    w.vec(pos_);
    w.vec(score_);
    for (int64_t i = 0; i < size(); ++i) {
        w.bytes(key_ptr(i), pool_->key_row_bytes());
        w.bytes(value_ptr(i), pool_->value_row_bytes());
    }
}

void PageStore::load(BinaryReader& r, int64_t max_entries) {
    clear();  // drops the bounds too
    std::vector<int32_t> pos = r.vec<int32_t>(static_cast<size_t>(max_entries));
    std::vector<float> score = r.vec<float>(static_cast<size_t>(max_entries));
    if (pos.size() != score.size())
        fail(r.what(), " is corrupted (", pos.size(), " positions, ", score.size(), " scores)");
    for (size_t i = 0; i < pos.size(); ++i) {
        if (i % pool_->page_tokens() == 0) pages_.push_back(pool_->alloc());
        pos_.push_back(pos[i]);
        score_.push_back(score[i]);
        r.bytes(kslot(static_cast<int64_t>(i)), pool_->key_row_bytes());
        r.bytes(vslot(static_cast<int64_t>(i)), pool_->value_row_bytes());
    }
}

void PageStore::set(int64_t i, const float* k, const float* v, int32_t pos, float score) {
    pos_[i] = pos;
    score_[i] = score;
    touch(i);
    store_entry(k, v, i);
}

void PageStore::store_entry(const float* k, const float* v, int64_t i) {
    const KVRotation& rot = pool_->rotation();
    const int d = pool_->head_dim();
    float buf[256];  // head dimensions are at most 256 (KVCache)
    if (rot.keys()) {
        std::copy_n(k, d, buf);
        rot.rotate_keys(buf, 1, d);
        k = buf;
    }
    store_row(pool_->key_type(), k, kslot(i), d);
    if (rot.values()) {
        std::copy_n(v, d, buf);
        rot.rotate_values(buf, 1, d);
        v = buf;
    }
    store_row(pool_->value_type(), v, vslot(i), d);
}

void PageStore::move_entry(int64_t from, int64_t to) {
    touch(to);
    std::memcpy(kslot(to), kslot(from), pool_->key_row_bytes());
    std::memcpy(vslot(to), vslot(from), pool_->value_row_bytes());
    pos_[to] = pos_[from];
    score_[to] = score_[from];
}

void PageStore::remove(int64_t i) {
    const int64_t last = size() - 1;
    if (i != last) move_entry(last, i);
    pos_.pop_back();
    score_.pop_back();
    if (size() % pool_->page_tokens() == 0) {
        pool_->release(pages_.back());
        pages_.pop_back();
    }
    trim_bounds();
}

void PageStore::retain(const std::vector<char>& keep) {
    int64_t w = 0;
    for (int64_t i = 0; i < size(); ++i)
        if (keep[i]) {
            if (w != i) move_entry(i, w);
            ++w;
        }
    pos_.resize(w);
    score_.resize(w);
    const size_t need = static_cast<size_t>((w + pool_->page_tokens() - 1) / pool_->page_tokens());
    while (pages_.size() > need) {
        pool_->release(pages_.back());
        pages_.pop_back();
    }
    trim_bounds();
}

void PageStore::clear() {
    for (int32_t p : pages_) pool_->release(p);
    pages_.clear();
    pos_.clear();
    score_.clear();
    bmin_.clear();
    bmax_.clear();
    bound_rows_.clear();
}

void PageStore::read(int64_t i, float* k, float* v) const {
    load_row(pool_->key_type(), key_ptr(i), k, pool_->head_dim());
    load_row(pool_->value_type(), value_ptr(i), v, pool_->head_dim());
    pool_->rotation().rotate_keys(k, 1, pool_->head_dim());
    pool_->rotation().rotate_values(v, 1, pool_->head_dim());
}

void stored_view(const KVPool& pool, float* k, float* v) {
    const KVRotation& rot = pool.rotation();
    const int d = pool.head_dim();
    if (pool.key_type() != KVType::kF32) {
        rot.rotate_keys(k, 1, d);
        round_trip_row(pool.key_type(), k, k, d);
        rot.rotate_keys(k, 1, d);
    }
    if (pool.value_type() != KVType::kF32) {
        rot.rotate_values(v, 1, d);
        round_trip_row(pool.value_type(), v, v, d);
        rot.rotate_values(v, 1, d);
    }
}

const uint8_t* PageStore::key_ptr(int64_t i) const {
    return pool_->keys(pages_[i / pool_->page_tokens()]) + (i % pool_->page_tokens()) * pool_->key_row_bytes();
}
const uint8_t* PageStore::value_ptr(int64_t i) const {
    return pool_->values(pages_[i / pool_->page_tokens()]) + (i % pool_->page_tokens()) * pool_->value_row_bytes();
}

}  // namespace kvsieve
