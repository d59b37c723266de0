// AVX-512 (F, BW, VL, DQ, VNNI) kernels. Compiled with those flags; only called after cpu_features checks.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attend_f16_avx512.h"
#include "kernels/attend_quant.h"
#include "kernels/dot.h"
#include "kernels/kv_attend.h"

// Block scales are converted with F16C here (the scalar table lookup is not inlined).
#define KVSIEVE_HALF(h) _cvtsh_ss(h)

namespace kvsieve {
namespace avx512 {

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

static float isa_dot_f32(const float* w, const float* x, int64_t n) { return dot_f32(w, x, n); }
#include "kernels/dot_generic.inc"

/// 16 binary16 values → 16 floats, converted as two 256-bit halves (see dot_f16).
static inline __m512 cvt16_ph(const uint16_t* p) {
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

// Binary16 weights: each 16-wide group converted with the 256-bit vcvtph2ps and joined into a 512-bit register for the
// FMA. The all-512-bit form (vcvtph2ps zmm from a 256-bit load) decoded SmolLM2 F16 at 77 tok/s on an AMD EPYC Zen 4
// (2 threads) against 131 with this one (126 with the AVX2 kernel): Zen 4 runs 512-bit conversions as two halves.
static float dot_f16(const uint16_t* w, const float* x, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch(reinterpret_cast<const char*>(w + i) + 2048, _MM_HINT_T0);
        a0 = _mm512_fmadd_ps(cvt16_ph(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(cvt16_ph(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(cvt16_ph(w + i), _mm512_loadu_ps(x + i), a0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
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
        _mm_prefetch(reinterpret_cast<const char*>(w + b) + 2048, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(w + b) + 2112, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(w + b) + 2176, _MM_HINT_T0);
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(KVSIEVE_HALF(w[b].d) * KVSIEVE_HALF(xq[b].d)), block_dot_q8(w[b], xq[b]),
                             a0);
        a1 = _mm256_fmadd_ps(_mm256_set1_ps(KVSIEVE_HALF(w[b + 1].d) * KVSIEVE_HALF(xq[b + 1].d)),
                             block_dot_q8(w[b + 1], xq[b + 1]), a1);
        a2 = _mm256_fmadd_ps(_mm256_set1_ps(KVSIEVE_HALF(w[b + 2].d) * KVSIEVE_HALF(xq[b + 2].d)),
                             block_dot_q8(w[b + 2], xq[b + 2]), a2);
        a3 = _mm256_fmadd_ps(_mm256_set1_ps(KVSIEVE_HALF(w[b + 3].d) * KVSIEVE_HALF(xq[b + 3].d)),
                             block_dot_q8(w[b + 3], xq[b + 3]), a3);
    }
    for (; b < nb; ++b)
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(KVSIEVE_HALF(w[b].d) * KVSIEVE_HALF(xq[b].d)), block_dot_q8(w[b], xq[b]),
                             a0);
    const __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
}

// Split-layout Q8_0: two blocks per 512-bit load; sixteen block scales per step, spread to the two
// 8-lane halves of each pair with one permute.
static float dot_q8_0_split(const int8_t* wq, const uint16_t* wd, const int8_t* xq, const float* xd, int64_t nb) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
    int64_t b = 0;
    for (; b + 16 <= nb; b += 16) {
        const __m512 sc = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wd + b))),
                                        _mm512_loadu_ps(xd + b));
        __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m512i two = _mm512_set1_epi32(2);
        for (int p = 0; p < 8; ++p, idx = _mm512_add_epi32(idx, two)) {
            const int8_t* wp = wq + (b + 2 * p) * QK8_0;
            _mm_prefetch(reinterpret_cast<const char*>(wp) + 4096, _MM_HINT_T0);
            const __m512i w = _mm512_loadu_si512(wp);
            const __m512i x = _mm512_loadu_si512(xq + (b + 2 * p) * QK8_0);
            const __mmask64 neg = _mm512_movepi8_mask(w);
            const __m512i sx = _mm512_mask_sub_epi8(x, neg, zero, x);
            const __m512i dot = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(w), sx);
            const __m512 s = _mm512_permutexvar_ps(idx, sc);
            if (p & 1)
                acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc1);
            else
                acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc0);
        }
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    if (b < nb) s += g_dot_q8_0_split(wq + b * QK8_0, wd + b, xq + b * QK8_0, xd + b, nb - b);
    return s;
}

static inline __m256i dot_us8_i32(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
#include "kernels/dot_int8_x86.inc"
#include "kernels/dot_kquant_x86.inc"

static void dequant_row(TensorType t, const void* src, float* dst, int64_t n) {
    if (t != TensorType::F16) return g_dequant_row_blocks(t, src, dst, n);
    const auto* s = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, cvt16_ph(s + i));
    for (; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
}
static void to_f16(const float* src, uint16_t* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}
static float isa_dot_f16(const uint16_t* w, const float* x, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(cvt16_ph(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(cvt16_ph(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; ++i) s += fp16_to_fp32(w[i]) * x[i];
    return s;
}
static void isa_axpy_f16(float a, const uint16_t* v, float* o, int64_t n) {
    const __m512 av = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(o + i, _mm512_fmadd_ps(av, cvt16_ph(v + i), _mm512_loadu_ps(o + i)));
    for (; i < n; ++i) o[i] += a * fp16_to_fp32(v[i]);
}
static float isa_dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* xq, int64_t nb) { return dot_q8_0(w, xq, nb); }
static float isa_dot_q4_1(const BlockQ4_1* w, const BlockQ8_1* xq, int64_t nb) { return x86_dot_q4_1(w, xq, nb); }
static float isa_dot_q5_0(const BlockQ5_0* w, const BlockQ8_0* xq, int64_t nb) { return x86_dot_q5_0(w, xq, nb); }
static float isa_dot_q5_1(const BlockQ5_1* w, const BlockQ8_1* xq, int64_t nb) { return x86_dot_q5_1(w, xq, nb); }
static float isa_dot_iq4_nl(const BlockIQ4_NL* w, const BlockQ8_0* xq, int64_t nb) { return x86_dot_iq4_nl(w, xq, nb); }
#include "kernels/attention_generic.inc"
// This set's KV attend kernels (kernels/kv_attend.h). F16 pages of F16 values and the common shapes take the
// specialised binary16 kernel (attend_f16_avx512.h); Q8_0 / Q4_0 keys with Q8_0, Q4_0 or F16 values and the common shapes
// take the specialised quantized-page kernel (attend_quant.h), same semantics; everything else the generic kernels.
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_float) {
    attend_rows_float_keys(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride);
}
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_f16) {
    if (kt == TensorType::F16 && vt == TensorType::F16 &&
        attend_rows_f16(static_cast<const uint16_t*>(k), static_cast<const uint16_t*>(v), n, d, q, G, scale, m, l, o,
                        s_out, s_stride))
        return;
    attend_rows_float_keys(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride);
}
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q8_0) {
    if (is_quant_attend_pair(kt, vt) && attend_rows_quant(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride))
        return;
    attend_rows_q8_0_keys(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride);
}
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q4_0) {
    if (is_quant_attend_pair(kt, vt) && attend_rows_quant(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride))
        return;
    attend_rows_q4_0_keys(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride);
}
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q4_1) {
    attend_rows_q4_1_keys(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride);
}
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q5_0) {
    attend_rows_q5_0_keys(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride);
}
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q5_1) {
    attend_rows_q5_1_keys(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride);
}
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_iq4_nl) {
    attend_rows_iq4_nl_keys(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride);
}
}  // namespace avx512

const DotKernels& dot_kernels_avx512() {
    static const DotKernels k = {.isa = "avx512",
                                 .split_q8_0 = true,
                                 .f32 = avx512::dot_f32,
                                 .f16 = avx512::dot_f16,
                                 .bf16 = avx512::g_dot_bf16,
                                 .q8_0 = avx512::dot_q8_0,
                                 .q8_0_split = avx512::dot_q8_0_split,
                                 .q4_0 = avx512::g_dot_q4_0,
                                 .q4_k = avx512::g_dot_q4_k,
                                 .q6_k = avx512::g_dot_q6_k,
                                 .q4_1 = avx512::x86_dot_q4_1,
                                 .q5_0 = avx512::x86_dot_q5_0,
                                 .q5_1 = avx512::x86_dot_q5_1,
                                 .q2_k = avx512::x86_dot_q2_k,
                                 .q3_k = avx512::x86_dot_q3_k,
                                 .q5_k = avx512::x86_dot_q5_k,
                                 .q8_0_rows = nullptr,  // Q8_0 rows are in the split layout on AVX-512
                                 .q4_1_rows = avx512::x86_dot_q4_1_rows,
                                 .dequant_row = avx512::dequant_row,
                                 .to_f16 = avx512::to_f16,
                                 .quantize_q8_0 = quantize_row_q8_0_activations,
                                 .quantize_q8_1 = quantize_row_q8_1_activations,
                                 .quantize_q8_k = quantize_row_q8_k,
                                 .softmax = avx512::softmax_row,
                                 .gelu_dot = avx512::gelu_dot_poly};
    return k;
}

}  // namespace kvsieve
