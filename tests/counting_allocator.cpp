// The test program's global operator new and delete (every variant: plain, array, aligned, nothrow, sized),
// forwarding to malloc / aligned_alloc / free and counting the allocations made while an AllocationCount is alive.
// Left out under AddressSanitizer (scripts/sanitize.sh), which needs its own operator new.
#include "counting_allocator.h"

#include <atomic>
#include <cstdlib>
#include <new>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVSIEVE_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KVSIEVE_TEST_ASAN 1
#endif

namespace kvsieve::test {
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_count{0};
}  // namespace

#ifdef KVSIEVE_TEST_ASAN
bool allocations_countable() { return false; }
#else
bool allocations_countable() { return true; }
#endif

AllocationCount::AllocationCount() {
    g_count.store(0);
    g_counting.store(true);
}
AllocationCount::~AllocationCount() { g_counting.store(false); }
int64_t AllocationCount::count() const { return g_count.load(); }

namespace {
void note() {
    if (g_counting.load(std::memory_order_relaxed)) g_count.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace
}  // namespace kvsieve::test

#ifndef KVSIEVE_TEST_ASAN
namespace {
void* allocate(std::size_t n) {
    kvsieve::test::note();
    return std::malloc(n == 0 ? 1 : n);
}
void* allocate_aligned(std::size_t n, std::align_val_t al) {
    kvsieve::test::note();
    const auto a = static_cast<std::size_t>(al);
    // aligned_alloc wants a size that is a multiple of the alignment.
    return std::aligned_alloc(a, ((n == 0 ? 1 : n) + a - 1) / a * a);
}
void* must(void* p) {
    if (!p) throw std::bad_alloc();
    return p;
}
}  // namespace

void* operator new(std::size_t n) { return must(allocate(n)); }
void* operator new[](std::size_t n) { return must(allocate(n)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new(std::size_t n, std::align_val_t al) { return must(allocate_aligned(n, al)); }
void* operator new[](std::size_t n, std::align_val_t al) { return must(allocate_aligned(n, al)); }
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
    return allocate_aligned(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
    return allocate_aligned(n, al);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
#endif
