#include "text/bpe_tokenizer.h"

#include <queue>

#include "text/unicode.h"

namespace kvsieve {

namespace {
struct Symbol {
    int prev, next;
    size_t start, len;
};
struct Bigram {
    int rank, left, right;
    size_t len;
    bool operator<(const Bigram& o) const {  // priority_queue pops the largest: lowest rank, then leftmost
        return rank > o.rank || (rank == o.rank && left > o.left);
    }
};
}  // namespace

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
        std::vector<Symbol> sym;
        for (size_t pos = 0; pos < word.size();) {
            const size_t n = std::min(utf8_len(static_cast<uint8_t>(word[pos])), word.size() - pos);
            const int idx = static_cast<int>(sym.size());
            sym.push_back({idx - 1, -1, pos, n});
            if (idx > 0) sym[idx - 1].next = idx;
            pos += n;
        }
        std::priority_queue<Bigram> queue;
        auto try_add = [&](int l, int r) {
            if (l < 0 || r < 0) return;
            const int rk = rank(word.substr(sym[l].start, sym[l].len), word.substr(sym[r].start, sym[r].len));
            if (rk >= 0) queue.push({rk, l, r, sym[l].len + sym[r].len});
        };
        for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
        while (!queue.empty()) {
            const Bigram b = queue.top();
            queue.pop();
            Symbol& L = sym[b.left];
            Symbol& R = sym[b.right];
            if (L.len == 0 || R.len == 0 || L.len + R.len != b.len || L.next != b.right) continue;  // stale
            L.len += R.len;
            R.len = 0;
            L.next = R.next;
            if (R.next >= 0) sym[R.next].prev = b.left;
            try_add(L.prev, b.left);
            try_add(b.left, L.next);
        }
        for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
            const std::string s = word.substr(sym[i].start, sym[i].len);
            const int32_t id = v_.find(s);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
            // Not in the vocabulary: one token per mapped byte where those exist.
            for (size_t p = 0; p < s.size();) {
                const size_t n = utf8_len(static_cast<uint8_t>(s[p]));
                const int32_t bid = v_.find(s.substr(p, n));
                if (bid >= 0) out.push_back(bid);
                else if (v_.unk >= 0) out.push_back(v_.unk);
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
