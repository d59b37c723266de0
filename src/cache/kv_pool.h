#pragma once
// The page pool behind every KV cache: fixed-size pages of keys and values of one KV head, handed out and
// taken back, from one reserved arena whose resident memory follows the pages in use.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"

namespace kvsieve {

/// Element type of cached keys and values.
enum class KVType { kF32, kF16, kBF16 };
/// Bytes per element (4 or 2).
size_t kv_type_size(KVType t);
/// "f32", "f16", "bf16".
std::string kv_type_name(KVType t);
/// Parses "f32" / "f16" / "bf16"; throws Error naming the value otherwise.
KVType parse_kv_type(const std::string& s);

/// Thrown when a page is requested from a pool whose budget is used up. The request that needed the page
/// fails; the pool and every other sequence using it stay valid.
class KVBudgetExhausted : public Error {
public:
    using Error::Error;
};

/// A pool of pages. Page p holds, for `page_tokens` entries of one KV head of dimension d:
/// K [page_tokens][d] then V [page_tokens][d], elements of `type`.
/// Memory: an address range of `capacity_pages` pages is reserved up front (no memory committed); a page's
/// memory is committed by the OS when first written and released (madvise DONTNEED) when the page is
/// returned, so resident bytes follow pages in use. Not thread-safe: pages are taken and returned by one
/// thread (the one running a sequence's cache maintenance).
class KVPool {
public:
    /// budget_bytes = 0: grow on demand up to 1/2 of physical memory (reserved, not committed).
    /// Throws Error if the budget is smaller than one page.
    KVPool(int head_dim, KVType type, int page_tokens = 16, uint64_t budget_bytes = 0);
    ~KVPool();
    KVPool(const KVPool&) = delete;
    KVPool& operator=(const KVPool&) = delete;

    /// Index of a free page; throws KVBudgetExhausted when none is left.
    int32_t alloc();
    /// Returns page p to the pool (its memory is released to the OS where the page spans whole OS pages).
    void release(int32_t p);

    uint8_t* keys(int32_t p) { return base_ + static_cast<size_t>(p) * page_bytes_; }
    uint8_t* values(int32_t p) { return keys(p) + half_bytes_; }
    const uint8_t* keys(int32_t p) const { return base_ + static_cast<size_t>(p) * page_bytes_; }
    const uint8_t* values(int32_t p) const { return keys(p) + half_bytes_; }

    int head_dim() const { return head_dim_; }
    KVType type() const { return type_; }
    int page_tokens() const { return page_tokens_; }
    size_t page_bytes() const { return page_bytes_; }
    /// Bytes of one cached vector (one key or one value).
    size_t row_bytes() const { return row_bytes_; }
    int64_t pages_in_use() const { return in_use_; }
    int64_t peak_pages() const { return peak_; }
    int64_t capacity_pages() const { return capacity_; }
    uint64_t bytes_in_use() const { return static_cast<uint64_t>(in_use_) * page_bytes_; }
    uint64_t peak_bytes() const { return static_cast<uint64_t>(peak_) * page_bytes_; }
    void reset_peak() { peak_ = in_use_; }

private:
    int head_dim_;
    KVType type_;
    int page_tokens_;
    size_t row_bytes_, half_bytes_, page_bytes_;
    int64_t capacity_;
    uint8_t* base_ = nullptr;
    size_t reserved_ = 0;
    std::vector<int32_t> free_;  // LIFO of returned pages
    int32_t high_ = 0;           // pages below this index have been handed out at least once
    int64_t in_use_ = 0, peak_ = 0;
};

}  // namespace kvsieve
