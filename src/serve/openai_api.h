#pragma once
// The OpenAI API's request and response bodies (completions and chat completions) as kvsieve reads and writes them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/llama_model.h"
#include "policy/predictor_names.h"
#include "serve/request.h"
#include "serve/scheduler.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {

/// A request the server refuses (400: bad field, 404: a missing saved file, 413: too large, …) with one line naming
/// the problem.
using ApiError = StatusError;

/// What the API layer needs to know about the server.
struct ApiContext {
    const Tokenizer* tok = nullptr;
    const ChatTemplate* chat_template = nullptr;  ///< null: the model has no chat template (chat requests get 400)
    std::string model_id;                         ///< the name /v1/models lists first and responses carry
    /// The names a request's `model` may be (the server's model and its aliases; /v1/models lists them); another
    /// name is refused with 404 model_not_found. Empty: any name is taken.
    std::vector<std::string> model_names;
    std::string default_policy = "full";  ///< kv_policy when a request names none
    int64_t n_ctx = 4096;                 ///< positions per sequence
    std::string cache_dir;                ///< where cache_save / cache_restore files live ("": refused)
    const LlamaModel* model = nullptr;    ///< for checking a restored file's model (needed with cache_dir)
    /// How kv_policy's predictor references (model=NAME) resolve: only to predictors the operator registered
    /// (policy/predictor_names.h); by default none, so a request never names a file.
    PolicyParseOptions policy_options = NamedPredictors{}.parse_options();
};

/// The most choices one request may ask for (`n`).
constexpr int kMaxChoices = 8;

/// A parsed request: what to generate and how to answer.
struct ApiRequest {
    GenerationRequest gen;
    bool chat = false;
    bool stream = false;
    bool include_usage = false;  ///< stream_options.include_usage: a last chunk with usage before [DONE]
    int n = 1;  ///< choices (1–kMaxChoices; Scheduler::submit_choices: one prefill, choice i samples with seed + i)
    bool echo = false;      ///< completions: the prompt's text comes before each choice's text
    std::string echo_text;  ///< the prompt as text (echo)
};

/// What one choice of a finished request produced.
struct ChoiceResult {
    std::string text;
    std::vector<TokenLogprob> prompt_logprobs, logprobs;
    GenerationEvent done;  ///< its kDone event
};

/// Parses the body of POST /v1/completions (`chat` false) or /v1/chat/completions (`chat` true).
/// Fields read: model (one of ctx.model_names, any string when it is empty), prompt (a string, [string] of one,
/// [int] token ids or [[int]] of one) or messages ([{role: system|developer|user|assistant, content: string or [{type: "text", text}]}]),
/// max_tokens (max_completion_tokens for chat; default 16 for completions, the rest of the context for chat),
/// temperature (default 1, 0 greedy), top_p (default 1), seed (default random), stop (string or up to 4
/// strings), stream, stream_options.include_usage, and the extensions top_k, min_p, kv_policy (a KV
/// policy spec for this request's cache), cache_save (NAME: at the end, save the sequence to
/// ctx.cache_dir/NAME.kvseq) and, for completions, cache_restore (NAME: start from that saved sequence; the prompt
/// is then the text after it, without BOS, and may be empty; its policy is the saved one; without a seed the saved
/// sampler state goes on), conversation (ID: keep the sequence under ID when it ends, and start from what is kept
/// under ID when the prompt begins with its tokens; serve/conversations.h; not with cache_restore). NAME and ID:
/// 1–64 of [A-Za-z0-9_.-], not starting with '.'. A missing saved file is 404. Fields with no effect are accepted at their neutral value only
/// (user; best_of null, 1 or n; suffix null; response_format text). n (1–kMaxChoices), presence_penalty and
/// frequency_penalty ([−2, 2], SamplerParams), logit_bias; logprobs: chat true/false with top_logprobs (0–20),
/// completions 0–5 (alternatives per token); echo (completions: the prompt's text first, and with logprobs the
/// prompt's log-probabilities, the first null; max_tokens may then be 0; not with cache_restore or conversation).
/// A model name not in ctx.model_names is 404. Throws ApiError 400 naming the field for anything else: an
/// unknown field, a wrong type or range, a kv_policy that does not parse or does not fit in the context, a prompt
/// that does not fit in the context.
/// `owner`: the owner tag of the request's API key (serve/auth.h; "" on a server without keys): the conversation
/// id is kept as scoped_id(owner, ID) and NAME is a file of the owner's folder (cache_path), so that clients with
/// different keys never see each other's sequences.
ApiRequest parse_api_request(const nlohmann::json& body, bool chat, const ApiContext& ctx,
                             const std::string& owner = "");

/// The id the scheduler keeps a client's conversation under: "OWNER/ID" for a key's owner (ID cannot hold '/'),
/// ID itself on a server without keys.
std::string scoped_id(const std::string& owner, const std::string& id);
/// The id a client of `owner` knows a kept id by; nothing when the kept id is another owner's.
std::optional<std::string> client_id(const std::string& owner, const std::string& kept);
/// `message` with the owner's scope taken out of the ids it names (what the client sees).
std::string for_client(const std::string& owner, std::string message);

/// A file or conversation name field: 1–64 of [A-Za-z0-9_.-], not starting with '.'. Throws ApiError 400 naming
/// `field` otherwise.
std::string api_name(const nlohmann::json& v, const std::string& field);
/// ctx.cache_dir/NAME.kvseq for the name in `v` (ctx.cache_dir/OWNER/NAME.kvseq for a key's owner). Throws ApiError
/// 400 when the server has no cache directory or the name is not one.
std::string cache_path(const nlohmann::json& v, const std::string& field, const ApiContext& ctx,
                       const std::string& owner = "");

/// The body of POST /v1/cache/save ({"name": NAME, and "conversation": ID or "slot": N}) or /v1/cache/restore
/// ({"name": NAME, "conversation": ID}, ID defaulting to NAME): the file ctx.cache_dir/NAME.kvseq and the
/// sequence. Throws ApiError 400 for a server without --cache-dir, a missing or bad name, id or slot, both or
/// neither of conversation and slot for a save, a slot for a restore, or an unknown field.
struct CacheOpRequest {
    std::string name, path;
    SequenceRef ref;
};
/// `owner` as for parse_api_request: the file is the owner's, the conversation id scoped, a slot only the owner's.
CacheOpRequest parse_cache_op(const nlohmann::json& body, bool restore, const ApiContext& ctx,
                              const std::string& owner = "");
/// {"object": object, "name", "conversation", "slot" (save of a slot), "tokens", "kv_bytes", "file_bytes" (save),
/// "policy"}.
nlohmann::json cache_op_body(const std::string& object, const std::string& name, const CacheOpResult& r);

/// The tokenizer endpoints (the shapes vLLM's server answers, which lm-evaluation-harness's remote tokenizer reads).
/// POST /tokenize {"prompt": text, "add_special_tokens": bool (default true: BOS/EOS as the vocabulary asks)} →
/// {"tokens": [ids], "count", "max_model_len"}; text equal to a special token becomes that token. POST /detokenize
/// {"tokens": [ids]} → {"prompt": text} (special tokens rendered). GET /tokenizer_info → {"bos_token",
/// "eos_token", "pad_token" (the token's text or null), "model_max_length" (the server's context), "chat_template"
/// (null: the chat formats are kvsieve's own, with no Jinja text to give)}. Throws ApiError 400 naming the field for a bad body (an unknown field, a wrong type, an id
/// outside the vocabulary).
nlohmann::json tokenize_answer(const nlohmann::json& body, const ApiContext& ctx);
nlohmann::json detokenize_answer(const nlohmann::json& body, const ApiContext& ctx);
nlohmann::json tokenizer_info(const ApiContext& ctx);

/// The error body {"error": {"message", "type", "param", "code", "status"}} as OpenAI writes it: type
/// invalid_request_error for 4xx, server_error for 5xx; param null; code a string naming the kind of error
/// (error_code); status the HTTP status (also in a stream's last event, whose HTTP status was 200). The message is
/// cut at kMaxErrorBytes (serve/json_body.h), whatever it quotes.
/// `code` replaces the status's code when not empty (e.g. model_not_found).
nlohmann::json error_body(int status, const std::string& message, const std::string& code = "");

/// The whole response of a non-streamed request: `text` is the answer, `done` its kDone event.
nlohmann::json completion_body(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, const GenerationEvent& done);
/// The whole response of a non-streamed request with one or more choices (index i: choices[i]); with logprobs
/// (r.gen.logprobs ≥ 0) each choice's log-probabilities in the shape of r's endpoint (logprobs_json). usage: the
/// prompt once, the completion tokens of all choices, the cache figures of the first.
nlohmann::json completion_body(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                               const std::vector<ChoiceResult>& choices, const Tokenizer& tok);
/// The `logprobs` of a choice. Chat (OpenAI's chat shape): {"content": [{token, logprob, bytes, top_logprobs:
/// [{token, logprob, bytes}]}], "refusal": null}. Completions (the legacy shape): {tokens, token_logprobs,
/// top_logprobs ({token: logprob} per token, r.gen.logprobs entries), text_offset (byte offset of each token's
/// piece in the concatenated pieces, counted from `offset`; the choice's text for sampled tokens)}; `prompt` (echo)
/// come first, the first with logprob and top_logprobs null. Token strings are Tokenizer::token_to_piece (special tokens rendered); `bytes` their bytes.
nlohmann::json logprobs_json(const ApiRequest& r, const Tokenizer& tok, const std::vector<TokenLogprob>& prompt,
                             const std::vector<TokenLogprob>& sampled, size_t offset = 0);
/// One streamed chunk (the `data:` payload of a server-sent event): a text piece (finish_reason null), the first
/// chat chunk with the assistant role (`role_only`), or the last one with its finish reason (`finish` not empty);
/// of choice `index`, with `logprobs` (null: none).
nlohmann::json chunk_body(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                          const std::string& text, const std::string& finish, bool role_only = false, int index = 0,
                          const nlohmann::json& logprobs = nullptr);
/// The usage chunk of a stream (choices empty), sent when stream_options.include_usage is set.
nlohmann::json usage_chunk_body(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                                const GenerationUsage& u);
/// OpenAI `usage` (prompt_tokens_details.cached_tokens: prompt tokens a kept conversation already held) with
/// kvsieve's additions: kv_bytes (pages the sequence held at its end), kv_bytes_full (a full
/// F16 cache of the same tokens), density and compression_ratio (KVStats), time_to_first_token_ms,
/// cache_saved_bytes, and cache_save_error (only when a cache_save failed: why; the answer is complete).
nlohmann::json usage_json(const GenerationUsage& u);

}  // namespace kvsieve
