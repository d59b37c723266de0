#include "cache/kv_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace kvsieve {

KVTypes parse_kv_types(const std::string& spec) {
    const size_t at = spec.find('@');
    const std::string types = spec.substr(0, at);
    const KVQuantAt where = at == std::string::npos ? KVQuantAt::kWrite : parse_kv_quant_at(spec.substr(at + 1));
    const size_t slash = types.find('/');
    if (slash == std::string::npos) {
        const KVType t = parse_kv_type(types);
        return {t, t, where};
    }
    return {parse_kv_type(types.substr(0, slash)), parse_kv_type(types.substr(slash + 1)), where};
}

std::string kv_types_spec(KVTypes t) {
    std::string s = t.key == t.value ? kv_type_name(t.key) : kv_type_name(t.key) + "/" + kv_type_name(t.value);
    if (t.quant_at == KVQuantAt::kAdmission && kv_quantized(t)) s += "@admission";
    return s;
}

std::string kv_quant_at_name(KVQuantAt a) { return a == KVQuantAt::kAdmission ? "admission" : "write"; }

KVQuantAt parse_kv_quant_at(const std::string& s) {
    if (s == "write") return KVQuantAt::kWrite;
    if (s == "admission") return KVQuantAt::kAdmission;
    fail("unknown place of KV quantization '", s, "' (supported: write, admission)");
}

KVType kv_local_type(KVType t, KVQuantAt at) {
    return at == KVQuantAt::kAdmission && kv_type_quantized(t) ? KVType::kF16 : t;
}

KVPool::KVPool(int head_dim, KVType type, int page_tokens, uint64_t pool_bytes)
    : KVPool(head_dim, type, type, page_tokens, pool_bytes) {}

KVPool::KVPool(int head_dim, KVType key_type, KVType value_type, int page_tokens, uint64_t pool_bytes,
               KVQuantAt quant_at)
    : head_dim_(head_dim), key_type_(key_type), value_type_(value_type), page_tokens_(page_tokens), quant_at_(quant_at),
      account_(std::make_shared<Account>()) {
    require(head_dim > 0 && page_tokens > 0, "KV pool: head_dim and page_tokens must be positive");
    key_row_bytes_ = kv_row_bytes(key_type, head_dim);
    value_row_bytes_ = kv_row_bytes(value_type, head_dim);
    const KVType lk = kv_local_type(key_type, quant_at), lv = kv_local_type(value_type, quant_at);
    size_t unit = (key_row_bytes_ + value_row_bytes_) * page_tokens;
    if (lk != key_type || lv != value_type)
        unit = std::max(unit, (kv_row_bytes(lk, head_dim) + kv_row_bytes(lv, head_dim)) * page_tokens);
    uint64_t limit = pool_bytes;
    if (limit == 0) {
        const uint64_t phys =
            static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
        limit = std::max<uint64_t>(phys / 2, unit);
    }
    require(limit >= unit, "KV pool of ", pool_bytes, " bytes (--kv-pool-mb) is smaller than one page (", unit,
            " bytes)");
    account_->limit = limit;
    account_->unit = unit;
    reserve();
    if (lk != key_type || lv != value_type) local_.reset(new KVPool(head_dim, lk, lv, page_tokens, quant_at, account_));
}

KVPool::KVPool(int head_dim, KVType key_type, KVType value_type, int page_tokens, KVQuantAt quant_at,
               std::shared_ptr<Account> account)
    : head_dim_(head_dim), key_type_(key_type), value_type_(value_type), page_tokens_(page_tokens), quant_at_(quant_at),
      account_(std::move(account)) {
    key_row_bytes_ = kv_row_bytes(key_type, head_dim);
    value_row_bytes_ = kv_row_bytes(value_type, head_dim);
    reserve();
}

void KVPool::reserve() {
    key_bytes_ = key_row_bytes_ * page_tokens_;
    page_bytes_ = key_bytes_ + value_row_bytes_ * page_tokens_;
    capacity_ = static_cast<int64_t>(account_->limit / page_bytes_);
    reserved_ = static_cast<size_t>(capacity_) * page_bytes_;
    void* p = mmap(nullptr, reserved_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("cannot reserve ", reserved_ >> 20, " MiB of address space for the KV pool");
    base_ = static_cast<uint8_t*>(p);
}

KVPool::~KVPool() {
    if (base_) munmap(base_, reserved_);
}

int32_t KVPool::alloc() {
    if (account_->used + page_bytes_ > account_->limit || (free_.empty() && high_ >= capacity_))
        throw KVPoolExhausted(cat("KV pool exhausted: ", account_->used, " of ", account_->limit, " bytes (",
                                  (account_->limit >> 20),
                                  " MiB) are in pages in use; raise --kv-pool-mb or compress more"));
    int32_t p;
    if (!free_.empty()) {
        p = free_.back();
        free_.pop_back();
    } else {
        p = high_++;
    }
    ++in_use_;
    account_->used += page_bytes_;
    account_->peak = std::max(account_->peak, account_->used);
    return p;
}

void KVPool::release(int32_t p) {
    require(p >= 0 && p < high_, "KV pool: releasing page ", p, " that was never handed out");
    // Give the memory back when the page covers whole OS pages.
    static const size_t os_page = static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
    uint8_t* start = keys(p);
    const uintptr_t a = (reinterpret_cast<uintptr_t>(start) + os_page - 1) / os_page * os_page;
    const uintptr_t b = (reinterpret_cast<uintptr_t>(start) + page_bytes_) / os_page * os_page;
    if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
    free_.push_back(p);
    --in_use_;
    account_->used -= page_bytes_;
}

void KVPool::set_rotation(const KVRotation& r) {
    require(account_->used == 0, "KV pool: the rotation cannot change while ", account_->used,
            " bytes of pages are in use");
    require(!r.any() || r.head_dim() == head_dim_, "KV pool: a rotation for head dimension ", r.head_dim(),
            " given to a pool of head dimension ", head_dim_);
    rotation_ = r;
    // The sinks' and window's layout stores its entries in the same rotated space, so that one decode step reads
    // both layouts with one rotated query and rotates one output back.
    if (local_) local_->rotation_ = r;
}

std::shared_ptr<KVPool> make_kv_pool(int head_dim, KVTypes types, KVRotateMode rotate, uint64_t pool_bytes,
                                     int page_tokens) {
    const KVRotation r = KVRotation::choose(rotate, types, head_dim);
    auto pool = std::make_shared<KVPool>(head_dim, types, page_tokens, pool_bytes);
    pool->set_rotation(r);
    return pool;
}

}  // namespace kvsieve
