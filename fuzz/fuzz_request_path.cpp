// A request body through the server's whole path on the smallest test model: the depth-checked JSON parse
// (serve/json_body), request validation (parse_api_request, which parses the kv_policy spec), the sequence's KV cache
// built from that policy on a pool, one prefill chunk of the prompt (cut to a few tokens), one sampled decode step,
// and the response body. Bodies the server refuses must be one StatusError 4xx; a request it takes must run without
// a crash, sanitizer report or leak (a clear kvsieve Error from the run, such as a policy refusing the tiny model,
// is allowed).
#include <algorithm>
#include <memory>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "cache/kv_pool.h"
#include "fuzz_input.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "serve/json_body.h"
#include "serve/openai_api.h"
#include "session/session.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace {

/// Prompt tokens fed: enough for a chunk, few enough that each input runs in milliseconds.
constexpr size_t kMaxPromptTokens = 12;
/// Positions per sequence: small, so that policies' windows and budgets meet the context's end.
constexpr int64_t kContext = 64;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kvsieve;
    static const LlamaModel model(fuzz::source_path("tests/data/models/tiny-llama-q2_k-pure.gguf"));
    static const auto tok = Tokenizer::from_gguf(model.file());
    static const ChatTemplate tmpl = chat_template_by_name("chatml");
    static const auto pool = std::make_shared<KVPool>(model.config().head_dim, KVType::kF16, 16, 8u << 20);
    ApiContext ctx;
    ctx.tok = tok.get();
    ctx.chat_template = &tmpl;
    ctx.model_id = "fuzz";
    ctx.n_ctx = kContext;
    ctx.cache_dir = "/nonexistent-kvsieve-fuzz";
    ctx.model = &model;
    nlohmann::json body;
    try {
        body = parse_json_body(std::string_view(reinterpret_cast<const char*>(data), size));
    } catch (const StatusError& e) {
        if (e.status() != 400) __builtin_trap();
        return 0;
    }
    for (bool chat : {false, true}) {
        ApiRequest r;
        try {
            r = parse_api_request(body, chat, ctx);
        } catch (const StatusError& e) {
            if (e.status() < 400 || e.status() > 499) __builtin_trap();
            continue;
        }
        GenerationRequest& g = r.gen;
        if (g.prompt.size() > kMaxPromptTokens) g.prompt.resize(kMaxPromptTokens);
        try {
            KVCache cache(model.config(), kContext, g.policy, pool);
            Session session(model, *tok, cache);
            std::vector<float> logits;
            PrefillPlan plan;  // one chunk: the whole (cut) prompt in one forward
            session.prefill(g.prompt, plan, logits);
            Sampler sampler(g.sampling);
            const int n_vocab = static_cast<int>(model.config().n_vocab);
            const int32_t next = sampler.sample(logits.data(), n_vocab);
            if (next < 0 || next >= n_vocab) __builtin_trap();
            session.decode(next, logits);
            GenerationEvent done;
            done.kind = GenerationEvent::Kind::kDone;
            done.finish_reason = "length";
            done.usage.prompt_tokens = static_cast<int64_t>(g.prompt.size());
            done.usage.completion_tokens = 1;
            dump_json(completion_body(r, "id", 0, "fuzz", tok->decode({next}), done));
        } catch (const Error&) {
            // A clear refusal from the run (the pool's budget, a policy that needs more than the tiny model has).
        }
    }
    return 0;
}
