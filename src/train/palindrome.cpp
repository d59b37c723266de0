#include "train/palindrome.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "text/tokenizer.h"
#include "text/vocab.h"
#include "util/error.h"

namespace kvsieve::train {

namespace {
/// The instruction, written after the list (more than 50 tokens under any of the project's vocabularies).
constexpr const char* kInstruction =
    "Now write the same two-digit numbers again in the opposite order, starting with the last number of the list "
    "and finishing with the first one, so that the list and its copy together read the same forwards and "
    "backwards. Write every number once, as it was written above.";
}  // namespace

namespace {
/// The prompt's two pieces around the list, as tokens: BOS + "Numbers:", and "\n" + instruction + "\nReversed:".
std::pair<std::vector<int32_t>, std::vector<int32_t>> prompt_parts(const Tokenizer& tok) {
    std::vector<int32_t> head = {tok.vocab().bos};
    for (int32_t t : tok.encode("Numbers:", false)) head.push_back(t);
    return {head, tok.encode("\n" + std::string(kInstruction) + "\nReversed:", false)};
}

/// The row's `count` numbers, 10 … 99, drawn from the stream.
std::vector<int> draw_numbers(uint64_t& st, int count = kPalindromeNumbers) {
    std::vector<int> nums(static_cast<size_t>(count));
    for (int& n : nums) n = 10 + static_cast<int>(next_random(st) % 90);
    return nums;
}

/// Appends EOS, checks the length and weighs the tokens from a0 on as the answer.
Sequence finish_row(Sequence s, size_t a0, const Tokenizer& tok, int64_t length, float prompt_weight,
                    float answer_weight, int64_t* answer_begin) {
    s.tokens.push_back(tok.vocab().eos);
    require(static_cast<int64_t>(s.tokens.size()) <= length, "the palindrome task needs ", s.tokens.size(),
            " tokens, more than the row length ", length);
    s.weight.assign(s.tokens.size(), prompt_weight);
    for (size_t i = a0; i < s.tokens.size(); ++i) s.weight[i] = answer_weight;
    if (answer_begin) *answer_begin = static_cast<int64_t>(a0);
    return s;
}
}  // namespace

Sequence palindrome_sequence(const Tokenizer& tok, int64_t length, uint64_t& st, float prompt_weight,
                             float answer_weight, int64_t* answer_begin) {
    const std::vector<int> nums = draw_numbers(st);
    std::string list, reversed;
    for (int i = 0; i < kPalindromeNumbers; ++i) {
        list += " " + std::to_string(nums[i]);
        reversed += " " + std::to_string(nums[kPalindromeNumbers - 1 - i]);
    }
    Sequence s;
    s.tokens.push_back(tok.vocab().bos);
    for (int32_t t : tok.encode("Numbers:" + list + "\n" + std::string(kInstruction) + "\nReversed:", false))
        s.tokens.push_back(t);
    const size_t a0 = s.tokens.size();
    for (int32_t t : tok.encode(reversed, false)) s.tokens.push_back(t);
    return finish_row(std::move(s), a0, tok, length, prompt_weight, answer_weight, answer_begin);
}

namespace {
/// palindrome_number_tokens() for the prompt's pieces already encoded.
std::vector<int32_t> number_tokens(const Vocab& v, const std::vector<int32_t>& head, const std::vector<int32_t>& mid) {
    std::vector<bool> used(v.tokens.size(), false);
    for (int32_t t : head) used.at(static_cast<size_t>(t)) = true;
    for (int32_t t : mid) used.at(static_cast<size_t>(t)) = true;
    std::vector<int32_t> out;
    for (int32_t id = static_cast<int32_t>(v.tokens.size()) - 1; id >= 0 && out.size() < 90; --id) {
        const bool special = id == v.bos || id == v.eos || id == v.unk || id == v.eot || id == v.eom || id == v.pad ||
                             (!v.types.empty() && v.types[static_cast<size_t>(id)] != TokenType::kNormal);
        if (!special && !used[static_cast<size_t>(id)]) out.push_back(id);
    }
    require(out.size() == 90,
            "the palindrome_tokens task needs 90 ordinary token ids outside its prompt; the "
            "vocabulary has ",
            out.size());
    return out;
}
}  // namespace

std::vector<int32_t> palindrome_number_tokens(const Tokenizer& tok) {
    const auto [head, mid] = prompt_parts(tok);
    return number_tokens(tok.vocab(), head, mid);
}

namespace {
Sequence tokens_row(const Tokenizer& tok, int64_t length, uint64_t& st, float prompt_weight, float answer_weight,
                    int64_t* answer_begin, int count) {
    const auto [head, mid] = prompt_parts(tok);
    const std::vector<int32_t> ids = number_tokens(tok.vocab(), head, mid);  // the prompt encoded once per row
    const std::vector<int> nums = draw_numbers(st, count);
    Sequence s;
    s.tokens = head;
    for (int n : nums) s.tokens.push_back(ids[static_cast<size_t>(n - 10)]);
    s.tokens.insert(s.tokens.end(), mid.begin(), mid.end());
    const size_t a0 = s.tokens.size();
    for (auto n = nums.rbegin(); n != nums.rend(); ++n) s.tokens.push_back(ids[static_cast<size_t>(*n - 10)]);
    return finish_row(std::move(s), a0, tok, length, prompt_weight, answer_weight, answer_begin);
}
}  // namespace

int64_t palindrome_gap_tokens(const Tokenizer& tok) { return static_cast<int64_t>(prompt_parts(tok).second.size()); }

Sequence palindrome_tokens_sequence(const Tokenizer& tok, int64_t length, uint64_t& st, float prompt_weight,
                                    float answer_weight, int64_t* answer_begin) {
    return tokens_row(tok, length, st, prompt_weight, answer_weight, answer_begin, kPalindromeNumbers);
}

Sequence palindrome_tokens_mixed_sequence(const Tokenizer& tok, int64_t length, uint64_t& st, float prompt_weight,
                                          float answer_weight, int64_t* answer_begin) {
    const int count = 2 + static_cast<int>(next_random(st) % (kPalindromeNumbers - 1));
    return tokens_row(tok, length, st, prompt_weight, answer_weight, answer_begin, count);
}

void PalindromeTally::add(const Sequence& s, int64_t a0, const std::vector<uint8_t>& hits) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    require(static_cast<int64_t>(hits.size()) == n - 1, "palindrome tally: ", hits.size(), " predictions for a row of ",
            n, " tokens");
    require(a0 >= 1 && a0 < n, "palindrome tally: answer start ", a0, " outside the row of ", n, " tokens");
    // The answer is the list reversed, so it holds the list's numbers with their multiplicities; EOS ends it.
    const std::vector<int32_t> answer(s.tokens.begin() + a0, s.tokens.end() - 1);
    const size_t len = answer.size() + 1;
    if (hits_at.size() < len) {
        hits_at.resize(len, 0);
        count_at.resize(len, 0);
    }
    // repeated[k]: answer k's number occurs more than once; the cue of answer k is answer k − 1.
    std::vector<bool> repeated(answer.size());
    for (size_t k = 0; k < answer.size(); ++k) repeated[k] = std::count(answer.begin(), answer.end(), answer[k]) > 1;
    for (size_t k = 0; k < len; ++k) {
        const bool ok = hits[static_cast<size_t>(a0) + k - 1] != 0;
        hits_at[k] += ok;
        ++count_at[k];
        if (k == answer.size()) continue;  // EOS
        (repeated[k] ? own_repeated_hits : own_unique_hits) += ok;
        ++(repeated[k] ? own_repeated_count : own_unique_count);
        if (k == 0) continue;
        (repeated[k - 1] ? repeated_hits : unique_hits) += ok;
        ++(repeated[k - 1] ? repeated_count : unique_count);
    }
}

nlohmann::json PalindromeTally::to_json(const std::string& prefix) const {
    auto acc = [](int64_t h, int64_t c) {
        return c ? nlohmann::json(static_cast<double>(h) / static_cast<double>(c)) : nlohmann::json();
    };
    nlohmann::json by = nlohmann::json::array();
    for (size_t k = 0; k < hits_at.size(); ++k) by.push_back(acc(hits_at[k], count_at[k]));
    return {{prefix + "unique_cue", acc(unique_hits, unique_count)},
            {prefix + "repeated_cue", acc(repeated_hits, repeated_count)},
            {prefix + "unique_number", acc(own_unique_hits, own_unique_count)},
            {prefix + "repeated_number", acc(own_repeated_hits, own_repeated_count)},
            {prefix + "by_index", by}};
}

}  // namespace kvsieve::train
