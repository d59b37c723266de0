#pragma once
// The Hadamard rotation of a quantized KV cache's stored entries ("attention rotation"): which halves of an entry
// are stored rotated, by which Walsh–Hadamard size, and the transform itself.
#include <cstdint>
#include <string>

namespace kvsieve {

struct KVTypes;  // cache/kv_pool.h

/// --kv-rotate: kAuto rotates a half (keys, values) when its type is block-quantized and the head dimension is a
/// multiple of 64 (llama.cpp's rule for attn_rot_k / attn_rot_v, docs/kv_quant_reference.md); kOn rotates keys and
/// values whatever their types and needs such a head dimension; kOff never rotates.
enum class KVRotateMode { kAuto, kOn, kOff };
/// Parses "auto", "on" or "off"; throws Error naming the value and the three choices otherwise.
KVRotateMode parse_kv_rotate_mode(const std::string& s);
/// "auto", "on", "off".
std::string kv_rotate_mode_name(KVRotateMode m);
/// Whether --kv-rotate can change how a cache of element types `types` stores its entries: true when keys or values
/// are block-quantized (auto and off then differ) or `mode` is kOn (which rotates F16 pages too); false for
/// unquantized types under kAuto or kOff, which both store entries unrotated. Reports (results cells, fidelity
/// tables) record the setting exactly when this is true, so F16 reports keep their settings.
bool kv_rotate_matters(KVRotateMode mode, KVTypes types);

/// How one cache stores its entries: a key k [d] is stored as R_K·k and a value v [d] as R_V·v (then converted to
/// the half's element type), where R = diag(H_n, …, H_n) is block-diagonal over d/n consecutive chunks of n channels
/// and H_n the orthonormal Walsh–Hadamard matrix of kernels/hadamard.h (Sylvester's construction; QuaRot, Ashkboos
/// et al. 2024, arXiv:2404.00456, §4; llama.cpp's llama_mul_mat_hadamard). R = Rᵀ = R⁻¹, so the same call rotates
/// and rotates back, and attention is unchanged in exact arithmetic: (R_K q)·(R_K k) = q·k and
/// Σ_j p_j R_V v_j = R_V Σ_j p_j v_j. Sizes as llama.cpp: keys n_K = the largest power of two ≥ 64 dividing d
/// (64 → 64, 128 → 128, 192 → 64), values n_V = 64. A default-constructed rotation rotates nothing.
class KVRotation {
public:
    KVRotation() = default;
    /// Rotation of a cache of head dimension head_dim whose keys and values are stored as `types`, chosen by `mode`.
    /// Throws Error naming the dimension for kOn with a head dimension that is not a positive multiple of 64.
    static KVRotation choose(KVRotateMode mode, KVTypes types, int head_dim);
    /// An explicit rotation: key_n / value_n the Walsh–Hadamard sizes of keys and values (0: that half is not
    /// rotated). Throws Error unless each nonzero size is a supported power of two (hadamard_supported) dividing
    /// head_dim.
    KVRotation(int head_dim, int key_n, int value_n);

    int head_dim() const { return head_dim_; }
    /// Walsh–Hadamard size of the keys (0: keys stored unrotated).
    int key_n() const { return key_n_; }
    /// Walsh–Hadamard size of the values (0: values stored unrotated).
    int value_n() const { return value_n_; }
    bool keys() const { return key_n_ > 0; }
    bool values() const { return value_n_ > 0; }
    bool any() const { return keys() || values(); }

    /// x ← R_K·x for `rows` rows of head_dim floats, row r at x + r·ld (ld ≥ head_dim): keys before they are
    /// stored, the stored keys back (R_K is its own inverse), and a decode step's queries. Nothing when keys() is
    /// false. O(d log d) per row (fwht_rows), never a matrix product.
    void rotate_keys(float* x, int64_t rows, int64_t ld) const;
    /// x ← R_V·x likewise: values before they are stored, stored values back, and attention outputs back.
    void rotate_values(float* x, int64_t rows, int64_t ld) const;

    /// "none", or e.g. "keys H_64, values H_64" (for errors and statistics).
    std::string describe() const;

    bool operator==(const KVRotation& o) const {
        return head_dim_ == o.head_dim_ && key_n_ == o.key_n_ && value_n_ == o.value_n_;
    }
    bool operator!=(const KVRotation& o) const { return !(*this == o); }

private:
    int head_dim_ = 0, key_n_ = 0, value_n_ = 0;
};

}  // namespace kvsieve
