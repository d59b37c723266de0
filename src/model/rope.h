#pragma once
// Rotary position embedding (Su et al. 2021, RoFormer eq. 34): each pair of dimensions (a, b) of a
// query or key at position p is rotated by θ_i = p · base^(−2i/n_rot) / f_i, where f_i are Llama 3.1
// frequency factors (1 when absent). Dimensions beyond n_rot pass unchanged.
#include <cstdint>
#include <vector>

#include "kernels/rope_angles.h"

#include "io/model_config.h"

namespace kvsieve {

/// Inverse frequencies of one model, and the cos/sin tables of a run of positions.
class Rope {
public:
    /// freq_factors: [n_rot/2] or empty.
    Rope(const ModelConfig& c, const std::vector<float>& freq_factors);

    /// cos/sin of θ for positions pos0 … pos0+T−1: [T][n_rot/2] each.
    struct Table {
        int64_t T = 0;
        std::vector<float> cos, sin;
    };
    Table table(int64_t pos0, int64_t T) const;
    /// Appends the rows of positions pos0 … pos0 + T − 1 to `t` (t.T grows by T; its vectors keep their capacity).
    void append_table(int64_t pos0, int64_t T, Table& t) const;

    /// Rotates x [T][n_heads][head_dim] in place with the table's angles, pairing dimensions as the
    /// model's layout says (adjacent pairs or halves).
    void apply(const Table& tab, float* x, int n_heads) const;

    /// The same rotation as data for KV policies (valid while this Rope lives).
    RopeAngles angles() const {
        return {n_rot_, layout_ == RopeLayout::kNeox, static_cast<double>(pos_scale_), inv_freq_.data()};
    }

private:
    int head_dim_, n_rot_;
    RopeLayout layout_;
    float pos_scale_;
    std::vector<double> inv_freq_;  // [n_rot/2]
};

}  // namespace kvsieve
