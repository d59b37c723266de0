#include "kernels/quant.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "util/error.h"

namespace kvsieve {

void dequantize_row(TensorType t, const void* src, float* dst, int64_t n) {
    switch (t) {
        case TensorType::F32: std::memcpy(dst, src, n * sizeof(float)); return;
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
        case TensorType::IQ4_NL: {
            const auto* b = static_cast<const BlockIQ4_NL*>(src);
            for (int64_t i = 0; i < n / QK8_0; ++i) dequant_block_iq4_nl(b + i, dst + i * QK8_0);
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
        case TensorType::Q2_K: {
            const auto* b = static_cast<const BlockQ2K*>(src);
            for (int64_t i = 0; i < n / QK_K; ++i) dequant_block_q2_k(b + i, dst + i * QK_K);
            return;
        }
        case TensorType::Q3_K: {
            const auto* b = static_cast<const BlockQ3K*>(src);
            for (int64_t i = 0; i < n / QK_K; ++i) dequant_block_q3_k(b + i, dst + i * QK_K);
            return;
        }
        case TensorType::Q5_K: {
            const auto* b = static_cast<const BlockQ5K*>(src);
            for (int64_t i = 0; i < n / QK_K; ++i) dequant_block_q5_k(b + i, dst + i * QK_K);
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

namespace {
/// The index of the IQ4_NL level nearest v (the upper of two equally near; the end levels beyond the grid).
int iq4_nl_nearest(float v) {
    if (v <= kIQ4NLValues[0]) return 0;
    if (v >= kIQ4NLValues[15]) return 15;
    int hi = 1;
    while (v >= kIQ4NLValues[hi]) ++hi;  // kIQ4NLValues[hi − 1] ≤ v < kIQ4NLValues[hi]
    return v - kIQ4NLValues[hi - 1] < kIQ4NLValues[hi] - v ? hi - 1 : hi;
}
}  // namespace

void quantize_row_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float* xb = x + b * QK8_0;
        const float m = block_signed_absmax(xb);
        uint8_t idx[QK8_0] = {};
        float d = 0;
        if (std::fabs(m) >= 1e-15f) {
            const float inv = 1.0f / (m / kIQ4NLValues[0]);
            float num = 0, den = 0;
            for (int j = 0; j < QK8_0; ++j) {
                idx[j] = static_cast<uint8_t>(iq4_nl_nearest(inv * xb[j]));
                const float v = kIQ4NLValues[idx[j]], w = xb[j] * xb[j];
                num += w * v * xb[j];
                den += w * v * v;
            }
            d = den > 0 ? num / den : 0.0f;
        }
        y[b].d = fp32_to_fp16(d);
        for (int j = 0; j < QK8_0 / 2; ++j) y[b].qs[j] = static_cast<uint8_t>(idx[j] | (idx[j + QK8_0 / 2] << 4));
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

void quantize_row_q8_k(const float* x, BlockQ8K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float* xb = x + b * QK_K;
        float amax = 0, maxv = 0;
        for (int i = 0; i < QK_K; ++i)
            if (std::fabs(xb[i]) > amax) {
                amax = std::fabs(xb[i]);
                maxv = xb[i];
            }
        BlockQ8K& o = y[b];
        if (amax == 0) {
            std::memset(&o, 0, sizeof(o));
            continue;
        }
        const float iscale = -127.0f / maxv;
        for (int i = 0; i < QK_K; ++i)
            o.qs[i] = static_cast<int8_t>(std::min(127, static_cast<int>(std::nearbyint(iscale * xb[i]))));
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += o.qs[16 * j + i];
            o.bsums[j] = static_cast<int16_t>(sum);
        }
        o.d = 1.0f / iscale;
    }
}

namespace {
/// The binary16 value nearest to v ≥ 0 that is not below it (largest finite value at most).
uint16_t fp16_not_below(float v) {
    uint16_t h = fp32_to_fp16(v);
    if (h >= 0x7C00) return 0x7BFF;
    if (fp16_to_fp32(h) < v) ++h;
    return std::min<uint16_t>(h, 0x7BFF);
}

/// Smallest integer k in 0..kmax with k·unit ≥ v (kmax if none; 0 when unit is 0).
int steps_covering(float v, float unit, int kmax) {
    if (!(unit > 0) || !(v > 0)) return 0;
    return std::min(kmax, static_cast<int>(std::ceil(v / unit)));
}

/// Affine K-quant of one super-block (Q2_K: sub = 16, nmax = 3, smax = 15; Q5_K: sub = 32, nmax = 31, smax = 63)
/// with the whole range of every sub-block covered: writes the scale and min codes sc[j], mn[j], the binary16
/// super-scales, and the values L[i] in 0..nmax so that x_i ≈ d·sc_j·L_i − dmin·mn_j.
void quantize_affine_superblock(const float* x, int sub, int nmax, int smax, uint8_t* sc, uint8_t* mn, uint16_t* d16,
                                uint16_t* dmin16, uint8_t* L) {
    const int nsub = QK_K / sub;
    float lo[QK_K / 16], hi[QK_K / 16];
    float max_m = 0;
    for (int j = 0; j < nsub; ++j) {
        lo[j] = std::min(0.0f, *std::min_element(x + j * sub, x + (j + 1) * sub));  // the min code is ≥ 0
        hi[j] = *std::max_element(x + j * sub, x + (j + 1) * sub);
        max_m = std::max(max_m, -lo[j]);
    }
    *dmin16 = fp16_not_below(max_m / smax);
    const float dmin = fp16_to_fp32(*dmin16);
    float step[QK_K / 16], max_step = 0;
    for (int j = 0; j < nsub; ++j) {
        mn[j] = static_cast<uint8_t>(steps_covering(-lo[j], dmin, smax));
        step[j] = std::max(0.0f, (hi[j] + dmin * mn[j]) / nmax);
        max_step = std::max(max_step, step[j]);
    }
    *d16 = fp16_not_below(max_step / smax);
    const float d = fp16_to_fp32(*d16);
    for (int j = 0; j < nsub; ++j) {
        sc[j] = static_cast<uint8_t>(steps_covering(step[j], d, smax));
        const float dl = d * sc[j], ml = dmin * mn[j];
        const float inv = dl > 0 ? 1.0f / dl : 0.0f;
        for (int i = j * sub; i < (j + 1) * sub; ++i)
            L[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::nearbyint((x[i] + ml) * inv)), 0, nmax));
    }
}

/// Packs 256 two-bit values into the Q2_K / Q3_K qs layout: value i at bits 2·((i%128)/32) of byte
/// 32·(i/128) + i%32.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int i = 0; i < QK_K / 4; ++i) qs[i] = 0;
    for (int i = 0; i < QK_K; ++i)
        qs[32 * (i / 128) + i % 32] |= static_cast<uint8_t>((L[i] & 3) << (2 * ((i % 128) / 32)));
}
}  // namespace

void quantize_row_q2_k(const float* x, BlockQ2K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b) {
        uint8_t sc[16], mn[16], L[QK_K];
        quantize_affine_superblock(x + b * QK_K, 16, 3, 15, sc, mn, &y[b].d, &y[b].dmin, L);
        for (int j = 0; j < 16; ++j) y[b].scales[j] = static_cast<uint8_t>(sc[j] | (mn[j] << 4));
        pack_2bit(L, y[b].qs);
    }
}

void quantize_row_q5_k(const float* x, BlockQ5K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b) {
        uint8_t sc[8], mn[8], L[QK_K];
        BlockQ5K& o = y[b];
        quantize_affine_superblock(x + b * QK_K, 32, 31, 63, sc, mn, &o.d, &o.dmin, L);
        // 6-bit codes as Q4_K packs them (see q4k_scale_min): j < 4 in the low six bits of bytes j and j+4;
        // j ≥ 4 as nibbles of byte j+4 with their top two bits in the high bits of bytes j−4 and j.
        std::memset(o.scales, 0, sizeof(o.scales));
        for (int j = 0; j < 8; ++j) {
            if (j < 4) {
                o.scales[j] |= sc[j];
                o.scales[j + 4] |= mn[j];
            } else {
                o.scales[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
                o.scales[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
                o.scales[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
            }
        }
        std::memset(o.qh, 0, sizeof(o.qh));
        std::memset(o.qs, 0, sizeof(o.qs));
        for (int i = 0; i < QK_K; ++i) {
            o.qs[32 * (i / 64) + i % 32] |= static_cast<uint8_t>((L[i] & 0xF) << (i % 64 < 32 ? 0 : 4));
            o.qh[i % 32] |= static_cast<uint8_t>((L[i] >> 4) << (i / 32));
        }
    }
}

void quantize_row_q3_k(const float* x, BlockQ3K* y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float* xb = x + b * QK_K;
        BlockQ3K& o = y[b];
        float a[16], max_half = 0;  // a: signed value of largest magnitude per sub-block; max of |a|/4
        for (int j = 0; j < 16; ++j) {
            a[j] = 0;
            for (int i = 16 * j; i < 16 * (j + 1); ++i)
                if (std::fabs(xb[i]) > std::fabs(a[j])) a[j] = xb[i];
            max_half = std::max(max_half, std::fabs(a[j]) / 4);
        }
        o.d = fp16_not_below(max_half / 31);
        const float d = fp16_to_fp32(o.d);
        std::memset(o.scales, 0, sizeof(o.scales));
        uint8_t L[QK_K];
        for (int j = 0; j < 16; ++j) {
            const int k = steps_covering(std::fabs(a[j]) / 4, d, 31);
            const int s = a[j] > 0 ? -k : k;  // a_j ↦ q = −4
            const int u = s + 32;             // 6-bit code
            if (j < 8)
                o.scales[j] |= static_cast<uint8_t>(u & 0xF);
            else
                o.scales[j - 8] |= static_cast<uint8_t>((u & 0xF) << 4);
            o.scales[8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
            const float dl = d * s;
            const float inv = dl != 0 ? 1.0f / dl : 0.0f;
            for (int i = 16 * j; i < 16 * (j + 1); ++i)
                L[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::nearbyint(xb[i] * inv)), -4, 3) + 4);
        }
        // Values 0..7 (q + 4): the low two bits in qs, the third in hmask (bit i/32 of byte i%32).
        pack_2bit(L, o.qs);
        std::memset(o.hmask, 0, sizeof(o.hmask));
        for (int i = 0; i < QK_K; ++i) o.hmask[i % 32] |= static_cast<uint8_t>((L[i] >> 2) << (i / 32));
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
                                       TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                       TensorType::Q2_K, TensorType::Q3_K, TensorType::Q5_K};
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
        case TensorType::Q2_K: quantize_row_q2_k(x, static_cast<BlockQ2K*>(dst), n); return;
        case TensorType::Q3_K: quantize_row_q3_k(x, static_cast<BlockQ3K*>(dst), n); return;
        case TensorType::Q5_K: quantize_row_q5_k(x, static_cast<BlockQ5K*>(dst), n); return;
        default: break;
    }
    fail("quantizing to ", type_name(t), " is not supported (use one of ", quantize_type_names(), ")");
}

}  // namespace kvsieve
