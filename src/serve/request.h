#pragma once
// One generation request as the scheduler runs it, and the channel its results come back on.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "model/sampler.h"
#include "policy/policy.h"
#include "session/cache_file.h"

namespace kvsieve {

/// What to generate: a tokenized prompt, how many tokens at most, how to sample, where to stop, and the KV
/// policy of the sequence's cache.
struct GenerationRequest {
    std::vector<int32_t> prompt;  ///< ≥ 1 ids, within the vocabulary
    /// Most tokens generated (≥ 0; 0: the prompt is run and nothing is sampled, e.g. for its log-probabilities);
    /// the context's end also stops.
    int64_t max_tokens = 16;
    /// Log-probabilities of the sampled tokens (GenerationEvent::logprobs) with this many most likely alternatives
    /// each (0–20); −1: none.
    int logprobs = -1;
    /// Log-probabilities of the prompt's tokens too (GenerationEvent::prompt_logprobs, with `logprobs`
    /// alternatives each, at least 0): the prefill computes the logits of every prompt position. Not with `restore`
    /// or `conversation` (their first tokens were run before).
    bool prompt_logprobs = false;
    /// The client asked for max_tokens (false: a default, such as a chat's rest of the context): only then does a
    /// request whose prompt and max_tokens exceed the whole KV pool count as one that can never fit (413).
    bool max_tokens_given = true;
    SamplerParams sampling;         ///< temp 0: greedy
    std::vector<std::string> stop;  ///< stop strings: generation ends before the first one, which is not returned
    int32_t end_token = -1;         ///< an extra token that ends generation (a chat template's end of turn), −1: none
    std::string policy_spec = "full";  ///< the spec `policy` was parsed from (reported in metrics)
    Policy policy;                     ///< the KV policy of this sequence's cache
    /// Start from this saved sequence (session/cache_file.h): `prompt` then holds only the new tokens after it, and
    /// may be empty when the saved state has the next token's logits.
    std::shared_ptr<const SavedSequence> restore;
    bool restore_sampler = false;  ///< continue with the saved sampler state (the request gave no seed)
    /// At the end, save the sequence to this file (its last sampled token run first, so that it can continue).
    std::string save_path;
    /// Keep the sequence under this id when it ends, and start from what is kept under it when the prompt begins
    /// with the kept tokens (serve/conversations.h); "" none. Not with `restore`.
    std::string conversation;
    bool policy_given = false;  ///< the client named the policy (a kept conversation with another one is refused)
    /// The owner tag of the client's API key ("" without keys): a save by slot index finds only the owner's slots.
    std::string owner;
};

/// Sizes and costs of a finished request (OpenAI `usage` plus the cache's figures).
struct GenerationUsage {
    int64_t prompt_tokens = 0, completion_tokens = 0;
    uint64_t kv_bytes = 0;         ///< bytes of KV pages the sequence held at its end
    uint64_t kv_bytes_full = 0;    ///< what a full F16 cache of the same tokens would take
    double density = 1;            ///< kept fraction beyond the local window (KVStats::density)
    double compression_ratio = 0;  ///< removed fraction of all entries (KVStats::compression_ratio)
    double queue_s = 0, time_to_first_token_s = 0, total_s = 0;  ///< from submission
    uint64_t saved_bytes = 0;   ///< size of the file written for GenerationRequest::save_path (0: none)
    int64_t cached_tokens = 0;  ///< prompt tokens not fed again: the kept conversation already held them
    /// Why GenerationRequest::save_path could not be written ("" when it was, or none was asked); the answer is
    /// complete either way.
    std::string cache_save_error;
};

/// The log-probability of one token and of the most likely alternatives at its position: log-softmax of the model's
/// logits (before logit_bias, the penalties and temperature), computed in double precision.
struct TokenLogprob {
    int32_t token = -1;
    double logprob = 0;                           ///< NaN: none (the prompt's first token, which nothing predicts)
    std::vector<std::pair<int32_t, double>> top;  ///< (id, log-probability), most likely first (ties: lower id)
};

/// The TokenLogprob of `token` under `logits` ([n_vocab] floats) with the `top` most likely alternatives (top ≥ 0).
/// log p_j = l_j − max l − log Σ_i exp(l_i − max l). Throws Error for a token outside the vocabulary.
TokenLogprob token_logprob(const float* logits, int n_vocab, int32_t token, int top);

/// One message from the scheduler to whoever waits on a request.
struct GenerationEvent {
    enum class Kind { kText, kDone, kError };
    Kind kind = Kind::kText;
    std::string text;  ///< kText: the next piece of the answer (whole UTF-8 characters)
    /// kText: the tokens sampled since the last event (GenerationRequest::logprobs ≥ 0; end tokens excluded). Their
    /// pieces need not match `text` byte for byte: a stop string and its tokens' text are cut, held-back bytes come
    /// with a later event.
    std::vector<TokenLogprob> logprobs;
    /// kText (one event, before any sampled token): one per prompt token (GenerationRequest::prompt_logprobs).
    std::vector<TokenLogprob> prompt_logprobs;
    std::string finish_reason;  ///< kDone: "stop" (end of turn, end of text or a stop string) or "length"
    GenerationUsage usage;      ///< kDone
    int status = 500;           ///< kError: the HTTP status that fits (503: the KV pool is exhausted)
    std::string error;          ///< kError: one line naming the problem
};

/// The channel between the scheduler (which pushes events) and a waiting client (which pops them and may
/// cancel). Thread-safe. After kDone or kError nothing more is pushed.
class RequestHandle {
public:
    void push(GenerationEvent ev);
    /// Waits up to `timeout` for the next event; false when none came.
    bool next(GenerationEvent& ev, std::chrono::milliseconds timeout);
    /// Waits for the next event (one always comes: every request ends with kDone or kError).
    GenerationEvent next();
    /// Asks the scheduler to drop the request; its KV pages are freed at the scheduler's next step.
    void cancel() { cancelled_ = true; }
    bool cancelled() const { return cancelled_; }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<GenerationEvent> events_;
    std::atomic<bool> cancelled_{false};
};

}  // namespace kvsieve
