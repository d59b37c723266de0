#pragma once
// Fast Walsh–Hadamard transform of KV head vectors: the orthonormal rotation applied to keys, queries and values
// before a quantized KV cache stores them. The scalar set is the readable reference; AVX2 and AVX-512 sets are
// chosen at run time (kernels/cpu_features.h, the same choice as dot_kernels()) and tested against it.
//
// The matrix is Sylvester's construction (Sylvester 1867), normalised: H_1 = [1],
//   H_2d = 1/√2 · [[H_d, H_d], [H_d, −H_d]],
// so H_d has entries ±1/√d, H_d = H_dᵀ = H_d⁻¹ (orthonormal and an involution) and entry (i, j) is
// (−1)^popcount(i AND j) / √d. The fast transform computes y = H_d·x in log2(d) butterfly stages of d/2
// (a, b) → (a + b, a − b) each, then scales by 1/√d: d·log2(d) additions instead of d² multiply-adds.
//
// Why a KV cache wants it (QuaRot, Ashkboos et al. 2024, "QuaRot: Outlier-Free 4-Bit Inference in Rotated
// LLMs", arXiv:2404.00456, which rotates queries and keys by an online Hadamard transform and values per head
// before quantizing the KV cache to 4 bits): a block-scaled format such as Q8_0 or Q4_0 sets each block's scale from its largest magnitude, so one outlier channel costs every other channel of its
// block its precision; H spreads the outlier's energy evenly over all d channels. Because H is orthonormal,
// attention is unchanged in exact arithmetic: scores q·k = (Hq)·(Hk), and with rotated values the output
// Σ_j p_j·H v_j = H·(Σ_j p_j v_j) is rotated back once per head by a second H (H·H = I). llama.cpp does the same
// for quantized K/V caches under the name "attention rotation" (attn_rot_k / attn_rot_v in src/llama-kv-cache.cpp,
// the ggml_gen_hadamard matrix applied through llama_mul_mat_hadamard; see docs/kv_quant_reference.md).
#include <cstdint>

namespace kvsieve {

/// Largest head dimension the transform takes.
constexpr int kHadamardMaxDim = 1024;

/// True when d is a power of two with 1 ≤ d ≤ kHadamardMaxDim (the sizes Sylvester's construction has).
bool hadamard_supported(int d);

/// The normalisation 1/√d as float32 (1/√d rounded once, from double precision), which every set multiplies by.
float hadamard_scale(int d);

/// One instruction set's transform. rows(x, rows, d, ld) replaces each of `rows` float32 rows of length d, row r
/// at x + r·ld, by H_d times it (normalised, see above). d must be hadamard_supported and ld ≥ d (the callers
/// below check; these pointers do not). Every set performs the same additions in the same order on every element
/// (only the order in which elements are visited differs) and scales by the same float32 1/√d, so all sets give
/// bit-identical results.
struct HadamardKernels {
    const char* isa;
    void (*rows)(float* x, int64_t rows, int d, int64_t ld);
};

/// The readable reference: plain radix-2 butterflies, stage lengths 1, 2, 4, …, d/2, then the 1/√d scale.
const HadamardKernels& hadamard_kernels_scalar();
/// AVX2 + FMA + F16C set (the first three stages inside 8-float registers). Call only when
/// cpu_features().has_avx2_set().
const HadamardKernels& hadamard_kernels_avx2();
/// AVX-512 set (the first four stages inside 16-float registers). Call only when cpu_features().has_avx512_set().
const HadamardKernels& hadamard_kernels_avx512();

/// The set matching dot_kernels() (so KVSIEVE_ISA=scalar|avx2|avx512 forces it too).
const HadamardKernels& hadamard_kernels();

/// x[0..d) ← H_d·x in place, the normalised Walsh–Hadamard transform above: applying it twice gives x back up to
/// float32 rounding; ‖H x‖ = ‖x‖. Throws Error when d is not a power of two in [1, kHadamardMaxDim] or x is null.
void fwht(float* x, int d);

/// fwht on `rows` rows of length d, row r at x + r·ld (ld in floats, ld ≥ d; elements between d and ld are left
/// untouched), e.g. every head of a [tokens][heads·d] key block with rows = tokens·heads, ld = d. rows = 0 does
/// nothing. Throws Error for a bad d, rows < 0, ld < d or a null x with rows > 0.
void fwht_rows(float* x, int64_t rows, int d, int64_t ld);

}  // namespace kvsieve
