#pragma once
// AVX-512 decode attention over one binary16 cache page (internal to the AVX-512 kernel set).

#include <cstdint>

namespace kvsieve::avx512 {

/// Largest GQA group (query heads per KV head) the specialised kernel takes.
constexpr int kMaxGroupF16Avx512 = 16;

/// Online-softmax step (Milakov & Gimelshein 2018; Dao et al. 2022, FlashAttention Alg. 1) over n ≤ 16 cached
/// rows of one KV head: k, v binary16 [n][d]; q float32 [G][d]; running max m[G], normaliser l[G] and
/// unnormalised output o[G][d] are updated in place; if s_out is set the scaled scores q·k·scale go to
/// s_out[g·s_stride + j]. Each key and value row is converted once for the whole GQA group.
/// Returns false, touching nothing, when the shape is not one it specialises (d ∉ {64, 128, 256},
/// G > kMaxGroupF16Avx512): the caller then uses the generic kernel. Requires AVX-512F.
bool attend_rows_f16(const uint16_t* k, const uint16_t* v, int n, int d, const float* q, int G, float scale, float* m,
                     float* l, float* o, float* s_out, int64_t s_stride);

}  // namespace kvsieve::avx512
