#pragma once
// The page pool behind every KV cache: fixed-size pages of keys and values of one KV head, handed out and
// taken back, from one reserved arena whose resident memory follows the pages in use.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_rotation.h"
#include "kernels/kv_types.h"
#include "util/error.h"

namespace kvsieve {

// KVType, its table (names, block geometry, row conversions, attend kernels) and kv_row_bytes, kv_type_name,
// parse_kv_type: kernels/kv_types.h.

/// Where a block-quantized (kv_type_quantized: Q8_0, Q4_0) key or value is quantized (docs/architecture.md, "Where quantization happens"):
///   kWrite     — mode (a): every entry when it is written; sinks, window and global region share one page layout;
///   kAdmission — mode (b): sinks and the local window hold binary16 (F16) rows, and an entry is quantized when it
///                leaves the window and is admitted to the global region (or at write, for a policy without a
///                window, whose entries go straight to the global region).
/// Types that are not block types (f32, f16, bf16) are stored as they are in either mode.
enum class KVQuantAt { kWrite, kAdmission };
/// "write", "admission".
std::string kv_quant_at_name(KVQuantAt a);
/// Parses "write" or "admission"; throws Error naming the value and both choices otherwise.
KVQuantAt parse_kv_quant_at(const std::string& s);
/// The element type of the sinks and the window for keys (or values) of type t quantized at `at`: kF16 for a block
/// type (kv_type_quantized) under kAdmission, t itself otherwise.
KVType kv_local_type(KVType t, KVQuantAt at);

/// The element types of a cache's keys and of its values (llama.cpp's --cache-type-k / --cache-type-v), and where
/// block types are quantized (--kv-quant-at).
struct KVTypes {
    KVType key = KVType::kF16;
    KVType value = KVType::kF16;
    KVQuantAt quant_at = KVQuantAt::kWrite;
};
/// Parses a KV types spec: one type name for keys and values ("q8_0"), or KEY/VALUE ("q8_0/f16"), optionally
/// followed by "@write" or "@admission" (where they are quantized; write when absent). Throws Error naming the value
/// and the supported types or places.
KVTypes parse_kv_types(const std::string& spec);
/// True when keys or values are of a block-quantized type (kv_type_quantized).
inline bool kv_quantized(KVTypes t) { return kv_type_quantized(t.key) || kv_type_quantized(t.value); }
/// The spec parse_kv_types reads back: "q8_0" when both types are equal, else "q8_0/f16" (keys/values), then
/// "@admission" when quantized at admission and a type is a block type (for f16, f32, bf16 the place changes
/// nothing and is left out).
std::string kv_types_spec(KVTypes t);

/// Thrown when a page is requested from a pool whose capacity is used up. The request that needed the page
/// fails; the pool and every other sequence using it stay valid.
class KVPoolExhausted : public Error {
public:
    using Error::Error;
};

/// A pool of pages. Page p holds, for `page_tokens` entries of one KV head of dimension d:
/// K [page_tokens] rows of key_row_bytes() (d elements of key_type()) then V [page_tokens] rows of value_row_bytes()
/// (d elements of value_type()). Keys and values may have different types (llama.cpp's --cache-type-k /
/// --cache-type-v); a block-quantized row is d/32 consecutive blocks, so a page's rows are one contiguous run of
/// blocks.
/// Two page layouts (quantization at admission, KVQuantAt::kAdmission, with a block type): this pool's pages hold the
/// global region in key_type() / value_type(), and local() is a second pool of the same head dimension and page size
/// whose pages hold the sinks and the window in kv_local_type() of each (binary16). Both draw on one account of bytes:
/// bytes_in_use(), peak_bytes(), pages_in_use() and capacity_pages() count the two layouts together; a layout's own
/// pages are layout_pages_in_use(). Otherwise local() is this pool itself.
/// Memory: an address range of `capacity_pages` pages is reserved up front (no memory committed); a page's
/// memory is committed by the OS when first written and released (madvise DONTNEED) when the page is
/// returned, so resident bytes follow pages in use. Not thread-safe: pages are taken and returned by one
/// thread (the one running a sequence's cache maintenance).
class KVPool {
public:
    /// Keys and values of one type. pool_bytes = 0: grow on demand up to 1/2 of physical memory (reserved, not
    /// committed). Throws Error if the capacity is smaller than one page or the type cannot hold rows of head_dim
    /// (check_kv_head_dim).
    KVPool(int head_dim, KVType type, int page_tokens = 16, uint64_t pool_bytes = 0);
    /// Keys of key_type and values of value_type, quantized at `quant_at`; otherwise as above. The capacity covers
    /// both layouts (it must hold one page of the larger).
    KVPool(int head_dim, KVType key_type, KVType value_type, int page_tokens = 16, uint64_t pool_bytes = 0,
           KVQuantAt quant_at = KVQuantAt::kWrite);
    /// The types and place of quantization of `types`; otherwise as above.
    KVPool(int head_dim, KVTypes types, int page_tokens = 16, uint64_t pool_bytes = 0)
        : KVPool(head_dim, types.key, types.value, page_tokens, pool_bytes, types.quant_at) {}
    ~KVPool();
    KVPool(const KVPool&) = delete;
    KVPool& operator=(const KVPool&) = delete;

    /// Index of a free page of this layout; throws KVPoolExhausted when the shared account has no room for it.
    int32_t alloc();
    /// Returns page p to the pool (its memory is released to the OS where the page spans whole OS pages).
    void release(int32_t p);

    uint8_t* keys(int32_t p) { return base_ + static_cast<size_t>(p) * page_bytes_; }
    uint8_t* values(int32_t p) { return keys(p) + key_bytes_; }
    const uint8_t* keys(int32_t p) const { return base_ + static_cast<size_t>(p) * page_bytes_; }
    const uint8_t* values(int32_t p) const { return keys(p) + key_bytes_; }

    /// The pool of the sinks' and the window's pages: a second layout for quantization at admission with a block
    /// type, else this pool.
    KVPool& local() { return local_ ? *local_ : *this; }
    const KVPool& local() const { return local_ ? *local_ : *this; }
    /// Whether local() is a second layout (its pages are other pages than this pool's).
    bool two_layouts() const { return local_ != nullptr; }
    KVQuantAt quant_at() const { return quant_at_; }

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
    /// Pages of this layout in use.
    int64_t layout_pages_in_use() const { return in_use_; }
    /// Bytes of the largest page of the layouts sharing the account: the unit of pages_in_use() and capacity_pages().
    size_t unit_page_bytes() const { return account_->unit; }
    /// Pages in use over both layouts, in units of unit_page_bytes() (rounded up; with one layout, its pages).
    int64_t pages_in_use() const {
        return static_cast<int64_t>((account_->used + account_->unit - 1) / account_->unit);
    }
    /// Largest pages_in_use() so far, likewise in units of unit_page_bytes().
    int64_t peak_pages() const { return static_cast<int64_t>((account_->peak + account_->unit - 1) / account_->unit); }
    /// Pages of unit_page_bytes() the pool holds (with one layout: its pages).
    int64_t capacity_pages() const { return static_cast<int64_t>(account_->limit / account_->unit); }
    /// Bytes of the pages in use, both layouts.
    uint64_t bytes_in_use() const { return account_->used; }
    uint64_t peak_bytes() const { return account_->peak; }
    /// Bytes the pool holds (--kv-pool-mb, or half the physical memory).
    uint64_t capacity_bytes() const { return account_->limit; }
    void reset_peak() { account_->peak = account_->used; }

    /// How entries are stored (cache/kv_rotation.h): keys as R_K·k and values as R_V·v before conversion to their
    /// types, read back through R again (PageStore). Default: no rotation.
    const KVRotation& rotation() const { return rotation_; }
    /// Sets the rotation; only while no page is in use (the stored entries would change meaning). Throws Error when
    /// pages are in use or r was made for another head dimension.
    void set_rotation(const KVRotation& r);

private:
    /// The account of bytes the layouts share: its limit, the bytes in use and their peak, and the largest page.
    struct Account {
        uint64_t limit = 0, used = 0, peak = 0;
        size_t unit = 1;
    };
    /// A second layout drawing on `account` (the local pages of quantization at admission).
    KVPool(int head_dim, KVType key_type, KVType value_type, int page_tokens, KVQuantAt quant_at,
           std::shared_ptr<Account> account);
    /// Lays out the pages and reserves the address range for account_->limit bytes of them.
    void reserve();

    int head_dim_;
    KVType key_type_, value_type_;
    int page_tokens_;
    KVQuantAt quant_at_;
    size_t key_row_bytes_, value_row_bytes_, key_bytes_, page_bytes_;
    int64_t capacity_;
    uint8_t* base_ = nullptr;
    size_t reserved_ = 0;
    std::vector<int32_t> free_;  // LIFO of returned pages
    int32_t high_ = 0;           // pages below this index have been handed out at least once
    int64_t in_use_ = 0;
    std::shared_ptr<Account> account_;
    std::unique_ptr<KVPool> local_;  // the sinks' and window's layout, when it differs from this one
    KVRotation rotation_;            // shared with local_ (set_rotation sets both)
};

/// A pool of rows of head_dim elements of `types`, stored with the rotation `rotate` chooses for them
/// (KVRotation::choose: auto, on or off). Throws Error as the KVPool constructor, or naming the head dimension for
/// KVRotateMode::kOn when it is not a multiple of 64.
std::shared_ptr<KVPool> make_kv_pool(int head_dim, KVTypes types, KVRotateMode rotate, uint64_t pool_bytes = 0,
                                     int page_tokens = 16);

}  // namespace kvsieve
