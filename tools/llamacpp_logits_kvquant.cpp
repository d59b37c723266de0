// Reference logits from llama.cpp with quantized K/V caches, for tests/data/golden/kvquant/ (not part of the kvsieve
// build; docs/kv_quant_reference.md describes what llama.cpp computes on this path).
//
// For each prompt and each cache configuration below (flash attention on in all of them, as llama.cpp requires for
// a quantized V cache): llama.cpp's greedy decode of n tokens, recording at every step the chosen token and the
// top-k logits ("steps"); and, teacher-forced on the greedy tokens of the F16/F16 configuration (the first), the
// logits of the F16 run's top-k tokens at every step ("forced_f16", row i aligned with the F16 run's step i), so that each quantized cache is compared with
// the F16 cache on the same sequence even where its own greedy choice departs from it.
//   f16          K F16,  V F16  (the yardstick)
//   q8_0         K Q8_0, V Q8_0, llama.cpp's attention rotation at its default (on for quantized caches)
//   q8_0_norot   the same with LLAMA_ATTN_ROT_DISABLE=1 while the context is made
//   q4_0, q4_0_norot  the same with Q4_0
//   q4_1, q5_0, q5_1, iq4_nl and their _norot  the same with Q4_1, Q5_0, Q5_1, IQ4_NL (llama.cpp rotates every
//                quantized cache type whose head dimension is a multiple of 64)
// "attn_rot_k" / "attn_rot_v" record what llama.cpp reported for each context (its "attn_rot_k = N" log lines).
// KVQUANT_CONFIGS=q4_1,q4_1_norot,... runs only the configurations named (f16, the yardstick, always runs first), to
// add configurations to an existing file without recomputing the others (each cache is independent of the others
// but for the F16 run's tokens); each cache then records "threads", the THREADS it ran with.
//
// "piece" is informational: each byte ≥ 0x80 is written as the code point of the same value. The loop is
// llamacpp_reference.h's (beside this file, shared with llamacpp_logits.cpp). Build against a
// llama.cpp build tree (headers from its source tree SRC, libraries from its build tree BUILD):
//   g++ -O2 -std=c++17 tools/llamacpp_logits_kvquant.cpp -I$SRC/include -I$SRC/ggml/include \
//       -L$BUILD/bin -lllama -lggml -lggml-base -Wl,-rpath,$BUILD/bin -o /tmp/llamacpp_logits_kvquant
//   /tmp/llamacpp_logits_kvquant MODEL.gguf N TOPK THREADS "prompt 1" "prompt 2" ... > logits.json
#include "llamacpp_reference.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace llamacpp_reference;

struct CacheConfig {
    const char* name;
    ggml_type k, v;
    bool rotation_off;  // LLAMA_ATTN_ROT_DISABLE=1 while the context is made
};

const CacheConfig kConfigs[] = {
    {"f16", GGML_TYPE_F16, GGML_TYPE_F16, false},
    {"q8_0", GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, false},
    {"q8_0_norot", GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, true},
    {"q4_0", GGML_TYPE_Q4_0, GGML_TYPE_Q4_0, false},
    {"q4_0_norot", GGML_TYPE_Q4_0, GGML_TYPE_Q4_0, true},
    {"q4_1", GGML_TYPE_Q4_1, GGML_TYPE_Q4_1, false},
    {"q4_1_norot", GGML_TYPE_Q4_1, GGML_TYPE_Q4_1, true},
    {"q5_0", GGML_TYPE_Q5_0, GGML_TYPE_Q5_0, false},
    {"q5_0_norot", GGML_TYPE_Q5_0, GGML_TYPE_Q5_0, true},
    {"q5_1", GGML_TYPE_Q5_1, GGML_TYPE_Q5_1, false},
    {"q5_1_norot", GGML_TYPE_Q5_1, GGML_TYPE_Q5_1, true},
    {"iq4_nl", GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_NL, false},
    {"iq4_nl_norot", GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_NL, true},
};

// What llama.cpp's log says about the rotation of the context being made (-1: not reported).
int g_rot_k = -1, g_rot_v = -1;

void log_callback(ggml_log_level level, const char* text, void*) {
    const char* p;
    if ((p = std::strstr(text, "attn_rot_k = "))) g_rot_k = std::atoi(p + 13);
    if ((p = std::strstr(text, "attn_rot_v = "))) g_rot_v = std::atoi(p + 13);
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

llama_context* make_context(llama_model* model, const CacheConfig& c, int threads) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = 1024;
    cp.n_ubatch = 512;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.type_k = c.k;
    cp.type_v = c.v;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    if (c.rotation_off) setenv("LLAMA_ATTN_ROT_DISABLE", "1", 1);
    g_rot_k = g_rot_v = -1;
    llama_context* ctx = llama_init_from_model(model, cp);
    unsetenv("LLAMA_ATTN_ROT_DISABLE");
    if (!ctx) {
        std::fprintf(stderr, "cannot create a llama.cpp context (%s)\n", c.name);
        std::exit(1);
    }
    return ctx;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_options(argc, argv);
    const int n = o.n, topk = o.topk, threads = o.threads;
    llama_log_set(log_callback, nullptr);
    llama_model* model = load_model(o.model);
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const char* base = std::strrchr(argv[1], '/');
    std::printf(
        "{\"model\": \"%s\", \"n_predict\": %d, \"top_k\": %d, \"threads\": %d, \"flash_attn\": true, "
        "\"rows\": [\n",
        json_escape(base ? base + 1 : argv[1]).c_str(), n, topk, threads);
    for (int a = 5; a < argc; ++a) {
        const std::string prompt = argv[a];
        const std::vector<llama_token> ids = tokenize(vocab, prompt, a - 4);
        std::printf("  {\"prompt\": \"%s\", \"prompt_ids\": ", json_escape(prompt).c_str());
        print_ints(ids);
        std::printf(", \"caches\": [\n");
        std::vector<Step> ref;  // the F16 run's steps
        // Under KVQUANT_CONFIGS each cache also records the thread count (the runs it is added to may have used another).
        const std::string cache_threads =
            std::getenv("KVQUANT_CONFIGS") ? "\"threads\": " + std::to_string(threads) + ", " : "";
        std::vector<CacheConfig> configs;
        const char* only = std::getenv("KVQUANT_CONFIGS");
        for (const CacheConfig& c : kConfigs)
            if (!only || c.k == GGML_TYPE_F16 ||
                (',' + std::string(only) + ',').find(',' + std::string(c.name) + ',') != std::string::npos)
                configs.push_back(c);
        const size_t nc = configs.size();
        for (size_t ci = 0; ci < nc; ++ci) {
            const CacheConfig& c = configs[ci];
            // free-running greedy decode
            llama_context* ctx = make_context(model, c, threads);
            const int rot_k = g_rot_k, rot_v = g_rot_v;
            const std::vector<Step> steps = greedy(ctx, vocab, ids, n, topk);
            llama_free(ctx);
            if (ci == 0) ref = steps;
            // teacher-forced on the F16 run's tokens: the logits of its top-k
            std::vector<std::vector<float>> forced;
            if (ci == 0) {
                for (const Step& s : steps) forced.push_back(s.logit);
            } else {
                ctx = make_context(model, c, threads);
                forced = teacher_forced(ctx, ids, ref);
                llama_free(ctx);
            }
            std::vector<int> greedy;
            for (const Step& s : steps) greedy.push_back(s.token);
            std::string text;
            for (int t : greedy) text += piece(vocab, t);
            std::printf(
                "    {\"cache\": \"%s\", %s\"type_k\": \"%s\", \"type_v\": \"%s\", \"attn_rot_k\": %d, "
                "\"attn_rot_v\": %d, \"greedy\": ",
                c.name, cache_threads.c_str(), ggml_type_name(c.k), ggml_type_name(c.v), rot_k, rot_v);
            print_ints(greedy);
            std::printf(", \"greedy_text\": \"%s\",\n     \"steps\": [\n", json_escape(text).c_str());
            for (size_t i = 0; i < steps.size(); ++i) {
                std::printf("      {\"token\": %d, \"top\": ", steps[i].token);
                print_ints(steps[i].top);
                std::printf(", \"logit\": ");
                print_floats(steps[i].logit);
                std::printf("}%s\n", i + 1 < steps.size() ? "," : "");
            }
            std::printf("     ],\n     \"forced_f16\": [\n");
            for (size_t i = 0; i < forced.size(); ++i) {
                std::printf("      ");
                print_floats(forced[i]);
                std::printf("%s\n", i + 1 < forced.size() ? "," : "");
            }
            std::printf("    ]}%s\n", ci + 1 < nc ? "," : "");
        }
        std::printf("  ]}%s\n", a + 1 < argc ? "," : "");
    }
    std::printf("]}\n");
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
