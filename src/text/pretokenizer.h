#pragma once
// Regex pre-tokenization for byte-level BPE vocabularies (tokenizer.ggml.pre), on PCRE2 with UTF + UCP.
#include <memory>
#include <string>
#include <vector>

namespace kvsieve {

/// A sequence of regular expressions applied one after another, as Hugging Face's Sequence of Split
/// pre-tokenizers with behaviour "isolated": each regex splits every piece produced so far into its
/// matches and the text between them (both kept). Works on byte offsets of UTF-8 text.
class PreTokenizer {
public:
    /// The regexes for a tokenizer.ggml.pre name (default/gpt-2, llama-bpe/llama3, qwen2, deepseek-llm,
    /// deepseek-coder, falcon, starcoder, refact, mpt, ...); throws Error for an unknown name.
    static PreTokenizer for_name(const std::string& pre);
    explicit PreTokenizer(const std::vector<std::string>& regexes);
    ~PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;

    /// Pieces of text in order; throws Error if text is not valid UTF-8. Safe to call from several threads at once.
    std::vector<std::string> split(const std::string& text) const;
    /// True for pre-tokenizers whose whole-word vocabulary hits bypass the merges (Llama 3).
    bool ignore_merges() const { return ignore_merges_; }

private:
    struct Compiled;
    std::vector<std::unique_ptr<Compiled>> re_;
    bool ignore_merges_ = false;
};

}  // namespace kvsieve
