#include "kernels/quant.h"

#include <algorithm>
#include <cctype>
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
        case TensorType::Q4_1: {
            const auto* b = static_cast<const BlockQ4_1*>(src);
            for (int64_t i = 0; i < n / QK8_0; ++i) dequant_block_q4_1(b + i, dst + i * QK8_0);
            return;
        }
        case TensorType::Q5_0: {
            const auto* b = static_cast<const BlockQ5_0*>(src);
            for (int64_t i = 0; i < n / QK8_0; ++i) dequant_block_q5_0(b + i, dst + i * QK8_0);
            return;
        }
        case TensorType::Q5_1: {
            const auto* b = static_cast<const BlockQ5_1*>(src);
            for (int64_t i = 0; i < n / QK8_0; ++i) dequant_block_q5_1(b + i, dst + i * QK8_0);
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
        default: break;
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

void quantize_row_q8_1_activations(const float* x, BlockQ8_1* y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float* xb = x + b * QK8_0;
        float amax = 0;
        for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0 ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_0; ++j) {
            y[b].qs[j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
            sum += y[b].qs[j];
        }
        y[b].d = fp32_to_fp16(d);
        y[b].s = fp32_to_fp16(d * static_cast<float>(sum));
    }
}

namespace {
/// Minimum and maximum of one 32-value block.
void block_min_max(const float* xb, float* mn, float* mx) {
    *mn = xb[0];
    *mx = xb[0];
    for (int j = 1; j < QK8_0; ++j) {
        *mn = std::min(*mn, xb[j]);
        *mx = std::max(*mx, xb[j]);
    }
}
/// Signed value of largest magnitude of one 32-value block (the first one on ties).
float block_signed_absmax(const float* xb) {
    float amax = 0, maxv = 0;
    for (int j = 0; j < QK8_0; ++j)
        if (std::fabs(xb[j]) > amax) {
            amax = std::fabs(xb[j]);
            maxv = xb[j];
        }
    return maxv;
}
/// Packs 32 five-bit values into a Q5 block's qs (low nibbles) and qh (fifth bits).
void pack_q5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
    uint32_t qh = 0;
    for (int j = 0; j < QK8_0 / 2; ++j) {
        qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
        qh |= static_cast<uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int i = 0; i < 4; ++i) qh_bytes[i] = static_cast<uint8_t>(qh >> (8 * i));
}
}  // namespace

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float* xb = x + b * QK8_0;
        float mn, mx;
        block_min_max(xb, &mn, &mx);
        const float d = (mx - mn) / 15.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        y[b].m = fp32_to_fp16(mn);
        for (int j = 0; j < QK8_0 / 2; ++j) {
            const int q0 = std::min(15, static_cast<int>((xb[j] - mn) * id + 0.5f));
            const int q1 = std::min(15, static_cast<int>((xb[j + 16] - mn) * id + 0.5f));
            y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float* xb = x + b * QK8_0;
        const float d = block_signed_absmax(xb) / -16.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        int q[QK8_0];
        for (int j = 0; j < QK8_0; ++j) q[j] = std::min(31, static_cast<int>(xb[j] * id + 16.5f));
        pack_q5(q, y[b].qs, y[b].qh);
    }
}

void quantize_row_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float* xb = x + b * QK8_0;
        float mn, mx;
        block_min_max(xb, &mn, &mx);
        const float d = (mx - mn) / 31.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[b].d = fp32_to_fp16(d);
        y[b].m = fp32_to_fp16(mn);
        int q[QK8_0];
        for (int j = 0; j < QK8_0; ++j) q[j] = std::min(31, static_cast<int>((xb[j] - mn) * id + 0.5f));
        pack_q5(q, y[b].qs, y[b].qh);
    }
}

void quantize_row_f16(const float* x, uint16_t* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}
void quantize_row_bf16(const float* x, uint16_t* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

namespace {
constexpr TensorType kQuantizable[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0,
                                       TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1};
}  // namespace

bool can_quantize_to(TensorType t) {
    for (TensorType q : kQuantizable)
        if (q == t) return true;
    return false;
}

std::string quantize_type_names() {
    std::string s;
    for (TensorType q : kQuantizable) {
        std::string n = type_name(q);
        for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        s += (s.empty() ? "" : ", ") + n;
    }
    return s;
}

void quantize_row(TensorType t, const float* x, void* dst, int64_t n) {
    switch (t) {
        case TensorType::F32: std::memcpy(dst, x, n * sizeof(float)); return;
        case TensorType::F16: quantize_row_f16(x, static_cast<uint16_t*>(dst), n); return;
        case TensorType::BF16: quantize_row_bf16(x, static_cast<uint16_t*>(dst), n); return;
        case TensorType::Q8_0: quantize_row_q8_0(x, static_cast<BlockQ8_0*>(dst), n); return;
        case TensorType::Q4_0: quantize_row_q4_0(x, static_cast<BlockQ4_0*>(dst), n); return;
        case TensorType::Q4_1: quantize_row_q4_1(x, static_cast<BlockQ4_1*>(dst), n); return;
        case TensorType::Q5_0: quantize_row_q5_0(x, static_cast<BlockQ5_0*>(dst), n); return;
        case TensorType::Q5_1: quantize_row_q5_1(x, static_cast<BlockQ5_1*>(dst), n); return;
        default: break;
    }
    fail("quantizing to ", type_name(t), " is not supported (use one of ", quantize_type_names(), ")");
}

}  // namespace kvsieve
