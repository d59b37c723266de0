#pragma once
// AVX2 decode attention over one binary16 cache page (internal to the AVX2 kernel set).

#include <cstdint>

namespace kvsieve::avx2 {

/// Largest GQA group (query heads per KV head) the specialised kernel takes: one accumulator register per query
/// head, next to the converted row chunk, in the 16 vector registers of AVX2.
constexpr int kMaxGroupF16Avx2 = 8;

/// Online-softmax step (Milakov & Gimelshein 2018; Dao et al. 2022, FlashAttention Alg. 1) over n ≤ 16 cached
/// rows of one KV head: k, v binary16 [n][d]; q float32 [G][d]; running max m[G], normaliser l[G] and
/// unnormalised output o[G][d] are updated in place; if s_out is set the scaled scores q·k·scale go to
/// s_out[g·s_stride + j]. Each 8-element chunk of a key or value row is converted once and used for the whole
/// GQA group (the generic kernel converts it once per query head). Returns false, touching nothing, when the
/// shape is not one it takes (d not a multiple of 8 or above 256, G > kMaxGroupF16Avx2): the caller then uses
/// the generic kernel. Requires AVX2, FMA and F16C.
bool attend_rows_f16(const uint16_t* k, const uint16_t* v, int n, int d, const float* q, int G, float scale, float* m,
                     float* l, float* o, float* s_out, int64_t s_stride);

}  // namespace kvsieve::avx2
