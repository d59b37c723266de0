#pragma once
// Block formats of the quantized weight types (ggml layout, bit-exact with GGUF files) and their scalar
// reference dequantisation / quantisation. Every fast kernel is tested against these.
#include <cstdint>
#include <string>

#include "kernels/fp16.h"
#include "kernels/tensor_types.h"

namespace kvsieve {

constexpr int QK8_0 = 32;  ///< weights per Q8_0 / Q4_0 block
constexpr int QK_K = 256;  ///< weights per K-quant super-block

/// Q8_0: x_j = d · q_j, q_j int8, d binary16. 34 bytes per 32 weights.
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[QK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

/// Q4_0: x_j = d · (nibble_j − 8); qs[j] holds weight j (low nibble) and j+16 (high). 18 bytes per 32.
struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[QK8_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

/// Q8_1: activations for Q4_1 / Q5_1 dot products. x_j = d · q_j; s = d · Σ q_j (both binary16), so a
/// weight block's offset term m · Σ x_j costs one product. 36 bytes per 32 values.
struct BlockQ8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[QK8_0];
};
static_assert(sizeof(BlockQ8_1) == 36);

/// Q4_1: x_j = d · nibble_j + m (nibble 0..15); qs[j] holds weight j (low nibble) and j+16 (high).
/// 20 bytes per 32 weights.
struct BlockQ4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[QK8_0 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

/// Q5_0: x_j = d · (q_j − 16), q_j 5 bits: low 4 in qs as in Q4_0, the fifth bit of weight j in bit j of
/// the little-endian 32-bit qh. 22 bytes per 32 weights.
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK8_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

/// Q5_1: x_j = d · q_j + m with q_j 5 bits laid out as in Q5_0. 24 bytes per 32 weights.
struct BlockQ5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QK8_0 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

/// IQ4_NL's 16 levels (ggml's kvalues_iq4nl, Kawrakow's non-linear 4-bit grid): denser near zero, where most
/// elements of a block lie.
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/// IQ4_NL: x_j = d · kIQ4NLValues[i_j] with i_j a 4-bit index; qs[j] holds the index of element j (low nibble)
/// and of j+16 (high), as Q4_0 does. 18 bytes per 32 elements (KV cache only here, never a weight type).
struct BlockIQ4_NL {
    uint16_t d;
    uint8_t qs[QK8_0 / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

/// Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in `scales`;
/// x = d·sc_j·q − dmin·m_j, q a 4-bit value. 144 bytes per 256 weights.
struct BlockQ4K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(BlockQ4K) == 144);

/// Q6_K: 16 sub-blocks of 16 with int8 scales; 6-bit values (low 4 bits in ql, high 2 in qh), offset −32.
/// x = d · sc_j · (q − 32). 210 bytes per 256 weights.
struct BlockQ6K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
static_assert(sizeof(BlockQ6K) == 210);

/// Q2_K (format of ggml's ggml-quants.c): 16 sub-blocks of 16 weights with 2-bit values q in 0..3;
/// x = d·(scales[j] & 15)·q − dmin·(scales[j] >> 4) for sub-block j = i/16 of weight i. Weight i (0..255) is bits
/// 2·((i%128)/32) .. +1 of qs[32·(i/128) + i%32]. d, dmin binary16. 84 bytes per 256 weights (2.625 bits each).
struct BlockQ2K {
    uint8_t scales[QK_K / 16];  ///< low nibble: 4-bit scale, high nibble: 4-bit min of sub-block j
    uint8_t qs[QK_K / 4];
    uint16_t d;
    uint16_t dmin;
};
static_assert(sizeof(BlockQ2K) == 84);

/// Q3_K (format of ggml's ggml-quants.c): 16 sub-blocks of 16 weights with 3-bit values q in −4..3 and 6-bit
/// signed scales; x = d·s_j·q for sub-block j = i/16. Weight i: low two bits as in Q2_K (bits 2·((i%128)/32) of
/// qs[32·(i/128) + i%32]); q = low + (bit i/32 of hmask[i%32] set ? 0 : −4). Scales (q3k_scale): s_j + 32 is a
/// 6-bit number whose low nibble is scales[j] & 15 (j < 8) or scales[j−8] >> 4 (j ≥ 8) and whose top two bits are
/// bits 2·(j/4) .. +1 of scales[8 + j%4]. d binary16. 110 bytes per 256 weights (3.4375 bits each).
struct BlockQ3K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};
static_assert(sizeof(BlockQ3K) == 110);

/// Q5_K (format of ggml's ggml-quants.c): 8 sub-blocks of 32 weights with 5-bit values q in 0..31, 6-bit scales
/// and mins packed as in Q4_K (q4k_scale_min); x = d·sc_j·q − dmin·m_j for sub-block j = i/32. Weight i: low
/// nibble of qs[32·(i/64) + i%32] for i%64 < 32, else its high nibble; fifth bit: bit i/32 of qh[i%32].
/// 176 bytes per 256 weights (5.5 bits each).
struct BlockQ5K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(BlockQ5K) == 176);

/// Q8_K (format of ggml's ggml-quants.c): activations for Q2_K / Q3_K / Q5_K dot products, never a weight type.
/// x_i = d · qs_i with d float32 (negative when the value of largest magnitude is positive: see
/// quantize_row_q8_k); bsums[j] = Σ of qs[16j .. 16j+15], for the min / offset terms of the K-quant dots.
/// 292 bytes per 256 values.
struct BlockQ8K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
static_assert(sizeof(BlockQ8K) == 292);

/// Signed scale s_j (−32..31) of sub-block j (0..15) of a Q3_K block, unpacked from its 12 scale bytes.
inline int q3k_scale(int j, const uint8_t* scales) {
    const int lo = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
    const int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K block.
inline void q4k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/// Scalar reference: 32 floats from one Q8_0 block.
inline void dequant_block_q8_0(const BlockQ8_0* b, float* y) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < QK8_0; ++j) y[j] = d * b->qs[j];
}
/// Scalar reference: 32 floats from one Q4_0 block.
inline void dequant_block_q4_0(const BlockQ4_0* b, float* y) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < QK8_0 / 2; ++j) {
        y[j] = d * ((b->qs[j] & 0xF) - 8);
        y[j + QK8_0 / 2] = d * ((b->qs[j] >> 4) - 8);
    }
}
/// Scalar reference: 32 floats from one Q4_1 block.
inline void dequant_block_q4_1(const BlockQ4_1* b, float* y) {
    const float d = fp16_to_fp32(b->d), m = fp16_to_fp32(b->m);
    for (int j = 0; j < QK8_0 / 2; ++j) {
        y[j] = d * (b->qs[j] & 0xF) + m;
        y[j + QK8_0 / 2] = d * (b->qs[j] >> 4) + m;
    }
}
/// The 32 high bits of a Q5_0 / Q5_1 block as one little-endian word (bit j belongs to weight j).
inline uint32_t q5_high_bits(const uint8_t qh[4]) {
    return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}
/// 5-bit value of weight j (0..31) of a Q5_0 / Q5_1 block, unsigned 0..31.
inline int q5_value(const uint8_t* qs, uint32_t qh, int j) {
    const int lo = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
    return lo | static_cast<int>(((qh >> j) & 1u) << 4);
}
/// Scalar reference: 32 floats from one Q5_0 block.
inline void dequant_block_q5_0(const BlockQ5_0* b, float* y) {
    const float d = fp16_to_fp32(b->d);
    const uint32_t qh = q5_high_bits(b->qh);
    for (int j = 0; j < QK8_0; ++j) y[j] = d * (q5_value(b->qs, qh, j) - 16);
}
/// Scalar reference: 32 floats from one Q5_1 block.
inline void dequant_block_q5_1(const BlockQ5_1* b, float* y) {
    const float d = fp16_to_fp32(b->d), m = fp16_to_fp32(b->m);
    const uint32_t qh = q5_high_bits(b->qh);
    for (int j = 0; j < QK8_0; ++j) y[j] = d * q5_value(b->qs, qh, j) + m;
}
/// Scalar reference: 32 floats from one IQ4_NL block.
inline void dequant_block_iq4_nl(const BlockIQ4_NL* b, float* y) {
    const float d = fp16_to_fp32(b->d);
    for (int j = 0; j < QK8_0 / 2; ++j) {
        y[j] = d * kIQ4NLValues[b->qs[j] & 0xF];
        y[j + QK8_0 / 2] = d * kIQ4NLValues[b->qs[j] >> 4];
    }
}
/// Scalar reference: 256 floats from one Q4_K block.
inline void dequant_block_q4_k(const BlockQ4K* b, float* y) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    const uint8_t* q = b->qs;
    for (int is = 0; is < 8; is += 2) {
        uint8_t sc, m;
        q4k_scale_min(is, b->scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        q4k_scale_min(is + 1, b->scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; ++l) y[l] = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l) y[32 + l] = d2 * (q[l] >> 4) - m2;
        q += 32;
        y += 64;
    }
}
/// Scalar reference: 256 floats from one Q6_K block.
inline void dequant_block_q6_k(const BlockQ6K* b, float* y) {
    const float d = fp16_to_fp32(b->d);
    const uint8_t* ql = b->ql;
    const uint8_t* qh = b->qh;
    const int8_t* sc = b->scales;
    for (int n = 0; n < QK_K; n += 128) {
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

/// Scalar reference: 256 floats from one Q2_K block (y_i = d·sc_j·q_i − dmin·m_j, j = i/16).
inline void dequant_block_q2_k(const BlockQ2K* b, float* y) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    for (int i = 0; i < QK_K; ++i) {
        const int q = (b->qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
        const uint8_t sc = b->scales[i / 16];
        y[i] = d * (sc & 0xF) * q - dmin * (sc >> 4);
    }
}
/// Scalar reference: 256 floats from one Q3_K block (y_i = d·s_j·q_i, j = i/16, q_i in −4..3).
inline void dequant_block_q3_k(const BlockQ3K* b, float* y) {
    const float d = fp16_to_fp32(b->d);
    for (int i = 0; i < QK_K; ++i) {
        const int lo = (b->qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
        const int q = lo - (((b->hmask[i % 32] >> (i / 32)) & 1) ? 0 : 4);
        y[i] = d * q3k_scale(i / 16, b->scales) * q;
    }
}
/// Scalar reference: 256 floats from one Q5_K block (y_i = d·sc_j·q_i − dmin·m_j, j = i/32, q_i in 0..31).
inline void dequant_block_q5_k(const BlockQ5K* b, float* y) {
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        q4k_scale_min(j, b->scales, &sc, &m);
        const float dl = d * sc, ml = dmin * m;
        const uint8_t* qs = b->qs + 32 * (j / 2);
        for (int l = 0; l < 32; ++l) {
            const int lo = (j % 2 == 0) ? (qs[l] & 0xF) : (qs[l] >> 4);
            const int q = lo | (((b->qh[l] >> j) & 1) << 4);
            y[32 * j + l] = dl * q - ml;
        }
    }
}

/// Scalar reference: n floats (n a multiple of the block size) from a row of type t.
/// Throws Error for unsupported types.
void dequantize_row(TensorType t, const void* src, float* dst, int64_t n);

/// Quantizes n floats (multiple of 32) to Q8_0 like ggml's reference quantizer (llama-quantize):
/// d = max|x|/127 (stored as binary16), q = round-half-away-from-zero(x/d).
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
/// The same with ties to even, as ggml's SIMD path quantizes activations before Q8_0 dot products.
void quantize_row_q8_0_activations(const float* x, BlockQ8_0* y, int64_t n);
/// Quantizes activations for Q4_1 / Q5_1 dot products like ggml's SIMD path: d = max|x|/127,
/// q = round-half-even(x · 127/max|x|), s = d · Σ q (d and s stored as binary16).
void quantize_row_q8_1_activations(const float* x, BlockQ8_1* y, int64_t n);
/// Quantizes n floats (multiple of 32) to Q4_1 like ggml's reference: d = (max − min)/15, m = min,
/// q = min(15, trunc((x − min)/d + 0.5)).
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n);
/// Quantizes n floats (multiple of 32) to Q5_0 like ggml's reference: d = max/−16 of the signed value of
/// largest magnitude, q = min(31, trunc(x/d + 16.5)).
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n);
/// Quantizes n floats (multiple of 32) to Q5_1 like ggml's reference: d = (max − min)/31, m = min,
/// q = trunc((x − min)/d + 0.5).
void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n);
/// Quantizes n floats (multiple of 32) to IQ4_NL as ggml's reference (quantize_row_iq4_nl_ref, the one llama.cpp
/// writes KV caches with) does, per block: with m the signed element of largest magnitude, each x_j takes the
/// index i_j of the level nearest x_j · (−127/m) (ties to the upper level), then the scale is the weighted
/// least-squares fit of those levels, d = Σ w_j·v_j·x_j / Σ w_j·v_j² with v_j = kIQ4NLValues[i_j] and w_j = x_j²
/// (no search over other scales: the reference's ntry is −1). A block with max|x| < 1e-15 gets d = 0.
void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n);
/// Quantizes n floats (multiple of 32) to Q4_0 like ggml's reference: d = max/−8 of the signed value of
/// largest magnitude, q = clamp(round(x/d) + 8, 0, 15).
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);
/// Quantizes activations (n a multiple of 256) for Q2_K / Q3_K / Q5_K dot products like ggml's quantize_row_q8_K
/// (ggml's ggml-quants.c): per block, with max the signed value of largest magnitude (the first on ties),
/// q_i = min(127, round-half-even(x_i · (−127/max))), d = 1/(−127/max) = −max/127 (float32, so the largest
/// magnitude becomes q = −127 and |x_i − d·q_i| ≤ |d|/2), bsums[j] = Σ_{16j ≤ i < 16j+16} q_i. An all-zero
/// block gets d = 0, q = 0, bsums = 0.
void quantize_row_q8_k(const float* x, BlockQ8K* y, int64_t n);
/// Quantizes n floats (a multiple of 256) to Q2_K. Not ggml's search: per sub-block of 16 the range
/// [min(min_j, 0), max_j] is covered exactly: m_j = −min(min_j, 0) is rounded *up* to dmin·mn_j (dmin =
/// max_j m_j / 15, binary16 rounded up, mn_j 4 bits), the step to d·sc_j ≥ (max_j + dmin·mn_j)/3 (d likewise
/// from max_j of those steps / 15), and q = round((x + dmin·mn_j)/(d·sc_j)) never clips. Bound: every weight is
/// within half its sub-block's step, |x − y| ≤ d·sc_j/2, with d·sc_j < (max_j − min(min_j, 0) + dmin)/3 + d.
void quantize_row_q2_k(const float* x, BlockQ2K* y, int64_t n);
/// Quantizes n floats (a multiple of 256) to Q3_K. Not ggml's search: per sub-block of 16, with a_j its signed
/// value of largest magnitude, the step |d·s_j| ≥ |a_j|/4 (d = max_j |a_j|/4 / 31, binary16 rounded up; s_j =
/// −sign(a_j)·⌈|a_j|/(4d)⌉ so a_j maps to q = −4, the level only the negative side has); q = clamp(round(x /
/// (d·s_j)), −4, 3). Bound: |x − y| ≤ |d·s_j| (half a step on a_j's side; one step on the other side, where +4
/// is clipped to 3), with |d·s_j| < |a_j|/4 + d.
void quantize_row_q3_k(const float* x, BlockQ3K* y, int64_t n);
/// Quantizes n floats (a multiple of 256) to Q5_K like quantize_row_q2_k with sub-blocks of 32, 5-bit values
/// (step ≥ (max_j + dmin·mn_j)/31) and 6-bit scales and mins (d, dmin = their maxima / 63). Bound: |x − y| ≤
/// d·sc_j/2 with d·sc_j < (max_j − min(min_j, 0) + dmin)/31 + d.
void quantize_row_q5_k(const float* x, BlockQ5K* y, int64_t n);
/// Converts n floats to binary16 / bfloat16 (round to nearest even).
void quantize_row_f16(const float* x, uint16_t* y, int64_t n);
void quantize_row_bf16(const float* x, uint16_t* y, int64_t n);
/// True if quantize_row can write type t.
bool can_quantize_to(TensorType t);
/// Names of the types quantize_row writes, lower case, comma separated (for help and error messages).
std::string quantize_type_names();
/// Quantizes n floats (a multiple of t's block size) into `dst` of type t; throws Error naming the type when
/// can_quantize_to(t) is false.
void quantize_row(TensorType t, const float* x, void* dst, int64_t n);

}  // namespace kvsieve
