#pragma once
// UTF-8 helpers and GPT-2's byte-to-unicode map used by byte-level BPE vocabularies.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvsieve {

/// Length in bytes of the UTF-8 sequence that starts with lead byte c (1 for invalid lead bytes).
size_t utf8_len(uint8_t c);
/// Encodes one code point as UTF-8.
std::string utf8_encode(uint32_t cp);
/// Decodes the code point at s[pos] and advances pos; an invalid sequence yields U+FFFD and advances by 1.
uint32_t utf8_decode(const std::string& s, size_t& pos);
/// True if s is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool utf8_valid(const std::string& s);

/// GPT-2's reversible map of the 256 byte values to printable code points (Radford et al. 2019,
/// openai/gpt-2 encoder.py bytes_to_unicode): bytes 0x21–0x7E, 0xA1–0xAC, 0xAE–0xFF map to themselves,
/// the other 68 to U+0100 onwards in byte order. Returned as UTF-8.
const std::string& byte_to_unicode(uint8_t b);
/// Inverse of byte_to_unicode; −1 for code points outside the map.
int unicode_to_byte(uint32_t cp);

}  // namespace kvsieve
