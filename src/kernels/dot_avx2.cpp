// AVX2 + FMA + F16C kernels. Compiled with those flags; only called after cpu_features checks.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attend_f16_avx2.h"
#include "kernels/attend_quant.h"
#include "kernels/dot.h"
#include "kernels/kv_attend.h"
#include "kernels/exp_avx2.h"
#include "kernels/repack.h"

// Block scales are converted with F16C here (the scalar table lookup is not inlined).
#define KVSIEVE_HALF(h) _cvtsh_ss(h)

namespace kvsieve {
namespace avx2 {

static inline float hsum(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
}

static float dot_f32(const float* w, const float* x, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    }
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; ++i) s += w[i] * x[i];
    return s;
}

static float isa_dot_f32(const float* w, const float* x, int64_t n) { return dot_f32(w, x, n); }
#include "kernels/dot_generic.inc"

static float dot_f16(const uint16_t* w, const float* x, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch(reinterpret_cast<const char*>(w + i) + 2048, _MM_HINT_T0);
        const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
        const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i + 8)));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), a1);
    }
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; ++i) s += fp16_to_fp32(w[i]) * x[i];
    return s;
}

// int8 · int8 of one 32-value block: maddubs(|w|, x·sign(w)) → int16 pairs, madd with 1 → int32 lanes (aw = |w|).
static inline __m256 block_dot_q8(__m256i wq, __m256i aw, const BlockQ8_0& x) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
    const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq, wq));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/// One Q8_0 weight row (GGUF layout) against N activation rows (row i's blocks at x + i·xs; the scale of block j
/// is xd(j): binary16 from the block for the single-row kernel, float32 converted once for the multi-row one — the
/// same value): each weight block is loaded and its magnitudes taken once for all N rows; row i's operations do not
/// depend on N (out[i] bit-identical to N = 1).
template <int N, class XScale>
static void dot_q8_0_n(const BlockQ8_0* w, const BlockQ8_0* x, XScale xd, int64_t xs, int64_t nb, float* out) {
    __m256 a0[N], a1[N];
    for (int i = 0; i < N; ++i) a0[i] = a1[i] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b + 1].qs));
        const __m256i aw0 = _mm256_sign_epi8(w0, w0), aw1 = _mm256_sign_epi8(w1, w1);
        const float d0 = KVSIEVE_HALF(w[b].d), d1 = KVSIEVE_HALF(w[b + 1].d);
        for (int i = 0; i < N; ++i) {
            const int64_t j = i * xs + b;
            a0[i] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * xd(j)), block_dot_q8(w0, aw0, x[j]), a0[i]);
            a1[i] = _mm256_fmadd_ps(_mm256_set1_ps(d1 * xd(j + 1)), block_dot_q8(w1, aw1, x[j + 1]), a1[i]);
        }
    }
    for (; b < nb; ++b) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
        const __m256i aw0 = _mm256_sign_epi8(w0, w0);
        const float d0 = KVSIEVE_HALF(w[b].d);
        for (int i = 0; i < N; ++i) {
            const int64_t j = i * xs + b;
            a0[i] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * xd(j)), block_dot_q8(w0, aw0, x[j]), a0[i]);
        }
    }
    for (int i = 0; i < N; ++i) out[i] = hsum(_mm256_add_ps(a0[i], a1[i]));
}

static float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* xq, int64_t nb) {
    float out;
    dot_q8_0_n<1>(
        w, xq, [xq](int64_t j) { return KVSIEVE_HALF(xq[j].d); }, 0, nb, &out);
    return out;
}

/// DotKernels::q8_0_rows: n in 1..kDotRowsMax activation rows.
static void dot_q8_0_rows(const BlockQ8_0* w, const BlockQ8_0* x, const float* xd, int64_t xs, int n, int64_t nb,
                          float* out) {
    auto sc = [xd](int64_t j) { return xd[j]; };
    switch (n) {
        case 1: return dot_q8_0_n<1>(w, x, sc, xs, nb, out);
        case 2: return dot_q8_0_n<2>(w, x, sc, xs, nb, out);
        case 3: return dot_q8_0_n<3>(w, x, sc, xs, nb, out);
        default: return dot_q8_0_n<4>(w, x, sc, xs, nb, out);
    }
}

// Split-layout Q8_0 (repack.h: a row's int8 weights contiguous, its binary16 block scales after them): eight
// blocks per step, their eight scales converted and multiplied by the activation scales at once, then broadcast
// to each block's products with one permute.
static float dot_q8_0_split(const int8_t* wq, const uint16_t* wd, const int8_t* xq, const float* xd, int64_t nb) {
    // A row's scales follow its quants, so each row starts with a load from its far end, before the hardware
    // prefetcher gets there. Rows are contiguous in the split layout: touch the scales of the next two rows now.
    const size_t row = split_q8_row_bytes(nb * QK8_0);
    _mm_prefetch(reinterpret_cast<const char*>(wd) + row, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wd) + 2 * row, _MM_HINT_T0);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        const __m256 sc = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wd + b))),
                                        _mm256_loadu_ps(xd + b));
        for (int p = 0; p < 8; ++p) {
            const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + (b + p) * QK8_0));
            const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + (b + p) * QK8_0));
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
            const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
            const __m256 s = _mm256_permutevar8x32_ps(sc, _mm256_set1_epi32(p));
            if (p & 1)
                acc1 = _mm256_fmadd_ps(dot, s, acc1);
            else
                acc0 = _mm256_fmadd_ps(dot, s, acc0);
        }
    }
    for (; b < nb; ++b) {  // the last nb % 8 blocks one at a time
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + b * QK8_0));
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * QK8_0));
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1))),
                               _mm256_set1_ps(KVSIEVE_HALF(wd[b]) * xd[b]), acc0);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

static inline __m256i dot_us8_i32(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
#include "kernels/dot_int8_x86.inc"
#include "kernels/dot_kquant_x86.inc"

static void dequant_row(TensorType t, const void* src, float* dst, int64_t n) {
    if (t != TensorType::F16) return g_dequant_row_blocks(t, src, dst, n);
    const auto* s = static_cast<const uint16_t*>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
    for (; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
}
static void to_f16(const float* src, uint16_t* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}
static float isa_dot_f16(const uint16_t* w, const float* x, int64_t n) { return dot_f16(w, x, n); }
static void isa_axpy_f16(float a, const uint16_t* v, float* o, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i,
                         _mm256_fmadd_ps(av, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i))),
                                         _mm256_loadu_ps(o + i)));
    for (; i < n; ++i) o[i] += a * fp16_to_fp32(v[i]);
}
static float isa_dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* xq, int64_t nb) { return dot_q8_0(w, xq, nb); }
static float isa_dot_q4_1(const BlockQ4_1* w, const BlockQ8_1* xq, int64_t nb) { return x86_dot_q4_1(w, xq, nb); }
static float isa_dot_q5_0(const BlockQ5_0* w, const BlockQ8_0* xq, int64_t nb) { return x86_dot_q5_0(w, xq, nb); }
static float isa_dot_q5_1(const BlockQ5_1* w, const BlockQ8_1* xq, int64_t nb) { return x86_dot_q5_1(w, xq, nb); }
static float isa_dot_iq4_nl(const BlockIQ4_NL* w, const BlockQ8_0* xq, int64_t nb) { return x86_dot_iq4_nl(w, xq, nb); }
#include "kernels/attention_generic.inc"
/// DotKernels::softmax with eight lanes at a time (max, exponentials and their sum, scaling).
static void softmax8(float* s, int64_t n) {
    int64_t j = 0;
    __m256 mv = _mm256_set1_ps(-INFINITY);
    for (; j + 8 <= n; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + j));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float m = std::max(_mm_cvtss_f32(m4), _mm_cvtss_f32(_mm_movehdup_ps(m4)));
    for (int64_t i = j; i < n; ++i) m = std::max(m, s[i]);
    const __m256 mb = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        const __m256 e = exp_nonpos8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mb));
        _mm256_storeu_ps(s + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    float total = hsum(sum);
    for (int64_t i = j; i < n; ++i) {
        s[i] = exp_nonpos(s[i] - m);
        total += s[i];
    }
    const __m256 inv = _mm256_set1_ps(1.0f / total);
    for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv));
    for (int64_t i = j; i < n; ++i) s[i] *= 1.0f / total;
}

/// DotKernels::gelu_dot with eight lanes at a time: gelu_dot_poly's formula (attention_generic.inc; the generic
/// loop does not vectorise with AVX2 alone), the sign chosen by a blend; the tail through gelu_dot_poly.
static float gelu_dot8(const float* a, const float* b, const float* w, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 z = _mm256_add_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j));
        const __m256 x = _mm256_mul_ps(_mm256_andnot_ps(sign, z), _mm256_set1_ps(0.70710678118654752f));
        const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), x, one));
        __m256 p = _mm256_set1_ps(1.061405429f);
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
        const __m256 q = _mm256_mul_ps(_mm256_mul_ps(p, t), exp_nonpos8(_mm256_xor_ps(_mm256_mul_ps(x, x), sign)));
        // 1 + erf(z/√2): 2 − q for z ≥ 0, q for z < 0
        const __m256 opg = _mm256_blendv_ps(_mm256_sub_ps(two, q), q, z);  // z's sign bit picks q
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), z), opg), acc);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h) + gelu_dot_poly(a + j, b + j, w + j, n - j);
}

// This set's KV attend kernels (kernels/kv_attend.h). F16 pages of F16 values and the common shapes take the
// specialised binary16 kernel (attend_f16_avx2.h); Q8_0 / Q4_0 keys with Q8_0, Q4_0 or F16 values and the common shapes
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
}  // namespace avx2

const DotKernels& dot_kernels_avx2() {
    static const DotKernels k = {.isa = "avx2",
                                 .split_q8_0 = false,
                                 .f32 = avx2::dot_f32,
                                 .f16 = avx2::dot_f16,
                                 .bf16 = avx2::g_dot_bf16,
                                 .q8_0 = avx2::dot_q8_0,
                                 .q8_0_split = avx2::dot_q8_0_split,
                                 .q4_0 = avx2::g_dot_q4_0,
                                 .q4_k = avx2::g_dot_q4_k,
                                 .q6_k = avx2::g_dot_q6_k,
                                 .q4_1 = avx2::x86_dot_q4_1,
                                 .q5_0 = avx2::x86_dot_q5_0,
                                 .q5_1 = avx2::x86_dot_q5_1,
                                 .q2_k = avx2::x86_dot_q2_k,
                                 .q3_k = avx2::x86_dot_q3_k,
                                 .q5_k = avx2::x86_dot_q5_k,
                                 .q8_0_rows = avx2::dot_q8_0_rows,
                                 .q4_1_rows = avx2::x86_dot_q4_1_rows,
                                 .dequant_row = avx2::dequant_row,
                                 .to_f16 = avx2::to_f16,
                                 .quantize_q8_0 = quantize_row_q8_0_activations,
                                 .quantize_q8_1 = quantize_row_q8_1_activations,
                                 .quantize_q8_k = quantize_row_q8_k,
                                 .softmax = avx2::softmax8,
                                 .gelu_dot = avx2::gelu_dot8};
    return k;
}

}  // namespace kvsieve
