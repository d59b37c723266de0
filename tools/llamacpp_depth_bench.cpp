// llama.cpp's prefill (pp) and decode (tg) speed at a context depth, for docs/benchmarks.md (not part of the
// kvsieve build; built by scripts/bench-vs-llamacpp.sh against a llama.cpp build tree of the current API, e.g. the
// tree vendored in the llama-cpp-python 0.3.36 sdist). The method is llama-bench's: per test a fresh context with a
// llama-bench-style thread pool, one warm-up, then per repetition the cache is cleared, filled to the depth with
// random tokens (untimed) and the pp or tg test is timed. As llama-bench does, the depth is computed once per test
// and its sequence state saved; later repetitions restore it instead of refilling (the fill of a deep quantized
// cache takes minutes). One JSON object per test on stdout.
// Usage: llamacpp_depth_bench MODEL N_PROMPT N_GEN THREADS REPS DEPTH[,DEPTH...] [TYPE_K TYPE_V [FLASH_ATTN]]
// TYPE_K / TYPE_V: KV cache element types by ggml name (f16, q8_0, q4_0, ...; default f16); FLASH_ATTN: on (the
// default, as llama.cpp's users run it; a quantized V cache needs it), off or auto.
#include "llama.h"
#include "ggml-cpu.h"
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

// The ggml type of that name (f16, q8_0, ...), GGML_TYPE_COUNT if none.
static ggml_type type_by_name(const std::string& name) {
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char* n = ggml_type_name(static_cast<ggml_type>(t));
        if (n && name == n) return static_cast<ggml_type>(t);
    }
    return GGML_TYPE_COUNT;
}

static uint64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
static void test_prompt(llama_context* ctx, int n_prompt, int n_batch) {
    const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<llama_token> tokens(n_batch);
    int n_processed = 0;
    while (n_processed < n_prompt) {
        int n_tokens = std::min(n_prompt - n_processed, n_batch);
        tokens[0] = n_processed == 0 && llama_vocab_get_add_bos(vocab) ? llama_vocab_bos(vocab) : std::rand() % n_vocab;
        for (int i = 1; i < n_tokens; i++) tokens[i] = std::rand() % n_vocab;
        llama_decode(ctx, llama_batch_get_one(tokens.data(), n_tokens));
        n_processed += n_tokens;
    }
    llama_synchronize(ctx);
}
static void test_gen(llama_context* ctx, int n_gen) {
    const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
    const int n_vocab = llama_vocab_n_tokens(vocab);
    llama_token token = llama_vocab_get_add_bos(vocab) ? llama_vocab_bos(vocab) : std::rand() % n_vocab;
    for (int i = 0; i < n_gen; i++) {
        llama_decode(ctx, llama_batch_get_one(&token, 1));
        llama_synchronize(ctx);
        token = std::rand() % n_vocab;
    }
}
static void null_log(enum ggml_log_level, const char*, void*) {}

int main(int argc, char** argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s MODEL N_PROMPT N_GEN THREADS REPS DEPTHS [TYPE_K TYPE_V [on|off|auto]]\n", argv[0]);
        return 1;
    }
    const ggml_type type_k = argc > 7 ? type_by_name(argv[7]) : GGML_TYPE_F16;
    const ggml_type type_v = argc > 8 ? type_by_name(argv[8]) : GGML_TYPE_F16;
    const std::string fa = argc > 9 ? argv[9] : "on";
    if (type_k == GGML_TYPE_COUNT || type_v == GGML_TYPE_COUNT || (fa != "on" && fa != "off" && fa != "auto")) {
        fprintf(stderr, "unknown cache type or flash attention mode\n");
        return 1;
    }
    const std::string model_path = argv[1];
    const int n_prompt = atoi(argv[2]), n_gen = atoi(argv[3]), n_threads = atoi(argv[4]), reps = atoi(argv[5]);
    std::vector<int> depths;
    {
        std::stringstream ss(argv[6]);
        std::string s;
        while (std::getline(ss, s, ',')) depths.push_back(atoi(s.c_str()));
    }
    const int n_batch = 2048, n_ubatch = 512;
    llama_log_set(null_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) {
        fprintf(stderr, "failed to load %s\n", model_path.c_str());
        return 1;
    }
    char desc[256];
    llama_model_desc(model, desc, sizeof(desc));
    for (int depth : depths) {
        for (int kind = 0; kind < 2; kind++) {  // 0: pp, 1: tg (separate tests, like llama-bench)
            const int np = kind == 0 ? n_prompt : 0, ng = kind == 1 ? n_gen : 0;
            if (np == 0 && ng == 0) continue;
            llama_context_params cp = llama_context_default_params();
            cp.n_ctx = np + ng + depth;
            cp.n_batch = n_batch;
            cp.n_ubatch = n_ubatch;
            cp.type_k = type_k;
            cp.type_v = type_v;
            cp.flash_attn_type = fa == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                                 : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                               : LLAMA_FLASH_ATTN_TYPE_AUTO;
            llama_context* ctx = llama_init_from_model(model, cp);
            if (!ctx) {
                fprintf(stderr, "ctx failed\n");
                return 1;
            }
            ggml_threadpool_params tpp = ggml_threadpool_params_default(n_threads);  // poll=50 like llama-bench
            ggml_threadpool* tp = ggml_threadpool_new(&tpp);
            llama_attach_threadpool(ctx, tp, nullptr);
            llama_set_n_threads(ctx, n_threads, n_threads);
            llama_memory_clear(llama_get_memory(ctx), true);
            if (np > 0) test_prompt(ctx, np, n_batch);  // warmup (as llama-bench)
            if (ng > 0) test_gen(ctx, 1);
            std::vector<double> ts;
            std::vector<uint8_t> depth_state;  // sequence 0 after the fill, restored by later repetitions
            for (int r = 0; r < reps; r++) {
                llama_memory_clear(llama_get_memory(ctx), true);
                if (depth > 0) {  // untimed fill
                    bool restored = !depth_state.empty() &&
                                    llama_state_seq_set_data(ctx, depth_state.data(), depth_state.size(), 0) != 0;
                    if (!restored) {
                        llama_memory_clear(llama_get_memory(ctx), true);
                        test_prompt(ctx, depth, n_batch);
                        depth_state.resize(llama_state_seq_get_size(ctx, 0));
                        llama_state_seq_get_data(ctx, depth_state.data(), depth_state.size(), 0);
                    }
                }
                uint64_t t0 = now_ns();
                if (np > 0) test_prompt(ctx, np, n_batch);
                if (ng > 0) test_gen(ctx, ng);
                ts.push_back(1e9 * (np + ng) / double(now_ns() - t0));
            }
            double avg = 0, sd = 0;
            for (double v : ts) avg += v;
            avg /= ts.size();
            for (double v : ts) sd += (v - avg) * (v - avg);
            sd = ts.size() > 1 ? std::sqrt(sd / (ts.size() - 1)) : 0;
            printf(
                "{\"model_filename\": \"%s\", \"model_type\": \"%s\", \"model_size\": %llu, \"n_threads\": %d, "
                "\"type_k\": \"%s\", \"type_v\": \"%s\", \"flash_attn\": \"%s\", "
                "\"n_batch\": %d, \"n_ubatch\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, "
                "\"test\": \"%s%d @ d%d\", \"avg_ts\": %.6f, \"stddev_ts\": %.6f, \"samples_ts\": [",
                model_path.c_str(), desc, (unsigned long long)llama_model_size(model), n_threads,
                ggml_type_name(type_k), ggml_type_name(type_v), fa.c_str(), n_batch, n_ubatch, np, ng, depth,
                np ? "pp" : "tg", np ? np : ng, depth, avg, sd);
            for (size_t i = 0; i < ts.size(); i++) printf("%s%.6f", i ? ", " : "", ts[i]);
            printf("]}\n");
            fflush(stdout);
            llama_free(ctx);
            ggml_threadpool_free(tp);
        }
    }
    llama_model_free(model);
    return 0;
}
