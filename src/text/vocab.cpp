#include "text/vocab.h"

#include "io/gguf.h"
#include "util/error.h"

namespace kvsieve {

int32_t Vocab::find(const std::string& s) const {
    auto it = token_to_id.find(s);
    return it == token_to_id.end() ? -1 : it->second;
}

Vocab Vocab::from_gguf(const GGUFFile& f) {
    Vocab v;
    v.model = f.get_string("tokenizer.ggml.model");
    if (v.model != "llama" && v.model != "gpt2")
        fail(f.path(), ": tokenizer model '", v.model, "' is not supported (llama or gpt2)");
    v.pre = f.get_string("tokenizer.ggml.pre", "default");
    v.tokens = f.get_string_array("tokenizer.ggml.tokens");
    const size_t n = v.tokens.size();
    require(n > 0, f.path(), ": empty token list");
    if (f.has("tokenizer.ggml.scores")) {
        v.scores = f.get_float_array("tokenizer.ggml.scores");
        require(v.scores.size() == n, f.path(), ": ", v.scores.size(), " scores for ", n, " tokens");
    } else {
        v.scores.assign(n, 0.0f);
    }
    if (f.has("tokenizer.ggml.token_type")) {
        const auto t = f.get_int_array("tokenizer.ggml.token_type");
        require(t.size() == n, f.path(), ": ", t.size(), " token types for ", n, " tokens");
        v.types.reserve(n);
        for (int32_t x : t) v.types.push_back(static_cast<TokenType>(x));
    } else {
        v.types.assign(n, TokenType::kNormal);
    }
    v.token_to_id.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) v.token_to_id[v.tokens[i]] = static_cast<int32_t>(i);
    if (f.has("tokenizer.ggml.merges")) {
        const auto merges = f.get_string_array("tokenizer.ggml.merges");
        v.merge_rank.reserve(merges.size() * 2);
        for (size_t i = 0; i < merges.size(); ++i) v.merge_rank.emplace(merges[i], static_cast<int32_t>(i));
    }
    require(v.model != "gpt2" || !v.merge_rank.empty(), f.path(), ": BPE vocabulary without tokenizer.ggml.merges");

    auto special = [&](const char* key, int32_t def) -> int32_t {
        const int64_t id = f.get_int(key, def);
        if (id == 0xFFFFFFFFll || id < 0) return -1;  // "none"
        require(id < static_cast<int64_t>(n), f.path(), ": ", key, " = ", id, " is outside the vocabulary of ", n);
        return static_cast<int32_t>(id);
    };
    const bool spm = v.model == "llama";
    v.bos = special("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
    v.eos = special("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
    v.unk = special("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
    v.eot = special("tokenizer.ggml.eot_token_id", -1);
    v.eom = special("tokenizer.ggml.eom_token_id", -1);
    v.pad = special("tokenizer.ggml.padding_token_id", -1);
    v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", spm);
    v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token", false);
    v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", spm);
    return v;
}

}  // namespace kvsieve
