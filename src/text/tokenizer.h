#pragma once
#include <utility>
// Text ↔ token ids for the vocabularies a GGUF file carries.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "text/vocab.h"

namespace kvsieve {

class GGUFFile;

/// Base of the two tokenizer families. It splits text around special tokens, adds BOS/EOS and decodes;
/// subclasses encode plain text fragments and map tokens back to bytes.
class Tokenizer {
public:
    explicit Tokenizer(Vocab v);
    virtual ~Tokenizer() = default;

    /// Encodes UTF-8 text. add_special: prepend BOS / append EOS as the vocabulary asks
    /// (tokenizer.ggml.add_bos_token / add_eos_token). parse_special: text equal to a CONTROL token
    /// (e.g. "<|im_start|>") becomes that token; USER_DEFINED tokens are always matched (as llama.cpp does).
    /// Throws Error if text is not valid UTF-8 (BPE vocabularies).
    std::vector<int32_t> encode(const std::string& text, bool add_special = true, bool parse_special = false) const;
    /// encode(text, add_special, true), except that no CONTROL token is matched in a text that overlaps one of the
    /// byte ranges `plain` ([begin, end), ascending, as ChatText::content): text a client wrote stays plain text
    /// even where it spells a template marker such as "<|im_end|>". Elsewhere the split and every fragment are as
    /// encode() makes them, so a prompt without such text gets the same ids. Throws Error as encode().
    std::vector<int32_t> encode_marked(const std::string& text, const std::vector<std::pair<size_t, size_t>>& plain,
                                       bool add_special = false) const;

    /// Bytes of one token as it appears in generated text (CONTROL tokens give "" unless render_special).
    /// Byte tokens give one raw byte, so a multi-byte character may span several pieces.
    std::string token_to_piece(int32_t id, bool render_special = false) const;
    /// Concatenated pieces.
    std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

    /// True for end-of-generation tokens: EOS, EOT, EOM.
    bool is_eog(int32_t id) const;
    const Vocab& vocab() const { return v_; }

    /// The tokenizer named by tokenizer.ggml.model; throws Error for unknown models or pre-tokenizers.
    static std::unique_ptr<Tokenizer> from_gguf(const GGUFFile& f);

protected:
    /// Appends the ids of a fragment without special tokens. `after_special` is true for the first
    /// fragment and for fragments that follow a special token (SentencePiece adds its space prefix there).
    virtual void encode_fragment(const std::string& text, bool after_special, std::vector<int32_t>& out) const = 0;
    /// Raw bytes of a NORMAL token.
    virtual std::string normal_piece(int32_t id) const = 0;

    Vocab v_;

private:
    std::vector<int32_t> encode_impl(const std::string& text, bool add_special, bool parse_special,
                                     const std::vector<std::pair<size_t, size_t>>* plain) const;
    std::vector<int32_t> special_ids_;  // CONTROL and USER_DEFINED tokens, longest text first
};

}  // namespace kvsieve
