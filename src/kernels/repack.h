#pragma once
// Re-laying Q8_0 weights for fast GEMV: GGUF interleaves a binary16 scale with every 32 int8 quants (34-byte
// blocks, unaligned); the "split" layout stores a row's quants contiguously (64-byte aligned, two blocks
// per 512-bit load) followed by its scales (sixteen per 256-bit load). Same information, same precision.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/matmul.h"

namespace kvsieve {

/// Owned bytes aligned to 64.
class AlignedBuffer {
public:
    AlignedBuffer() = default;
    explicit AlignedBuffer(size_t n);
    uint8_t* data() { return p_.get(); }
    const uint8_t* data() const { return p_.get(); }
    size_t size() const { return n_; }

private:
    struct Free {
        void operator()(uint8_t* p) const;
    };
    std::unique_ptr<uint8_t, Free> p_;
    size_t n_ = 0;
};

/// Bytes of one split-Q8_0 row of `cols` weights: 32·nb quants + 2·nb scale bytes, rounded up to 64.
inline size_t split_q8_row_bytes(int64_t cols) {
    const size_t nb = static_cast<size_t>(cols / 32);
    return (nb * (32 + 2) + 63) / 64 * 64;
}
/// Quants of row r (int8 [cols]) and its scales (binary16 [cols/32]).
inline const int8_t* split_q8_quants(const WeightMatrix& W, int64_t r) {
    return reinterpret_cast<const int8_t*>(W.row(r));
}
inline const uint16_t* split_q8_scales(const WeightMatrix& W, int64_t r) {
    return reinterpret_cast<const uint16_t*>(W.row(r) + W.cols);
}

/// Copies a GGUF-layout Q8_0 matrix into `buf` (resized) in the split layout and returns a view of it
/// (type Q8_0, layout kSplitQ8). Multi-threaded. Throws Error if src is not a GGUF-layout Q8_0 matrix.
WeightMatrix repack_q8_0_split(const WeightMatrix& src, AlignedBuffer& buf);

}  // namespace kvsieve
