// Scalar reference kernels (no instruction-set assumptions beyond x86-64 baseline / any CPU).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/dot.h"

namespace kvsieve {
namespace scalar {
static float isa_dot_f32(const float* w, const float* x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += w[i] * x[i];
    return s;
}
#include "kernels/dot_generic.inc"

static void dequant_row(TensorType t, const void* src, float* dst, int64_t n) { dequantize_row(t, src, dst, n); }
static float isa_dot_f16(const uint16_t* w, const float* x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += fp16_to_fp32(w[i]) * x[i];
    return s;
}
static void isa_axpy_f16(float a, const uint16_t* v, float* o, int64_t n) {
    for (int64_t i = 0; i < n; ++i) o[i] += a * fp16_to_fp32(v[i]);
}
#include "kernels/attention_generic.inc"

static float dot_f16(const uint16_t* w, const float* x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; ++i) s += fp16_to_fp32(w[i]) * x[i];
    return s;
}
}  // namespace scalar

const DotKernels& dot_kernels_scalar() {
    static const DotKernels k = {"scalar",         scalar::g_dot_f32,  scalar::dot_f16,  scalar::g_dot_bf16,
                                 scalar::g_dot_q8_0, scalar::g_dot_q8_0_split, scalar::g_dot_q4_0, scalar::g_dot_q4_k, scalar::g_dot_q6_k,
                                 dequantize_row,   quantize_row_q8_0_activations, scalar::attend_rows};
    return k;
}

}  // namespace kvsieve
