// AVX2 decode attention over quantized KV pages (kernels/attend_quant.h). Compiled with AVX2/FMA/F16C flags;
// callers reach it only after cpu_features() reports that set.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attend_quant.h"
#include "kernels/online_softmax_avx2.h"

// Block scales are converted with F16C.
#define KVSIEVE_HALF(h) _cvtsh_ss(h)

namespace kvsieve::avx2 {
namespace {

// Eight int32 sums of four u8 · s8 products each (maddubs then madd; no saturation for the operands used here:
// |key| ≤ 128 or nibbles ≤ 15 against queries in −127..127).
inline __m256i dot_us8_i32(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
#include "kernels/dot_int8_x86.inc"

constexpr int kMaxBlocks = 256 / QK8_0;

/// The eight sums of a[0..7]'s lanes, in that order (three levels of horizontal adds and one lane swap instead of
/// eight separate reductions).
inline __m256 hsum8x8(const __m256* a) {
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/// Per-call view of the G quantized queries: their blocks, their scales as float32 and, for Q4_0 keys (unsigned
/// nibbles against signed query bytes), the int32 correction −8·Σ_i q_i of each block spread over a vector's lanes.
template <int G>
struct Queries {
    const BlockQ8_0* qq;
    alignas(32) float dq[G][kMaxBlocks][8];  ///< broadcast to 8 lanes
    alignas(32) int32_t bias[G][kMaxBlocks][8];
};

/// Eight values (columns w..w+7 of block b, w a multiple of 8) of a value row, dequantized to float32.
template <TensorType VT>
inline __m256 value8(const uint8_t* row, int b, int w) {
    if constexpr (VT == TensorType::Q8_0) {
        const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
        const __m256i x = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.qs + w)));
        return _mm256_mul_ps(_mm256_set1_ps(KVSIEVE_HALF(blk.d)), _mm256_cvtepi32_ps(x));
    } else if constexpr (VT == TensorType::Q4_0) {
        const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
        __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.qs + (w & 15))));
        x = w < 16 ? _mm256_and_si256(x, _mm256_set1_epi32(0xF)) : _mm256_srli_epi32(x, 4);
        return _mm256_mul_ps(_mm256_set1_ps(KVSIEVE_HALF(blk.d)),
                             _mm256_cvtepi32_ps(_mm256_sub_epi32(x, _mm256_set1_epi32(8))));
    } else {
        const auto* h = reinterpret_cast<const uint16_t*>(row) + b * QK8_0 + w;
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
    }
}

/// Bytes of one cached row of d values of type T (Q8_0, Q4_0: d/32 blocks; F16: 2·d), without row_bytes's checks
/// (the shape was checked once by the caller).
template <TensorType T>
constexpr size_t page_row_bytes(int d) {
    if constexpr (T == TensorType::Q8_0)
        return static_cast<size_t>(d / QK8_0) * sizeof(BlockQ8_0);
    else if constexpr (T == TensorType::Q4_0)
        return static_cast<size_t>(d / QK8_0) * sizeof(BlockQ4_0);
    else
        return static_cast<size_t>(d) * sizeof(uint16_t);
}

template <int G, TensorType KT, TensorType VT>
void attend(const uint8_t* K, const uint8_t* V, int n, int d, const Queries<G>& Q, float scale, float* m, float* l,
            float* o, float* s_out, int64_t s_stride) {
    const int nb = d / QK8_0;
    const size_t kb = page_row_bytes<KT>(d), vb = page_row_bytes<VT>(d);
    alignas(32) __m256 part[G][16];
    alignas(32) float s[G][16];
    alignas(32) float p[G][16];
    float corr[G];
    // 1. Scores: each key block is loaded (and, for Q4_0, unpacked) once and dotted with all G query blocks; the
    // int32 lanes are exact, scaled per block by d_k·d_q into one float accumulator per head.
    for (int j = 0; j < n; ++j) {
        __m256 acc[G];
        for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
        for (int b = 0; b < nb; ++b) {
            __m256 dk;
            __m256i ku, ks;
            if constexpr (KT == TensorType::Q8_0) {
                const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(K + j * kb)[b];
                ks = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
                ku = _mm256_sign_epi8(ks, ks);  // |k|, with k's sign moved onto the query bytes below
                dk = _mm256_set1_ps(KVSIEVE_HALF(blk.d));
            } else {
                const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(K + j * kb)[b];
                ku = unpack_nibbles_32(blk.qs);
                ks = ku;
                dk = _mm256_set1_ps(KVSIEVE_HALF(blk.d));
            }
            for (int g = 0; g < G; ++g) {
                const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(Q.qq[g * nb + b].qs));
                __m256i dot;
                if constexpr (KT == TensorType::Q8_0)
                    dot = dot_us8_i32(ku, _mm256_sign_epi8(qv, ks));
                else
                    dot = _mm256_add_epi32(dot_us8_i32(ku, qv),
                                           _mm256_load_si256(reinterpret_cast<const __m256i*>(Q.bias[g][b])));
                acc[g] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dk, _mm256_load_ps(Q.dq[g][b])), acc[g]);
            }
        }
        for (int g = 0; g < G; ++g) part[g][j] = acc[g];
    }
    const int n8 = (n + 7) & ~7;
    for (int g = 0; g < G; ++g) {
        for (int j = n; j < n8; ++j) part[g][j] = _mm256_setzero_ps();
        for (int j = 0; j < n8; j += 8)
            _mm256_store_ps(s[g] + j, _mm256_mul_ps(hsum8x8(part[g] + j), _mm256_set1_ps(scale)));
    }
    // 2. Online softmax update per query head; lanes j ≥ n are zeroed after the exponential.
    online_softmax_step16(s, p, G, n, m, l, corr, s_out, s_stride);
    // 3. Values: per CH 8-column chunks the G·CH outputs stay in registers while each row's chunks are dequantized
    // once and accumulated into all of them (CH > 1 gives the FMAs more independent chains than G alone).
    constexpr int CH = G <= 3 ? 4 : G <= 6 ? 2 : 1;
    for (int c = 0; c < d; c += 8 * CH) {
        const int b = c / QK8_0, w = c % QK8_0;
        __m256 acc[G][CH];
        for (int g = 0; g < G; ++g)
            for (int u = 0; u < CH; ++u)
                acc[g][u] = _mm256_mul_ps(_mm256_set1_ps(corr[g]), _mm256_loadu_ps(o + g * d + c + 8 * u));
        for (int j = 0; j < n; ++j)
            for (int u = 0; u < CH; ++u) {
                const __m256 vr = value8<VT>(V + j * vb, b, w + 8 * u);
                for (int g = 0; g < G; ++g) acc[g][u] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[g][j]), vr, acc[g][u]);
            }
        for (int g = 0; g < G; ++g)
            for (int u = 0; u < CH; ++u) _mm256_storeu_ps(o + g * d + c + 8 * u, acc[g][u]);
    }
}

template <int G, TensorType KT>
void dispatch_v(TensorType vt, const uint8_t* k, const uint8_t* v, int n, int d, const Queries<G>& Q, float scale,
                float* m, float* l, float* o, float* s_out, int64_t s_stride) {
    switch (vt) {
        case TensorType::Q8_0: return attend<G, KT, TensorType::Q8_0>(k, v, n, d, Q, scale, m, l, o, s_out, s_stride);
        case TensorType::Q4_0: return attend<G, KT, TensorType::Q4_0>(k, v, n, d, Q, scale, m, l, o, s_out, s_stride);
        default: return attend<G, KT, TensorType::F16>(k, v, n, d, Q, scale, m, l, o, s_out, s_stride);
    }
}

template <int G>
void run(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d, const BlockQ8_0* qq, float scale,
         float* m, float* l, float* o, float* s_out, int64_t s_stride) {
    const int nb = d / QK8_0;
    Queries<G> Q;
    Q.qq = qq;
    const __m256i ones = _mm256_set1_epi8(1);
    for (int g = 0; g < G; ++g)
        for (int b = 0; b < nb; ++b) {
            const BlockQ8_0& blk = qq[g * nb + b];
            _mm256_store_ps(Q.dq[g][b], _mm256_set1_ps(KVSIEVE_HALF(blk.d)));
            // −8·Σ q over the block, spread over the eight lanes (sums of four bytes each; the lanes are summed).
            if (kt == TensorType::Q4_0)
                _mm256_store_si256(
                    reinterpret_cast<__m256i*>(Q.bias[g][b]),
                    _mm256_slli_epi32(
                        _mm256_sub_epi32(
                            _mm256_setzero_si256(),
                            dot_us8_i32(ones, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs)))),
                        3));
        }
    const auto* K = static_cast<const uint8_t*>(k);
    const auto* V = static_cast<const uint8_t*>(v);
    if (kt == TensorType::Q8_0)
        dispatch_v<G, TensorType::Q8_0>(vt, K, V, n, d, Q, scale, m, l, o, s_out, s_stride);
    else
        dispatch_v<G, TensorType::Q4_0>(vt, K, V, n, d, Q, scale, m, l, o, s_out, s_stride);
}

bool takes(TensorType kt, TensorType vt, int n, int d, int G) {
    return is_quant_attend_pair(kt, vt) && n >= 1 && n <= 16 && d >= QK8_0 && d <= 256 && d % QK8_0 == 0 && G >= 1 &&
           G <= kMaxGroupQuantAvx2;
}

}  // namespace

void quantize_queries_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float* xb = x + b * QK8_0;
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps();
        for (int u = 0; u < 4; ++u) {
            v[u] = _mm256_loadu_ps(xb + 8 * u);
            amax = _mm256_max_ps(amax, _mm256_and_ps(v[u], abs_mask));
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float d = _mm_cvtss_f32(h) / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = static_cast<uint16_t>(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
        const __m256 idv = _mm256_set1_ps(id);
        __m256i i[4];
        for (int u = 0; u < 4; ++u) i[u] = _mm256_cvtps_epi32(_mm256_mul_ps(v[u], idv));  // ties to even
        const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs),
                            _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
}

bool attend_rows_quant_q8(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d, const BlockQ8_0* qq,
                          int G, float scale, float* m, float* l, float* o, float* s_out, int64_t s_stride) {
    if (!takes(kt, vt, n, d, G)) return false;
    switch (G) {
        case 1: run<1>(kt, k, vt, v, n, d, qq, scale, m, l, o, s_out, s_stride); break;
        case 2: run<2>(kt, k, vt, v, n, d, qq, scale, m, l, o, s_out, s_stride); break;
        case 3: run<3>(kt, k, vt, v, n, d, qq, scale, m, l, o, s_out, s_stride); break;
        case 4: run<4>(kt, k, vt, v, n, d, qq, scale, m, l, o, s_out, s_stride); break;
        case 5: run<5>(kt, k, vt, v, n, d, qq, scale, m, l, o, s_out, s_stride); break;
        case 6: run<6>(kt, k, vt, v, n, d, qq, scale, m, l, o, s_out, s_stride); break;
        case 7: run<7>(kt, k, vt, v, n, d, qq, scale, m, l, o, s_out, s_stride); break;
        default: run<8>(kt, k, vt, v, n, d, qq, scale, m, l, o, s_out, s_stride); break;
    }
    return true;
}

bool attend_rows_quant(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d, const float* q, int G,
                       float scale, float* m, float* l, float* o, float* s_out, int64_t s_stride) {
    if (!takes(kt, vt, n, d, G)) return false;
    BlockQ8_0 qq[kMaxGroupQuantAvx2 * kMaxBlocks];
    quantize_queries_q8_0(q, qq, static_cast<int64_t>(G) * d);
    return attend_rows_quant_q8(kt, k, vt, v, n, d, qq, G, scale, m, l, o, s_out, s_stride);
}

}  // namespace kvsieve::avx2
