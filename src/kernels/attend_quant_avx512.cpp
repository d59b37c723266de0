// AVX-512 (with VNNI) decode attention over quantized KV pages (kernels/attend_quant.h). Compiled with the
// AVX-512 set's flags; callers reach it only after cpu_features().has_avx512_set().
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attend_quant.h"
#include "kernels/online_softmax_avx512.h"

#define KVSIEVE_HALF(h) _cvtsh_ss(h)

namespace kvsieve::avx512 {
namespace {

constexpr int kMaxBlocks = 256 / QK8_0;
constexpr int kMaxPairs = kMaxBlocks / 2;

/// The eight sums of a[0..7]'s lanes, in that order.
inline __m256 hsum8x8(const __m256* a) {
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/// Per-call layout of the G quantized queries for two-block dots: each head's query bytes back to back in
/// 64-byte pairs of blocks (a missing odd block zero), the pair's two binary16 scales as float32 in lanes 0..7 and
/// 8..15, and the int32 correction −c·Σ_i q_i of each block spread over the eight lanes of its half (the lanes are
/// summed anyway), c the offset of the unsigned key bytes (128 for Q8_0 keys read as k + 128, 8 for Q4_0 nibbles).
template <int G>
struct Queries {
    alignas(64) int8_t qs[G][kMaxPairs][64];
    alignas(64) float dq[G][kMaxPairs][16];
    alignas(64) int32_t bias[G][kMaxPairs][16];
};

/// Sixteen values (columns 16·h..16·h+15 of block b) of a value row, dequantized to float32.
template <TensorType VT>
inline __m512 value16(const uint8_t* row, int b, int h) {
    if constexpr (VT == TensorType::Q8_0) {
        const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
        const __m512i x = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs + 16 * h)));
        return _mm512_mul_ps(_mm512_set1_ps(KVSIEVE_HALF(blk.d)), _mm512_cvtepi32_ps(x));
    } else if constexpr (VT == TensorType::Q4_0) {
        const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
        __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs)));
        x = h == 0 ? _mm512_and_si512(x, _mm512_set1_epi32(0xF)) : _mm512_srli_epi32(x, 4);
        return _mm512_mul_ps(_mm512_set1_ps(KVSIEVE_HALF(blk.d)),
                             _mm512_cvtepi32_ps(_mm512_sub_epi32(x, _mm512_set1_epi32(8))));
    } else {
        // Two 256-bit conversions joined, as attend_f16_avx512.cpp does (faster on Zen 4 than one 512-bit one).
        const auto* p = reinterpret_cast<const uint16_t*>(row) + b * QK8_0 + 16 * h;
        const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
        return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    }
}

/// The 32 key bytes of block b as unsigned bytes for vpdpbusd (Q8_0: k + 128, by flipping the sign bit; Q4_0: the
/// nibbles, low ones first) and its scale; zero bytes and scale for b = nb (the missing half of an odd pair).
template <TensorType KT>
inline __m256i key_block(const uint8_t* row, int b, int nb, float* dk) {
    if (b >= nb) {
        *dk = 0.0f;
        return _mm256_setzero_si256();
    }
    if constexpr (KT == TensorType::Q8_0) {
        const BlockQ8_0& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
        *dk = KVSIEVE_HALF(blk.d);
        return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs)),
                                _mm256_set1_epi8(static_cast<char>(0x80)));
    } else {
        const BlockQ4_0& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
        *dk = KVSIEVE_HALF(blk.d);
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
        const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
        return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
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
    const int nb = d / QK8_0, np = (nb + 1) / 2;
    const size_t kb = page_row_bytes<KT>(d), vb = page_row_bytes<VT>(d);
    alignas(32) __m256 part[G][16];
    alignas(64) float s[G][16];
    alignas(64) float p[G][16];
    float corr[G];
    // 1. Scores: each pair of key blocks is loaded once as 64 unsigned bytes and dotted (vpdpbusd, exact int32,
    // the offset correction as the accumulator's start) with all G queries, scaled per block by d_k·d_q.
    for (int j = 0; j < n; ++j) {
        const uint8_t* row = K + j * kb;
        __m512 acc[G];
        for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
        for (int pr = 0; pr < np; ++pr) {
            float dk0, dk1;
            const __m256i lo = key_block<KT>(row, 2 * pr, nb, &dk0);
            const __m256i hi = key_block<KT>(row, 2 * pr + 1, nb, &dk1);
            const __m512i ku = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            const __m512 dkv = _mm512_insertf32x8(_mm512_set1_ps(dk0), _mm256_set1_ps(dk1), 1);
            for (int g = 0; g < G; ++g) {
                const __m512i dot =
                    _mm512_dpbusd_epi32(_mm512_load_si512(Q.bias[g][pr]), ku, _mm512_load_si512(Q.qs[g][pr]));
                acc[g] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dkv, _mm512_load_ps(Q.dq[g][pr])), acc[g]);
            }
        }
        for (int g = 0; g < G; ++g)
            part[g][j] = _mm256_add_ps(_mm512_castps512_ps256(acc[g]), _mm512_extractf32x8_ps(acc[g], 1));
    }
    const int n8 = (n + 7) & ~7;
    for (int g = 0; g < G; ++g) {
        for (int j = n; j < n8; ++j) part[g][j] = _mm256_setzero_ps();
        for (int j = 0; j < n8; j += 8)
            _mm256_store_ps(s[g] + j, _mm256_mul_ps(hsum8x8(part[g] + j), _mm256_set1_ps(scale)));
    }
    // 2. Online softmax update per query head, 16 keys at once.
    online_softmax_step16(s, p, G, n, m, l, corr, s_out, s_stride);
    // 3. Values: per 16-column chunk the G outputs stay in registers while each row's chunk is dequantized once
    // and accumulated into all of them.
    for (int c = 0; c < d; c += 16) {
        const int b = c / QK8_0, h = (c / 16) & 1;
        __m512 acc[G];
        for (int g = 0; g < G; ++g) acc[g] = _mm512_mul_ps(_mm512_set1_ps(corr[g]), _mm512_loadu_ps(o + g * d + c));
        for (int j = 0; j < n; ++j) {
            const __m512 vr = value16<VT>(V + j * vb, b, h);
            for (int g = 0; g < G; ++g) acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(p[g][j]), vr, acc[g]);
        }
        for (int g = 0; g < G; ++g) _mm512_storeu_ps(o + g * d + c, acc[g]);
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
    const int nb = d / QK8_0, np = (nb + 1) / 2;
    // −off·Σ q over each block, spread over its eight lanes (vpdpbusd of the bytes with ones: sums of four).
    const __m256i neg_off = _mm256_set1_epi32(kt == TensorType::Q8_0 ? -128 : -8);
    const __m256i ones = _mm256_set1_epi8(1);
    Queries<G> Q;
    for (int g = 0; g < G; ++g)
        for (int pr = 0; pr < np; ++pr)
            for (int h = 0; h < 2; ++h) {
                const int b = 2 * pr + h;
                __m256i q = _mm256_setzero_si256();
                float dq = 0.0f;
                if (b < nb) {
                    q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qq[g * nb + b].qs));
                    dq = KVSIEVE_HALF(qq[g * nb + b].d);
                }
                _mm256_store_si256(reinterpret_cast<__m256i*>(Q.qs[g][pr] + 32 * h), q);
                _mm256_store_ps(Q.dq[g][pr] + 8 * h, _mm256_set1_ps(dq));
                _mm256_store_si256(reinterpret_cast<__m256i*>(Q.bias[g][pr] + 8 * h),
                                   _mm256_mullo_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q), neg_off));
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
           G <= kMaxGroupQuantAvx512;
}

}  // namespace

void quantize_queries_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float* xb = x + b * QK8_0;
        const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = static_cast<uint16_t>(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
        const __m512 idv = _mm512_set1_ps(id);
        // Ties to even (the default rounding mode), then int32 → int8 (in range: |x·id| ≤ 127 up to rounding).
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, idv))));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, idv))));
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
        case 8: run<8>(kt, k, vt, v, n, d, qq, scale, m, l, o, s_out, s_stride); break;
        default: {
            // 9..16 heads: two passes over the page, heads 0..7 then the rest.
            const int nb = d / QK8_0;
            run<8>(kt, k, vt, v, n, d, qq, scale, m, l, o, s_out, s_stride);
            attend_rows_quant_q8(kt, k, vt, v, n, d, qq + 8 * nb, G - 8, scale, m + 8, l + 8, o + 8 * d,
                                 s_out ? s_out + 8 * s_stride : nullptr, s_stride);
            break;
        }
    }
    return true;
}

bool attend_rows_quant(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d, const float* q, int G,
                       float scale, float* m, float* l, float* o, float* s_out, int64_t s_stride) {
    if (!takes(kt, vt, n, d, G)) return false;
    BlockQ8_0 qq[kMaxGroupQuantAvx512 * kMaxBlocks];
    quantize_queries_q8_0(q, qq, static_cast<int64_t>(G) * d);
    return attend_rows_quant_q8(kt, k, vt, v, n, d, qq, G, scale, m, l, o, s_out, s_stride);
}

}  // namespace kvsieve::avx512
