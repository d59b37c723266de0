// Float conversions and quantizers against their definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/fp16.h"
#include "kernels/quant.h"
#include "kernels/tensor_types.h"

namespace kvsieve {
namespace {

TEST(Fp16, EveryHalfRoundTripsExactly) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = fp16_to_fp32(static_cast<uint16_t>(h));
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
            continue;
        }
        ASSERT_EQ(fp32_to_fp16(f), h) << "half 0x" << std::hex << h;
    }
}

TEST(Fp16, KnownValuesAndRounding) {
    EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
    EXPECT_EQ(fp16_to_fp32(0xC000), -2.0f);
    EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
    EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
    EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie → even
    EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie → even (up)
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);                          // rounds to infinity
    EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie with zero → even
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(Fp16, DirectedRoundingGivesTheNearestHalfOnEachSide) {
    // Against every finite binary16, sorted: down(x) is the largest one ≤ x and up(x) the smallest ≥ x, for values
    // across the whole range (subnormals, zeros, the largest finite half and beyond it, where both saturate).
    std::vector<float> halves;
    for (uint32_t h = 0; h < 0x10000u; ++h)
        if ((h & 0x7c00u) != 0x7c00u) halves.push_back(fp16_to_fp32(static_cast<uint16_t>(h)));
    std::sort(halves.begin(), halves.end());
    std::vector<float> xs = {0.0f,      -0.0f,    1e-9f,     -1e-9f, 6e-8f, -6e-8f, 1.0f,  -1.0f,    65504.0f,
                             -65504.0f, 65510.0f, -65510.0f, 1e6f,   -1e6f, 0.1f,   -0.1f, 3.14159f, 1.0f + 1e-4f};
    uint32_t state = 12345;
    for (int i = 0; i < 20000; ++i) {
        state = state * 1664525u + 1013904223u;
        uint32_t bits = state;
        if ((bits & 0x7f800000u) == 0x7f800000u) continue;  // no inf/NaN here
        float f;
        std::memcpy(&f, &bits, 4);
        if (std::fabs(f) < 1e5f) xs.push_back(f);
        xs.push_back(
            std::ldexp(static_cast<float>(state % 100000) / 100000.0f - 0.5f, static_cast<int>(state % 40) - 24));
    }
    for (float x : xs) {
        const float lo = fp16_to_fp32(fp32_to_fp16_down(x)), hi = fp16_to_fp32(fp32_to_fp16_up(x));
        if (x >= 65504.0f) {
            EXPECT_EQ(lo, 65504.0f);
            EXPECT_EQ(hi, 65504.0f);
            continue;
        }
        if (x <= -65504.0f) {
            EXPECT_EQ(lo, -65504.0f);
            EXPECT_EQ(hi, -65504.0f);
            continue;
        }
        const float want_lo = *(std::upper_bound(halves.begin(), halves.end(), x) - 1);
        const float want_hi = *std::lower_bound(halves.begin(), halves.end(), x);
        ASSERT_EQ(lo, want_lo) << x;
        ASSERT_EQ(hi, want_hi) << x;
    }
    EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16_up(NAN))));
}

TEST(Bf16, RoundsToNearestEven) {
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
    uint32_t u = 0x3F808000;  // exactly halfway between 0x3F80 and 0x3F81
    float f;
    std::memcpy(&f, &u, 4);
    EXPECT_EQ(fp32_to_bf16(f), 0x3F80);
    u = 0x3F818000;
    std::memcpy(&f, &u, 4);
    EXPECT_EQ(fp32_to_bf16(f), 0x3F82);
    EXPECT_EQ(bf16_to_fp32(0x4049), 3.140625f);
}

TEST(Quant, Q8_0ErrorIsWithinHalfAStep) {
    std::vector<float> x(128);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * (1 + i % 7);
    std::vector<BlockQ8_0> q(4);
    quantize_row_q8_0(x.data(), q.data(), 128);
    std::vector<float> y(128);
    dequantize_row(TensorType::Q8_0, q.data(), y.data(), 128);
    for (int b = 0; b < 4; ++b) {
        const float d = fp16_to_fp32(q[b].d);
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        EXPECT_NEAR(d, amax / 127, amax / 127 * 1e-3);
        for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), 0.5f * d * 1.01f + 1e-6f);
    }
}

TEST(Quant, Q4_0ErrorIsWithinOneStep) {
    std::vector<float> x(64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.21f * i) * 3;
    std::vector<BlockQ4_0> q(2);
    quantize_row_q4_0(x.data(), q.data(), 64);
    std::vector<float> y(64);
    dequantize_row(TensorType::Q4_0, q.data(), y.data(), 64);
    for (int b = 0; b < 2; ++b) {
        const float d = std::fabs(fp16_to_fp32(q[b].d));
        for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), d * 1.01f);
    }
}

TEST(Quant, Q4_1AndQ5_1ErrorIsWithinHalfAStepPlusScaleRounding) {
    std::vector<float> x(96);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.29f * i) * 2 + 0.7f;  // positive-biased blocks
    std::vector<BlockQ4_1> q4(3);
    std::vector<BlockQ5_1> q5(3);
    quantize_row_q4_1(x.data(), q4.data(), 96);
    quantize_row_q5_1(x.data(), q5.data(), 96);
    std::vector<float> y4(96), y5(96);
    dequantize_row(TensorType::Q4_1, q4.data(), y4.data(), 96);
    dequantize_row(TensorType::Q5_1, q5.data(), y5.data(), 96);
    for (int b = 0; b < 3; ++b) {
        float mn = x[b * 32], mx = x[b * 32];
        for (int j = 0; j < 32; ++j) {
            mn = std::min(mn, x[b * 32 + j]);
            mx = std::max(mx, x[b * 32 + j]);
        }
        EXPECT_NEAR(fp16_to_fp32(q4[b].m), mn, std::fabs(mn) * 1e-3);
        EXPECT_NEAR(fp16_to_fp32(q4[b].d), (mx - mn) / 15, (mx - mn) / 15 * 1e-3);
        EXPECT_NEAR(fp16_to_fp32(q5[b].d), (mx - mn) / 31, (mx - mn) / 31 * 1e-3);
        // Half a step, plus the binary16 rounding of d (times up to 15 or 31 steps) and of m.
        const float slack = 16 * (mx - mn) * 1e-3f + std::fabs(mn) * 1e-3f;
        for (int j = 0; j < 32; ++j) {
            EXPECT_LE(std::fabs(x[b * 32 + j] - y4[b * 32 + j]), 0.5f * (mx - mn) / 15 + slack);
            EXPECT_LE(std::fabs(x[b * 32 + j] - y5[b * 32 + j]), 0.5f * (mx - mn) / 31 + slack);
        }
    }
}

TEST(Quant, Q5_0ErrorIsWithinOneStepAndUsesAllFiveBits) {
    std::vector<float> x(64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.17f * i) * 3;
    std::vector<BlockQ5_0> q(2);
    quantize_row_q5_0(x.data(), q.data(), 64);
    std::vector<float> y(64);
    dequantize_row(TensorType::Q5_0, q.data(), y.data(), 64);
    int with_high_bit = 0;
    for (int b = 0; b < 2; ++b) {
        const float d = std::fabs(fp16_to_fp32(q[b].d));
        // Half a step, except one step at the clamped end opposite the largest magnitude (q = 31, not 32).
        for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), d * 1.01f + 1e-6f);
        with_high_bit += __builtin_popcount(q5_high_bits(q[b].qh));
    }
    EXPECT_GT(with_high_bit, 0);
    EXPECT_LT(with_high_bit, 64);
}

/// Rows with positive-biased, negative-biased and mixed sub-blocks and one all-zero sub-block.
std::vector<float> kquant_test_row() {
    std::vector<float> x(512);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * (1 + 0.1f * (i % 23)) + (i < 256 ? 0.9f : -0.6f);
    for (int i = 32; i < 48; ++i) x[i] = 0;
    return x;
}

TEST(Quant, Q2KAndQ5KErrorIsWithinHalfTheirSubBlockStep) {
    const auto x = kquant_test_row();
    std::vector<BlockQ2K> q2(2);
    std::vector<BlockQ5K> q5(2);
    quantize_row_q2_k(x.data(), q2.data(), 512);
    quantize_row_q5_k(x.data(), q5.data(), 512);
    std::vector<float> y2(512), y5(512);
    dequantize_row(TensorType::Q2_K, q2.data(), y2.data(), 512);
    dequantize_row(TensorType::Q5_K, q5.data(), y5.data(), 512);
    for (int i = 0; i < 512; ++i) {
        const BlockQ2K& b2 = q2[i / 256];
        const float step2 = fp16_to_fp32(b2.d) * (b2.scales[(i % 256) / 16] & 0xF);
        EXPECT_LE(std::fabs(x[i] - y2[i]), 0.5f * step2 * 1.001f + 1e-6f) << i;
        const BlockQ5K& b5 = q5[i / 256];
        uint8_t sc, m;
        q4k_scale_min((i % 256) / 32, b5.scales, &sc, &m);
        const float step5 = fp16_to_fp32(b5.d) * sc;
        EXPECT_LE(std::fabs(x[i] - y5[i]), 0.5f * step5 * 1.001f + 1e-6f) << i;
    }
    // The steps stay within the documented bound: d·sc_j < (max_j − min(min_j, 0) + dmin)/nmax + d.
    for (int j = 0; j < 32; ++j) {  // Q2_K sub-blocks of 16
        const float* xs = x.data() + 16 * j;
        const float range = *std::max_element(xs, xs + 16) - std::min(0.0f, *std::min_element(xs, xs + 16));
        const BlockQ2K& b = q2[j / 16];
        const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
        EXPECT_LE(d * (b.scales[j % 16] & 0xF), (range + dmin) / 3 + d) << j;
    }
    for (int j = 0; j < 16; ++j) {  // Q5_K sub-blocks of 32
        const float* xs = x.data() + 32 * j;
        const float range = *std::max_element(xs, xs + 32) - std::min(0.0f, *std::min_element(xs, xs + 32));
        const BlockQ5K& b = q5[j / 8];
        uint8_t sc, m;
        q4k_scale_min(j % 8, b.scales, &sc, &m);
        const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
        EXPECT_LE(d * sc, (range + dmin) / 31 + d) << j;
    }
    EXPECT_EQ(y2[40], 0.0f);  // the all-zero sub-block decodes to zero
}

TEST(Quant, Q3KErrorIsWithinOneStepAndUsesEveryLevel) {
    const auto x = kquant_test_row();
    std::vector<BlockQ3K> q(2);
    quantize_row_q3_k(x.data(), q.data(), 512);
    std::vector<float> y(512);
    dequantize_row(TensorType::Q3_K, q.data(), y.data(), 512);
    int levels[8] = {};
    for (int i = 0; i < 512; ++i) {
        const BlockQ3K& b = q[i / 256];
        const int j = (i % 256) / 16;
        const float step = std::fabs(fp16_to_fp32(b.d) * q3k_scale(j, b.scales));
        // Half a step on the side of the sub-block's largest magnitude, one step on the other (+4 clips to 3).
        EXPECT_LE(std::fabs(x[i] - y[i]), step * 1.001f + 1e-6f) << i;
        if (step > 0) ++levels[static_cast<int>(std::lround(y[i] / (fp16_to_fp32(b.d) * q3k_scale(j, b.scales)))) + 4];
    }
    for (int l = 0; l < 8; ++l) EXPECT_GT(levels[l], 0) << "level " << l - 4;
}

TEST(Quant, KQuantBlockLayoutsMatchGgml) {
    // Hand-built blocks whose decoded values follow from ggml's layout (ggml-quants.c dequantize_row_q{2,3,5}_K).
    // Q2_K: d = 1, dmin = 1, sub-block j has scale 1 and min j % 4; weight i stores i % 4 at bits 2·((i%128)/32)
    // of qs[32·(i/128) + i%32].
    BlockQ2K b2{};
    b2.d = fp32_to_fp16(1.0f);
    b2.dmin = fp32_to_fp16(1.0f);
    for (int j = 0; j < 16; ++j) b2.scales[j] = static_cast<uint8_t>(1 | ((j % 4) << 4));
    for (int i = 0; i < 256; ++i)
        b2.qs[32 * (i / 128) + i % 32] |= static_cast<uint8_t>((i % 4) << (2 * ((i % 128) / 32)));
    float y[256];
    dequant_block_q2_k(&b2, y);
    for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], float(i % 4 - (i / 16) % 4)) << i;
    // Q3_K: scale codes 32 + s with s = j − 8 spread over the low nibbles and the two-bit high parts; hmask bit
    // i/32 of byte i%32 set for even i (no −4 offset), low bits 1.
    BlockQ3K b3{};
    b3.d = fp32_to_fp16(1.0f);
    for (int j = 0; j < 16; ++j) {
        const int u = 32 + (j - 8);
        if (j < 8)
            b3.scales[j] |= static_cast<uint8_t>(u & 0xF);
        else
            b3.scales[j - 8] |= static_cast<uint8_t>((u & 0xF) << 4);
        b3.scales[8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
    }
    for (int i = 0; i < 256; ++i) {
        b3.qs[32 * (i / 128) + i % 32] |= static_cast<uint8_t>(1 << (2 * ((i % 128) / 32)));
        if (i % 2 == 0) b3.hmask[i % 32] |= static_cast<uint8_t>(1 << (i / 32));
    }
    dequant_block_q3_k(&b3, y);
    for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], float((i / 16 - 8) * (i % 2 == 0 ? 1 : -3))) << i;
    // Q5_K: every scale 1 and min 0 (six-bit codes as Q4_K packs them); weight i = 32j + l holds (l + j) % 32,
    // low nibble in qs[32·(j/2) + l] (high nibble for odd j), fifth bit at bit j of qh[l].
    BlockQ5K b5{};
    b5.d = fp32_to_fp16(1.0f);
    b5.dmin = fp32_to_fp16(1.0f);
    for (int j = 0; j < 4; ++j) b5.scales[j] = 1;
    for (int j = 4; j < 8; ++j) b5.scales[j + 4] = 1;
    for (int j = 0; j < 8; ++j)
        for (int l = 0; l < 32; ++l) {
            const int v = (l + j) % 32;
            b5.qs[32 * (j / 2) + l] |= static_cast<uint8_t>((v & 0xF) << (j % 2 ? 4 : 0));
            b5.qh[l] |= static_cast<uint8_t>((v >> 4) << j);
        }
    dequant_block_q5_k(&b5, y);
    for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], float((i % 32 + i / 32) % 32)) << i;
    // Quantizing the Q2_K and Q5_K values gives them back up to the binary16 rounding of d and dmin.
    for (const auto& [t, block] :
         {std::pair<TensorType, const void*>{TensorType::Q2_K, &b2}, {TensorType::Q5_K, &b5}}) {
        float v[256], w[256];
        dequantize_row(t, block, v, 256);
        std::vector<uint8_t> r(row_bytes(t, 256));
        quantize_row(t, v, r.data(), 256);
        dequantize_row(t, r.data(), w, 256);
        for (int i = 0; i < 256; ++i)
            EXPECT_NEAR(w[i], v[i], 4e-3f * (1 + std::fabs(v[i]))) << type_name(t) << " " << i;
    }
}

TEST(Quant, Q5BlockLayoutMatchesGgml) {
    // One hand-built Q5_1 block: weight j has value j (0..31), d = 1, m = −10. In ggml's layout qs[j] holds
    // the low nibbles of weights j and j+16 and bit j of qh the fifth bit of weight j: weights 16..31 set it.
    BlockQ5_1 b{};
    b.d = fp32_to_fp16(1.0f);
    b.m = fp32_to_fp16(-10.0f);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (j << 4));
    b.qh[2] = 0xFF;
    b.qh[3] = 0xFF;
    float y[32];
    dequant_block_q5_1(&b, y);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], j - 10.0f) << j;
    // The quantizer writes the same block back from those values.
    BlockQ5_1 r{};
    quantize_row_q5_1(y, &r, 32);
    EXPECT_EQ(std::memcmp(r.qs, b.qs, 16), 0);
    EXPECT_EQ(std::memcmp(r.qh, b.qh, 4), 0);
}

}  // namespace
}  // namespace kvsieve
