#pragma once
// Vector exponential for the AVX-512 kernels (include only from units compiled with AVX-512F flags).
#include <immintrin.h>

namespace kvsieve::avx512 {

/// exp(x) for 16 lanes with x ≤ 0: 2^n · p(r), n = round(x·log2 e), r = x − n·ln 2 (two-part ln 2), p the
/// degree-6 Taylor polynomial (the scalar exp_nonpos of attention_generic.inc, relative error < 2e-7);
/// inputs below −87 are clamped to −87.
inline __m512 exp_nonpos16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

}  // namespace kvsieve::avx512
