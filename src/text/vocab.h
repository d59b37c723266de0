#pragma once
// A tokenizer vocabulary as stored in GGUF metadata (tokenizer.ggml.*).
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvsieve {

class GGUFFile;

/// Token types of tokenizer.ggml.token_type (llama.cpp / SentencePiece numbering).
enum class TokenType : int32_t {
    kUndefined = 0,
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
};

/// Token strings, scores and types with the special ids and flags that drive encoding.
struct Vocab {
    std::string model;  ///< tokenizer.ggml.model: "llama" (SentencePiece-style) or "gpt2" (byte-level BPE)
    std::string pre;    ///< tokenizer.ggml.pre ("default" when absent)
    std::vector<std::string> tokens;
    std::vector<float> scores;                             ///< empty entries are 0
    std::vector<TokenType> types;                          ///< kNormal when absent
    std::unordered_map<std::string, int32_t> token_to_id;  ///< last id wins on duplicate strings
    std::unordered_map<std::string, int32_t> merge_rank;   ///< "left right" → rank (BPE)

    int32_t bos = -1, eos = -1, unk = -1, eot = -1, eom = -1, pad = -1;
    bool add_bos = false;
    bool add_eos = false;
    bool add_space_prefix = true;

    int32_t size() const { return static_cast<int32_t>(tokens.size()); }
    /// Id of a token string, or −1.
    int32_t find(const std::string& s) const;

    /// Reads tokenizer.ggml.* keys; throws Error for a missing token list, arrays of different lengths,
    /// special ids outside the vocabulary, or an unknown tokenizer model.
    static Vocab from_gguf(const GGUFFile& f);
};

}  // namespace kvsieve
