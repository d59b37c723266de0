#pragma once
// The rotary position embedding of a model, as data: what a KV policy needs to rotate a vector to a position
// exactly as the forward does (model/rope.h builds it), without depending on the model layer.
#include <cstdint>

namespace kvsieve {

/// RoPE (Su et al. 2021): pair i < n_rot/2 of a head vector is rotated by θ_i(p) = p · pos_scale · inv_freq[i]
/// at position p; pair i is (2i, 2i+1) (adjacent, llama) or (i, i + n_rot/2) (halves, neox); dimensions
/// n_rot … d−1 are not rotated. inv_freq already holds base^(−2i/n_rot) divided by any frequency factor (Llama 3.1).
struct RopeAngles {
    int n_rot = 0;
    bool neox = false;
    double pos_scale = 1.0;            ///< linear position scaling (1 / rope.scaling.factor)
    const double* inv_freq = nullptr;  ///< [n_rot/2]; owned by the model's Rope
    /// The two dimensions of pair i.
    int first(int i) const { return neox ? i : 2 * i; }
    int second(int i) const { return neox ? i + n_rot / 2 : 2 * i + 1; }
    /// θ_i(p) in radians.
    double theta(int64_t p, int i) const { return static_cast<double>(p) * pos_scale * inv_freq[i]; }
};

}  // namespace kvsieve
