// Reference logits from llama.cpp for tests/data/golden/smollm2/logits.json (not part of the kvsieve build).
//
// For each prompt: llama.cpp's greedy decode (F16 K and V cache, its default) of n tokens, recording at every
// step the chosen token and the top-k logits; then the same token sequence teacher-forced through a second
// context whose cache is F32, recording the same top-k tokens' logits there. The second pass measures how much
// llama.cpp's own logits move with the KV element type alone: the yardstick for kvsieve's tolerance.
//
// "piece" is informational: each byte ≥ 0x80 is written as the code point of the same value (pieces can be lone
// UTF-8 bytes). The loop is llamacpp_reference.h's (beside this file, shared with llamacpp_logits_kvquant.cpp).
// Build against a llama.cpp build tree (tested at commit c392e5094):
//   g++ -O2 -std=c++17 tools/llamacpp_logits.cpp -I$LLAMA/include -I$LLAMA/ggml/include \
//       -L$LLAMA/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin -o /tmp/llamacpp_logits
//   /tmp/llamacpp_logits MODEL.gguf N TOPK THREADS "prompt 1" "prompt 2" ... > logits.json
#include "llamacpp_reference.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace llamacpp_reference;

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

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_options(argc, argv);
    const int n = o.n, topk = o.topk, threads = o.threads;
    llama_model* model = load_model(o.model);
    const llama_vocab* vocab = llama_model_get_vocab(model);
    std::printf("{\"model\": \"%s\", \"n_predict\": %d, \"top_k\": %d, \"rows\": [\n", json_escape(argv[1]).c_str(), n,
                topk);
    for (int a = 5; a < argc; ++a) {
        const std::string prompt = argv[a];
        const std::vector<llama_token> ids = tokenize(vocab, prompt, a - 4);
        // llama.cpp's greedy decode with its default F16 cache, then its F32 cache teacher-forced on those tokens.
        llama_context* c16 = make_context(model, GGML_TYPE_F16, threads);
        const std::vector<Step> steps = greedy(c16, vocab, ids, n, topk);
        llama_free(c16);
        llama_context* c32 = make_context(model, GGML_TYPE_F32, threads);
        const std::vector<std::vector<float>> logit32 = teacher_forced(c32, ids, steps);
        llama_free(c32);
        std::printf("  {\"prompt\": \"%s\", \"prompt_ids\": ", json_escape(prompt).c_str());
        print_ints(ids);
        std::printf(", \"steps\": [\n");
        for (size_t i = 0; i < steps.size(); ++i) {
            const Step& s = steps[i];
            std::printf("    {\"token\": %d, \"piece\": \"%s\", \"top\": ", s.token,
                        json_escape(piece(vocab, s.token)).c_str());
            print_ints(s.top);
            std::printf(", \"logit_f16kv\": ");
            print_floats(s.logit);
            std::printf(", \"logit_f32kv\": ");
            print_floats(logit32[i]);
            std::printf("}%s\n", i + 1 < steps.size() ? "," : "");
        }
        std::printf("  ]}%s\n", a + 1 < argc ? "," : "");
    }
    std::printf("]}\n");
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
