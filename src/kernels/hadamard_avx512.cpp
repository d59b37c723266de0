// AVX-512 Walsh–Hadamard transform (16 floats per register). Compiled with the AVX-512 set's flags; reached only
// through hadamard_kernels_avx512(), which the dispatcher selects after checking the CPU.
#include <immintrin.h>

#include "kernels/hadamard.h"

namespace kvsieve {
namespace hadamard_avx512 {

using V = __m512;
constexpr int W = 16;
static inline V vload(const float* p) { return _mm512_loadu_ps(p); }
static inline void vstore(float* p, V v) { _mm512_storeu_ps(p, v); }
static inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
static inline V vsub(V a, V b) { return _mm512_sub_ps(a, b); }
static inline V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
static inline V vset1(float f) { return _mm512_set1_ps(f); }

/// Stages h = 1, 2, 4, 8 in one register: the partner lane j XOR h comes from a permutation (within 128-bit
/// lanes for h < 4, of 128-bit lanes for h ≥ 4); lanes with bit h clear keep x_j + x_{j+h}, the others (mask)
/// take x_{j−h} − x_j (the scalar reference's a − b with a the lower partner).
static inline V vstages(V v) {
    V p = _mm512_permute_ps(v, 0xB1);  // lanes 1 0 3 2 …
    v = _mm512_mask_blend_ps(0xAAAA, _mm512_add_ps(v, p), _mm512_sub_ps(p, v));
    p = _mm512_permute_ps(v, 0x4E);  // lanes 2 3 0 1 …
    v = _mm512_mask_blend_ps(0xCCCC, _mm512_add_ps(v, p), _mm512_sub_ps(p, v));
    p = _mm512_shuffle_f32x4(v, v, 0xB1);  // 128-bit lanes 1 0 3 2
    v = _mm512_mask_blend_ps(0xF0F0, _mm512_add_ps(v, p), _mm512_sub_ps(p, v));
    p = _mm512_shuffle_f32x4(v, v, 0x4E);  // 128-bit lanes 2 3 0 1
    return _mm512_mask_blend_ps(0xFF00, _mm512_add_ps(v, p), _mm512_sub_ps(p, v));
}

#include "kernels/hadamard_simd.inc"

}  // namespace hadamard_avx512

const HadamardKernels& hadamard_kernels_avx512() {
    static const HadamardKernels k = {.isa = "avx512", .rows = hadamard_avx512::simd_rows};
    return k;
}

}  // namespace kvsieve
