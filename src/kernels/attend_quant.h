#pragma once
// Decode attention over quantized KV cache pages: Q8_0 or Q4_0 keys, Q8_0, Q4_0 or binary16 values. The scalar
// reference (attend_quant_reference.cpp) is the readable definition; the AVX2 and AVX-512 kernels
// (attend_quant_avx2.cpp, attend_quant_avx512.cpp) compute the same with the integer dot products exact and are
// tested against it.
//
// The computation is that of llama.cpp's CPU flash attention for quantized caches. Each query head's vector is
// quantized to Q8_0 blocks (quantize_row_q8_0_activations: d_q = max|q|/127 as binary16, ties to even); the score
// of cached row j for head g is
//     s_gj = scale · Σ_b (d_k,jb · d_q,gb) · Σ_{i in block b} k_jbi · q_gbi          (integer inner sums)
// with k_jbi the key's integers (Q8_0: −127..127; Q4_0: nibble − 8, −8..7); the values are dequantized to
// float32 (v = d_v·q_v; binary16 converted) and accumulated with the online softmax (Milakov & Gimelshein 2018,
// "Online normalizer calculation for softmax", Alg. 3; Dao et al. 2022, FlashAttention, Alg. 1): with
// m' = max(m_g, max_j s_gj), c = exp(m_g − m') (0 while m_g = −∞),
//     l_g ← c·l_g + Σ_j exp(s_gj − m'),   o_g ← c·o_g + Σ_j exp(s_gj − m')·v_j,   m_g ← m'.
//
// Page layout (all functions): k holds n key rows of row_bytes(kt, d) bytes each, back to back (d/32 blocks per
// row); v likewise with vt (binary16 values: n rows of d uint16). q is float32 [G][d]; m, l float32 [G];
// o float32 [G][d] (unnormalised output); if s_out is set the scaled scores go to s_out[g·s_stride + j].
#include <cstdint>

#include "kernels/quant.h"

namespace kvsieve {

/// True when (key type, value type) is a pair the quantized-page kernels take: kt ∈ {Q8_0, Q4_0} and
/// vt ∈ {Q8_0, Q4_0, F16}. The dispatch test a caller needs before attend_rows_quant.
inline bool is_quant_attend_pair(TensorType kt, TensorType vt) {
    return (kt == TensorType::Q8_0 || kt == TensorType::Q4_0) &&
           (vt == TensorType::Q8_0 || vt == TensorType::Q4_0 || vt == TensorType::F16);
}

/// Scalar reference of the online-softmax step above over n cached rows of one KV head for its G query heads,
/// with the queries already quantized: qq holds G rows of d/32 Q8_0 blocks (qq[g·d/32 + b]). Any n ≥ 0, G ≥ 1.
/// Throws Error naming the problem when the pair is not one is_quant_attend_pair takes or d is not a positive
/// multiple of 32. Exponentials by std::exp.
void attend_rows_quant_q8_reference(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d,
                                    const BlockQ8_0* qq, int G, float scale, float* m, float* l, float* o, float* s_out,
                                    int64_t s_stride);

/// The same from float32 queries q [G][d]: quantizes each head's row with quantize_row_q8_0_activations, then
/// attend_rows_quant_q8_reference. Same errors.
void attend_rows_quant_reference(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d,
                                 const float* q, int G, float scale, float* m, float* l, float* o, float* s_out,
                                 int64_t s_stride);

namespace avx2 {

/// Largest GQA group the AVX2 kernels take: one score or output accumulator per query head next to the row
/// chunk in the 16 vector registers of AVX2.
constexpr int kMaxGroupQuantAvx2 = 8;

/// Quantizes n floats (a multiple of 32) to Q8_0 bit for bit as quantize_row_q8_0_activations does (d = max|x|/127
/// stored as binary16, q = round-half-even(x / d) with 1/d taken from the unrounded d), 8 lanes at a time.
/// Requires AVX2, FMA and F16C.
void quantize_queries_q8_0(const float* x, BlockQ8_0* y, int64_t n);

/// The online-softmax step of this header over one page with pre-quantized queries qq (G rows of d/32 Q8_0
/// blocks, e.g. from quantize_queries_q8_0 once per decode step for all the pages a head reads). Each key block
/// is loaded once and dotted (maddubs/madd, exact int32) with all G queries; each 8-value chunk of a value row is
/// dequantized once and accumulated into all G outputs. Returns false, touching nothing, unless
/// is_quant_attend_pair(kt, vt), 1 ≤ n ≤ 16, d a multiple of 32 in 32..256 and 1 ≤ G ≤ kMaxGroupQuantAvx2.
/// Requires AVX2, FMA and F16C.
bool attend_rows_quant_q8(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d, const BlockQ8_0* qq,
                          int G, float scale, float* m, float* l, float* o, float* s_out, int64_t s_stride);

/// The same from float32 queries q [G][d], quantized per call with quantize_queries_q8_0 (G·d values: about a
/// key row's work per head, so cheap next to 16 rows; attend_rows_quant_q8 saves it when a step reads several
/// pages). Same shapes and return value.
bool attend_rows_quant(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d, const float* q, int G,
                       float scale, float* m, float* l, float* o, float* s_out, int64_t s_stride);

}  // namespace avx2

namespace avx512 {

/// Largest GQA group the AVX-512 kernels take: up to 8 heads in one pass over the page (one score or output
/// accumulator per head next to the row chunk), 9..16 in two passes (heads 0..7, then the rest).
constexpr int kMaxGroupQuantAvx512 = 16;

/// As avx2::quantize_queries_q8_0 (bit-identical to quantize_row_q8_0_activations), 16 lanes at a time.
/// Requires AVX-512F/BW/VL/DQ.
void quantize_queries_q8_0(const float* x, BlockQ8_0* y, int64_t n);

/// As avx2::attend_rows_quant_q8, with two key blocks per 512-bit VNNI dot (vpdpbusd: unsigned key bytes — Q8_0
/// offset by 128, Q4_0 nibbles — times signed query bytes, the offset's 128·Σq or 8·Σq taken back in the int32
/// sum, so it stays exact) and 16-value chunks of the value rows. Returns false, touching nothing, unless
/// is_quant_attend_pair(kt, vt), 1 ≤ n ≤ 16, d a multiple of 32 in 32..256 and 1 ≤ G ≤ kMaxGroupQuantAvx512.
/// Requires AVX-512F/BW/VL/DQ and VNNI (CpuFeatures::has_avx512_set).
bool attend_rows_quant_q8(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d, const BlockQ8_0* qq,
                          int G, float scale, float* m, float* l, float* o, float* s_out, int64_t s_stride);

/// The same from float32 queries q [G][d], quantized per call with avx512::quantize_queries_q8_0.
bool attend_rows_quant(TensorType kt, const void* k, TensorType vt, const void* v, int n, int d, const float* q, int G,
                       float scale, float* m, float* l, float* o, float* s_out, int64_t s_stride);

}  // namespace avx512

}  // namespace kvsieve
