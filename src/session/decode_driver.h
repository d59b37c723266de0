#pragma once
// The one decode driver: what happens to each next-token distribution of a sequence, for `kvsieve generate`,
// `kvsieve chat` and the server's scheduler alike. From the logits of the next token it samples the token, checks the
// stop rules (end-of-turn or end-of-generation tokens, stop strings, a token limit, a full context) and turns the
// token into text that may be shown now (whole UTF-8 characters, nothing of a stop string). The driver is the
// per-sequence state machine and never runs the model: decode_session() below runs it over one Session for the
// command line, and the scheduler runs each sequence's row of one batched forward and feeds the driver that row's
// logits.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "session/stop_strings.h"
#include "text/utf8_stream.h"

namespace kvsieve {

class Sampler;
class Session;
class Tokenizer;

/// Why an answer ended.
enum class FinishReason {
    kNone,         ///< not finished
    kEndToken,     ///< an end token came: the vocabulary's end of generation (EOS, end of turn) or one of
                   ///< StopRules::end_tokens
    kStopString,   ///< a stop string appeared in the text
    kMaxTokens,    ///< StopRules::max_tokens tokens were sampled
    kContextFull,  ///< the context has no position left to run the token sampled last
};

/// The OpenAI finish_reason of `r`: "stop" (an end token or a stop string), "length" (the token limit or the
/// context), "" for kNone.
const char* finish_reason_name(FinishReason r);

/// When an answer stops.
struct StopRules {
    /// Texts that end the answer where they first appear (OpenAI `stop`); the answer's text ends just before it.
    /// Empty strings are ignored.
    std::vector<std::string> stop_strings;
    /// Tokens that end the answer besides the vocabulary's end-of-generation ones (Tokenizer::is_eog), e.g. a chat
    /// template's end-of-turn token; ids < 0 are ignored. An end token is sampled (counted) but gives no text.
    std::vector<int32_t> end_tokens;
    /// Most tokens sampled (≥ 0; 0 samples none).
    int64_t max_tokens = 16;
};

/// What one sampled token did.
struct DecodeStep {
    int32_t token = -1;      ///< the sampled id
    bool end_token = false;  ///< it is an end token (StopRules::end_tokens or Tokenizer::is_eog)
    std::string piece;       ///< the token's own bytes (Tokenizer::token_to_piece; "" for an end token), which
                             ///< may split a UTF-8 character
    std::string text;        ///< the answer's text that may be shown now: whole UTF-8 characters, never a part
                             ///< of a stop string; when the answer finishes, everything held back is included
    FinishReason finish = FinishReason::kNone;
};

/// One answer being generated: a sampler, the stop rules and the streamed text. Not thread-safe; the tokenizer and
/// the sampler (whose random state the driver advances) must outlive it.
class DecodeDriver {
public:
    /// Throws Error for max_tokens < 0.
    DecodeDriver(const Tokenizer& tok, Sampler& sampler, StopRules rules);

    /// Samples the next token from `logits` ([n_vocab] floats, the next token's), then applies the stop rules in this
    /// order: an end token finishes (kEndToken); else the token's text goes through the stop strings, and one that
    /// appears finishes (kStopString); else max_tokens tokens sampled finishes (kMaxTokens); else the token must be
    /// run next, and `positions_left` ≤ 0 (positions the context can still take: n_ctx − tokens it holds)
    /// finishes (kContextFull). On a finish the text held back (an unfinished UTF-8 character becomes U+FFFD, text
    /// that could begin a stop string) is released into DecodeStep::text, through the stop strings, which may still
    /// end it (then kStopString, unless an end token finished it). Throws Error when the driver has finished, and
    /// what Sampler::sample throws.
    DecodeStep next(const float* logits, int n_vocab, int64_t positions_left);

    /// Whether the answer has finished, and why.
    bool finished() const { return reason_ != FinishReason::kNone; }
    FinishReason finish_reason() const { return reason_; }
    /// Marks the answer finished by `reason` (≠ kNone) without sampling, e.g. max_tokens 0 or a context that cannot
    /// take one more token; returns the text still held back (released through the stop strings: one that appears
    /// in it makes the reason kStopString, unless `reason` is kEndToken). Throws Error when it has finished already.
    std::string finish(FinishReason reason);
    /// Tokens sampled so far (the end token included when one came).
    const std::vector<int32_t>& tokens() const { return tokens_; }
    int64_t generated() const { return static_cast<int64_t>(tokens_.size()); }
    const StopRules& rules() const { return rules_; }
    Sampler& sampler() { return sampler_; }

private:
    bool is_end(int32_t id) const;
    std::string release();

    const Tokenizer& tok_;
    Sampler& sampler_;
    StopRules rules_;
    Utf8Stream utf8_;
    StopMatcher stops_;
    std::vector<int32_t> tokens_;
    FinishReason reason_ = FinishReason::kNone;
};

/// Whether the token an answer ends with is run through the model (so that the cache holds it and the logits become
/// the token after it).
enum class RunLast {
    kNo,              ///< never (one answer, nothing follows it)
    kUnlessEndToken,  ///< unless it is an end token (a sequence saved to be continued)
    kYes,             ///< always, the end token included (a conversation whose next turn follows it)
};

/// What decode_session() did.
struct DecodeRun {
    FinishReason reason = FinishReason::kNone;
    /// The context had no room: for a token to be run next (reason kContextFull), or for the last token that
    /// RunLast asked to run.
    bool context_full = false;
    /// `logits` are the next token's after every sampled token: nothing was sampled, or the last one was run.
    bool logits_current = true;
};

/// Generates one answer over `session` with `driver`: samples from `logits` (the next token's, [n_vocab], e.g.
/// from the prefill), gives each DecodeStep to `on_step`, and runs each sampled token with Session::decode until the
/// driver finishes; the token it finishes with is run as `run_last` says, when the context has room. With
/// max_tokens 0 the driver finishes (kMaxTokens) without sampling. Throws Error for logits of another size than the
/// vocabulary, and what Session::decode and the driver throw.
DecodeRun decode_session(Session& session, DecodeDriver& driver, std::vector<float>& logits, RunLast run_last,
                         const std::function<void(const DecodeStep&)>& on_step);

}  // namespace kvsieve
