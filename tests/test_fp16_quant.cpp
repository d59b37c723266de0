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

}  // namespace
}  // namespace kvsieve
