#pragma once
// A count of the heap allocations made while a scope is alive, for tests that check a hot path allocates nothing
// (tests/counting_allocator.cpp replaces the global operator new family of the test program).
#include <cstdint>

namespace kvsieve::test {

/// True when the replacement operator new is linked and counting works: false under AddressSanitizer, whose own
/// allocator must keep operator new (a test then skips).
bool allocations_countable();

/// Counts every operator new (all variants: plain, array, aligned, nothrow) on any thread while it is alive; outside
/// such a scope nothing is counted, so other tests are unaffected. One at a time (not nested).
class AllocationCount {
public:
    AllocationCount();
    ~AllocationCount();
    AllocationCount(const AllocationCount&) = delete;
    AllocationCount& operator=(const AllocationCount&) = delete;
    /// Allocations since construction.
    int64_t count() const;
};

}  // namespace kvsieve::test
