#pragma once
// SHA-256 (FIPS 180-4), self-contained: for stable identifiers derived from secrets (the server's key owners),
// not for bulk data.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvsieve {

/// The SHA-256 digest of `data` (32 bytes).
std::array<uint8_t, 32> sha256(std::string_view data);

/// The digest as 64 lowercase hexadecimal characters.
std::string sha256_hex(std::string_view data);

}  // namespace kvsieve
