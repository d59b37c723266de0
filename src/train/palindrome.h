#pragma once
// The palindrome-reversal task of SP-KV App. G (Szilvasy, Faysse et al.): a fixed instruction of more than 50
// tokens, a list of random two-digit numbers, then the list reversed. Only the reversed list carries the loss.
// Reversal needs every number at a distance that grows to the whole list, so a sliding window of w tokens
// cannot answer beyond its reach (its loss stays near ln 100 per number), while full attention and SP-KV with
// the same window (keeping the numbers, dropping the instruction) can.
#include <cstdint>
#include <vector>

#include "train/data.h"

namespace kvsieve::train {

/// Numbers per row (App. G).
inline constexpr int kPalindromeNumbers = 32;

/// BOS, the instruction, "\nNumbers:" and 32 numbers " 10" … " 99", "\nReversed:" and the same numbers in reverse
/// order, then EOS. The reversed numbers and EOS weigh `answer_weight`, everything else `prompt_weight`.
/// *answer_begin (if set) receives the index of the first answer token. Throws Error if the row does not fit in
/// `length` tokens (about 230 with a SentencePiece vocabulary of single digits).
Sequence palindrome_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state, float prompt_weight,
                             float answer_weight, int64_t* answer_begin = nullptr);

/// The same row with every number one token, as App. G's loss of ln 100 per number for a sliding window implies
/// (a vocabulary of single digits spells " 42" in three tokens, and a small model then has to match numbers across
/// three positions before it can reverse them). The numbers 10 … 99 stand for the 90 highest ids of the
/// vocabulary that are neither special nor among the tokens of the instruction and the two headers
/// (palindrome_number_tokens()); a model trained from scratch learns them as symbols. Throws Error if the
/// vocabulary has fewer than 90 such ids or the row does not fit in `length` (about 140 tokens).
Sequence palindrome_tokens_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state, float prompt_weight,
                                    float answer_weight, int64_t* answer_begin = nullptr);

/// palindrome_tokens_sequence() with a list of 2 … 32 numbers (uniform per row): the short lists a small model can
/// reverse first, on the way to 32 (a curriculum within each batch; the evaluation keeps 32).
Sequence palindrome_tokens_mixed_sequence(const Tokenizer& tok, int64_t length, uint64_t& rng_state,
                                          float prompt_weight, float answer_weight, int64_t* answer_begin = nullptr);

/// The 90 token ids of palindrome_tokens_sequence(): element n − 10 stands for the number n.
std::vector<int32_t> palindrome_number_tokens(const Tokenizer& tok);

}  // namespace kvsieve::train
