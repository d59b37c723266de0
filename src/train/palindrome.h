#pragma once
// The palindrome-reversal task of SP-KV App. G (Szilvasy, Faysse et al.): a list of random two-digit numbers, a
// fixed instruction of more than 50 tokens, then the list reversed. Only the reversed list carries the loss.
// The instruction stands between the list and its reversal, so every number lies more than 50 tokens before the
// answer that needs it: a sliding window of w = 32 tokens sees none of the list (its loss stays near the number's
// entropy, ln 90 here), while full attention and SP-KV with the same window (keeping the numbers, dropping the
// instruction) can answer.
#include <cstdint>
#include <vector>

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

}  // namespace kvsieve::train
