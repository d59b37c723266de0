#include "kernels/quant.h"

#include <cmath>
#include <cstring>

#include "util/error.h"

namespace kvsieve {

void dequantize_row(TensorType t, const void* src, float* dst, int64_t n) {
    switch (t) {
        case TensorType::F32:
            std::memcpy(dst, src, n * sizeof(float));
            return;
        case TensorType::F16: {
            const auto* s = static_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
            return;
        }
        case TensorType::BF16: {
            const auto* s = static_cast<const uint16_t*>(src);
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
            return;
        }
        case TensorType::Q8_0: {
            const auto* b = static_cast<const BlockQ8_0*>(src);
            for (int64_t i = 0; i < n / QK8_0; ++i) dequant_block_q8_0(b + i, dst + i * QK8_0);
            return;
        }
        case TensorType::Q4_0: {
            const auto* b = static_cast<const BlockQ4_0*>(src);
            for (int64_t i = 0; i < n / QK8_0; ++i) dequant_block_q4_0(b + i, dst + i * QK8_0);
            return;
        }
        case TensorType::Q4_K: {
            const auto* b = static_cast<const BlockQ4K*>(src);
            for (int64_t i = 0; i < n / QK_K; ++i) dequant_block_q4_k(b + i, dst + i * QK_K);
            return;
        }
        case TensorType::Q6_K: {
            const auto* b = static_cast<const BlockQ6K*>(src);
            for (int64_t i = 0; i < n / QK_K; ++i) dequant_block_q6_k(b + i, dst + i * QK_K);
            return;
        }
    }
    fail("cannot dequantize tensors of type ", type_name(t));
}

namespace {
template <class Round>
void quantize_q8_0_with(const float* x, BlockQ8_0* y, int64_t n, Round round) {
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float* xb = x + b * QK8_0;
        float amax = 0;
        for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(round(xb[j] * id));
    }
}
}  // namespace

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
    quantize_q8_0_with(x, y, n, [](float v) { return std::round(v); });
}

void quantize_row_q8_0_activations(const float* x, BlockQ8_0* y, int64_t n) {
    quantize_q8_0_with(x, y, n, [](float v) { return std::nearbyint(v); });
}

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float* xb = x + b * QK8_0;
        float amax = 0, maxv = 0;
        for (int j = 0; j < QK8_0; ++j)
            if (std::fabs(xb[j]) > amax) {
                amax = std::fabs(xb[j]);
                maxv = xb[j];
            }
        const float d = maxv / -8.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < QK8_0 / 2; ++j) {
            const int q0 = std::min(15, static_cast<int>(xb[j] * id + 8.5f));
            const int q1 = std::min(15, static_cast<int>(xb[j + QK8_0 / 2] * id + 8.5f));
            y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void quantize_row_f16(const float* x, uint16_t* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}
void quantize_row_bf16(const float* x, uint16_t* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

void quantize_row(TensorType t, const float* x, void* dst, int64_t n) {
    switch (t) {
        case TensorType::F32: std::memcpy(dst, x, n * sizeof(float)); return;
        case TensorType::F16: quantize_row_f16(x, static_cast<uint16_t*>(dst), n); return;
        case TensorType::BF16: quantize_row_bf16(x, static_cast<uint16_t*>(dst), n); return;
        case TensorType::Q8_0: quantize_row_q8_0(x, static_cast<BlockQ8_0*>(dst), n); return;
        case TensorType::Q4_0: quantize_row_q4_0(x, static_cast<BlockQ4_0*>(dst), n); return;
        default: break;
    }
    fail("quantizing to ", type_name(t), " is not supported (use f32, f16, bf16, q8_0 or q4_0)");
}

}  // namespace kvsieve
