// AVX2 online-softmax decode attention over binary16 cache pages. Compiled with AVX2/FMA/F16C flags; reached
// only through dot_kernels_avx2(), which the dispatcher selects after checking the CPU.
#include "kernels/attend_f16_avx2.h"
#include "kernels/online_softmax_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace kvsieve::avx2 {
namespace {

inline __m256 load_half8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <int G>
void attend(const uint16_t* K, const uint16_t* V, int n, int d, const float* q, float scale, float* m, float* l,
            float* o, float* s_out, int64_t s_stride) {
    alignas(32) float s[G][16];
    alignas(32) float p[G][16];
    float corr[G];
    // 1. Scores: each 8-wide chunk of a key row is converted once and multiplied into all G queries.
    for (int j = 0; j < n; ++j) {
        __m256 acc[G];
        for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
        for (int c = 0; c < d; c += 8) {
            const __m256 kr = load_half8(K + j * d + c);
            for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(kr, _mm256_loadu_ps(q + g * d + c), acc[g]);
        }
        for (int g = 0; g < G; ++g) s[g][j] = hsum8(acc[g]) * scale;
    }
    // 2. Online softmax update per query head; lanes j ≥ n are zeroed after the exponential.
    online_softmax_step16(s, p, G, n, m, l, corr, s_out, s_stride);
    // 3. Values: per 8-wide column chunk, the G outputs stay in registers while each row's chunk is converted
    // once and accumulated into all of them.
    for (int c = 0; c < d; c += 8) {
        __m256 acc[G];
        for (int g = 0; g < G; ++g) acc[g] = _mm256_mul_ps(_mm256_set1_ps(corr[g]), _mm256_loadu_ps(o + g * d + c));
        for (int j = 0; j < n; ++j) {
            const __m256 vr = load_half8(V + j * d + c);
            for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][j]), vr, acc[g]);
        }
        for (int g = 0; g < G; ++g) _mm256_storeu_ps(o + g * d + c, acc[g]);
    }
}

}  // namespace

bool attend_rows_f16(const uint16_t* k, const uint16_t* v, int n, int d, const float* q, int G, float scale, float* m,
                     float* l, float* o, float* s_out, int64_t s_stride) {
    if (n < 1 || n > 16 || d % 8 != 0 || d > 256) return false;
    switch (G) {
        case 1: attend<1>(k, v, n, d, q, scale, m, l, o, s_out, s_stride); return true;
        case 2: attend<2>(k, v, n, d, q, scale, m, l, o, s_out, s_stride); return true;
        case 3: attend<3>(k, v, n, d, q, scale, m, l, o, s_out, s_stride); return true;
        case 4: attend<4>(k, v, n, d, q, scale, m, l, o, s_out, s_stride); return true;
        case 5: attend<5>(k, v, n, d, q, scale, m, l, o, s_out, s_stride); return true;
        case 6: attend<6>(k, v, n, d, q, scale, m, l, o, s_out, s_stride); return true;
        case 7: attend<7>(k, v, n, d, q, scale, m, l, o, s_out, s_stride); return true;
        case 8: attend<8>(k, v, n, d, q, scale, m, l, o, s_out, s_stride); return true;
        default: return false;
    }
}

}  // namespace kvsieve::avx2
