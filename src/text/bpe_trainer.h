#pragma once
// Training a small SentencePiece-style BPE vocabulary (Sennrich et al. 2016, "Neural Machine Translation of
// Rare Words with Subword Units", Alg. 1) that the engine's SPM tokenizer (text/spm_tokenizer.h) encodes with.
#include <cstdint>
#include <string>

#include "text/vocab.h"

namespace kvsieve {

/// Options of the BPE trainer.
struct BpeTrainOptions {
    int vocab_size = 2048;     ///< total entries: <unk> <s> </s>, 256 byte tokens, characters, merges
    int min_char_count = 50;   ///< rarer characters are left to the byte fallback
    bool split_digits = true;  ///< never merge a digit with anything (numbers are one token per digit)
};

/// Learns merges on `text`: words are the runs between spaces and newlines, each prefixed with "▁" (U+2581)
/// as SentencePiece writes a space; merges never cross a word. Each merged token gets score −rank, so the
/// SPM encoder (which merges the adjacent pair whose concatenation has the highest score) replays the merges in
/// the order they were learned. Returns a "llama"-model Vocab with BOS 1, EOS 2, UNK 0, add_bos, add_space_prefix.
/// Throws Error if text is empty or vocab_size cannot hold the byte and character tokens.
Vocab train_bpe_vocab(const std::string& text, const BpeTrainOptions& opt);

}  // namespace kvsieve
