#pragma once
// Conversions between float32 and the 16-bit float formats (IEEE binary16 and bfloat16), scalar reference.
#include <cstdint>
#include <cstring>

namespace kvsieve {

/// IEEE 754 binary16 → float32 through a 65,536-entry table (exact).
float fp16_to_fp32(uint16_t h);
/// float32 → IEEE binary16, round to nearest even; overflow gives ±inf, NaN stays NaN.
uint16_t fp32_to_fp16(float f);

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
