// AVX-512 (F, BW, VL, DQ, VNNI) kernels. Compiled with those flags; only called after cpu_features checks.
#include <immintrin.h>

#include <cstring>

#include "kernels/dot.h"

// Block scales are converted with F16C here (the scalar table lookup is not inlined).
#define KVSIEVE_HALF(h) _cvtsh_ss(h)

namespace kvsieve {
namespace avx512 {
#include "kernels/dot_generic.inc"

static float dot_f32(const float* w, const float* x, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; ++i) s += w[i] * x[i];
    return s;
}

static float dot_f16(const uint16_t* w, const float* x, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(w + i) + 1024, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(w + i) + 1088, _MM_HINT_T0);
        const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i)));
        const __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 16)));
        const __m512 w2 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 32)));
        const __m512 w3 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 48)));
        a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(w2, _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(w3, _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i)));
        a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i), a0);
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; ++i) s += fp16_to_fp32(w[i]) * x[i];
    return s;
}

// int8 · int8 of one 32-value block with VNNI: |w| (unsigned) · (x with w's sign) summed in int32 lanes.
static inline __m256 block_dot_q8(const BlockQ8_0& w, const BlockQ8_0& x) {
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs));
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
    const __m256i aw = _mm256_sign_epi8(wq, wq);
    const __m256i sx = _mm256_sign_epi8(xq, wq);
    const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sx);
    return _mm256_cvtepi32_ps(dot);
}

static float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* xq, int64_t nb) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        _mm_prefetch(reinterpret_cast<const char*>(w + b) + 1024, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(w + b) + 1088, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(w + b) + 1152, _MM_HINT_T0);
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(KVSIEVE_HALF(w[b].d) * KVSIEVE_HALF(xq[b].d)), block_dot_q8(w[b], xq[b]), a0);
        a1 = _mm256_fmadd_ps(_mm256_set1_ps(KVSIEVE_HALF(w[b + 1].d) * KVSIEVE_HALF(xq[b + 1].d)),
                             block_dot_q8(w[b + 1], xq[b + 1]), a1);
        a2 = _mm256_fmadd_ps(_mm256_set1_ps(KVSIEVE_HALF(w[b + 2].d) * KVSIEVE_HALF(xq[b + 2].d)),
                             block_dot_q8(w[b + 2], xq[b + 2]), a2);
        a3 = _mm256_fmadd_ps(_mm256_set1_ps(KVSIEVE_HALF(w[b + 3].d) * KVSIEVE_HALF(xq[b + 3].d)),
                             block_dot_q8(w[b + 3], xq[b + 3]), a3);
    }
    for (; b < nb; ++b)
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(KVSIEVE_HALF(w[b].d) * KVSIEVE_HALF(xq[b].d)), block_dot_q8(w[b], xq[b]), a0);
    const __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
}

static void dequant_row(TensorType t, const void* src, float* dst, int64_t n) {
    if (t != TensorType::F16) return g_dequant_row_blocks(t, src, dst, n);
    const auto* s = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
    for (; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
}
}  // namespace avx512

const DotKernels& dot_kernels_avx512() {
    static const DotKernels k = {"avx512",         avx512::dot_f32,    avx512::dot_f16,    avx512::g_dot_bf16,
                                 avx512::dot_q8_0, avx512::g_dot_q4_0, avx512::g_dot_q4_k, avx512::g_dot_q6_k,
                                 avx512::dequant_row, quantize_row_q8_0};
    return k;
}

}  // namespace kvsieve
