#include "text/bpe_tokenizer.h"

#include "text/pair_merge.h"
#include "text/unicode.h"

namespace kvsieve {

BpeTokenizer::BpeTokenizer(Vocab v) : Tokenizer(std::move(v)), pre_(PreTokenizer::for_name(v_.pre)) {}

int BpeTokenizer::rank(const std::string& left, const std::string& right) const {
    auto it = v_.merge_rank.find(left + " " + right);
    return it == v_.merge_rank.end() ? -1 : it->second;
}

void BpeTokenizer::encode_fragment(const std::string& text, bool, std::vector<int32_t>& out) const {
    for (const std::string& piece : pre_.split(text)) {
        std::string word;
        for (unsigned char c : piece) word += byte_to_unicode(c);
        if (pre_.ignore_merges()) {
            const int32_t id = v_.find(word);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
        }
        const auto pieces = merge_pairs(word, [this](std::string_view l, std::string_view r) -> std::optional<double> {
            const int rk = rank(std::string(l), std::string(r));
            if (rk < 0) return std::nullopt;
            return -static_cast<double>(rk);
        });
        for (const std::string& s : pieces) {
            const int32_t id = v_.find(s);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
            // Not in the vocabulary: one token per mapped byte where those exist.
            for (size_t p = 0; p < s.size();) {
                const size_t n = utf8_len(static_cast<uint8_t>(s[p]));
                const int32_t bid = v_.find(s.substr(p, n));
                if (bid >= 0)
                    out.push_back(bid);
                else if (v_.unk >= 0)
                    out.push_back(v_.unk);
                p += n;
            }
        }
    }
}

std::string BpeTokenizer::normal_piece(int32_t id) const {
    const std::string& t = v_.tokens[id];
    std::string s;
    for (size_t pos = 0; pos < t.size();) {
        const size_t before = pos;
        const uint32_t cp = utf8_decode(t, pos);
        const int b = unicode_to_byte(cp);
        if (b >= 0)
            s += static_cast<char>(b);
        else
            s.append(t, before, pos - before);  // not a mapped byte: keep the text as it is
    }
    return s;
}

}  // namespace kvsieve
