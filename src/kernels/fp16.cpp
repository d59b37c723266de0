#include "kernels/fp16.h"

#include <cmath>

namespace kvsieve {
namespace {

float half_bits_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: renormalise
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while ((mant & 0x400) == 0);
            bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000 | mant << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

}  // namespace

float fp16_to_fp32_special(uint16_t h) { return half_bits_to_float(h); }

namespace {
/// The binary16 next to finite, non-NaN h towards +∞ (up) or −∞, on the sign-magnitude encoding.
uint16_t fp16_step(uint16_t h, bool up) {
    const bool neg = h & 0x8000u;
    if ((h & 0x7fffu) == 0) return up ? 0x0001 : 0x8001;  // ±0 → the smallest subnormal of the direction
    return (neg == up) ? static_cast<uint16_t>(h - 1) : static_cast<uint16_t>(h + 1);
}

uint16_t fp32_to_fp16_directed(float f, bool up) {
    if (std::isnan(f)) return 0x7e00;
    if (f >= 65504.0f) return 0x7bff;
    if (f <= -65504.0f) return 0xfbff;
    uint16_t h = fp32_to_fp16(f);
    const float back = fp16_to_fp32(h);
    if (up ? back < f : back > f) h = fp16_step(h, up);
    return h;
}
}  // namespace

uint16_t fp32_to_fp16_down(float f) { return fp32_to_fp16_directed(f, false); }

uint16_t fp32_to_fp16_up(float f) { return fp32_to_fp16_directed(f, true); }

uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
    const uint32_t ax = x & 0x7fffffff;
    if (ax > 0x7f800000) return sign | 0x7e00;   // NaN
    if (ax >= 0x477ff000) return sign | 0x7c00;  // overflow (≥ 65520 rounds to inf)
    if (ax < 0x38800000) {                       // subnormal or zero in half
        if (ax < 0x33000000) return sign;        // < 2^-25 rounds to 0
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x7fffff) | 0x800000;
        const int shift = 126 - static_cast<int>(e);  // bring to half subnormal scale (2^-24 units)
        uint32_t r = m >> (shift);
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) ++r;
        return sign | static_cast<uint16_t>(r);
    }
    uint32_t r = ((ax >> 13) - (112u << 10));
    const uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
    return sign | static_cast<uint16_t>(r);
}

}  // namespace kvsieve
