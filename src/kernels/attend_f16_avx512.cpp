// AVX-512 online-softmax decode attention over binary16 cache pages. Compiled with AVX-512 flags; reached only
// through dot_kernels_avx512(), which the dispatcher selects after checking the CPU.
#include "kernels/attend_f16_avx512.h"
#include "kernels/online_softmax_avx512.h"

#include <immintrin.h>

#include <cmath>

namespace kvsieve::avx512 {
namespace {

// Two 256-bit conversions joined: Zen 4 runs the 512-bit vcvtph2ps as two halves, and the joined form decoded
// faster there (SmolLM2 Q4_1 at depth 4096: 74.5 → 77.4 tok/s; the F16 weight kernel of dot_avx512.cpp: 77 → 131).
inline __m512 load_half16(const uint16_t* p) {
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

/// NV = d / 16 vectors per row; GB = query heads whose outputs stay in registers during the value pass.
template <int NV>
void attend(const uint16_t* K, const uint16_t* V, int n, const float* q, int G, float scale, float* m, float* l,
            float* o, float* s_out, int64_t s_stride) {
    constexpr int d = NV * 16;
    constexpr int GB = NV >= 16 ? 1 : 16 / NV;
    alignas(64) float s[kMaxGroupF16Avx512][16];
    alignas(64) float p[kMaxGroupF16Avx512][16];
    float corr[kMaxGroupF16Avx512];
    // 1. Scores: each key row is converted once and dotted with all G queries.
    for (int j = 0; j < n; ++j) {
        __m512 kr[NV];
        for (int u = 0; u < NV; ++u) kr[u] = load_half16(K + j * d + 16 * u);
        for (int g = 0; g < G; ++g) {
            const float* qg = q + g * d;
            __m512 a0 = _mm512_mul_ps(kr[0], _mm512_loadu_ps(qg));
            __m512 a1 = NV > 1 ? _mm512_mul_ps(kr[1], _mm512_loadu_ps(qg + 16)) : _mm512_setzero_ps();
            for (int u = 2; u < NV; u += 2) {
                a0 = _mm512_fmadd_ps(kr[u], _mm512_loadu_ps(qg + 16 * u), a0);
                if (u + 1 < NV) a1 = _mm512_fmadd_ps(kr[u + 1], _mm512_loadu_ps(qg + 16 * (u + 1)), a1);
            }
            s[g][j] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) * scale;
        }
    }
    // 2. Online softmax update per query head, 16 keys at once.
    online_softmax_step16(s, p, G, n, m, l, corr, s_out, s_stride);
    // 3. Values: each value row is converted once per block of GB query heads held in registers.
    for (int g0 = 0; g0 < G; g0 += GB) {
        const int gn = std::min(GB, G - g0);
        __m512 acc[GB][NV];
        for (int b = 0; b < GB; ++b)
            if (b < gn) {
                const __m512 c = _mm512_set1_ps(corr[g0 + b]);
                for (int u = 0; u < NV; ++u) acc[b][u] = _mm512_mul_ps(c, _mm512_loadu_ps(o + (g0 + b) * d + 16 * u));
            }
        for (int j = 0; j < n; ++j) {
            __m512 vr[NV];
            for (int u = 0; u < NV; ++u) vr[u] = load_half16(V + j * d + 16 * u);
            for (int b = 0; b < GB; ++b)
                if (b < gn) {
                    const __m512 pj = _mm512_set1_ps(p[g0 + b][j]);
                    for (int u = 0; u < NV; ++u) acc[b][u] = _mm512_fmadd_ps(pj, vr[u], acc[b][u]);
                }
        }
        for (int b = 0; b < GB; ++b)
            if (b < gn)
                for (int u = 0; u < NV; ++u) _mm512_storeu_ps(o + (g0 + b) * d + 16 * u, acc[b][u]);
    }
}

}  // namespace

bool attend_rows_f16(const uint16_t* k, const uint16_t* v, int n, int d, const float* q, int G, float scale, float* m,
                     float* l, float* o, float* s_out, int64_t s_stride) {
    if (n < 1 || n > 16 || G < 1 || G > kMaxGroupF16Avx512) return false;
    switch (d) {
        case 64: attend<4>(k, v, n, q, G, scale, m, l, o, s_out, s_stride); return true;
        case 128: attend<8>(k, v, n, q, G, scale, m, l, o, s_out, s_stride); return true;
        case 256: attend<16>(k, v, n, q, G, scale, m, l, o, s_out, s_stride); return true;
        default: return false;
    }
}

}  // namespace kvsieve::avx512
