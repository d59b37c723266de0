#include "cache/kv_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace kvsieve {

size_t kv_type_size(KVType t) { return t == KVType::kF32 ? 4 : 2; }

std::string kv_type_name(KVType t) {
    switch (t) {
        case KVType::kF32: return "f32";
        case KVType::kF16: return "f16";
        case KVType::kBF16: return "bf16";
    }
    return "?";
}

KVType parse_kv_type(const std::string& s) {
    if (s == "f32") return KVType::kF32;
    if (s == "f16") return KVType::kF16;
    if (s == "bf16") return KVType::kBF16;
    fail("unknown KV cache type '", s, "' (f32, f16 or bf16)");
}

KVPool::KVPool(int head_dim, KVType type, int page_tokens, uint64_t budget_bytes)
    : head_dim_(head_dim), type_(type), page_tokens_(page_tokens) {
    require(head_dim > 0 && page_tokens > 0, "KV pool: head_dim and page_tokens must be positive");
    row_bytes_ = static_cast<size_t>(head_dim) * kv_type_size(type);
    half_bytes_ = row_bytes_ * page_tokens;
    page_bytes_ = 2 * half_bytes_;
    uint64_t limit = budget_bytes;
    if (limit == 0) {
        const uint64_t phys = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
        limit = std::max<uint64_t>(phys / 2, page_bytes_);
    }
    capacity_ = static_cast<int64_t>(limit / page_bytes_);
    require(capacity_ > 0, "KV pool of ", budget_bytes, " bytes (--kv-pool-mb) is smaller than one page (", page_bytes_,
            " bytes)");
    reserved_ = static_cast<size_t>(capacity_) * page_bytes_;
    void* p = mmap(nullptr, reserved_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("cannot reserve ", reserved_ >> 20, " MiB of address space for the KV pool");
    base_ = static_cast<uint8_t*>(p);
}

KVPool::~KVPool() {
    if (base_) munmap(base_, reserved_);
}

int32_t KVPool::alloc() {
    int32_t p;
    if (!free_.empty()) {
        p = free_.back();
        free_.pop_back();
    } else {
        if (high_ >= capacity_)
            throw KVBudgetExhausted(cat("KV cache budget exhausted: all ", capacity_, " pages (", (reserved_ >> 20),
                                        " MiB) are in use; raise --kv-pool-mb or compress more"));
        p = high_++;
    }
    ++in_use_;
    peak_ = std::max(peak_, in_use_);
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
}

}  // namespace kvsieve
