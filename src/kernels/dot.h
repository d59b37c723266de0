#pragma once
// Dot products of one weight row with one activation vector, per weight type and instruction set.
// The scalar set is the readable reference; AVX2 and AVX-512 sets are chosen at run time
// (kernels/cpu_features.h) and tested against it.
#include <cstdint>

#include "kernels/quant.h"

namespace kvsieve {

/// One instruction set's kernels. n counts weights; nb counts blocks (32 weights for Q4_0, Q4_1, Q5_0, Q5_1
/// and Q8_0, 256 for K-quants). Q8_0 and Q5_0 rows are dotted with activations quantized to Q8_0, Q4_1 and
/// Q5_1 rows with activations quantized to Q8_1, Q2_K, Q3_K and Q5_K rows with activations quantized to Q8_K
/// (integer products, as ggml does; activation_type() names the format); every other type (Q4_K and Q6_K
/// included) with float32 activations. Each returns the float32 sum.
struct DotKernels {
    const char* isa;
    /// Q8_0 weight rows are re-laid at load in the split layout (kernels/repack.h) for these kernels: true for
    /// AVX-512 (two blocks per 512-bit load); false for AVX2 and scalar, which read GGUF's interleaved blocks
    /// (the split layout measured 1.8× slower per thread with AVX2 on a Zen 3 EPYC: each row starts with a load
    /// from its far end).
    bool split_q8_0;
    float (*f32)(const float* w, const float* x, int64_t n);
    float (*f16)(const uint16_t* w, const float* x, int64_t n);
    float (*bf16)(const uint16_t* w, const float* x, int64_t n);
    float (*q8_0)(const BlockQ8_0* w, const BlockQ8_0* xq, int64_t nb);
    /// Q8_0 in the split layout (kernels/repack.h): wq int8 [32·nb], wd binary16 [nb]; activations
    /// xq int8 [32·nb] (64-byte aligned), xd float32 [nb] (their binary16-rounded scales).
    float (*q8_0_split)(const int8_t* wq, const uint16_t* wd, const int8_t* xq, const float* xd, int64_t nb);
    float (*q4_0)(const BlockQ4_0* w, const float* x, int64_t nb);
    float (*q4_k)(const BlockQ4K* w, const float* x, int64_t nb);
    float (*q6_k)(const BlockQ6K* w, const float* x, int64_t nb);
    float (*q4_1)(const BlockQ4_1* w, const BlockQ8_1* xq, int64_t nb);
    float (*q5_0)(const BlockQ5_0* w, const BlockQ8_0* xq, int64_t nb);
    float (*q5_1)(const BlockQ5_1* w, const BlockQ8_1* xq, int64_t nb);
    /// K-quant rows with Q8_K activations (ggml's vec_dot_q{2,3,5}_K_q8_K formulas, in ggml's ggml-quants.c), per
    /// super-block b with d_x = xq[b].d and, for each sub-block j, S_j = Σ_i q_i·xq_i over its weights (int32):
    ///   Q2_K: d_x·d·Σ_j sc_j·S_j − d_x·dmin·Σ_j m_j·bsums_j                   (16 sub-blocks of 16, q in 0..3)
    ///   Q3_K: d_x·d·Σ_j s_j·S_j                                              (16 sub-blocks of 16, q in −4..3)
    ///   Q5_K: d_x·d·Σ_j sc_j·S_j − d_x·dmin·Σ_j m_j·(bsums_2j + bsums_2j+1)  (8 sub-blocks of 32, q in 0..31)
    float (*q2_k)(const BlockQ2K* w, const BlockQ8K* xq, int64_t nb);
    float (*q3_k)(const BlockQ3K* w, const BlockQ8K* xq, int64_t nb);
    float (*q5_k)(const BlockQ5K* w, const BlockQ8K* xq, int64_t nb);
    /// Multi-row forms (batched decode): one weight row w against n activation rows, row i's blocks at x + i·xs,
    /// 1 ≤ n ≤ kDotRowsMax; xd[i·xs + b] (and xsum for Q8_1) are the blocks' binary16 scales converted to float32.
    /// out[i] is bit-identical to the single-row kernel on row i (the weights are unpacked once for all n rows,
    /// each row's arithmetic unchanged). Null where an instruction set has none: matmul then calls the single-row
    /// kernel per row. Q8_0 only in the GGUF layout.
    void (*q8_0_rows)(const BlockQ8_0* w, const BlockQ8_0* x, const float* xd, int64_t xs, int n, int64_t nb,
                      float* out);
    void (*q4_1_rows)(const BlockQ4_1* w, const BlockQ8_1* x, const float* xd, const float* xsum, int64_t xs, int n,
                      int64_t nb, float* out);
    /// Row conversion used when a weight panel is dequantized for a prefill GEMM.
    void (*dequant_row)(TensorType t, const void* src, float* dst, int64_t n);
    /// float32 [n] → IEEE half [n], round to nearest even, overflow to ±inf (fp32_to_fp16() per element, bit for
    /// bit on every non-NaN input; a NaN stays a NaN): how F16 KV cache rows are written.
    void (*to_f16)(const float* src, uint16_t* dst, int64_t n);
    /// Quantizes activations for Q8_0 weights (same rounding as quantize_row_q8_0).
    void (*quantize_q8_0)(const float* x, BlockQ8_0* y, int64_t n);
    /// Quantizes activations for Q4_1 / Q5_1 weights (quantize_row_q8_1_activations).
    void (*quantize_q8_1)(const float* x, BlockQ8_1* y, int64_t n);
    /// Quantizes activations for Q2_K / Q3_K / Q5_K weights (quantize_row_q8_k).
    void (*quantize_q8_k)(const float* x, BlockQ8K* y, int64_t n);
    /// s[0..n) ← softmax(s) in place: exp(s_j − max s) / Σ, in float32 (the exponential of attention_generic.inc,
    /// relative error < 2e-7; vectorised per instruction set). n ≥ 1.
    void (*softmax)(float* s, int64_t n);
    /// Σ_j w_j · GELU(a_j + b_j) over n floats, the exact (erf) GELU z/2 · (1 + erf(z/√2)) (Hendrycks & Gimpel
    /// 2016), as WG-KV's gate MLP uses it (a: the pre-activations, b: their bias, w: the output weights). The
    /// scalar set calls std::erf; the vector sets use Abramowitz & Stegun 7.1.26 (|erf error| ≤ 1.5e-7) with
    /// the softmax's exponential, vectorised.
    float (*gelu_dot)(const float* a, const float* b, const float* w, int64_t n);
    // Decode attention over cached pages is per KV element type: kernels/kv_types.h (KVTypeTraits::attend).
};

/// Most activation rows a multi-row kernel (DotKernels::q8_0_rows, q4_1_rows) takes at once.
constexpr int kDotRowsMax = 4;

/// The format activations take before a dot product with weights of type t: F32 (no quantization), Q8_0, Q8_1
/// or Q8_K.
TensorType activation_type(TensorType t);

const DotKernels& dot_kernels_scalar();
const DotKernels& dot_kernels_avx2();
const DotKernels& dot_kernels_avx512();

/// The fastest set this CPU runs (AVX-512 with VNNI, else AVX2+FMA+F16C, else scalar). The environment
/// variable KVSIEVE_ISA=scalar|avx2|avx512 forces one (an unsupported choice throws Error).
const DotKernels& dot_kernels();

}  // namespace kvsieve
