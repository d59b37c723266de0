#pragma once
// The online-softmax step shared by the AVX2 decode-attention kernels over binary16 and quantized pages (include
// only from units compiled with AVX2 and FMA flags).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/exp_avx2.h"

namespace kvsieve::avx2 {

/// Σ of the 8 lanes of a (pairwise: high half onto low, then within the half).
inline float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/// Online-softmax update (Milakov & Gimelshein 2018; Dao et al. 2022, FlashAttention Alg. 1) of G query heads over
/// one page of n ≤ 16 rows. s [G][16] (32-byte aligned): the scaled scores q·k·scale of rows 0..n−1 (lanes j ≥ n are
/// overwritten). Writes p [G][16] (32-byte aligned): the unnormalised weights exp(s − m_new), 0 for j ≥ n; corr[g] =
/// exp(m_old − m_new), the factor the running output must be scaled by (0 when no row was seen yet, m_old = −∞);
/// updates the running max m[G] and normaliser l[G]. If s_out is set the scores also go to s_out[g·s_stride + j].
inline void online_softmax_step16(float (*s)[16], float (*p)[16], int G, int n, float* m, float* l, float* corr,
                                  float* s_out, int64_t s_stride) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 live0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
    const __m256 live1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8), lane));
    for (int g = 0; g < G; ++g) {
        if (s_out)
            for (int j = 0; j < n; ++j) s_out[g * s_stride + j] = s[g][j];
        float mx = m[g];
        for (int j = 0; j < n; ++j) mx = std::max(mx, s[g][j]);
        for (int j = n; j < 16; ++j) s[g][j] = mx;
        const __m256 mv = _mm256_set1_ps(mx);
        const __m256 p0 = _mm256_and_ps(live0, exp_nonpos8(_mm256_sub_ps(_mm256_load_ps(s[g]), mv)));
        const __m256 p1 = _mm256_and_ps(live1, exp_nonpos8(_mm256_sub_ps(_mm256_load_ps(s[g] + 8), mv)));
        _mm256_store_ps(p[g], p0);
        _mm256_store_ps(p[g] + 8, p1);
        corr[g] = m[g] == -INFINITY ? 0.0f : _mm256_cvtss_f32(exp_nonpos8(_mm256_set1_ps(m[g] - mx)));
        l[g] = l[g] * corr[g] + hsum8(_mm256_add_ps(p0, p1));
        m[g] = mx;
    }
}

}  // namespace kvsieve::avx2
