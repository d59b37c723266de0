#pragma once
// The OpenAI API's request and response bodies (completions and chat completions) as kvsieve reads and writes them.
#include <cstdint>
#include <optional>
#include <string>

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
    std::string model_id;                         ///< the name /v1/models lists and responses carry
    std::string default_policy = "full";          ///< kv_policy when a request names none
    int64_t n_ctx = 4096;                         ///< positions per sequence
    std::string cache_dir;                        ///< where cache_save / cache_restore files live ("": refused)
    const LlamaModel* model = nullptr;            ///< for checking a restored file's model (needed with cache_dir)
    /// How kv_policy's predictor references (model=NAME) resolve: only to predictors the operator registered
    /// (policy/predictor_names.h); by default none, so a request never names a file.
    PolicyParseOptions policy_options = NamedPredictors{}.parse_options();
};

/// A parsed request: what to generate and how to answer.
struct ApiRequest {
    GenerationRequest gen;
    bool chat = false;
    bool stream = false;
    bool include_usage = false;  ///< stream_options.include_usage: a last chunk with usage before [DONE]
};

/// Parses the body of POST /v1/completions (`chat` false) or /v1/chat/completions (`chat` true).
/// Fields read: model (any string; the server has one model), prompt (a string, [string] of one, or [int] token
/// ids) or messages ([{role: system|developer|user|assistant, content: string or [{type: "text", text}]}]),
/// max_tokens (max_completion_tokens for chat; default 16 for completions, the rest of the context for chat),
/// temperature (default 1, 0 greedy), top_p (default 1), seed (default random), stop (string or up to 4
/// strings), stream, stream_options.include_usage, n (1), and the extensions top_k, min_p, kv_policy (a KV
/// policy spec for this request's cache), cache_save (NAME: at the end, save the sequence to
/// ctx.cache_dir/NAME.kvseq) and, for completions, cache_restore (NAME: start from that saved sequence; the prompt
/// is then the text after it, without BOS, and may be empty; its policy is the saved one; without a seed the saved
/// sampler state goes on), conversation (ID: keep the sequence under ID when it ends, and start from what is kept
/// under ID when the prompt begins with its tokens; serve/conversations.h; not with cache_restore). NAME and ID:
/// 1–64 of [A-Za-z0-9_.-], not starting with '.'. A missing saved file is 404. Fields with no effect are accepted at their neutral value only
/// (user; n 1, best_of 1, echo false, suffix null, logprobs null or false, presence_penalty and frequency_penalty
/// 0, logit_bias empty, response_format text). Throws ApiError 400 naming the field for anything else: an
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

/// The error body {"error": {"message", "type", "param", "code", "status"}} as OpenAI writes it: type
/// invalid_request_error for 4xx, server_error for 5xx; param null; code a string naming the kind of error
/// (error_code); status the HTTP status (also in a stream's last event, whose HTTP status was 200). The message is
/// cut at kMaxErrorBytes (serve/json_body.h), whatever it quotes.
nlohmann::json error_body(int status, const std::string& message);

/// The whole response of a non-streamed request: `text` is the answer, `done` its kDone event.
nlohmann::json completion_body(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, const GenerationEvent& done);
/// One streamed chunk (the `data:` payload of a server-sent event): a text piece (finish_reason null), the first
/// chat chunk with the assistant role (`role_only`), or the last one with its finish reason (`finish` not empty).
nlohmann::json chunk_body(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                          const std::string& text, const std::string& finish, bool role_only = false);
/// The usage chunk of a stream (choices empty), sent when stream_options.include_usage is set.
nlohmann::json usage_chunk_body(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                                const GenerationUsage& u);
/// OpenAI `usage` (prompt_tokens_details.cached_tokens: prompt tokens a kept conversation already held) with
/// kvsieve's additions: kv_bytes (pages the sequence held at its end), kv_bytes_full (a full
/// F16 cache of the same tokens), density and compression_ratio (KVStats), time_to_first_token_ms,
/// cache_saved_bytes, and cache_save_error (only when a cache_save failed: why; the answer is complete).
nlohmann::json usage_json(const GenerationUsage& u);

}  // namespace kvsieve
