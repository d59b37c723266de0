#include "text/spm_tokenizer.h"

#include <cstdio>

#include "text/pair_merge.h"
#include "text/unicode.h"

namespace kvsieve {

namespace {
const std::string kSpace = "\xE2\x96\x81";  // U+2581

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab v) : Tokenizer(std::move(v)) {
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        byte_ids_[b] = v_.find(buf);
    }
}

void SpmTokenizer::encode_fragment(const std::string& raw, bool after_special, std::vector<int32_t>& out) const {
    std::string text;
    if (v_.add_space_prefix && after_special) text = kSpace;
    for (char ch : raw) {
        if (ch == ' ')
            text += kSpace;
        else
            text += ch;
    }

    const auto pieces = merge_pairs(text, [this](std::string_view l, std::string_view r) -> std::optional<double> {
        std::string m(l);
        m += r;
        const int32_t id = v_.find(m);
        if (id < 0) return std::nullopt;
        return v_.scores[id];
    });
    for (const std::string& piece : pieces) {
        const int32_t id = v_.find(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        for (unsigned char c : piece) {
            const int32_t bid = byte_ids_[c];
            if (bid >= 0)
                out.push_back(bid);
            else if (v_.unk >= 0)
                out.push_back(v_.unk);
        }
    }
}

std::string SpmTokenizer::normal_piece(int32_t id) const {
    const std::string& t = v_.tokens[id];
    if (v_.types[id] == TokenType::kByte && t.size() == 6 && t.compare(0, 3, "<0x") == 0)
        return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
    std::string s;
    for (size_t i = 0; i < t.size();) {
        if (t.compare(i, 3, kSpace) == 0) {
            s += ' ';
            i += 3;
        } else {
            s += t[i++];
        }
    }
    return s;
}

}  // namespace kvsieve
