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
#include <vector>

#include "model/sampler.h"
#include "policy/policy.h"
#include "session/cache_file.h"

namespace kvsieve {

/// What to generate: a tokenized prompt, how many tokens at most, how to sample, where to stop, and the KV
/// policy of the sequence's cache.
struct GenerationRequest {
    std::vector<int32_t> prompt;  ///< ≥ 1 ids, within the vocabulary
    int64_t max_tokens = 16;      ///< most tokens generated (≥ 1); the context's end also stops
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

/// One message from the scheduler to whoever waits on a request.
struct GenerationEvent {
    enum class Kind { kText, kDone, kError };
    Kind kind = Kind::kText;
    std::string text;           ///< kText: the next piece of the answer (whole UTF-8 characters)
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
