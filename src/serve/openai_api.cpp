#include "serve/openai_api.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "policy/policy.h"
#include "serve/json_body.h"
#include "session/cache_file.h"
#include "text/chat_prompt.h"
#include "util/names.h"

namespace kvsieve {

namespace {
using json = nlohmann::json;

[[noreturn]] void bad(const std::string& msg) { throw ApiError(400, msg); }

double number_in(const json& v, const char* name, double lo, double hi) {
    if (!v.is_number()) bad(std::string("'") + name + "' must be a number, got " + describe_value(v));
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi))
        bad(std::string("'") + name + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " +
            describe_value(v));
    return x;
}

int64_t integer_in(const json& v, const char* name, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) bad(std::string("'") + name + "' must be an integer, got " + describe_value(v));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
        bad(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
            describe_value(v));
    return x;
}

/// A field that changes nothing in kvsieve, accepted only at the value that means "off".
void neutral(const json& v, const char* name, const std::vector<json>& allowed) {
    for (const auto& a : allowed)
        if (v == a) return;
    bad(std::string("'") + name + "' = " + describe_value(v) + " is not supported (only " + json(allowed).dump() + ")");
}

std::string message_text(const json& content, size_t i) {
    if (content.is_string()) return content.get<std::string>();
    if (content.is_array()) {
        std::string text;
        for (const auto& part : content) {
            // value("type", "") would throw for a type that is not a string: compare the JSON value instead.
            if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
                !part["text"].is_string())
                bad("messages[" + std::to_string(i) +
                    "].content: only parts {\"type\": \"text\", \"text\": \"…\"} are supported");
            text += part["text"].get<std::string>();
        }
        return text;
    }
    bad("messages[" + std::to_string(i) + "].content must be a string or an array of text parts");
}

}  // namespace

std::string api_name(const json& v, const std::string& field) {
    if (!v.is_string()) bad("'" + field + "' must be a name (1 to 64 of A-Z a-z 0-9 _ . -)");
    const std::string name = v.get<std::string>();
    if (!is_safe_name(name))
        bad("'" + field + "' must be a name of 1 to 64 of A-Z a-z 0-9 _ . - not starting with '.', got " +
            describe_value(v));
    return name;
}

std::string cache_path(const json& v, const std::string& field, const ApiContext& ctx, const std::string& owner) {
    if (ctx.cache_dir.empty()) bad("'" + field + "' needs a server started with --cache-dir DIR");
    return ctx.cache_dir + (owner.empty() ? "" : "/" + owner) + "/" + api_name(v, field) + ".kvseq";
}

std::string scoped_id(const std::string& owner, const std::string& id) { return owner.empty() ? id : owner + "/" + id; }

std::optional<std::string> client_id(const std::string& owner, const std::string& kept) {
    if (owner.empty()) return kept;
    const std::string prefix = owner + "/";
    if (kept.size() <= prefix.size() || kept.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
    return kept.substr(prefix.size());
}

std::string for_client(const std::string& owner, std::string message) {
    if (owner.empty()) return message;
    const std::string prefix = owner + "/";
    for (size_t at = message.find(prefix); at != std::string::npos; at = message.find(prefix, at))
        message.erase(at, prefix.size());
    return message;
}

namespace {

/// The text a (parsed) completion prompt stands for: the string itself, or its token ids decoded.
std::string p_text_or_tokens(const json& p, const Tokenizer& tok) {
    if (p.is_string()) return p.get<std::string>();
    if (p.is_array() && p.size() == 1 && p[0].is_string()) return p[0].get<std::string>();
    const json& ids = p.is_array() && p.size() == 1 && p[0].is_array() ? p[0] : p;
    std::vector<int32_t> v;
    for (const auto& x : ids) v.push_back(x.get<int32_t>());
    return tok.decode(v, true);
}

std::vector<ChatMessage> parse_messages(const json& m) {
    if (!m.is_array() || m.empty()) bad("'messages' must be a non-empty array");
    std::vector<ChatMessage> out;
    for (size_t i = 0; i < m.size(); ++i) {
        const json& e = m[i];
        if (!e.is_object()) bad("messages[" + std::to_string(i) + "] must be an object");
        for (const auto& [k, v] : e.items())
            if (k != "role" && k != "content" && k != "name")
                bad("messages[" + std::to_string(i) + "] has unknown field '" + excerpt(k) +
                    "' (tool calls are not supported)");
        if (!e.contains("role") || !e["role"].is_string())
            bad("messages[" + std::to_string(i) + "].role must be a string");
        std::string role = e["role"].get<std::string>();
        if (role == "developer") role = "system";
        if (role != "system" && role != "user" && role != "assistant")
            bad("messages[" + std::to_string(i) + "].role '" + excerpt(role) +
                "' is not supported (system, developer, user, assistant)");
        if (!e.contains("content")) bad("messages[" + std::to_string(i) + "] has no content");
        out.push_back({role, message_text(e["content"], i)});
    }
    return out;
}
}  // namespace

namespace {
/// Refuses a field the request's kind does not know (400 naming it).
void check_fields(const json& body, bool chat) {
    static const std::set<std::string> common = {"model",
                                                 "max_tokens",
                                                 "temperature",
                                                 "top_p",
                                                 "top_k",
                                                 "min_p",
                                                 "seed",
                                                 "stop",
                                                 "stream",
                                                 "stream_options",
                                                 "n",
                                                 "user",
                                                 "presence_penalty",
                                                 "frequency_penalty",
                                                 "logit_bias",
                                                 "logprobs",
                                                 "kv_policy",
                                                 "cache_save",
                                                 "conversation"};
    static const std::set<std::string> completion_only = {"prompt", "echo", "suffix", "best_of", "cache_restore"};
    static const std::set<std::string> chat_only = {"messages", "max_completion_tokens", "top_logprobs",
                                                    "response_format"};
    for (const auto& [k, v] : body.items()) {
        if (common.count(k) || (chat ? chat_only : completion_only).count(k)) continue;
        bad("unknown field '" + excerpt(k) + "' in a " + (chat ? "chat completion" : "completion") + " request");
    }
}

/// The request's `model`, when given, must be one of the server's names (404 model_not_found otherwise).
void check_model_name(const json& body, const ApiContext& ctx) {
    if (body.contains("model") && !body["model"].is_string()) bad("'model' must be a string");
    if (body.contains("model") && !ctx.model_names.empty() &&
        std::find(ctx.model_names.begin(), ctx.model_names.end(), body["model"].get<std::string>()) ==
            ctx.model_names.end())
        throw ApiError(404,
                       "the model '" + excerpt(body["model"].get<std::string>(), 64) +
                           "' does not exist on this server (GET /v1/models lists its names)",
                       "model_not_found");
}

/// cache_restore (the saved sequence this request starts from) and conversation (a kept one, by the owner's id).
void read_saved_state(const json& body, const ApiContext& ctx, const std::string& owner, GenerationRequest& g) {
    // cache_restore: the saved sequence is where this request starts.
    if (body.contains("cache_restore") && !body["cache_restore"].is_null()) {
        const std::string path = cache_path(body["cache_restore"], "cache_restore", ctx, owner);
        if (!std::filesystem::exists(path))
            throw ApiError(404, "no saved sequence '" + body["cache_restore"].get<std::string>() +
                                    "' in the server's --cache-dir");
        try {
            g.restore = std::make_shared<const SavedSequence>(
                read_sequence(path, *ctx.model, body["cache_restore"].get<std::string>() + ".kvseq"));
            decode_generation_state(g.restore->extra, ctx.model->config().n_vocab);
        } catch (const Error& e) { bad("cache_restore: " + excerpt(e.what(), 2 * kMaxQuotedBytes)); }
    }
    // With saved state (cache_restore, or a kept conversation restored from a file), no seed: its sampler goes on.
    g.restore_sampler = !body.contains("seed") || body["seed"].is_null();
    if (body.contains("conversation") && !body["conversation"].is_null()) {
        g.conversation = scoped_id(owner, api_name(body["conversation"], "conversation"));
        if (g.restore)
            bad("'conversation' and 'cache_restore' exclude each other (restore into a conversation with POST "
                "/v1/cache/restore)");
    }
}

/// The prompt: a chat's messages through the model's template, or a completion's text or token ids; with what a
/// restored sequence holds it must leave room in the context. Returns the prompt's tokens, restored ones included.
int64_t read_prompt(const json& body, bool chat, const ApiContext& ctx, const std::string& owner,
                    GenerationRequest& g) {
    // The prompt.
    const Tokenizer& tok = *ctx.tok;
    if (chat) {
        if (!body.contains("messages")) bad("'messages' is required");
        if (!ctx.chat_template) bad("the model has no chat template; use /v1/completions");
        const std::vector<ChatMessage> msgs = parse_messages(body["messages"]);
        try {
            g.prompt = encode_conversation(tok, *ctx.chat_template, msgs, true);
        } catch (const Error& e) { bad("messages: " + excerpt(e.what())); }
        g.end_token = tok.vocab().find(ctx.chat_template->end_of_turn());
    } else {
        if (!body.contains("prompt")) bad("'prompt' is required");
        const json& p = body["prompt"];
        const json* text = nullptr;
        if (p.is_string())
            text = &p;
        else if (p.is_array() && p.size() == 1 && p[0].is_string())
            text = &p[0];
        if (text) {
            try {
                g.prompt = tok.encode(text->get<std::string>(), !g.restore, false);
            } catch (const Error& e) { bad("prompt: " + excerpt(e.what())); }
        } else if (const json* ids = p.is_array() && p.size() == 1 && p[0].is_array() ? &p[0] : &p;
                   ids->is_array() && !ids->empty() &&
                   std::all_of(ids->begin(), ids->end(), [](const json& x) { return x.is_number_integer(); })) {
            for (const auto& x : *ids) {
                const int64_t id = x.get<int64_t>();
                if (id < 0 || id >= tok.vocab().size())
                    bad("prompt token id " + std::to_string(id) + " is outside the vocabulary of " +
                        std::to_string(tok.vocab().size()));
                g.prompt.push_back(static_cast<int32_t>(id));
            }
        } else {
            bad("'prompt' must be a string, an array of one string, an array of token ids, or an array of one array "
                "of token ids (batched prompts are not supported)");
        }
    }
    if (g.prompt.empty() && !g.restore) bad("the prompt is empty");
    g.owner = owner;
    const int64_t held = g.restore ? static_cast<int64_t>(g.restore->tokens.size()) : 0;
    const int64_t n_prompt = held + static_cast<int64_t>(g.prompt.size());
    if (n_prompt >= ctx.n_ctx)
        bad("the prompt has " + std::to_string(n_prompt) + " tokens" +
            (held ? " with the " + std::to_string(held) + " of the restored sequence" : std::string()) +
            "; the context holds " + std::to_string(ctx.n_ctx) + " (prompt and answer together; the server's -c)");

    return n_prompt;
}

/// echo, logprobs / top_logprobs, and max_tokens (which may be 0 with echo).
void read_logprobs_and_length(const json& body, bool chat, const ApiContext& ctx, int64_t n_prompt, ApiRequest& r) {
    GenerationRequest& g = r.gen;
    const Tokenizer& tok = *ctx.tok;
    // echo and the log-probabilities (before max_tokens, which may be 0 with echo).
    if (!chat && body.contains("echo") && !body["echo"].is_null()) {
        if (!body["echo"].is_boolean()) bad("'echo' must be true or false");
        r.echo = body["echo"].get<bool>();
    }
    if (chat) {
        bool want = false;
        if (body.contains("logprobs") && !body["logprobs"].is_null()) {
            if (!body["logprobs"].is_boolean()) bad("'logprobs' must be true or false for a chat completion");
            want = body["logprobs"].get<bool>();
        }
        int top = 0;
        if (body.contains("top_logprobs") && !body["top_logprobs"].is_null())
            top = static_cast<int>(integer_in(body["top_logprobs"], "top_logprobs", 0, 20));
        g.logprobs = want ? top : -1;
    } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
        g.logprobs = static_cast<int>(integer_in(body["logprobs"], "logprobs", 0, 5));
    }
    if (r.echo) {
        if (g.restore || !g.conversation.empty())
            bad("'echo' is not supported with cache_restore or conversation (the prompt's first tokens were run "
                "before)");
        r.echo_text = p_text_or_tokens(body["prompt"], tok);
        g.prompt_logprobs = g.logprobs >= 0;
    }
    g.max_tokens = chat ? ctx.n_ctx - n_prompt : 16;
    const char* max_key = chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    g.max_tokens_given = body.contains(max_key) && !body[max_key].is_null();
    if (g.max_tokens_given) {
        if (r.echo && body[max_key] == 0) {
            g.max_tokens = 0;
        } else {
            g.max_tokens = integer_in(body[max_key], max_key, 1, INT32_MAX);
        }
    }
}

/// temperature, top_p, top_k, min_p and seed.
void read_sampling(const json& body, GenerationRequest& g) {
    if (body.contains("temperature") && !body["temperature"].is_null())
        g.sampling.temp = static_cast<float>(number_in(body["temperature"], "temperature", 0, 2));
    if (body.contains("top_p") && !body["top_p"].is_null()) {
        g.sampling.top_p = static_cast<float>(number_in(body["top_p"], "top_p", 0, 1));
        if (g.sampling.top_p <= 0) bad("'top_p' must be > 0");
    }
    if (body.contains("top_k") && !body["top_k"].is_null())
        g.sampling.top_k = static_cast<int>(integer_in(body["top_k"], "top_k", 0, INT32_MAX));
    if (body.contains("min_p") && !body["min_p"].is_null())
        g.sampling.min_p = static_cast<float>(number_in(body["min_p"], "min_p", 0, 1));
    if (body.contains("seed") && !body["seed"].is_null()) {
        if (!body["seed"].is_number_integer()) bad("'seed' must be an integer");
        g.sampling.seed = body["seed"].is_number_unsigned() ? body["seed"].get<uint64_t>()
                                                            : static_cast<uint64_t>(body["seed"].get<int64_t>());
    }
    if (body.contains("stop") && !body["stop"].is_null()) {
        const json& s = body["stop"];
        if (s.is_string()) {
            g.stop.push_back(s.get<std::string>());
        } else if (s.is_array() && s.size() <= 4 &&
                   std::all_of(s.begin(), s.end(), [](const json& x) { return x.is_string(); })) {
            for (const auto& x : s) g.stop.push_back(x.get<std::string>());
        } else {
            bad("'stop' must be a string or an array of at most 4 strings");
        }
    }
}

/// stream, stream_options, n and the fields accepted only at their neutral values, the penalties and logit_bias.
void read_choices_and_penalties(const json& body, const ApiContext& ctx, ApiRequest& r) {
    GenerationRequest& g = r.gen;
    const Tokenizer& tok = *ctx.tok;
    if (body.contains("stream") && !body["stream"].is_null()) {
        if (!body["stream"].is_boolean()) bad("'stream' must be true or false");
        r.stream = body["stream"].get<bool>();
    }
    if (body.contains("stream_options") && !body["stream_options"].is_null()) {
        const json& o = body["stream_options"];
        if (!o.is_object()) bad("'stream_options' must be an object");
        for (const auto& [k, v] : o.items()) {
            if (k != "include_usage") bad("unknown field 'stream_options." + excerpt(k) + "'");
            if (!v.is_boolean()) bad("'stream_options.include_usage' must be true or false");
            r.include_usage = v.get<bool>();
        }
    }
    if (body.contains("n") && !body["n"].is_null()) r.n = static_cast<int>(integer_in(body["n"], "n", 1, kMaxChoices));
    if (body.contains("best_of")) neutral(body["best_of"], "best_of", {1, r.n, nullptr});
    if (r.n > 1 &&
        (g.restore || !g.conversation.empty() || (body.contains("cache_save") && !body["cache_save"].is_null())))
        bad("'n' > 1 is not supported with cache_restore, cache_save or conversation (one sequence each)");
    if (body.contains("suffix")) neutral(body["suffix"], "suffix", {nullptr, ""});
    if (body.contains("presence_penalty") && !body["presence_penalty"].is_null())
        g.sampling.presence_penalty =
            static_cast<float>(number_in(body["presence_penalty"], "presence_penalty", -2, 2));
    if (body.contains("frequency_penalty") && !body["frequency_penalty"].is_null())
        g.sampling.frequency_penalty =
            static_cast<float>(number_in(body["frequency_penalty"], "frequency_penalty", -2, 2));
    if (body.contains("logit_bias") && !body["logit_bias"].is_null()) {
        // OpenAI's form: {"token id": bias in [-100, 100]}, added to the logits before sampling.
        const json& lb = body["logit_bias"];
        if (!lb.is_object()) bad("'logit_bias' must be an object {\"token id\": bias}, got " + describe_value(lb));
        const int64_t n_vocab = static_cast<int64_t>(tok.vocab().size());
        for (auto it = lb.begin(); it != lb.end(); ++it) {
            const std::string& key = it.key();
            char* end = nullptr;
            errno = 0;
            const long long id = key.empty() ? -1 : std::strtoll(key.c_str(), &end, 10);
            if (key.empty() || *end != '\0' || errno != 0 || id < 0 || id >= n_vocab)
                bad("logit_bias: '" + excerpt(key) + "' is not a token id in [0, " + std::to_string(n_vocab) + ")");
            const std::string name = "logit_bias[" + key + "]";
            g.sampling.logit_bias.emplace_back(static_cast<int32_t>(id),
                                               static_cast<float>(number_in(it.value(), name.c_str(), -100, 100)));
        }
    }
    if (body.contains("response_format"))
        neutral(body["response_format"], "response_format", {nullptr, json{{"type", "text"}}});
    if (body.contains("user") && !body["user"].is_string() && !body["user"].is_null()) bad("'user' must be a string");
}

/// kv_policy (the server's default, or the restored sequence's), cache_save, and the policy parsed and checked
/// against the context.
void read_policy(const json& body, const ApiContext& ctx, const std::string& owner, GenerationRequest& g) {
    g.policy_spec = g.restore ? g.restore->policy_spec : ctx.default_policy;
    if (body.contains("kv_policy") && !body["kv_policy"].is_null()) {
        if (!body["kv_policy"].is_string()) bad("'kv_policy' must be a string such as \"snapkv:ratio=0.5\"");
        const std::string spec = body["kv_policy"].get<std::string>();
        if (g.restore && spec != g.restore->policy_spec)
            bad("kv_policy: the restored sequence runs '" + g.restore->policy_spec +
                "'; drop kv_policy or give the same");
        g.policy_spec = spec;
        g.policy_given = true;
    }
    if (body.contains("cache_save") && !body["cache_save"].is_null())
        g.save_path = cache_path(body["cache_save"], "cache_save", ctx, owner);
    try {
        g.policy = parse_policy(g.policy_spec, ctx.policy_options);
        check_policy_fits(g.policy, ctx.n_ctx);
    } catch (const Error& e) { bad("kv_policy: " + excerpt(e.what(), 2 * kMaxQuotedBytes)); }
}
}  // namespace

ApiRequest parse_api_request(const json& body, bool chat, const ApiContext& ctx, const std::string& owner) {
    if (!body.is_object()) bad("the request body must be a JSON object");
    check_fields(body, chat);
    ApiRequest r;
    r.chat = chat;
    GenerationRequest& g = r.gen;
    g.sampling.temp = 1.0f;
    g.sampling.top_k = 0;
    g.sampling.top_p = 1.0f;
    g.sampling.min_p = 0.0f;
    g.sampling.seed = std::random_device{}();

    check_model_name(body, ctx);
    read_saved_state(body, ctx, owner, g);
    const int64_t n_prompt = read_prompt(body, chat, ctx, owner, g);
    read_logprobs_and_length(body, chat, ctx, n_prompt, r);
    read_sampling(body, g);
    read_choices_and_penalties(body, ctx, r);
    read_policy(body, ctx, owner, g);
    return r;
}

json tokenize_answer(const json& body, const ApiContext& ctx) {
    if (!body.is_object()) bad("the request body must be a JSON object");
    for (const auto& [k, v] : body.items())
        if (k != "prompt" && k != "add_special_tokens" && k != "model")
            bad("unknown field '" + excerpt(k) + "' in a tokenize request (prompt, add_special_tokens)");
    if (!body.contains("prompt") || !body["prompt"].is_string()) bad("'prompt' must be a string");
    bool special = true;
    if (body.contains("add_special_tokens") && !body["add_special_tokens"].is_null()) {
        if (!body["add_special_tokens"].is_boolean()) bad("'add_special_tokens' must be true or false");
        special = body["add_special_tokens"].get<bool>();
    }
    std::vector<int32_t> ids;
    try {
        ids = ctx.tok->encode(body["prompt"].get<std::string>(), special, true);
    } catch (const Error& e) { bad("prompt: " + excerpt(e.what())); }
    return {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.n_ctx}};
}

json detokenize_answer(const json& body, const ApiContext& ctx) {
    if (!body.is_object()) bad("the request body must be a JSON object");
    for (const auto& [k, v] : body.items())
        if (k != "tokens" && k != "model") bad("unknown field '" + excerpt(k) + "' in a detokenize request (tokens)");
    if (!body.contains("tokens") || !body["tokens"].is_array()) bad("'tokens' must be an array of token ids");
    std::vector<int32_t> ids;
    const int64_t n_vocab = ctx.tok->vocab().size();
    for (const auto& x : body["tokens"]) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= n_vocab)
            bad("'tokens' must hold token ids in [0, " + std::to_string(n_vocab) + "), got " + describe_value(x));
        ids.push_back(x.get<int32_t>());
    }
    return {{"prompt", ctx.tok->decode(ids, true)}};
}

json tokenizer_info(const ApiContext& ctx) {
    const Vocab& v = ctx.tok->vocab();
    auto text = [&](int32_t id) { return id >= 0 ? json(ctx.tok->token_to_piece(id, true)) : json(nullptr); };
    return {{"bos_token", text(v.bos)},
            {"eos_token", text(v.eot >= 0 ? v.eot : v.eos)},
            {"pad_token", text(v.pad)},
            {"model_max_length", ctx.n_ctx},
            // kvsieve renders its chat formats itself, not from a Jinja text a client could render alike: none is given
            // (lm-eval's --apply_chat_template then refuses instead of rendering something else; chat goes through
            // /v1/chat/completions).
            {"chat_template", nullptr}};
}

CacheOpRequest parse_cache_op(const json& body, bool restore, const ApiContext& ctx, const std::string& owner) {
    const std::string what = restore ? "a cache restore" : "a cache save";
    if (!body.is_object()) bad("the request body must be a JSON object");
    for (const auto& [k, v] : body.items())
        if (k != "name" && k != "conversation" && !(k == "slot" && !restore))
            bad("unknown field '" + excerpt(k) + "' in " + what + " request (name, " +
                (restore ? "conversation" : "conversation or slot") + ")");
    if (!body.contains("name")) bad("'name' is required: the file is --cache-dir/NAME.kvseq");
    CacheOpRequest r;
    r.path = cache_path(body["name"], "name", ctx, owner);
    r.name = body["name"].get<std::string>();
    r.ref.owner = owner;
    const bool has_conv = body.contains("conversation") && !body["conversation"].is_null();
    const bool has_slot = body.contains("slot") && !body["slot"].is_null();
    if (has_conv) r.ref.conversation = scoped_id(owner, api_name(body["conversation"], "conversation"));
    if (restore) {
        if (!has_conv) r.ref.conversation = scoped_id(owner, r.name);
        return r;
    }
    if (has_conv == has_slot)
        bad("a cache save names one sequence: 'conversation' (an id) or 'slot' (a running slot's index)");
    if (has_slot) {
        const json& v = body["slot"];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1 << 20)
            bad("'slot' must be a slot index (an integer ≥ 0), got " + describe_value(v));
        r.ref.slot = v.get<int>();
    }
    return r;
}

json cache_op_body(const std::string& object, const std::string& name, const CacheOpResult& r) {
    json j = {{"object", object}, {"name", name}, {"tokens", r.tokens}, {"kv_bytes", r.kv_bytes}, {"policy", r.policy}};
    j["conversation"] = r.conversation.empty() ? json(nullptr) : json(r.conversation);
    if (r.slot >= 0) j["slot"] = r.slot;
    if (r.file_bytes > 0) j["file_bytes"] = r.file_bytes;
    return j;
}

namespace {
/// The `code` of an error body: a string per HTTP status.
const char* error_code(int status) {
    switch (status) {
        case 400: return "invalid_request";
        case 401: return "invalid_api_key";
        case 403: return "forbidden";
        case 404: return "not_found";
        case 405: return "method_not_allowed";
        case 408: return "request_timeout";
        case 411: return "length_required";
        case 413: return "request_too_large";
        case 415: return "unsupported_media_type";
        case 429: return "rate_limit_exceeded";
        case 431: return "headers_too_large";
        case 499: return "client_closed_request";
        case 501: return "not_implemented";
        case 503: return "server_busy";
        case 504: return "timeout";
        case 505: return "http_version_not_supported";
        case 507: return "insufficient_storage";
        default: return status < 500 ? "invalid_request" : "server_error";
    }
}
}  // namespace

json error_body(int status, const std::string& message, const std::string& code) {
    return {{"error",
             {{"message", excerpt(message, kMaxErrorBytes)},
              {"type", status < 500 ? "invalid_request_error" : "server_error"},
              {"param", nullptr},
              {"code", code.empty() ? std::string(error_code(status)) : code},
              {"status", status}}}};
}

json usage_json(const GenerationUsage& u) {
    json j = {{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"kv_bytes", u.kv_bytes},
              {"kv_bytes_full", u.kv_bytes_full},
              {"density", u.density},
              {"compression_ratio", u.compression_ratio},
              {"time_to_first_token_ms", 1e3 * u.time_to_first_token_s},
              {"cache_saved_bytes", u.saved_bytes},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
    if (!u.cache_save_error.empty()) j["cache_save_error"] = u.cache_save_error;
    return j;
}

json completion_body(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                     const std::string& text, const GenerationEvent& done) {
    json choice = {{"index", 0}, {"finish_reason", done.finish_reason}, {"logprobs", nullptr}};
    if (r.chat)
        choice["message"] = {{"role", "assistant"}, {"content", text}};
    else
        choice["text"] = text;
    return {{"id", id},
            {"object", r.chat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", json::array({choice})},
            {"usage", usage_json(done.usage)}};
}

namespace {
json piece_bytes(const std::string& piece) {
    json b = json::array();
    for (unsigned char c : piece) b.push_back(static_cast<int>(c));
    return b;
}
json logprob_value(double lp) { return std::isnan(lp) ? json(nullptr) : json(lp); }
}  // namespace

json logprobs_json(const ApiRequest& r, const Tokenizer& tok, const std::vector<TokenLogprob>& prompt,
                   const std::vector<TokenLogprob>& sampled, size_t offset) {
    if (r.chat) {
        json content = json::array();
        for (const TokenLogprob& t : sampled) {
            const std::string piece = tok.token_to_piece(t.token, true);
            json top = json::array();
            for (const auto& [id, lp] : t.top) {
                const std::string p = tok.token_to_piece(id, true);
                top.push_back({{"token", p}, {"logprob", lp}, {"bytes", piece_bytes(p)}});
            }
            content.push_back({{"token", piece},
                               {"logprob", logprob_value(t.logprob)},
                               {"bytes", piece_bytes(piece)},
                               {"top_logprobs", top}});
        }
        return {{"content", content}, {"refusal", nullptr}};
    }
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    for (const auto* list : {&prompt, &sampled})
        for (const TokenLogprob& t : *list) {
            const std::string piece = tok.token_to_piece(t.token, true);
            tokens.push_back(piece);
            lps.push_back(logprob_value(t.logprob));
            if (std::isnan(t.logprob)) {
                tops.push_back(nullptr);
            } else {
                json top = json::object();
                for (const auto& [id, lp] : t.top) top[tok.token_to_piece(id, true)] = lp;
                tops.push_back(top);
            }
            offsets.push_back(offset);
            offset += piece.size();
        }
    return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json completion_body(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                     const std::vector<ChoiceResult>& choices, const Tokenizer& tok) {
    require(!choices.empty(), "a completion has at least one choice");
    json out = json::array();
    GenerationUsage usage = choices[0].done.usage;
    usage.completion_tokens = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
        const ChoiceResult& c = choices[i];
        usage.completion_tokens += c.done.usage.completion_tokens;
        json choice = {{"index", i}, {"finish_reason", c.done.finish_reason}, {"logprobs", nullptr}};
        if (r.gen.logprobs >= 0) choice["logprobs"] = logprobs_json(r, tok, c.prompt_logprobs, c.logprobs);
        if (r.chat)
            choice["message"] = {{"role", "assistant"}, {"content", c.text}};
        else
            choice["text"] = r.echo ? r.echo_text + c.text : c.text;
        out.push_back(choice);
    }
    return {{"id", id},           {"object", r.chat ? "chat.completion" : "text_completion"},
            {"created", created}, {"model", model},
            {"choices", out},     {"usage", usage_json(usage)}};
}

json chunk_body(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                const std::string& text, const std::string& finish, bool role_only, int index, const json& logprobs) {
    json choice = {
        {"index", index}, {"logprobs", logprobs}, {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}};
    if (r.chat) {
        json delta = json::object();
        if (role_only)
            delta = {{"role", "assistant"}, {"content", ""}};
        else if (finish.empty())
            delta = {{"content", text}};
        choice["delta"] = delta;
    } else {
        choice["text"] = text;
    }
    return {{"id", id},
            {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", json::array({choice})}};
}

json usage_chunk_body(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                      const GenerationUsage& u) {
    return {{"id", id},
            {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", json::array()},
            {"usage", usage_json(u)}};
}

}  // namespace kvsieve
