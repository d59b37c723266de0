// AVX2 Walsh–Hadamard transform (8 floats per register). Compiled with the AVX2 set's flags; reached only through
// hadamard_kernels_avx2(), which the dispatcher selects after checking the CPU.
#include <immintrin.h>

#include "kernels/hadamard.h"

namespace kvsieve {
namespace hadamard_avx2 {

using V = __m256;
constexpr int W = 8;
static inline V vload(const float* p) { return _mm256_loadu_ps(p); }
static inline void vstore(float* p, V v) { _mm256_storeu_ps(p, v); }
static inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
static inline V vsub(V a, V b) { return _mm256_sub_ps(a, b); }
static inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
static inline V vset1(float f) { return _mm256_set1_ps(f); }

/// Stages h = 1, 2, 4 in one register: the partner lane j XOR h comes from a permutation; lanes with bit h clear
/// keep x_j + x_{j+h}, the others take x_{j−h} − x_j (the scalar reference's a − b with a the lower partner).
static inline V vstages(V v) {
    V p = _mm256_permute_ps(v, 0xB1);  // lanes 1 0 3 2 …
    v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xAA);
    p = _mm256_permute_ps(v, 0x4E);  // lanes 2 3 0 1 …
    v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xCC);
    p = _mm256_permute2f128_ps(v, v, 0x01);  // the two 128-bit halves swapped
    return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xF0);
}

#include "kernels/hadamard_simd.inc"

}  // namespace hadamard_avx2

const HadamardKernels& hadamard_kernels_avx2() {
    static const HadamardKernels k = {.isa = "avx2", .rows = hadamard_avx2::simd_rows};
    return k;
}

}  // namespace kvsieve
