#pragma once
// Conversions between float32 and the 16-bit float formats (IEEE binary16 and bfloat16), scalar reference.
#include <cstdint>
#include <cstring>

namespace kvsieve {

/// IEEE 754 binary16 → float32 for zeros, subnormals, infinities and NaN (exact).
float fp16_to_fp32_special(uint16_t h);

/// IEEE 754 binary16 → float32 (exact): normal numbers by rebiasing the exponent inline, the rest out of line.
inline float fp16_to_fp32(uint16_t h) {
    const uint32_t em = h & 0x7fffu;
    if (em < 0x0400u || em >= 0x7c00u) return fp16_to_fp32_special(h);
    const uint32_t bits = (static_cast<uint32_t>(h & 0x8000u) << 16) | ((em << 13) + ((127u - 15u) << 23));
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
/// float32 → IEEE binary16, round to nearest even; overflow gives ±inf, NaN stays NaN.
uint16_t fp32_to_fp16(float f);

/// float32 → IEEE binary16 rounded outwards: fp32_to_fp16_down(f) is the largest binary16 ≤ f, fp32_to_fp16_up(f) the
/// smallest ≥ f, both saturating at ±65504 (the largest finite binary16; a value beyond it gives ±65504, which is then
/// not a bound) so that products with zero stay finite. For a lower and an upper bound kept in half the bytes (Quest's
/// per-page key bounds). NaN gives NaN.
uint16_t fp32_to_fp16_down(float f);
uint16_t fp32_to_fp16_up(float f);

/// bfloat16 (upper 16 bits of a float32) → float32 (exact).
inline float bf16_to_fp32(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
/// float32 → bfloat16, round to nearest even (NaN kept quiet).
inline uint16_t fp32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 64);
    u += 0x7fff + ((u >> 16) & 1);
    return static_cast<uint16_t>(u >> 16);
}

}  // namespace kvsieve
