#include "cache/kv_rotation.h"

#include "cache/kv_pool.h"
#include "kernels/hadamard.h"
#include "util/error.h"

namespace kvsieve {

KVRotateMode parse_kv_rotate_mode(const std::string& s) {
    if (s == "auto") return KVRotateMode::kAuto;
    if (s == "on") return KVRotateMode::kOn;
    if (s == "off") return KVRotateMode::kOff;
    fail("--kv-rotate: '", s, "' is not one of auto, on, off");
}

std::string kv_rotate_mode_name(KVRotateMode m) {
    switch (m) {
        case KVRotateMode::kAuto: return "auto";
        case KVRotateMode::kOn: return "on";
        case KVRotateMode::kOff: return "off";
    }
    return "?";
}

namespace {
/// llama.cpp's key size: the largest power of two ≥ 64 dividing d (and at most kHadamardMaxDim); 0 if 64 ∤ d.
int key_size(int d) {
    if (d <= 0 || d % 64 != 0) return 0;
    int n = 64;
    while (n * 2 <= kHadamardMaxDim && d % (n * 2) == 0) n *= 2;
    return n;
}
bool quantized(KVType t) { return kv_type_block(t) > 1; }

void rotate(float* x, int64_t rows, int64_t ld, int d, int n) {
    if (n == 0 || rows == 0) return;
    require(x != nullptr && ld >= d, "KV rotation: bad rows (ld ", ld, ", head dimension ", d, ")");
    if (ld == d) {
        fwht_rows(x, rows * (d / n), n, n);
        return;
    }
    for (int64_t r = 0; r < rows; ++r) fwht_rows(x + r * ld, d / n, n, n);
}
}  // namespace

bool kv_rotate_matters(KVRotateMode mode, KVTypes types) { return mode == KVRotateMode::kOn || kv_quantized(types); }

KVRotation KVRotation::choose(KVRotateMode mode, KVTypes types, int head_dim) {
    const int kn = key_size(head_dim);
    switch (mode) {
        case KVRotateMode::kOff: return KVRotation();
        case KVRotateMode::kOn:
            require(kn > 0,
                    "--kv-rotate on needs a head dimension that is a multiple of 64 (Walsh–Hadamard blocks of "
                    "64 channels); this model's head dimension is ",
                    head_dim);
            return KVRotation(head_dim, kn, 64);
        case KVRotateMode::kAuto:
            if (kn == 0) return KVRotation();
            return KVRotation(head_dim, quantized(types.key) ? kn : 0, quantized(types.value) ? 64 : 0);
    }
    return KVRotation();
}

KVRotation::KVRotation(int head_dim, int key_n, int value_n) : head_dim_(head_dim), key_n_(key_n), value_n_(value_n) {
    for (int n : {key_n, value_n})
        require(n == 0 || (hadamard_supported(n) && head_dim > 0 && head_dim % n == 0),
                "KV rotation: a Walsh–Hadamard "
                "size of ",
                n, " does not divide the head dimension ", head_dim, " or is not a power of two up to ",
                kHadamardMaxDim);
}

void KVRotation::rotate_keys(float* x, int64_t rows, int64_t ld) const { rotate(x, rows, ld, head_dim_, key_n_); }
void KVRotation::rotate_values(float* x, int64_t rows, int64_t ld) const { rotate(x, rows, ld, head_dim_, value_n_); }

std::string KVRotation::describe() const {
    if (!any()) return "none";
    std::string s;
    if (keys()) s = "keys H_" + std::to_string(key_n_);
    if (values()) s += std::string(s.empty() ? "" : ", ") + "values H_" + std::to_string(value_n_);
    return s;
}

}  // namespace kvsieve
