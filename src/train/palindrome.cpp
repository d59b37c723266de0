#include "train/palindrome.h"

#include <string>
#include <vector>

#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve::train {

namespace {
/// The instruction (more than 50 tokens under any of the project's vocabularies).
constexpr const char* kInstruction =
    "Read the list of two-digit numbers below very carefully, one number after the other, from the first to the "
    "last. When the list ends, write the same numbers again in the opposite order, starting with the last number "
    "of the list and finishing with the first one, so that the list and its copy together read the same forwards "
    "and backwards.";
}  // namespace

Sequence palindrome_sequence(const Tokenizer& tok, int64_t length, uint64_t& st, float prompt_weight,
                             float answer_weight, int64_t* answer_begin) {
    const Vocab& v = tok.vocab();
    std::vector<int> nums(kPalindromeNumbers);
    for (int& n : nums) n = 10 + static_cast<int>(next_random(st) % 90);
    std::string list, reversed;
    for (int i = 0; i < kPalindromeNumbers; ++i) {
        list += " " + std::to_string(nums[i]);
        reversed += " " + std::to_string(nums[kPalindromeNumbers - 1 - i]);
    }
    Sequence s;
    s.tokens.push_back(v.bos);
    for (int32_t t : tok.encode(std::string(kInstruction) + "\nNumbers:" + list + "\nReversed:", false))
        s.tokens.push_back(t);
    const size_t a0 = s.tokens.size();
    for (int32_t t : tok.encode(reversed, false)) s.tokens.push_back(t);
    s.tokens.push_back(v.eos);
    require(static_cast<int64_t>(s.tokens.size()) <= length, "the palindrome task needs ", s.tokens.size(),
            " tokens, more than the row length ", length);
    s.weight.assign(s.tokens.size(), prompt_weight);
    for (size_t i = a0; i < s.tokens.size(); ++i) s.weight[i] = answer_weight;
    if (answer_begin) *answer_begin = static_cast<int64_t>(a0);
    return s;
}

}  // namespace kvsieve::train
