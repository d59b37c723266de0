#include "text/utf8_stream.h"

#include "text/unicode.h"

namespace kvsieve {

namespace {
const char* kReplacement = "\xEF\xBF\xBD";
bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }
}  // namespace

std::string Utf8Stream::push(const std::string& bytes) {
    pending_ += bytes;
    std::string out;
    size_t i = 0;
    while (i < pending_.size()) {
        const auto c = static_cast<unsigned char>(pending_[i]);
        if (c < 0x80) {
            out += pending_[i++];
            continue;
        }
        const size_t n = utf8_len(c);
        if (n == 1) {  // stray continuation or invalid lead byte
            out += kReplacement;
            ++i;
            continue;
        }
        size_t k = 1;
        while (k < n && i + k < pending_.size() && is_cont(static_cast<unsigned char>(pending_[i + k]))) ++k;
        if (k == n) {
            std::string seq = pending_.substr(i, n);
            out += utf8_valid(seq) ? seq : std::string(kReplacement);
            i += n;
        } else if (i + k == pending_.size()) {
            break;  // incomplete: wait for more bytes
        } else {
            out += kReplacement;  // interrupted sequence
            i += k;
        }
    }
    pending_.erase(0, i);
    return out;
}

std::string Utf8Stream::finish() {
    std::string out = pending_.empty() ? "" : kReplacement;
    pending_.clear();
    return out;
}

}  // namespace kvsieve
