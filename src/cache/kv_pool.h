#pragma once
// The page pool behind every KV cache: fixed-size pages of keys and values of one KV head, handed out and
// taken back, from one reserved arena whose resident memory follows the pages in use.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"

namespace kvsieve {

/// Element type of cached keys or values. kQ8_0 and kQ4_0 are ggml's (llama.cpp's `-ctk q8_0`) block formats of 32
/// elements (kernels/quant.h BlockQ8_0, BlockQ4_0): Q8_0 = binary16 scale d = max|x|/127 and 32 int8, 34 bytes per
/// 32 elements; Q4_0 = binary16 scale d = m/−8 (m the signed element of largest magnitude) and 32 nibbles q with
/// x̂ = (q − 8)·d, 18 bytes per 32. Quantized rows need a head dimension that is a multiple of 32.
enum class KVType { kF32, kF16, kBF16, kQ8_0, kQ4_0 };
/// Bytes of one cached row of n elements of type t (4n, 2n, 34·n/32 or 18·n/32). Throws Error (check_kv_head_dim)
/// when t is a block type and n is not a multiple of its block.
size_t kv_row_bytes(KVType t, int n);
/// Elements per block of t: 32 for Q8_0 / Q4_0, 1 otherwise.
int kv_type_block(KVType t);
/// Throws Error naming the type and the dimension when rows of head_dim elements cannot be stored as t (a block
/// type and a head dimension that is not a multiple of 32).
void check_kv_head_dim(KVType t, int head_dim);
/// "f32", "f16", "bf16", "q8_0", "q4_0".
std::string kv_type_name(KVType t);
/// The supported names, comma separated, for help texts and errors: "f32, f16, bf16, q8_0, q4_0".
std::string kv_type_names();
/// Parses one of kv_type_names(); throws Error naming the value and the supported types otherwise.
KVType parse_kv_type(const std::string& s);

/// The element types of a cache's keys and of its values (llama.cpp's --cache-type-k / --cache-type-v).
struct KVTypes {
    KVType key = KVType::kF16;
    KVType value = KVType::kF16;
};
/// Parses a KV types spec: one type name for keys and values ("q8_0"), or KEY/VALUE ("q8_0/f16"). Throws Error
/// naming the value and the supported types.
KVTypes parse_kv_types(const std::string& spec);
/// The spec parse_kv_types reads back: "q8_0" when both types are equal, else "q8_0/f16" (keys/values).
std::string kv_types_spec(KVTypes t);

/// Thrown when a page is requested from a pool whose budget is used up. The request that needed the page
/// fails; the pool and every other sequence using it stay valid.
class KVBudgetExhausted : public Error {
public:
    using Error::Error;
};

/// A pool of pages. Page p holds, for `page_tokens` entries of one KV head of dimension d:
/// K [page_tokens] rows of key_row_bytes() (d elements of key_type()) then V [page_tokens] rows of value_row_bytes()
/// (d elements of value_type()). Keys and values may have different types (llama.cpp's --cache-type-k /
/// --cache-type-v); a block-quantized row is d/32 consecutive blocks, so a page's rows are one contiguous run of
/// blocks.
/// Memory: an address range of `capacity_pages` pages is reserved up front (no memory committed); a page's
/// memory is committed by the OS when first written and released (madvise DONTNEED) when the page is
/// returned, so resident bytes follow pages in use. Not thread-safe: pages are taken and returned by one
/// thread (the one running a sequence's cache maintenance).
class KVPool {
public:
    /// Keys and values of one type. budget_bytes = 0: grow on demand up to 1/2 of physical memory (reserved, not
    /// committed). Throws Error if the budget is smaller than one page or the type cannot hold rows of head_dim
    /// (check_kv_head_dim).
    KVPool(int head_dim, KVType type, int page_tokens = 16, uint64_t budget_bytes = 0);
    /// Keys of key_type and values of value_type; otherwise as above.
    KVPool(int head_dim, KVType key_type, KVType value_type, int page_tokens = 16, uint64_t budget_bytes = 0);
    ~KVPool();
    KVPool(const KVPool&) = delete;
    KVPool& operator=(const KVPool&) = delete;

    /// Index of a free page; throws KVBudgetExhausted when none is left.
    int32_t alloc();
    /// Returns page p to the pool (its memory is released to the OS where the page spans whole OS pages).
    void release(int32_t p);

    uint8_t* keys(int32_t p) { return base_ + static_cast<size_t>(p) * page_bytes_; }
    uint8_t* values(int32_t p) { return keys(p) + key_bytes_; }
    const uint8_t* keys(int32_t p) const { return base_ + static_cast<size_t>(p) * page_bytes_; }
    const uint8_t* values(int32_t p) const { return keys(p) + key_bytes_; }

    int head_dim() const { return head_dim_; }
    KVType key_type() const { return key_type_; }
    KVType value_type() const { return value_type_; }
    int page_tokens() const { return page_tokens_; }
    size_t page_bytes() const { return page_bytes_; }
    /// Bytes of one cached key (kv_row_bytes(key_type(), head_dim())).
    size_t key_row_bytes() const { return key_row_bytes_; }
    /// Bytes of one cached value (kv_row_bytes(value_type(), head_dim())).
    size_t value_row_bytes() const { return value_row_bytes_; }
    /// Bytes of a page's keys (page_tokens · key_row_bytes; the values start there).
    size_t key_page_bytes() const { return key_bytes_; }
    int64_t pages_in_use() const { return in_use_; }
    int64_t peak_pages() const { return peak_; }
    int64_t capacity_pages() const { return capacity_; }
    uint64_t bytes_in_use() const { return static_cast<uint64_t>(in_use_) * page_bytes_; }
    uint64_t peak_bytes() const { return static_cast<uint64_t>(peak_) * page_bytes_; }
    void reset_peak() { peak_ = in_use_; }

private:
    int head_dim_;
    KVType key_type_, value_type_;
    int page_tokens_;
    size_t key_row_bytes_, value_row_bytes_, key_bytes_, page_bytes_;
    int64_t capacity_;
    uint8_t* base_ = nullptr;
    size_t reserved_ = 0;
    std::vector<int32_t> free_;  // LIFO of returned pages
    int32_t high_ = 0;           // pages below this index have been handed out at least once
    int64_t in_use_ = 0, peak_ = 0;
};

}  // namespace kvsieve
