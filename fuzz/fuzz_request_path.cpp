// The server's whole request path on the smallest test model, from the bytes on the wire to the response body. The
// input is read as HTTP/1.1 by the front's HttpRequestReader (Boost.Beast's parser under the front's limits), twice:
// whole and in pieces of 7 bytes, each time taking no more than want() as the front does; both readings must agree
// on every request (pipelined ones too; agree()), a refusal must carry one of the front's statuses, and a reading
// may never stall (more wanted, nothing asked for). The body of the first request read whole — or, when the input is not a
// request, the input itself — then goes on as a request body: the depth-checked JSON parse (serve/json_body),
// request validation (parse_api_request, which parses the kv_policy spec, the model name against the server's names,
// logprobs, echo, n and the penalties), the sequence's KV cache built from that policy on a pool, one prefill chunk
// of the prompt (cut to a few tokens; every row's logits when the prompt's log-probabilities are asked for), one
// sampled decode step, and the response body of every choice with its log-probabilities; the same body also goes to
// the tokenizer endpoints (tokenize_answer, detokenize_answer). Bodies the server refuses must be one StatusError 4xx; a request it takes must run without a crash,
// sanitizer report or leak (a clear kvsieve Error from the run, such as a policy refusing the tiny model, is
// allowed).
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "cache/kv_pool.h"
#include "fuzz_input.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "serve/http_front.h"
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

/// What one request of the input came to.
struct Reading {
    enum Kind { kIncomplete, kDone, kRefused, kTooLarge } kind = kIncomplete;
    std::string method, target, version, body;
    std::vector<std::pair<std::string, std::string>> headers;
    bool operator==(const Reading&) const = default;
};

/// The requests `wire` holds, read as the front reads them: `piece` bytes at most per read, never more than the
/// reader wants; a refusal or an announced body over the limit (the front's 413) ends the connection.
std::vector<Reading> read_requests(std::string_view wire, size_t piece, const kvsieve::HttpLimits& limits) {
    using kvsieve::HttpRequestReader;
    using Step = HttpRequestReader::Step;
    std::vector<Reading> out;
    std::string in;
    size_t pos = 0;
    auto reader = std::make_unique<HttpRequestReader>(limits);
    for (;;) {
        const Step step = reader->feed(in);
        if (step == Step::kRefused) {
            const int s = reader->status();
            if (s != 400 && s != 411 && s != 413 && s != 415 && s != 431 && s != 501 && s != 505) __builtin_trap();
            if (reader->message().empty()) __builtin_trap();
            out.push_back({Reading::kRefused});
            return out;
        }
        if (step == Step::kHead) {
            const kvsieve::HttpRequest& q = reader->request();
            if (q.method.empty() || q.target.empty() || q.target[0] != '/') __builtin_trap();
            if (q.headers.size() > static_cast<size_t>(limits.max_headers)) __builtin_trap();
            if (reader->body_length() > limits.max_body_bytes) {
                out.push_back({Reading::kTooLarge});
                return out;
            }
            reader->read_body();
            continue;
        }
        if (step == Step::kDone) {
            const kvsieve::HttpRequest& q = reader->request();
            // A Content-Length body is exactly that long; a chunked one (body_length 0) at most the body limit.
            if (reader->body_length() > 0 ? q.body.size() != reader->body_length()
                                          : q.body.size() > limits.max_body_bytes)
                __builtin_trap();
            out.push_back({Reading::kDone, q.method, q.target, q.version, q.body, q.headers});
            reader = std::make_unique<HttpRequestReader>(limits);
            continue;
        }
        const size_t want = reader->want(in.size());
        if (want == 0) __builtin_trap();  // the front would wait for bytes it never reads
        if (pos >= wire.size()) {
            if (reader->started()) out.push_back({Reading::kIncomplete});
            return out;
        }
        const size_t n = std::min({want, piece, wire.size() - pos});
        in.append(wire.substr(pos, n));
        pos += n;
    }
}

/// Whether a reading in pieces agrees with the reading of the whole input: the same requests, except that a head
/// refused in the whole may still be incomplete in pieces when the input ends (once Beast's parser needs more bytes
/// it waits for the head's end before parsing again).
bool agree(const std::vector<Reading>& whole, const std::vector<Reading>& pieces) {
    for (size_t i = 0; i < whole.size() && i < pieces.size(); ++i)
        if (!(whole[i] == pieces[i]))
            return whole[i].kind == Reading::kRefused && pieces[i].kind == Reading::kIncomplete &&
                   i + 1 == pieces.size();
    return whole.size() == pieces.size();
}

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
    ctx.model_names = {"fuzz", "m"};
    ctx.n_ctx = kContext;
    ctx.cache_dir = "/nonexistent-kvsieve-fuzz";
    ctx.model = &model;
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    HttpLimits limits;
    limits.max_header_bytes = 1024;
    limits.max_headers = 8;
    limits.max_body_bytes = 4096;
    const std::vector<Reading> whole = read_requests(input, input.size(), limits);
    if (!agree(whole, read_requests(input, 7, limits))) __builtin_trap();
    std::string_view text = input;
    for (const Reading& r : whole)
        if (r.kind == Reading::kDone && !r.body.empty()) {
            text = r.body;
            break;
        }
    nlohmann::json body;
    try {
        body = parse_json_body(text);
    } catch (const StatusError& e) {
        if (e.status() != 400) __builtin_trap();
        return 0;
    }
    for (bool encode : {true, false}) {
        try {
            dump_json(encode ? tokenize_answer(body, ctx) : detokenize_answer(body, ctx));
        } catch (const StatusError& e) {
            if (e.status() != 400) __builtin_trap();
        }
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
            plan.all_logits = g.prompt_logprobs;
            session.prefill(g.prompt, plan, logits);
            const int n_vocab = static_cast<int>(model.config().n_vocab);
            const int top = std::max(0, g.logprobs);
            ChoiceResult c;
            if (g.prompt_logprobs) {  // as the scheduler scores the rows: row j predicts token j + 1
                if (logits.size() != g.prompt.size() * static_cast<size_t>(n_vocab)) __builtin_trap();
                c.prompt_logprobs.push_back({g.prompt[0], std::nan(""), {}});
                for (size_t j = 0; j + 1 < g.prompt.size(); ++j)
                    c.prompt_logprobs.push_back(
                        token_logprob(logits.data() + j * n_vocab, n_vocab, g.prompt[j + 1], top));
                logits.erase(logits.begin(), logits.end() - n_vocab);
            }
            Sampler sampler(g.sampling);
            const int32_t next = sampler.sample(logits.data(), n_vocab);
            if (next < 0 || next >= n_vocab) __builtin_trap();
            if (g.logprobs >= 0) {
                c.logprobs.push_back(token_logprob(logits.data(), n_vocab, next, top));
                if (!(c.logprobs[0].logprob <= 0)) __builtin_trap();
                if (static_cast<int>(c.logprobs[0].top.size()) != std::min(top, n_vocab)) __builtin_trap();
            }
            session.decode(next, logits);
            GenerationEvent done;
            done.kind = GenerationEvent::Kind::kDone;
            done.finish_reason = "length";
            done.usage.prompt_tokens = static_cast<int64_t>(g.prompt.size());
            done.usage.completion_tokens = 1;
            dump_json(completion_body(r, "id", 0, "fuzz", tok->decode({next}), done));
            c.text = tok->decode({next});
            c.done = done;
            const std::vector<ChoiceResult> choices(static_cast<size_t>(r.n), c);
            dump_json(completion_body(r, "id", 0, "fuzz", choices, *tok));
            if (g.logprobs >= 0) dump_json(logprobs_json(r, *tok, c.prompt_logprobs, c.logprobs));
        } catch (const Error&) {
            // A clear refusal from the run (the pool's budget, a policy that needs more than the tiny model has).
        }
    }
    return 0;
}
