#include "text/bpe_trainer.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_map>
#include <vector>

#include "text/unicode.h"
#include "util/error.h"

namespace kvsieve {

namespace {
const std::string kSpace = "\xE2\x96\x81";  // U+2581

/// Splits UTF-8 into characters (invalid bytes become single-byte pieces).
std::vector<std::string> utf8_chars(const std::string& s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
        size_t n = utf8_len(static_cast<uint8_t>(s[i]));
        if (i + n > s.size()) n = 1;
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

bool has_digit(const std::string& s) {
    return std::any_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
}  // namespace

namespace {
/// Word counts of the training text: words are split at ' ' and '\n' (each word with the space prefix); a newline is
/// its own word.
std::unordered_map<std::string, int64_t> count_words(const std::string& text) {
    std::unordered_map<std::string, int64_t> word_count;
    std::string w;
    auto flush = [&] {
        if (!w.empty()) ++word_count[kSpace + w];
        w.clear();
    };
    for (char ch : text) {
        if (ch == ' ') {
            flush();
        } else if (ch == '\n') {
            flush();
            ++word_count["\n"];
        } else {
            w += ch;
        }
    }
    flush();
    return word_count;
}

void add_token(Vocab& v, const std::string& t, float score, TokenType ty) {
    v.tokens.push_back(t);
    v.scores.push_back(score);
    v.types.push_back(ty);
}

/// The vocabulary's first entries: <unk>, <s>, </s>, the 256 byte tokens, then every character seen at least
/// min_char_count times (newline aside), most frequent first, scored never to be preferred over a merge. Throws Error
/// when they leave no room in vocab_size.
void add_base_tokens(Vocab& v, const std::map<std::string, int64_t>& char_count, const BpeTrainOptions& opt) {
    add_token(v, "<unk>", 0, TokenType::kUnknown);
    add_token(v, "<s>", 0, TokenType::kControl);
    add_token(v, "</s>", 0, TokenType::kControl);
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        add_token(v, buf, 0, TokenType::kByte);
    }
    std::vector<std::pair<int64_t, std::string>> chars;
    for (const auto& [ch, c] : char_count)
        if (c >= opt.min_char_count && ch != "\n") chars.emplace_back(c, ch);
    std::sort(chars.begin(), chars.end(), std::greater<>());
    require(static_cast<int>(v.tokens.size() + chars.size()) < opt.vocab_size, "a BPE vocabulary of ", opt.vocab_size,
            " entries cannot hold the 259 special and byte tokens and ", chars.size(), " characters");
    for (const auto& [c, ch] : chars) add_token(v, ch, -1e9f, TokenType::kNormal);  // never preferred over a merge
}

/// The symbols of the merges: each string's id, interned in order of first use.
struct Symbols {
    std::vector<std::string> str;
    std::unordered_map<std::string, int> id;
    int intern(const std::string& s) {
        auto it = id.find(s);
        if (it != id.end()) return it->second;
        str.push_back(s);
        return id[s] = static_cast<int>(str.size()) - 1;
    }
};

/// A word of the training text as symbols, and how often it occurs.
struct Word {
    std::vector<int> sym;
    int64_t count;
};

/// The most frequent adjacent pair of mergeable symbols (ties: the lowest pair), as (a << 32 | b), and its count;
/// count −1 when there is none.
std::pair<uint64_t, int64_t> best_pair(const std::vector<Word>& words, const std::vector<char>& ok) {
    std::unordered_map<uint64_t, int64_t> pairs;
    for (const auto& w : words)
        for (size_t i = 0; i + 1 < w.sym.size(); ++i)
            if (ok[w.sym[i]] && ok[w.sym[i + 1]])
                pairs[(uint64_t(uint32_t(w.sym[i])) << 32) | uint32_t(w.sym[i + 1])] += w.count;
    uint64_t best = 0;
    int64_t best_c = -1;
    for (const auto& [p, c] : pairs)
        if (c > best_c || (c == best_c && p < best)) best = p, best_c = c;
    return {best, best_c};
}

/// Replaces every adjacent (a, b) of every word by m and drops the words left with one symbol.
void apply_merge(std::vector<Word>& words, int a, int b, int m) {
    for (auto& w : words) {
        std::vector<int> out;
        out.reserve(w.sym.size());
        for (size_t i = 0; i < w.sym.size(); ++i) {
            if (i + 1 < w.sym.size() && w.sym[i] == a && w.sym[i + 1] == b) {
                out.push_back(m);
                ++i;
            } else {
                out.push_back(w.sym[i]);
            }
        }
        w.sym.swap(out);
    }
    words.erase(std::remove_if(words.begin(), words.end(), [](const Word& w) { return w.sym.size() < 2; }),
                words.end());
}
}  // namespace

Vocab train_bpe_vocab(const std::string& text, const BpeTrainOptions& opt) {
    require(!text.empty(), "BPE training text is empty");
    const std::unordered_map<std::string, int64_t> word_count = count_words(text);
    std::map<std::string, int64_t> char_count;  // the character inventory
    for (const auto& [w, c] : word_count)
        for (const auto& ch : utf8_chars(w)) char_count[ch] += c;
    Vocab v;
    v.model = "llama";
    add_base_tokens(v, char_count, opt);
    Symbols syms;
    std::vector<Word> words;
    words.reserve(word_count.size());
    for (const auto& [w, c] : word_count) {
        if (w == "\n") continue;
        Word wd{{}, c};
        for (const auto& ch : utf8_chars(w)) wd.sym.push_back(syms.intern(ch));
        if (wd.sym.size() > 1) words.push_back(std::move(wd));
    }
    // A symbol may merge unless it holds a digit (split_digits) or is a character rare enough to be left to the
    // byte fallback.
    std::vector<char> ok;
    int rank = 0;
    while (static_cast<int>(v.tokens.size()) < opt.vocab_size) {
        while (ok.size() < syms.str.size()) {
            const std::string& s = syms.str[ok.size()];
            const auto it = char_count.find(s);
            const bool rare = it != char_count.end() && it->second < opt.min_char_count;
            ok.push_back(!rare && !(opt.split_digits && has_digit(s)) ? 1 : 0);
        }
        const auto [best, best_c] = best_pair(words, ok);
        if (best_c < 2) break;  // no pair, or none seen twice
        const int a = static_cast<int>(best >> 32), b = static_cast<int>(best & 0xffffffffu);
        const std::string merged = syms.str[a] + syms.str[b];
        const int m = syms.intern(merged);
        add_token(v, merged, -static_cast<float>(rank++), TokenType::kNormal);
        apply_merge(words, a, b, m);
    }
    for (size_t i = 0; i < v.tokens.size(); ++i) v.token_to_id[v.tokens[i]] = static_cast<int32_t>(i);
    v.bos = 1;
    v.eos = 2;
    v.unk = 0;
    v.add_bos = true;
    v.add_space_prefix = true;
    return v;
}

}  // namespace kvsieve
