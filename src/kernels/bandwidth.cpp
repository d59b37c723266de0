#include "kernels/bandwidth.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "kernels/cpu_features.h"
#include "kernels/repack.h"

namespace kvsieve {

namespace {
// One 64-byte load per cache line, two independent chains: the loads, not the adds, set the pace.
__attribute__((target("avx512f"))) uint64_t sum_avx512_range(const uint64_t* p, size_t begin, size_t end) {
    uint64_t total = 0;
    for (size_t i = begin; i < end; i += 16) {
        const __m512i a = _mm512_load_si512(p + i);
        const __m512i b = _mm512_load_si512(p + i + 8);
        total += static_cast<uint64_t>(_mm512_reduce_add_epi64(_mm512_add_epi64(a, b)));
    }
    return total;
}

// The threads take blocks of 64 KiB (the AVX-512 code stays in a function of its own: an OpenMP region's body is
// compiled without the enclosing function's target attribute by some compilers).
uint64_t sum_avx512(const uint64_t* p, size_t n) {
    constexpr size_t kBlock = 8192;  // uint64 values, a multiple of 16
    const size_t blocks = (n + kBlock - 1) / kBlock;
    uint64_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (size_t b = 0; b < blocks; ++b) total += sum_avx512_range(p, b * kBlock, std::min(n, (b + 1) * kBlock));
    return total;
}

uint64_t sum_generic(const uint64_t* p, size_t n) {
    uint64_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (size_t i = 0; i < n; i += 8) {
        uint64_t a[8];
        for (int j = 0; j < 8; ++j) a[j] = p[i + j];
        total += ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    }
    return total;
}
}  // namespace

double measure_read_bandwidth_gbs(size_t bytes, int reps) {
    const size_t n = bytes / 128 * 16;  // whole pairs of cache lines
    AlignedBuffer buf(n * sizeof(uint64_t));
    auto* p = reinterpret_cast<uint64_t*>(buf.data());
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) p[i] = i;
    const bool avx512 = cpu_features().avx512f;
    double best = 0;
    uint64_t sink = 0;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        sink += avx512 ? sum_avx512(p, n) : sum_generic(p, n);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / s / 1e9);
    }
    return sink == 1 ? 0 : best;  // keeps the sums observable
}

}  // namespace kvsieve
