// Walsh–Hadamard transform (kernels/hadamard.h): against an explicitly built Sylvester matrix, as an involution and
// an orthonormal map, every instruction set against the scalar reference, bad sizes refused, and what it is for:
// smaller Q8_0 reconstruction error on a vector with an outlier channel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/hadamard.h"
#include "kernels/quant.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

using test::randn;

/// H_d built entry by entry from Sylvester's recursion H_2d = [[H_d, H_d], [H_d, −H_d]] (unnormalised, ±1), in
/// double, row-major [d][d].
std::vector<double> sylvester(int d) {
    std::vector<double> h(static_cast<size_t>(d) * d);
    h[0] = 1.0;
    for (int s = 1; s < d; s *= 2)
        for (int i = 0; i < s; ++i)
            for (int j = 0; j < s; ++j) {
                const double v = h[static_cast<size_t>(i) * d + j];
                h[static_cast<size_t>(i) * d + j + s] = v;
                h[static_cast<size_t>(i + s) * d + j] = v;
                h[static_cast<size_t>(i + s) * d + j + s] = -v;
            }
    return h;
}

/// The instruction sets this CPU runs.
std::vector<const HadamardKernels*> runnable_sets() {
    std::vector<const HadamardKernels*> sets = {&hadamard_kernels_scalar()};
    if (cpu_features().has_avx2_set()) sets.push_back(&hadamard_kernels_avx2());
    if (cpu_features().has_avx512_set()) sets.push_back(&hadamard_kernels_avx512());
    return sets;
}

std::vector<int> dims_up_to(int top) {
    std::vector<int> ds;
    for (int d = 1; d <= top; d *= 2) ds.push_back(d);
    return ds;
}

TEST(Hadamard, SupportedSizesArePowersOfTwoUpTo1024) {
    for (int d : dims_up_to(kHadamardMaxDim)) EXPECT_TRUE(hadamard_supported(d)) << d;
    for (int d : {-8, -1, 0, 3, 6, 12, 48, 96, 1023, 2048, 4096}) EXPECT_FALSE(hadamard_supported(d)) << d;
}

TEST(Hadamard, EqualsTheSylvesterMatrixProduct) {
    for (int d : dims_up_to(256)) {
        const std::vector<double> h = sylvester(d);
        const std::vector<float> x = randn(static_cast<size_t>(d), 100 + d);
        for (const HadamardKernels* set : runnable_sets()) {
            std::vector<float> y = x;
            set->rows(y.data(), 1, d, d);
            for (int i = 0; i < d; ++i) {
                double ref = 0;
                for (int j = 0; j < d; ++j) ref += h[static_cast<size_t>(i) * d + j] * x[j];
                ref /= std::sqrt(static_cast<double>(d));
                // float32 butterflies: log2(d) roundings of partial sums bounded by Σ|x_j|
                EXPECT_NEAR(y[i], ref, 1e-6 * (1 + std::log2(d)) * std::sqrt(static_cast<double>(d)))
                    << set->isa << " d=" << d << " i=" << i;
            }
        }
        std::vector<float> y = x;
        fwht(y.data(), d);
        std::vector<float> ref = x;
        hadamard_kernels_scalar().rows(ref.data(), 1, d, d);
        EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), sizeof(float) * d)) << "fwht d=" << d;
    }
}

TEST(Hadamard, TwiceIsTheIdentity) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
    for (int d : dims_up_to(kHadamardMaxDim)) {
        std::vector<float> x(static_cast<size_t>(d));
        for (auto& v : x) v = ud(rng);
        std::vector<float> y = x;
        fwht(y.data(), d);
        fwht(y.data(), d);
        for (int i = 0; i < d; ++i) EXPECT_NEAR(y[i], x[i], 1e-6) << "d=" << d << " i=" << i;
    }
}

TEST(Hadamard, PreservesNormsAndDotProducts) {
    for (int d : dims_up_to(kHadamardMaxDim)) {
        const std::vector<float> x = randn(static_cast<size_t>(d), 1 + d), y = randn(static_cast<size_t>(d), 2 + d);
        std::vector<float> hx = x, hy = y;
        fwht(hx.data(), d);
        fwht(hy.data(), d);
        double nx = 0, nhx = 0, xy = 0, hxhy = 0;
        for (int i = 0; i < d; ++i) {
            nx += static_cast<double>(x[i]) * x[i];
            nhx += static_cast<double>(hx[i]) * hx[i];
            xy += static_cast<double>(x[i]) * y[i];
            hxhy += static_cast<double>(hx[i]) * hy[i];
        }
        EXPECT_NEAR(std::sqrt(nhx), std::sqrt(nx), 1e-6 * std::sqrt(nx)) << "d=" << d;
        // q·k = (Hq)·(Hk): attention scores unchanged by rotating queries and keys alike
        EXPECT_NEAR(hxhy, xy, 1e-6 * d) << "d=" << d;
    }
}

// Each vector set does the reference's additions in the reference's order: bit for bit equal (0 ulp), on strided
// rows whose padding it must leave alone.
TEST(Hadamard, EveryInstructionSetEqualsTheScalarReferenceBitForBit) {
    const auto sets = runnable_sets();
    if (sets.size() == 1) GTEST_SKIP() << "this CPU runs only the scalar set";
    for (int d : dims_up_to(kHadamardMaxDim)) {
        const int64_t rows = 5, ld = d + 3;
        std::vector<float> x = randn(static_cast<size_t>(rows * ld), 300 + d);
        for (int64_t r = 0; r < rows; ++r) x[r * ld + d % 3] *= 40.0f;  // an outlier channel per row
        std::vector<float> ref = x;
        hadamard_kernels_scalar().rows(ref.data(), rows, d, ld);
        for (const HadamardKernels* set : sets) {
            std::vector<float> y = x;
            set->rows(y.data(), rows, d, ld);
            EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), sizeof(float) * y.size())) << set->isa << " d=" << d;
        }
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = d; j < ld; ++j) EXPECT_EQ(ref[r * ld + j], x[r * ld + j]) << "padding changed, d=" << d;
    }
}

TEST(Hadamard, RowsEqualOneRowAtATime) {
    const int d = 64, heads = 3, tokens = 4;  // a [tokens][heads·d] key block, one transform per head
    std::vector<float> x = randn(static_cast<size_t>(tokens * heads * d), 11);
    std::vector<float> one = x;
    for (int r = 0; r < tokens * heads; ++r) fwht(one.data() + r * d, d);
    fwht_rows(x.data(), tokens * heads, d, d);
    EXPECT_EQ(0, std::memcmp(x.data(), one.data(), sizeof(float) * x.size()));
    fwht_rows(nullptr, 0, d, d);  // nothing to do
}

TEST(Hadamard, BadArgumentsAreRefused) {
    std::vector<float> x(4096, 1.0f);
    for (int d : {0, -4, 3, 12, 96, 2048}) {
        try {
            fwht(x.data(), d);
            ADD_FAILURE() << "d=" << d << " accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("not a power of two"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(std::to_string(d)), std::string::npos) << e.what();
        }
        EXPECT_THROW(fwht_rows(x.data(), 1, d, 4096), Error) << d;
    }
    EXPECT_THROW(fwht(nullptr, 64), Error);
    EXPECT_THROW(fwht_rows(nullptr, 2, 64, 64), Error);
    EXPECT_THROW(fwht_rows(x.data(), -1, 64, 64), Error);
    EXPECT_THROW(fwht_rows(x.data(), 2, 64, 32), Error);
    for (float v : x) ASSERT_EQ(v, 1.0f);  // nothing written by a refused call
}

/// ‖x − dequant(quant(x))‖² for Q8_0 blocks, optionally with the rotation: x → H x, quantize, dequantize, → H·(…).
double q8_0_error(const std::vector<float>& x, int d, bool rotate) {
    std::vector<float> y = x;
    if (rotate) fwht(y.data(), d);
    std::vector<BlockQ8_0> q(static_cast<size_t>(d / QK8_0));
    quantize_row_q8_0(y.data(), q.data(), d);
    std::vector<float> back(static_cast<size_t>(d));
    dequantize_row(TensorType::Q8_0, q.data(), back.data(), d);
    if (rotate) fwht(back.data(), d);
    double e = 0;
    for (int i = 0; i < d; ++i) e += (static_cast<double>(back[i]) - x[i]) * (static_cast<double>(back[i]) - x[i]);
    return e;
}

// One outlier channel (30σ, as key channels of LLMs have) sets its Q8_0 block's scale to ~30/127 and costs the
// block's other 31 channels their precision; rotated, the outlier's energy spreads as ±30/√d over all channels, every
// block's scale is ~(3 + 30/√d)/127 and the total squared error drops (expected ratio ~0.1 for d = 128).
TEST(Hadamard, RotationShrinksQ8_0ErrorOfAVectorWithAnOutlierChannel) {
    const int d = 128;
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> channel(0, d - 1);
    double plain = 0, rotated = 0;
    int rotated_wins = 0;
    const int trials = 200;
    for (int t = 0; t < trials; ++t) {
        std::vector<float> x = randn(static_cast<size_t>(d), 1000 + t);
        x[static_cast<size_t>(channel(rng))] = (t % 2 ? 30.0f : -30.0f);
        const double e0 = q8_0_error(x, d, false), e1 = q8_0_error(x, d, true);
        plain += e0;
        rotated += e1;
        rotated_wins += e1 < e0;
    }
    EXPECT_LT(rotated, 0.25 * plain) << "plain " << plain / trials << " rotated " << rotated / trials;
    EXPECT_GE(rotated_wins, trials * 9 / 10);
    // Without an outlier (Gaussian channels) the rotation neither helps nor hurts much: within a factor of 2.
    double g0 = 0, g1 = 0;
    for (int t = 0; t < trials; ++t) {
        const std::vector<float> x = randn(static_cast<size_t>(d), 5000 + t);
        g0 += q8_0_error(x, d, false);
        g1 += q8_0_error(x, d, true);
    }
    EXPECT_LT(g1, 2 * g0);
    EXPECT_LT(g0, 2 * g1);
}

}  // namespace
}  // namespace kvsieve
