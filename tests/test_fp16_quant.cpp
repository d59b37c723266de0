// Float conversions and quantizers against their definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/fp16.h"
#include "kernels/quant.h"

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
    EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie → even
    EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie → even (up)
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);   // rounds to infinity
    EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie with zero → even
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
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
