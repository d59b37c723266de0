#include "text/spm_tokenizer.h"

#include <cstdio>
#include <queue>

#include "text/unicode.h"

namespace kvsieve {

namespace {
const std::string kSpace = "\xE2\x96\x81";  // U+2581

struct Symbol {
    int prev, next;
    size_t start, len;
};
struct Bigram {
    float score;
    int left, right;
    size_t len;
    bool operator<(const Bigram& o) const {  // priority_queue pops the largest: highest score, then leftmost
        return score < o.score || (score == o.score && left > o.left);
    }
};
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

    std::vector<Symbol> sym;
    for (size_t pos = 0; pos < text.size();) {
        const size_t n = std::min(utf8_len(static_cast<uint8_t>(text[pos])), text.size() - pos);
        const int idx = static_cast<int>(sym.size());
        sym.push_back({idx - 1, -1, pos, n});
        if (idx > 0) sym[idx - 1].next = idx;
        pos += n;
    }

    std::priority_queue<Bigram> queue;
    auto try_add = [&](int l, int r) {
        if (l < 0 || r < 0) return;
        const int32_t id = v_.find(text.substr(sym[l].start, sym[l].len + sym[r].len));
        if (id < 0) return;
        queue.push({v_.scores[id], l, r, sym[l].len + sym[r].len});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
        const Bigram b = queue.top();
        queue.pop();
        Symbol& L = sym[b.left];
        Symbol& R = sym[b.right];
        if (L.len == 0 || R.len == 0 || L.len + R.len != b.len) continue;  // stale
        L.len += R.len;
        R.len = 0;
        L.next = R.next;
        if (R.next >= 0) sym[R.next].prev = b.left;
        try_add(L.prev, b.left);
        try_add(b.left, L.next);
    }

    for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
        const std::string piece = text.substr(sym[i].start, sym[i].len);
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
