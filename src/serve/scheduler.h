#pragma once
// The server's engine room: slots of sequences that share one KV pool and decode together in batched steps.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/kv_pool.h"
#include "model/llama_model.h"
#include "policy/predictor_names.h"
#include "serve/conversations.h"
#include "serve/histogram.h"
#include "serve/request.h"
#include "session/batch_step.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {

/// Thrown by Scheduler::submit when the queue is full or the scheduler has stopped (HTTP 503).
class ServerBusy : public Error {
public:
    using Error::Error;
};

/// A request or cache operation the server refuses, with the HTTP status that fits (4xx: the client's, 5xx: the
/// server's) and one line naming the problem. Thrown as CacheOpError by the scheduler's cache operations and as
/// ApiError (serve/openai_api.h) by the request parsers.
class StatusError : public Error {
public:
    /// `code`: the error body's `code` when the status's own (error_body) is not precise enough ("" none).
    StatusError(int status, const std::string& message, std::string code = "")
        : Error(message), status_(status), code_(std::move(code)) {}
    int status() const { return status_; }
    const std::string& code() const { return code_; }

private:
    int status_;
    std::string code_;
};

/// A cache operation (save, restore, drop) the scheduler refuses: 404 no such conversation or slot, 409 not in a
/// state to do it, 503 the KV pool cannot hold it, 507 the storage is full, 500 the file cannot be written otherwise.
using CacheOpError = StatusError;

/// Which sequence a cache operation is about: a conversation id (kept, or the running request that named it) or
/// a running slot's index (when conversation is empty).
struct SequenceRef {
    std::string conversation;
    int slot = -1;
    std::string owner;  ///< a slot is found only when its request has this owner (GenerationRequest::owner)
};

/// What a save or restore did.
struct CacheOpResult {
    std::string conversation;  ///< the conversation saved or restored ("" for a slot without one)
    int slot = -1;             ///< the slot saved (−1: a kept conversation)
    int64_t tokens = 0;        ///< positions the sequence holds
    uint64_t kv_bytes = 0;     ///< bytes of the pool pages it holds
    uint64_t file_bytes = 0;   ///< size of the file written (save)
    std::string policy;
};

struct SchedulerOptions {
    int slots = 4;         ///< sequences run at once; more requests wait in the queue
    int64_t n_ctx = 4096;  ///< positions per sequence (prompt + answer)
    /// Prompt tokens a sequence feeds per step (session/prefill_plan.h: a policy it feeds in one piece, all); the
    /// cache keeps what one batch keeps whatever this is.
    int64_t prefill_chunk = 256;
    /// Admit and compress after each step's chunk of a prompt (KVCache::set_compress_during_prefill): the memory of
    /// a long prompt stays bounded, but the kept entries, and so the answers, then depend on prefill_chunk.
    bool compress_during_prefill = false;
    int max_queue = 64;  ///< requests waiting for a slot; one more is refused with ServerBusy
    /// When the KV pool cannot hold a step: false, the request that does not fit fails with status 503 at once;
    /// true, it waits until others finish (and fails only when nothing else is running).
    bool wait_for_memory = false;
    /// Sequences kept between requests under a conversation id (ConversationStore); 0 keeps none.
    int max_conversations = 32;
    /// How the policy spec of a restored sequence resolves `model=`: the predictors the operator registered. The
    /// default refuses every name, so that a spec read from a saved file never names a file to open.
    PolicyParseOptions policy_options = NamedPredictors{}.parse_options();
    /// Most bytes of saved sequences one owner's folder of the cache directory may hold (serve/cache_quota.h;
    /// 0: no limit). A save past it is refused: a request's cache_save reports why in its usage, save() throws 403.
    uint64_t cache_quota_bytes = 0;
};

/// What the scheduler has done and holds, for /metrics and /health. Counters grow from start.
struct SchedulerSnapshot {
    struct SlotInfo {
        int slot = 0;
        std::string policy;
        int64_t prompt_tokens = 0, prompt_done = 0, generated = 0;
        std::string conversation;  ///< the id it will be kept under ("" none)
        int64_t live_entries = 0;  ///< KV entries the sequence keeps (all layers and KV heads)
        uint64_t kv_bytes = 0;     ///< bytes of the pages it holds
        double density = 1, compression_ratio = 0;
    };
    struct PolicyTotals {
        int64_t finished = 0;
        double density_sum = 0, compression_ratio_sum = 0;
    };
    int slots = 0, queued = 0;
    std::vector<SlotInfo> active;
    std::vector<ConversationStore::Info> conversations;  ///< kept between requests
    int64_t prompt_tokens_cached = 0;   ///< prompt tokens a kept conversation already held (not fed again)
    int64_t conversations_dropped = 0;  ///< kept conversations dropped for the pages of running requests
    /// Pool pages in use and in all, in units of pool_page_bytes (KVPool::unit_page_bytes: the larger page when the
    /// sinks and windows are binary16 and the global regions quantized, --kv-quant-at admission).
    int64_t pool_pages_in_use = 0, pool_pages_capacity = 0, pool_page_bytes = 0;
    int64_t pool_bytes_in_use = 0, pool_bytes_capacity = 0;  ///< real bytes of the pages in use; the pool's capacity
    int64_t requests_finished = 0, requests_failed = 0, requests_cancelled = 0, requests_refused = 0;
    int64_t prompt_tokens = 0, generated_tokens = 0;  ///< of requests admitted / tokens sampled
    int64_t prefill_rows = 0, decode_rows = 0, steps = 0;
    double prefill_s = 0, decode_s = 0;  ///< step time split between prefill and decode rows in proportion to rows
    std::map<std::string, PolicyTotals> by_policy;  ///< finished requests per policy spec
    bool running = true;
    bool draining = false;  ///< drain() was called: new requests are refused
    // Distributions of the requests that ended normally (kDone): seconds from submission to the first token, between
    // two tokens of one request, from submission to the end and waiting for a slot; prompt tokens (given) and
    // generated tokens per request; and how many ended for each finish reason ("stop", "length").
    Histogram time_to_first_token_s{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
    Histogram inter_token_s{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
    Histogram request_duration_s{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
    Histogram queue_time_s{{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60}};
    Histogram request_prompt_tokens{{1, 4, 16, 64, 256, 1024, 4096, 16384}};
    Histogram request_generated_tokens{{1, 4, 16, 64, 256, 1024, 4096, 16384}};
    std::map<std::string, int64_t> finish_reasons;
    int max_queue = 0;  ///< SchedulerOptions::max_queue
    /// Seconds since the scheduler last finished a step while requests are queued or running (0 when there is no
    /// work): a large value means it is stuck.
    double stalled_s = 0;
};

/// Runs generation requests on one thread that owns the model's compute. Up to `slots` sequences are active;
/// each step runs every active sequence once in one LlamaModel::forward_batch: a decode token for those that
/// generate, the next prompt chunk for those that prefill (so new requests interleave with ongoing decoding).
/// Every sequence has its own KVCache and policy over the one shared KVPool: compressed sequences hold fewer
/// pages, so more of them fit. Before each step the pages the step may need (per KV head, at most one page per
/// 16 new entries plus one per region) are checked against the pool's free pages, oldest sequences first; a
/// sequence that does not fit fails alone with status 503 (or waits, SchedulerOptions::wait_for_memory), and the
/// others go on untouched; kept conversations (ConversationStore) give their pages first. Free slots go to the
/// queued request of the owner running the fewest (fairest_queued). A cancelled request is
/// dropped and its pages freed at the next step (kept, as far as it ran, when it named a conversation).
class Scheduler {
public:
    /// Starts the thread. The model, tokenizer and pool must outlive the scheduler. Throws Error for options out
    /// of range (slots < 1, n_ctx < 2, prefill_chunk < 1, max_queue < 0).
    Scheduler(const LlamaModel& model, const Tokenizer& tok, std::shared_ptr<KVPool> pool, SchedulerOptions opts);
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    /// Queues a request; events arrive on the returned handle. Throws Error for an empty prompt, an id outside the
    /// vocabulary, a prompt that leaves no room in the context for one generated token, or max_tokens < 1;
    /// StatusError 413 when the whole KV pool could never hold it (its first step, or with a policy that drops
    /// nothing its prompt and a max_tokens the client gave; decided before any kept conversation is dropped for
    /// it); ServerBusy when
    /// the queue is full or the scheduler has stopped.
    std::shared_ptr<RequestHandle> submit(GenerationRequest req);
    /// Queues a request of `n` choices (1–n): the first runs the prompt, and when its prefill ends each other choice
    /// starts from a copy of that sequence (its own pages, the prompt not run again; a cache whose record cannot be
    /// taken makes each choice run the prompt itself) and samples with the seed + i; choice i's events arrive on
    /// handle i. The other choices get the prompt's log-probabilities too (prompt_logprobs), and an error event when
    /// the first fails or is cancelled before its prefill ends. Throws as submit(), and Error for n < 1 or n > 1
    /// with a restored sequence, a conversation or a save.
    std::vector<std::shared_ptr<RequestHandle>> submit_choices(GenerationRequest req, int n);
    /// Stops the thread; requests still queued or running end with a 503 error event.
    void stop();
    /// Refuses new requests from now on (submit throws ServerBusy "shutting down") while queued and running ones go
    /// on; idle() tells when they are all done. For a graceful stop: drain(), wait for idle() (bounded), stop().
    void drain();
    /// No request is queued or running.
    bool idle() const;

    /// Saves a sequence to `path` (session/cache_file.h), between two steps. A kept conversation is saved as it
    /// is (its next-token logits only when it was restored from a file that had them). A running slot must be
    /// generating: its last sampled token is run first (as its next step would have run it), the file gets the
    /// next token's logits and the sampler's state, and the slot goes on from there — so the file continues
    /// exactly as the request itself does. Throws CacheOpError (404 unknown conversation or slot, 409 a slot still
    /// reading its prompt, 503 no pages for the token, 403 over the owner's SchedulerOptions::cache_quota_bytes,
    /// 507 the storage is full (util/atomic_file.h StorageFull), 500 the file cannot be written otherwise),
    /// ServerBusy when stopped.
    CacheOpResult save(const SequenceRef& ref, const std::string& path);
    /// Keeps a saved sequence under `conversation` (replacing a kept one), so that a request naming the id goes on
    /// from it, as `owner`'s (the key's owner tag: ConversationStore shares room between owners). Kept
    /// conversations are dropped (ConversationStore::drop_for_pages) if the pool needs their pages. Throws
    /// CacheOpError (409 a running request has that id, 400 the sequence does not fit in the context or its
    /// policy does not parse, 503 the pool cannot hold it), ServerBusy when stopped.
    CacheOpResult restore(std::shared_ptr<const SavedSequence> saved, const std::string& conversation,
                          const std::string& owner = "");
    /// Drops a kept conversation (its pages return to the pool); false when none is kept under the id. Throws
    /// ServerBusy when stopped.
    bool drop(const std::string& conversation);
    SchedulerSnapshot snapshot() const;
    /// Waits until `pred(snapshot())` holds, checking it now and after each round of the scheduler's thread (its
    /// cache operations, admissions and one batched step: where requests finish, pages return to the pool and
    /// conversations are kept), or until `timeout_s` seconds have passed or the scheduler stops. Returns whether it
    /// holds. For callers that wait for the scheduler's state (tests, a drain) without polling.
    bool wait_for(const std::function<bool(const SchedulerSnapshot&)>& pred, double timeout_s) const;
    const SchedulerOptions& options() const { return opts_; }
    const KVPool& pool() const { return *pool_; }

private:
    struct Queued;
    struct Slot;
    void loop();
    /// The queued request to admit next (queue_ not empty; mu_ held), and records its owner's turn: the earliest of
    /// the owner holding the fewest of the running slots (`active` and those `admitted` this round), ties going to
    /// the owner whose last admission is oldest (round robin), so that one key's queued requests never keep another
    /// key waiting for a slot behind all of them; with a single owner, first come first served.
    std::deque<std::unique_ptr<Queued>>::iterator fairest_queued(const std::vector<std::unique_ptr<Slot>>& active,
                                                                 const std::vector<std::unique_ptr<Queued>>& admitted);
    /// Runs fn on the scheduler's thread between two steps and returns its result (rethrowing what it throws).
    template <class T>
    T on_loop(std::function<T()> fn);
    Slot* find_slot(const SequenceRef& ref);
    /// A new cache under `policy` and its session, restoring `saved` when given; kept conversations are dropped,
    /// least recently used first, while the pool cannot hold it. On an error both stay null: KVPoolExhausted
    /// when it does not fit even then, Error as restore_sequence.
    void open_sequence(const Policy& policy, const SavedSequence* saved, std::unique_ptr<KVCache>& cache,
                       std::unique_ptr<Session>& session);
    /// Drops kept conversations, least recently used first, until `pages` pool pages are free; false when the
    /// pool cannot free that many.
    bool free_pages_for(int64_t pages);
    /// Starts the slot from the conversation kept under its request's id when the prompt begins with its tokens.
    void resume_conversation(Slot& s);
    void keep_conversation(Slot& s);
    void note_conversations_dropped(int64_t n);
    /// Copies the kept conversations' sizes into the snapshot.
    void publish_conversations();
    /// A slot for a queued request (its cache, and the saved sequence it restores), or null when it was cancelled
    /// or failed (its client told).
    std::unique_ptr<Slot> admit(std::unique_ptr<Queued> q, const std::vector<std::unique_ptr<Slot>>& active);
    /// One step of every active sequence: the cancelled ones dropped, each one's next feed planned, those the pool
    /// can hold run as one batched forward, then each one's step finished (its token sampled).
    void step(std::vector<std::unique_ptr<Slot>>& active);
    /// Drops the sequences whose client cancelled (their conversation kept: between steps a sequence is whole).
    void drop_cancelled(std::vector<std::unique_ptr<Slot>>& active);
    /// Sets each sequence's feed: its next prompt chunk (the chunk planner's) or the token it sampled last.
    void plan_feeds(std::vector<std::unique_ptr<Slot>>& active);
    /// The sequences whose rows the pool can hold this step, oldest first (kept conversations give their pages
    /// first); the others wait (wait_for_memory) or fail with 503.
    std::vector<Slot*> fit_in_pool(std::vector<std::unique_ptr<Slot>>& active);
    /// Runs `batch` as one forward; returns the sequences that ran (a failed forward fails them all: none).
    std::vector<Slot*> run_batch(const std::vector<Slot*>& batch);
    /// Ends the step of each sequence that ran: its prompt progress, prompt log-probabilities, forks and next token.
    void finish_batch(const std::vector<Slot*>& run);
    void finish(Slot& s, const std::string& reason);
    void fail(Slot& s, int status, const std::string& message);
    /// Samples the slot's next token from its logits through its decode driver (session/decode_driver.h), sends
    /// the text it releases and finishes the request when the driver says so; else the token is the next step's.
    void sample_next(Slot& s);
    /// The prompt log-probabilities of the rows the slot's prefill step computed (GenerationRequest::prompt_logprobs);
    /// leaves the last row, the next token's logits, in the slot's logits.
    void score_prompt_rows(Slot& s);
    /// Queues the slot's other choices (Queued::forks) from its sequence, just prefilled, ahead of the queue.
    void fork_choices(Slot& s);
    int64_t pages_needed(int64_t rows) const;

    const LlamaModel& model_;
    const Tokenizer& tok_;
    std::shared_ptr<KVPool> pool_;
    SchedulerOptions opts_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Queued>> queue_;
    std::map<std::string, uint64_t> last_admitted_;  ///< per owner, the admission count at its latest (fairest_queued)
    uint64_t admissions_ = 0;
    std::deque<std::function<void()>> commands_;  // guarded by mu_; run by the scheduler's thread
    bool stop_ = false;
    bool draining_ = false;
    bool working_ = false;                                 // guarded by mu_: requests are being admitted or run
    std::chrono::steady_clock::time_point last_progress_;  // guarded by mu_: end of the last step, or when work arrived
    uint64_t rounds_ = 0;                                  // guarded by mu_: rounds of the thread's loop ended
    mutable std::condition_variable round_done_;           // notified at the end of each round and at the stop
    // The scheduler thread's own state.
    std::vector<std::unique_ptr<Slot>> active_;
    BatchStep step_;  // the step being run (the scheduler thread's; its buffers reused from step to step)
    ConversationStore conversations_;
    SchedulerSnapshot snap_;  // guarded by mu_
    std::thread thread_;
};

}  // namespace kvsieve
