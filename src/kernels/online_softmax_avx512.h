#pragma once
// The online-softmax step shared by the AVX-512 decode-attention kernels over binary16 and quantized pages (include
// only from units compiled with AVX-512F flags).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/exp_avx512.h"

namespace kvsieve::avx512 {

/// Online-softmax update (Milakov & Gimelshein 2018; Dao et al. 2022, FlashAttention Alg. 1) of G query heads over
/// one page of n ≤ 16 rows, 16 keys at once. s [G][16] (64-byte aligned): the scaled scores q·k·scale of rows
/// 0..n−1. Writes p [G][16] (64-byte aligned): the unnormalised weights exp(s − m_new), 0 for j ≥ n; corr[g] =
/// exp(m_old − m_new), the factor the running output must be scaled by (0 when no row was seen yet, m_old = −∞);
/// updates the running max m[G] and normaliser l[G]. If s_out is set the scores also go to s_out[g·s_stride + j].
inline void online_softmax_step16(float (*s)[16], float (*p)[16], int G, int n, float* m, float* l, float* corr,
                                  float* s_out, int64_t s_stride) {
    const __mmask16 live = static_cast<__mmask16>((1u << n) - 1u);
    for (int g = 0; g < G; ++g) {
        const __m512 sv = _mm512_maskz_load_ps(live, s[g]);
        if (s_out) _mm512_mask_storeu_ps(s_out + g * s_stride, live, sv);
        const float mx = std::max(m[g], _mm512_mask_reduce_max_ps(live, sv));
        const __m512 pv = _mm512_maskz_mov_ps(live, exp_nonpos16(_mm512_sub_ps(sv, _mm512_set1_ps(mx))));
        _mm512_store_ps(p[g], pv);
        corr[g] = m[g] == -INFINITY ? 0.0f : _mm512_cvtss_f32(exp_nonpos16(_mm512_set1_ps(m[g] - mx)));
        l[g] = l[g] * corr[g] + _mm512_reduce_add_ps(pv);
        m[g] = mx;
    }
}

}  // namespace kvsieve::avx512
