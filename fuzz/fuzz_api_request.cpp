// The server's request bodies: any bytes parsed as JSON by the server's parser (serve/json_body.h: depth-checked
// first) and read as a completion and a chat completion request, and as a cache save and restore body, give a
// request or one ApiError (a 4xx), never a crash.
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "io/gguf.h"
#include "serve/json_body.h"
#include "serve/openai_api.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const kvsieve::GGUFFile file(kvsieve::fuzz::test_model_path("tiny-qwen3-f32.gguf"));
    static const auto tok = kvsieve::Tokenizer::from_gguf(file);
    static const kvsieve::ChatTemplate tmpl = kvsieve::chat_template_by_name("chatml");
    kvsieve::ApiContext ctx;
    ctx.tok = tok.get();
    ctx.chat_template = &tmpl;
    ctx.model_id = "fuzz";
    ctx.n_ctx = 256;
    ctx.cache_dir = "/nonexistent-kvsieve-fuzz";
    nlohmann::json body;
    try {  // the server's parser: depth-checked before parsing
        body = kvsieve::parse_json_body(std::string_view(reinterpret_cast<const char*>(data), size));
    } catch (const kvsieve::StatusError& e) {
        if (e.status() != 400) __builtin_trap();
        return 0;  // the server answers 400 before parse_api_request
    }
    for (bool chat : {false, true}) {
        try {
            const kvsieve::ApiRequest r = kvsieve::parse_api_request(body, chat, ctx);
            kvsieve::GenerationEvent done;
            done.kind = kvsieve::GenerationEvent::Kind::kDone;
            kvsieve::completion_body(r, "id", 0, "m", "text", done).dump();
        } catch (const kvsieve::ApiError& e) {
            if (e.status() < 400 || e.status() > 499) __builtin_trap();
        }
    }
    for (bool restore : {false, true}) {
        try {
            const kvsieve::CacheOpRequest op = kvsieve::parse_cache_op(body, restore, ctx);
            kvsieve::CacheOpResult res;
            res.conversation = op.ref.conversation;
            res.slot = op.ref.slot;
            kvsieve::cache_op_body("kv_cache.saved", op.name, res).dump();
        } catch (const kvsieve::ApiError& e) {
            if (e.status() < 400 || e.status() > 499) __builtin_trap();
        }
    }
    return 0;
}
