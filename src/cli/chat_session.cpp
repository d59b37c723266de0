#include "cli/chat_session.h"

#include <algorithm>
#include <chrono>

#include "text/chat_prompt.h"
#include "session/decode_driver.h"
#include "util/error.h"

namespace kvsieve::cli {

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

ChatSession::ChatSession(const LlamaModel& m, const Tokenizer& tok, ChatTemplate t, KVCache& cache,
                         const CacheOptions& opts, Sampler& sampler, std::optional<std::string> system, bool keep_reply)
    : m_(m), tok_(tok), t_(std::move(t)), session_(m, tok, cache), opts_(opts), sampler_(sampler),
      system_(std::move(system)), keep_reply_(keep_reply), end_of_turn_id_(tok.vocab().find(t_.end_of_turn())) {}

std::vector<int32_t> ChatSession::turn_prompt(const std::string& user) const {
    if (history_.empty()) {
        std::vector<ChatMessage> msgs;
        if (system_) msgs.push_back({"system", *system_});
        msgs.push_back({"user", user});
        return encode_conversation(tok_, t_, msgs, true);
    }
    // The cache ends with the previous answer (and its end-of-turn token when the model wrote one).
    ChatText text;
    text.add_template((last_ended_ ? std::string() : t_.end_of_turn()) + t_.after_end_of_turn());
    const ChatText more = render_continuation_marked(t_, history_, {{"user", user}}, true);
    for (const auto& [b, e] : more.content) text.content.emplace_back(b + text.text.size(), e + text.text.size());
    text.text += more.text;
    return tok_.encode_marked(text.text, text.content);
}

ChatTurn ChatSession::turn(const std::string& user, int64_t n_predict,
                           const std::function<void(const std::string&)>& on_text) {
    ChatTurn r;
    const std::vector<int32_t> prompt = turn_prompt(user);
    r.n_prompt = static_cast<int64_t>(prompt.size());
    require(!prompt.empty(), "the chat prompt is empty");
    if (session_.n_tokens() + r.n_prompt >= session_.n_ctx()) {
        r.context_full = true;
        return r;
    }
    const double t0 = now_s();
    std::vector<float> logits;
    opts_.prefill(session_, prompt, logits);
    const double t1 = now_s();
    if (history_.empty() && system_) history_.push_back({"system", *system_});
    history_.push_back({"user", user});

    StopRules rules;
    rules.end_tokens = {end_of_turn_id_};
    rules.max_tokens = std::max<int64_t>(0, n_predict);
    DecodeDriver driver(tok_, sampler_, rules);
    // A single turn does not run its last token; a conversation gives every token, end of turn included, to the cache.
    const DecodeRun run =
        decode_session(session_, driver, logits, keep_reply_ ? RunLast::kYes : RunLast::kNo, [&](const DecodeStep& st) {
            r.reply += st.piece;
            if (!st.text.empty()) on_text(st.text);
        });
    r.ids = driver.tokens();
    r.ended = run.reason == FinishReason::kEndToken;
    r.context_full = run.context_full;
    r.prefill_s = t1 - t0;
    r.decode_s = now_s() - t1;
    history_.push_back({"assistant", r.reply});
    last_ended_ = r.ended && !r.context_full;
    return r;
}

void ChatSession::reset() {
    session_.reset();
    history_.clear();
    last_ended_ = true;
}

}  // namespace kvsieve::cli
