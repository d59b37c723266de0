#pragma once
// An independent reading of ggml's Q8_0 / Q4_0 block layouts, for tests that check what kvsieve stores without going
// through kvsieve's own dequantization.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cache/kv_pool.h"
#include "kernels/fp16.h"

namespace kvsieve::test {

/// Dequantizes one stored row of n elements (n a multiple of 32) from its bytes by the block layout itself: per block
/// of 32, a binary16 scale d, then 32 int8 q (Q8_0, 34 bytes: x = d·q) or 16 bytes of nibbles with element j in the
/// low and element j+16 in the high nibble of byte j (Q4_0, 18 bytes: x = d·(q − 8)). When `scale` is given it
/// receives each element's block scale |d|.
inline std::vector<float> decode_block_row(KVType t, const uint8_t* p, int n, std::vector<float>* scale = nullptr) {
    std::vector<float> y(n);
    if (scale) scale->assign(n, 0.0f);
    const size_t bb = t == KVType::kQ8_0 ? 34 : 18;
    for (int b = 0; b < n / 32; ++b) {
        const uint8_t* blk = p + b * bb;
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const float d = fp16_to_fp32(dh);
        for (int j = 0; j < 32; ++j) {
            if (scale) (*scale)[b * 32 + j] = std::fabs(d);
            if (t == KVType::kQ8_0) {
                y[b * 32 + j] = d * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
            } else {
                const uint8_t byte = blk[2 + (j % 16)];
                const int q = j < 16 ? (byte & 0xF) : (byte >> 4);
                y[b * 32 + j] = d * static_cast<float>(q - 8);
            }
        }
    }
    return y;
}

}  // namespace kvsieve::test
