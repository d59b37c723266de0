// RoPE against its definition (RoFormer eq. 34), written out independently in float64.
#include <gtest/gtest.h>

#include <cmath>

#include "model/rope.h"

namespace kvsieve {
namespace {

std::vector<float> rotate_reference(const std::vector<float>& x, int64_t pos, int d, int n_rot, double base, bool neox,
                                    const std::vector<float>& factors, double pos_scale) {
    std::vector<float> y = x;
    for (int i = 0; i < n_rot / 2; ++i) {
        double theta = pos * pos_scale * std::pow(base, -2.0 * i / n_rot);
        if (!factors.empty()) theta /= factors[i];
        const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
        y[a] = static_cast<float>(x[a] * std::cos(theta) - x[b] * std::sin(theta));
        y[b] = static_cast<float>(x[a] * std::sin(theta) + x[b] * std::cos(theta));
    }
    (void)d;
    return y;
}

TEST(Rope, BothLayoutsPartialRotationFrequencyFactorsAndLinearScaling) {
    for (bool neox : {false, true})
        for (bool factors : {false, true})
            for (float scale : {1.0f, 0.25f}) {
                ModelConfig c;
                c.head_dim = 16;
                c.n_rot = 12;  // partial: the last 4 dimensions pass unchanged
                c.rope_base = 5e5f;
                c.rope_layout = neox ? RopeLayout::kNeox : RopeLayout::kNormal;
                c.rope_linear_scale = scale;
                std::vector<float> ff;
                if (factors) ff = {1, 1, 2, 4, 8, 8};
                Rope rope(c, ff);
                const int64_t pos0 = 1000, T = 3;
                std::vector<float> x(T * 2 * 16);
                for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7 * i) + 0.1f;
                std::vector<float> y = x;
                rope.apply(rope.table(pos0, T), y.data(), 2);
                for (int64_t t = 0; t < T; ++t)
                    for (int h = 0; h < 2; ++h) {
                        std::vector<float> v(x.begin() + (t * 2 + h) * 16, x.begin() + (t * 2 + h + 1) * 16);
                        const auto want = rotate_reference(v, pos0 + t, 16, 12, 5e5, neox, ff, scale);
                        for (int k = 0; k < 16; ++k)
                            EXPECT_NEAR(y[(t * 2 + h) * 16 + k], want[k], 2e-5)
                                << "neox=" << neox << " factors=" << factors << " scale=" << scale << " k=" << k;
                    }
            }
}

TEST(Rope, RotationPreservesNormAndRelativePosition) {
    ModelConfig c;
    c.head_dim = c.n_rot = 8;
    c.rope_base = 1e4f;
    Rope rope(c, {});
    std::vector<float> q{1, 2, 3, 4, 5, 6, 7, 8}, k{0.5f, -1, 2, 0, 1, 1, -2, 3};
    // q·k after rotating q at m and k at n depends only on m − n.
    auto dot_at = [&](int64_t m, int64_t n) {
        auto a = q, b = k;
        rope.apply(rope.table(m, 1), a.data(), 1);
        rope.apply(rope.table(n, 1), b.data(), 1);
        double s = 0;
        for (int i = 0; i < 8; ++i) s += double(a[i]) * b[i];
        return s;
    };
    EXPECT_NEAR(dot_at(10, 3), dot_at(107, 100), 1e-4);
    auto a = q;
    rope.apply(rope.table(12345, 1), a.data(), 1);
    double n0 = 0, n1 = 0;
    for (int i = 0; i < 8; ++i) n0 += q[i] * q[i], n1 += a[i] * a[i];
    EXPECT_NEAR(n0, n1, 1e-3);
}

}  // namespace
}  // namespace kvsieve
