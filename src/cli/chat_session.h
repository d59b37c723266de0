#pragma once
// One conversation with a model whose KV cache keeps the earlier turns: each turn prefills only its own tokens.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cli/cache_options.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace kvsieve::cli {

/// What one turn did.
struct ChatTurn {
    std::string reply;         ///< the answer's text, without the end-of-turn token
    std::vector<int32_t> ids;  ///< the sampled ids, with the end-of-turn (or EOS) token when one came
    int64_t n_prompt = 0;      ///< tokens of the turn's prompt (prefilled unless context_full came first)
    double prefill_s = 0, decode_s = 0;
    bool ended = false;         ///< the model ended its answer with the end-of-turn or an EOS token
    bool context_full = false;  ///< the turn stopped (or did not start) because the context has no room left
};

/// A conversation over one model, tokenizer, chat template and KV cache (which it owns the contents of).
/// Turn 1 tokenizes the rendered conversation (system message if any, then the user's), with special tokens
/// parsed and BOS added only when the vocabulary asks for it and the text does not already start with it. A later
/// turn tokenizes only what the template adds after the previous answer (ChatTemplate::after_end_of_turn, then
/// render_continuation) and prefills it at the positions after what the cache holds; the cache's policy runs on
/// every prefill with the whole token history as its context. Generation stops at the template's end-of-turn
/// token, an end-of-generation token of the vocabulary, n_predict tokens, or a full context.
class ChatSession {
public:
    /// keep_reply: give every generated token, the final end-of-turn one included, to the cache, so that a later
    /// turn continues the conversation; false for a single turn, whose last token is then not run.
    ChatSession(const LlamaModel& m, const Tokenizer& tok, ChatTemplate t, KVCache& cache, const CacheOptions& opts,
                Sampler& sampler, std::optional<std::string> system, bool keep_reply);

    /// Adds a user message and generates the answer; on_text receives its text as it comes (whole UTF-8
    /// characters). When the context cannot hold the turn's prompt and one more token, returns with
    /// context_full and changes nothing. Throws Error from the model or the cache (e.g. the KV pool exhausted).
    ChatTurn turn(const std::string& user, int64_t n_predict, const std::function<void(const std::string&)>& on_text);
    /// Forgets the conversation (the system message stays) and empties the cache.
    void reset();

    const std::vector<ChatMessage>& history() const { return history_; }
    /// Every token given to the cache, in order (its positions 0 … n − 1).
    const std::vector<int32_t>& tokens() const { return session_.tokens(); }
    const ChatTemplate& chat_template() const { return t_; }

private:
    std::vector<int32_t> turn_prompt(const std::string& user) const;

    const LlamaModel& m_;
    const Tokenizer& tok_;
    ChatTemplate t_;
    Session session_;
    const CacheOptions& opts_;
    Sampler& sampler_;
    std::optional<std::string> system_;
    bool keep_reply_;
    int32_t end_of_turn_id_;
    std::vector<ChatMessage> history_;
    bool last_ended_ = true;  // whether the last answer ended with its end-of-turn token (in the cache)
};

}  // namespace kvsieve::cli
