#pragma once
// Saved cache records in the layouts of earlier versions, written by hand from a current one, for tests that check
// old records still load.
#include <cstdint>
#include <cstring>
#include <string>

#include "util/error.h"

namespace kvsieve::test {

/// The element types as version 1-3 records wrote them: int32 positions of the type enum of those builds, in this
/// order (f32 0, f16 1, bf16 2, q8_0 3, q4_0 4).
inline int32_t legacy_type_position(const std::string& name) {
    const char* names[] = {"f32", "f16", "bf16", "q8_0", "q4_0"};
    for (int32_t i = 0; i < 5; ++i)
        if (name == names[i]) return i;
    fail("no version-3 position for KV type '", name, "'");
}

/// A version-4 cache record (KVCache::save: u32 version, int32 L, H, d, then the key, value, local key and local
/// value types as strings — u64 length and bytes — then the rest) rewritten as version 3: the same with each type
/// as its int32 legacy_type_position.
inline std::string record_as_version3(const std::string& v4) {
    uint32_t version;
    std::memcpy(&version, v4.data(), 4);
    if (version != 4) fail("record_as_version3: a version-4 record expected, got version ", version);
    std::string out = v4.substr(0, 4 + 3 * 4);
    const uint32_t three = 3;
    std::memcpy(out.data(), &three, 4);
    size_t at = 4 + 3 * 4;
    for (int i = 0; i < 4; ++i) {
        uint64_t len;
        std::memcpy(&len, v4.data() + at, 8);
        const int32_t pos = legacy_type_position(v4.substr(at + 8, len));
        out.append(reinterpret_cast<const char*>(&pos), 4);
        at += 8 + len;
    }
    return out + v4.substr(at);
}

}  // namespace kvsieve::test
