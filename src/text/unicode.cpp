#include "text/unicode.h"

#include <array>
#include <unordered_map>

namespace kvsieve {

size_t utf8_len(uint8_t c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;
}

std::string utf8_encode(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

uint32_t utf8_decode(const std::string& s, size_t& pos) {
    const auto c = static_cast<uint8_t>(s[pos]);
    const size_t n = utf8_len(c);
    if (n == 1) {
        ++pos;
        return c < 0x80 ? c : 0xFFFD;
    }
    if (pos + n > s.size()) {
        ++pos;
        return 0xFFFD;
    }
    uint32_t cp = c & (0xFF >> (n + 1));
    for (size_t i = 1; i < n; ++i) {
        const auto cc = static_cast<uint8_t>(s[pos + i]);
        if ((cc & 0xC0) != 0x80) {
            ++pos;
            return 0xFFFD;
        }
        cp = cp << 6 | (cc & 0x3F);
    }
    static const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_len[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        ++pos;
        return 0xFFFD;
    }
    pos += n;
    return cp;
}

bool utf8_valid(const std::string& s) {
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t before = pos;
        const uint32_t cp = utf8_decode(s, pos);
        if (cp == 0xFFFD && !(pos - before == 3 && s.compare(before, 3, "\xEF\xBF\xBD") == 0)) return false;
    }
    return true;
}

namespace {
struct ByteMap {
    std::array<std::string, 256> fwd;
    std::unordered_map<uint32_t, int> back;
    ByteMap() {
        int extra = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const uint32_t cp = printable ? static_cast<uint32_t>(b) : 256u + extra++;
            fwd[b] = utf8_encode(cp);
            back[cp] = b;
        }
    }
};
const ByteMap& byte_map() {
    static const ByteMap m;
    return m;
}
}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return byte_map().fwd[b]; }

int unicode_to_byte(uint32_t cp) {
    const auto& m = byte_map().back;
    auto it = m.find(cp);
    return it == m.end() ? -1 : it->second;
}

}  // namespace kvsieve
