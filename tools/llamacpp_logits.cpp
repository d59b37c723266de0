// Reference logits from llama.cpp for tests/data/golden/smollm2/logits.json (not part of the kvsieve build).
//
// For each prompt: llama.cpp's greedy decode (F16 K and V cache, its default) of n tokens, recording at every
// step the chosen token and the top-k logits; then the same token sequence teacher-forced through a second
// context whose cache is F32, recording the same top-k tokens' logits there. The second pass measures how much
// llama.cpp's own logits move with the KV element type alone: the yardstick for kvsieve's tolerance.
//
// "piece" is informational: each byte ≥ 0x80 is written as the code point of the same value (pieces can be lone
// UTF-8 bytes). Build against a llama.cpp build tree (tested at commit c392e5094):
//   g++ -O2 -std=c++17 tools/llamacpp_logits.cpp -I$LLAMA/include -I$LLAMA/ggml/include \
//       -L$LLAMA/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin -o /tmp/llamacpp_logits
//   /tmp/llamacpp_logits MODEL.gguf N TOPK THREADS "prompt 1" "prompt 2" ... > logits.json
#include <llama.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

namespace {

struct Step {
    int token;                    // llama.cpp's greedy choice (F16 cache)
    std::vector<int> top;         // top-k token ids by the F16-cache logits
    std::vector<float> logit16;   // their logits, F16 cache
    std::vector<float> logit32;   // the same tokens' logits, F32 cache, teacher-forced on the same sequence
};

llama_context* make_context(llama_model* model, ggml_type kv, int threads) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.type_k = kv;
    cp.type_v = kv;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        std::fprintf(stderr, "cannot create a llama.cpp context\n");
        std::exit(1);
    }
    return ctx;
}

void decode(llama_context* ctx, std::vector<llama_token> toks) {
    if (llama_decode(ctx, llama_batch_get_one(toks.data(), static_cast<int32_t>(toks.size()))) != 0) {
        std::fprintf(stderr, "llama_decode failed\n");
        std::exit(1);
    }
}

std::string json_escape(const std::string& s) {
    std::string o;
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            o += '\\';
            o += static_cast<char>(c);
        } else if (c < 0x20 || c >= 0x80) {  // bytes ≥ 0x80 as \u0080..\u00ff: a piece may be a lone UTF-8 byte
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            o += buf;
        } else {
            o += static_cast<char>(c);
        }
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 6) {
        std::fprintf(stderr, "usage: %s MODEL N TOPK THREADS PROMPT...\n", argv[0]);
        return 2;
    }
    const int n = std::atoi(argv[2]), topk = std::atoi(argv[3]), threads = std::atoi(argv[4]);
    llama_backend_init();
    llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int V = llama_vocab_n_tokens(vocab);
    std::printf("{\"model\": \"%s\", \"n_predict\": %d, \"top_k\": %d, \"rows\": [\n", json_escape(argv[1]).c_str(), n,
                topk);
    for (int a = 5; a < argc; ++a) {
        const std::string prompt = argv[a];
        std::vector<llama_token> ids(prompt.size() + 8);
        const int np = llama_tokenize(vocab, prompt.c_str(), static_cast<int32_t>(prompt.size()), ids.data(),
                                      static_cast<int32_t>(ids.size()), true, false);
        ids.resize(np);
        std::vector<Step> steps;
        llama_context* c16 = make_context(model, GGML_TYPE_F16, threads);
        decode(c16, ids);
        for (int i = 0; i < n; ++i) {
            const float* lg = llama_get_logits_ith(c16, -1);
            std::vector<int> order(V);
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + topk, order.end(),
                              [&](int x, int y) { return lg[x] > lg[y]; });
            Step s;
            s.token = order[0];
            s.top.assign(order.begin(), order.begin() + topk);
            for (int t : s.top) s.logit16.push_back(lg[t]);
            steps.push_back(s);
            if (llama_vocab_is_eog(vocab, s.token)) break;
            decode(c16, {s.token});
        }
        llama_free(c16);
        llama_context* c32 = make_context(model, GGML_TYPE_F32, threads);
        decode(c32, ids);
        for (size_t i = 0; i < steps.size(); ++i) {
            const float* lg = llama_get_logits_ith(c32, -1);
            for (int t : steps[i].top) steps[i].logit32.push_back(lg[t]);
            if (i + 1 < steps.size()) decode(c32, {steps[i].token});
        }
        llama_free(c32);
        std::printf("  {\"prompt\": \"%s\", \"prompt_ids\": [", json_escape(prompt).c_str());
        for (int i = 0; i < np; ++i) std::printf("%s%d", i ? ", " : "", ids[i]);
        std::printf("], \"steps\": [\n");
        for (size_t i = 0; i < steps.size(); ++i) {
            const Step& s = steps[i];
            char piece[256];
            const int len = llama_token_to_piece(vocab, s.token, piece, sizeof piece, 0, false);
            std::printf("    {\"token\": %d, \"piece\": \"%s\", \"top\": [", s.token,
                        json_escape(std::string(piece, std::max(len, 0))).c_str());
            for (int k = 0; k < topk; ++k) std::printf("%s%d", k ? ", " : "", s.top[k]);
            std::printf("], \"logit_f16kv\": [");
            for (int k = 0; k < topk; ++k) std::printf("%s%.5f", k ? ", " : "", s.logit16[k]);
            std::printf("], \"logit_f32kv\": [");
            for (int k = 0; k < topk; ++k) std::printf("%s%.5f", k ? ", " : "", s.logit32[k]);
            std::printf("]}%s\n", i + 1 < steps.size() ? "," : "");
        }
        std::printf("  ]}%s\n", a + 1 < argc ? "," : "");
    }
    std::printf("]}\n");
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
