// The loop the llama.cpp reference tools share (tools/llamacpp_logits.cpp, tools/llamacpp_logits_kvquant.cpp; not
// part of the kvsieve build): tokenize a prompt, decode it, run llama.cpp's greedy decode recording the top-k logits
// of every step, teacher-force another context on those tokens, and write the results as JSON. Header only, found
// beside the tool that includes it, so each tool still builds with the one g++ command of its header comment.
#pragma once

#include <llama.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

namespace llamacpp_reference {

/// The tools' command line `MODEL N TOPK THREADS PROMPT...`: N greedy steps per prompt, the TOPK logits recorded
/// at each, llama.cpp's thread count. Exits with the usage line (status 2) when a prompt is missing or a number is not
/// positive.
struct Options {
    const char* model = nullptr;
    int n = 0, topk = 0, threads = 0;
};

inline Options parse_options(int argc, char** argv) {
    Options o;
    if (argc >= 6) {
        o.model = argv[1];
        o.n = std::atoi(argv[2]);
        o.topk = std::atoi(argv[3]);
        o.threads = std::atoi(argv[4]);
    }
    if (argc < 6 || o.n <= 0 || o.topk <= 0 || o.threads <= 0) {
        std::fprintf(stderr, "usage: %s MODEL N TOPK THREADS PROMPT...\n", argv[0]);
        std::exit(2);
    }
    return o;
}

/// llama_backend_init, then the GGUF model at `path` with llama.cpp's default model parameters; exits with a message
/// naming the file when it cannot be loaded.
inline llama_model* load_model(const char* path) {
    llama_backend_init();
    llama_model* model = llama_model_load_from_file(path, llama_model_default_params());
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", path);
        std::exit(1);
    }
    return model;
}

/// One greedy step: the chosen token (the argmax of the logits), the top-k token ids by logit, highest first, and
/// their logits.
struct Step {
    int token = -1;
    std::vector<int> top;
    std::vector<float> logit;
};

/// llama_decode of `toks` as one batch at the context's next positions; exits with a message when it fails.
inline void decode(llama_context* ctx, std::vector<llama_token> toks) {
    if (llama_decode(ctx, llama_batch_get_one(toks.data(), static_cast<int32_t>(toks.size()))) != 0) {
        std::fprintf(stderr, "llama_decode failed\n");
        std::exit(1);
    }
}

/// llama.cpp's token ids of `prompt` with BOS added and special tokens read as text; exits with a message naming the
/// prompt's 1-based `index` when it cannot be tokenized.
inline std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& prompt, int index) {
    std::vector<llama_token> ids(prompt.size() + 8);
    const int np = llama_tokenize(vocab, prompt.c_str(), static_cast<int32_t>(prompt.size()), ids.data(),
                                  static_cast<int32_t>(ids.size()), true, false);
    if (np < 0) {
        std::fprintf(stderr, "cannot tokenize prompt %d\n", index);
        std::exit(1);
    }
    ids.resize(np);
    return ids;
}

/// Greedy decode on a fresh context: `prompt` in one batch, then up to `n` steps, each recording the top `topk`
/// tokens and logits of the last position and feeding back the argmax; stops after an end-of-generation token.
inline std::vector<Step> greedy(llama_context* ctx, const llama_vocab* vocab, const std::vector<llama_token>& prompt,
                                int n, int topk) {
    const int V = llama_vocab_n_tokens(vocab);
    std::vector<Step> steps;
    decode(ctx, prompt);
    for (int i = 0; i < n; ++i) {
        const float* lg = llama_get_logits_ith(ctx, -1);
        std::vector<int> order(V);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + topk, order.end(),
                          [&](int x, int y) { return lg[x] > lg[y]; });
        Step s;
        s.token = order[0];
        s.top.assign(order.begin(), order.begin() + topk);
        for (int t : s.top) s.logit.push_back(lg[t]);
        steps.push_back(s);
        if (llama_vocab_is_eog(vocab, s.token)) break;
        decode(ctx, {s.token});
    }
    return steps;
}

/// Teacher forcing on a fresh context: `prompt` in one batch, then the tokens of `ref` one by one; row i holds the
/// logits of ref[i].top at the position where ref[i] was chosen (aligned with ref, one row per step).
inline std::vector<std::vector<float>> teacher_forced(llama_context* ctx, const std::vector<llama_token>& prompt,
                                                      const std::vector<Step>& ref) {
    std::vector<std::vector<float>> rows;
    decode(ctx, prompt);
    for (size_t i = 0; i < ref.size(); ++i) {
        const float* lg = llama_get_logits_ith(ctx, -1);
        std::vector<float> row;
        for (int t : ref[i].top) row.push_back(lg[t]);
        rows.push_back(row);
        if (i + 1 < ref.size()) decode(ctx, {ref[i].token});
    }
    return rows;
}

/// The text of one token as llama.cpp renders it (special tokens not rendered); may be a lone UTF-8 byte.
inline std::string piece(const llama_vocab* vocab, int token) {
    char buf[256];
    const int len = llama_token_to_piece(vocab, token, buf, sizeof buf, 0, false);
    return std::string(buf, std::max(len, 0));
}

/// `s` as the inside of a JSON string: quote and backslash escaped, control bytes and every byte ≥ 0x80 written as
/// \u00XX (the code point of the same value: a piece may be a lone UTF-8 byte, so the text is informational).
inline std::string json_escape(const std::string& s) {
    std::string o;
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            o += '\\';
            o += static_cast<char>(c);
        } else if (c < 0x20 || c >= 0x80) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            o += buf;
        } else {
            o += static_cast<char>(c);
        }
    }
    return o;
}

/// Writes `v` to stdout as a JSON array of integers: [a, b, c].
template <class Int>
void print_ints(const std::vector<Int>& v) {
    std::printf("[");
    for (size_t i = 0; i < v.size(); ++i) std::printf("%s%d", i ? ", " : "", static_cast<int>(v[i]));
    std::printf("]");
}

/// Writes `v` to stdout as a JSON array of numbers with 5 decimals: [1.00000, -2.50000].
inline void print_floats(const std::vector<float>& v) {
    std::printf("[");
    for (size_t i = 0; i < v.size(); ++i) std::printf("%s%.5f", i ? ", " : "", v[i]);
    std::printf("]");
}

}  // namespace llamacpp_reference
