#pragma once
// The palindrome-reversal task of SP-KV App. G (Szilvasy, Faysse et al.): a list of random two-digit numbers, a
// fixed instruction of more than 50 tokens, then the list reversed. Only the reversed list carries the loss.
// The instruction stands between the list and its reversal, so every number lies more than 50 tokens before the
// answer that needs it: a sliding window of w = 32 tokens sees none of the list (its loss stays near the number's
// entropy, ln 90 here), while full attention and SP-KV with the same window (keeping the numbers, dropping the
// instruction) can answer.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/data.h"

namespace kvsieve::train {

/// Numbers per row (App. G).
inline constexpr int kPalindromeNumbers = 32;

/// BOS, "Numbers:" and 32 numbers " 10" … " 99", "\n", the instruction, "\nReversed:" and the same numbers in
/// reverse order, then EOS. The reversed numbers and EOS weigh `answer_weight`, everything else `prompt_weight`.
/// *answer_begin (if set) receives the index of the first answer token. Throws Error if the row does not fit in
/// `length` tokens (about 240 with a SentencePiece vocabulary of single digits).
Sequence palindrome_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state, float prompt_weight,
                             float answer_weight, int64_t* answer_begin = nullptr);

/// The same row with every number one token, as App. G's loss of ln 100 per number for a sliding window implies
/// (a vocabulary of single digits spells " 42" in three tokens, and a small model then has to match numbers across
/// three positions before it can reverse them). The numbers 10 … 99 stand for the 90 highest ids of the
/// vocabulary that are neither special nor among the tokens of the instruction and the two headers
/// (palindrome_number_tokens()); a model trained from scratch learns them as symbols. Throws Error if the
/// vocabulary has fewer than 90 such ids or the row does not fit in `length` (about 150 tokens).
Sequence palindrome_tokens_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state, float prompt_weight,
                                    float answer_weight, int64_t* answer_begin = nullptr);

/// palindrome_tokens_sequence() with a list of 2 … 32 numbers (uniform per row): the short lists a small model can
/// reverse first, on the way to 32 (a curriculum within each batch; the evaluation keeps 32).
Sequence palindrome_tokens_mixed_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state,
                                          float prompt_weight, float answer_weight, int64_t* answer_begin = nullptr);

/// The 90 token ids of palindrome_tokens_sequence(): element n − 10 stands for the number n.
std::vector<int32_t> palindrome_number_tokens(const Tokenizer& tok);

/// Tokens between the last number of the list and the first of the answer (the instruction and the two headers
/// around it) under `tok`: the distance a sliding window would have to span. More than 50 under every vocabulary
/// of the project (App. G's "> 50-token instruction").
int64_t palindrome_gap_tokens(const Tokenizer& tok);

/// Where a model's reversal goes wrong, over rows of the one-token tasks (palindrome_tokens, _mixed), from
/// teacher-forced greedy predictions. Answer k ≥ 1 (the list's number 31 − k) follows answer k − 1, which a
/// content-matching (induction-like) reader looks up in the list to read the number before it: the lookup is
/// ambiguous exactly when that cue occurs more than once in the list (about 29% of cues for 32 numbers drawn
/// from 90 with replacement), and only the position can then tell the copies apart. Answer 0 has no cue but a fixed
/// distance to the list's end.
struct PalindromeTally {
    std::vector<int64_t> hits_at, count_at;         ///< per answer index k (the last one is EOS)
    int64_t unique_hits = 0, unique_count = 0;      ///< answers k ≥ 1 whose cue occurs once in the list
    int64_t repeated_hits = 0, repeated_count = 0;  ///< answers k ≥ 1 whose cue occurs two or more times
    int64_t own_repeated_hits = 0,
            own_repeated_count = 0;                     ///< answers (EOS aside) whose own number occurs twice or more
    int64_t own_unique_hits = 0, own_unique_count = 0;  ///< answers (EOS aside) whose own number occurs once

    /// Adds one row: `s` a row of palindrome_tokens_sequence() or its mixed form, `a0` its first answer token,
    /// `hits[i]` whether the prediction after tokens[0..i] was tokens[i + 1] (size tokens − 1). Throws Error if
    /// the sizes disagree.
    void add(const Sequence& s, int64_t a0, const std::vector<uint8_t>& hits);
    /// {"<prefix>unique_cue", "<prefix>repeated_cue", "<prefix>unique_number", "<prefix>repeated_number": accuracy,
    /// "<prefix>by_index": [accuracy per answer index, EOS last]}; an empty class gives null.
    nlohmann::json to_json(const std::string& prefix) const;
};

}  // namespace kvsieve::train
