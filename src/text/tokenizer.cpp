#include "text/tokenizer.h"

#include <algorithm>

#include "io/gguf.h"
#include "text/bpe_tokenizer.h"
#include "text/spm_tokenizer.h"
#include "util/error.h"

namespace kvsieve {

Tokenizer::Tokenizer(Vocab v) : v_(std::move(v)) {
    for (int32_t i = 0; i < v_.size(); ++i)
        if ((v_.types[i] == TokenType::kControl || v_.types[i] == TokenType::kUserDefined) && !v_.tokens[i].empty())
            special_ids_.push_back(i);
    std::stable_sort(special_ids_.begin(), special_ids_.end(),
                     [&](int32_t a, int32_t b) { return v_.tokens[a].size() > v_.tokens[b].size(); });
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_special, bool parse_special) const {
    return encode_impl(text, add_special, parse_special, nullptr);
}

std::vector<int32_t> Tokenizer::encode_marked(const std::string& text,
                                              const std::vector<std::pair<size_t, size_t>>& plain,
                                              bool add_special) const {
    return encode_impl(text, add_special, true, &plain);
}

std::vector<int32_t> Tokenizer::encode_impl(const std::string& text, bool add_special, bool parse_special,
                                            const std::vector<std::pair<size_t, size_t>>* plain) const {
    std::vector<int32_t> out;
    if (add_special && v_.add_bos && v_.bos >= 0) out.push_back(v_.bos);
    // Split around special tokens: at each position take the longest special token that matches there.
    std::string frag;
    bool after_special = true;
    auto flush = [&] {
        if (!frag.empty()) {
            encode_fragment(frag, after_special, out);
            after_special = false;
            frag.clear();
        }
    };
    size_t pos = 0, next_plain = 0;  // plain ranges before next_plain end at or before pos
    while (pos < text.size()) {
        while (plain && next_plain < plain->size() && (*plain)[next_plain].second <= pos) ++next_plain;
        int32_t hit = -1;
        for (int32_t id : special_ids_) {
            if (!parse_special && v_.types[id] == TokenType::kControl) continue;
            const std::string& s = v_.tokens[id];
            // A CONTROL token that would take a byte of a plain range is not one.
            if (plain && next_plain < plain->size() && v_.types[id] == TokenType::kControl &&
                (*plain)[next_plain].first < pos + s.size())
                continue;
            if (text.compare(pos, s.size(), s) == 0) {
                hit = id;
                break;
            }
        }
        if (hit >= 0) {
            flush();
            out.push_back(hit);
            after_special = true;
            pos += v_.tokens[hit].size();
        } else {
            frag += text[pos++];
        }
    }
    flush();
    if (add_special && v_.add_eos && v_.eos >= 0) out.push_back(v_.eos);
    return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
    require(id >= 0 && id < v_.size(), "token id ", id, " is outside the vocabulary of ", v_.size());
    switch (v_.types[id]) {
        case TokenType::kControl:
        case TokenType::kUnknown:
        case TokenType::kUnused: return render_special ? v_.tokens[id] : std::string();
        case TokenType::kUserDefined: return v_.tokens[id];
        default: return normal_piece(id);
    }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
    std::string s;
    for (int32_t id : ids) s += token_to_piece(id, render_special);
    return s;
}

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && (id == v_.eos || id == v_.eot || id == v_.eom); }

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GGUFFile& f) {
    Vocab v = Vocab::from_gguf(f);
    if (v.model == "llama") return std::make_unique<SpmTokenizer>(std::move(v));
    return std::make_unique<BpeTokenizer>(std::move(v));
}

}  // namespace kvsieve
