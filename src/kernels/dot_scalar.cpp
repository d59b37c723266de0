// Scalar reference kernels (no instruction-set assumptions beyond x86-64 baseline / any CPU).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/dot.h"
#include "kernels/kv_attend.h"

namespace kvsieve {
namespace scalar {
static float isa_dot_f32(const float* w, const float* x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += w[i] * x[i];
    return s;
}
#include "kernels/dot_generic.inc"

static void dequant_row(TensorType t, const void* src, float* dst, int64_t n) { dequantize_row(t, src, dst, n); }
static void to_f16(const float* src, uint16_t* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}
static float isa_dot_f16(const uint16_t* w, const float* x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += fp16_to_fp32(w[i]) * x[i];
    return s;
}
static void isa_axpy_f16(float a, const uint16_t* v, float* o, int64_t n) {
    for (int64_t i = 0; i < n; ++i) o[i] += a * fp16_to_fp32(v[i]);
}
static float isa_dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* xq, int64_t nb) { return g_dot_q8_0(w, xq, nb); }
static float isa_dot_q4_1(const BlockQ4_1* w, const BlockQ8_1* xq, int64_t nb) { return g_dot_q4_1(w, xq, nb); }
static float isa_dot_q5_0(const BlockQ5_0* w, const BlockQ8_0* xq, int64_t nb) { return g_dot_q5_0(w, xq, nb); }
static float isa_dot_q5_1(const BlockQ5_1* w, const BlockQ8_1* xq, int64_t nb) { return g_dot_q5_1(w, xq, nb); }
static float isa_dot_iq4_nl(const BlockIQ4_NL* w, const BlockQ8_0* xq, int64_t nb) { return g_dot_iq4_nl(w, xq, nb); }
#include "kernels/attention_generic.inc"

// The scalar set's KV attend kernels (kernels/kv_attend.h): the generic kernels as they are.
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_float) {
    attend_rows_float_keys(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride);
}
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_f16) {
    attend_rows_float_keys(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride);
}
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q8_0) {
    attend_rows_q8_0_keys(kt, k, vt, v, n, d, q, G, scale, m, l, o, s_out, s_stride);
}
KVSIEVE_DECLARE_KV_ATTEND(kv_attend_q4_0) {
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

static float dot_f16(const uint16_t* w, const float* x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += fp16_to_fp32(w[i]) * x[i];
    return s;
}

// The reference GELU dot: std::erf in float32.
static float gelu_dot_exact(const float* a, const float* b, const float* w, int64_t n) {
    float s = 0;
    for (int64_t j = 0; j < n; ++j) {
        const float z = a[j] + b[j];
        s += w[j] * 0.5f * z * (1.0f + std::erf(z * 0.70710678118654752f));
    }
    return s;
}
}  // namespace scalar

TensorType activation_type(TensorType t) {
    switch (t) {
        case TensorType::Q8_0:
        case TensorType::Q5_0: return TensorType::Q8_0;
        case TensorType::Q4_1:
        case TensorType::Q5_1: return TensorType::Q8_1;
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q5_K: return TensorType::Q8_K;
        default: return TensorType::F32;
    }
}

const DotKernels& dot_kernels_scalar() {
    static const DotKernels k = {.isa = "scalar",
                                 .split_q8_0 = false,
                                 .f32 = scalar::g_dot_f32,
                                 .f16 = scalar::dot_f16,
                                 .bf16 = scalar::g_dot_bf16,
                                 .q8_0 = scalar::g_dot_q8_0,
                                 .q8_0_split = scalar::g_dot_q8_0_split,
                                 .q4_0 = scalar::g_dot_q4_0,
                                 .q4_k = scalar::g_dot_q4_k,
                                 .q6_k = scalar::g_dot_q6_k,
                                 .q4_1 = scalar::g_dot_q4_1,
                                 .q5_0 = scalar::g_dot_q5_0,
                                 .q5_1 = scalar::g_dot_q5_1,
                                 .q2_k = scalar::g_dot_q2_k,
                                 .q3_k = scalar::g_dot_q3_k,
                                 .q5_k = scalar::g_dot_q5_k,
                                 .q8_0_rows = nullptr,  // the reference: matmul calls q8_0 per row
                                 .q4_1_rows = nullptr,
                                 .dequant_row = dequantize_row,
                                 .to_f16 = scalar::to_f16,
                                 .quantize_q8_0 = quantize_row_q8_0_activations,
                                 .quantize_q8_1 = quantize_row_q8_1_activations,
                                 .quantize_q8_k = quantize_row_q8_k,
                                 .softmax = scalar::softmax_row,
                                 .gelu_dot = scalar::gelu_dot_exact};
    return k;
}

}  // namespace kvsieve
