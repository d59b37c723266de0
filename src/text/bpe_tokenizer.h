#pragma once
// Byte-level BPE (tokenizer.ggml.model = "gpt2"): GPT-2, Llama 3, Qwen2, DeepSeek, Falcon, StarCoder...
#include "text/pretokenizer.h"
#include "text/tokenizer.h"

namespace kvsieve {

/// Encodes like GPT-2's byte-level BPE (Radford et al. 2019; Sennrich et al. 2016): the text is split by
/// the pre-tokenizer regexes, each piece's bytes are mapped to printable code points, and the adjacent
/// pair with the lowest merge rank is merged repeatedly (leftmost on ties). Llama 3's pre-tokenizer takes
/// pieces that are whole vocabulary entries as they are.
class BpeTokenizer : public Tokenizer {
public:
    explicit BpeTokenizer(Vocab v);

protected:
    void encode_fragment(const std::string& text, bool after_special, std::vector<int32_t>& out) const override;
    std::string normal_piece(int32_t id) const override;

private:
    int rank(const std::string& left, const std::string& right) const;
    PreTokenizer pre_;
};

}  // namespace kvsieve
