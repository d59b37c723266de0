#include "model/rope.h"

#include <cmath>

#include "util/error.h"

namespace kvsieve {

Rope::Rope(const ModelConfig& c, const std::vector<float>& freq_factors)
    : head_dim_(c.head_dim), n_rot_(c.n_rot), layout_(c.rope_layout), pos_scale_(c.rope_linear_scale) {
    const int half = n_rot_ / 2;
    require(freq_factors.empty() || static_cast<int>(freq_factors.size()) == half, "rope_freqs has ",
            freq_factors.size(), " factors, expected ", half);
    inv_freq_.resize(half);
    for (int i = 0; i < half; ++i) {
        double f = std::pow(static_cast<double>(c.rope_base), -2.0 * i / n_rot_);
        if (!freq_factors.empty()) f /= freq_factors[i];
        inv_freq_[i] = f;
    }
}

Rope::Table Rope::table(int64_t pos0, int64_t T) const {
    Table t;
    append_table(pos0, T, t);
    return t;
}

void Rope::append_table(int64_t pos0, int64_t T, Table& t) const {
    const int half = n_rot_ / 2;
    const int64_t r0 = t.T;
    t.T += T;
    t.cos.resize(static_cast<size_t>(t.T * half));
    t.sin.resize(static_cast<size_t>(t.T * half));
    for (int64_t p = 0; p < T; ++p) {
        const double pos = static_cast<double>(pos0 + p) * pos_scale_;
        for (int i = 0; i < half; ++i) {
            const double th = pos * inv_freq_[i];
            t.cos[(r0 + p) * half + i] = static_cast<float>(std::cos(th));
            t.sin[(r0 + p) * half + i] = static_cast<float>(std::sin(th));
        }
    }
}

void Rope::apply(const Table& tab, float* x, int n_heads) const {
    const int half = n_rot_ / 2;
    for (int64_t p = 0; p < tab.T; ++p) {
        const float* cs = tab.cos.data() + p * half;
        const float* sn = tab.sin.data() + p * half;
        for (int h = 0; h < n_heads; ++h) {
            float* v = x + (p * n_heads + h) * head_dim_;
            for (int i = 0; i < half; ++i) {
                const int a = layout_ == RopeLayout::kNormal ? 2 * i : i;
                const int b = layout_ == RopeLayout::kNormal ? 2 * i + 1 : i + half;
                const float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs[i] - x1 * sn[i];
                v[b] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
}

}  // namespace kvsieve
