#pragma once
// SentencePiece-style BPE over scored pieces (tokenizer.ggml.model = "llama").
#include "text/tokenizer.h"

namespace kvsieve {

/// Encodes like SentencePiece's BPE mode as llama.cpp implements it: spaces become U+2581 ("▁"), a "▁" is
/// prepended when add_space_prefix is set, the text starts as one symbol per UTF-8 character, and the
/// adjacent pair whose concatenation is the highest-scoring vocabulary entry is merged repeatedly
/// (leftmost on ties). Symbols left outside the vocabulary fall back to byte tokens "<0xXX>", else <unk>.
class SpmTokenizer : public Tokenizer {
public:
    explicit SpmTokenizer(Vocab v);

protected:
    void encode_fragment(const std::string& text, bool after_special, std::vector<int32_t>& out) const override;
    std::string normal_piece(int32_t id) const override;

private:
    int32_t byte_ids_[256];
};

}  // namespace kvsieve
