#pragma once
// The server's engine room: slots of sequences that share one KV pool and decode together in batched steps.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/kv_pool.h"
#include "model/llama_model.h"
#include "serve/request.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {

/// Thrown by Scheduler::submit when the queue is full or the scheduler has stopped (HTTP 503).
class ServerBusy : public Error {
public:
    using Error::Error;
};

struct SchedulerOptions {
    int slots = 4;               ///< sequences run at once; more requests wait in the queue
    int64_t n_ctx = 4096;        ///< positions per sequence (prompt + answer)
    int64_t prefill_chunk = 256; ///< prompt tokens a sequence feeds per step (policies that rescore the whole prompt: all)
    int max_queue = 64;          ///< requests waiting for a slot; one more is refused with ServerBusy
    /// When the KV pool cannot hold a step: false, the request that does not fit fails with status 503 at once;
    /// true, it waits until others finish (and fails only when nothing else is running).
    bool wait_for_memory = false;
};

/// What the scheduler has done and holds, for /metrics and /health. Counters grow from start.
struct SchedulerSnapshot {
    struct SlotInfo {
        int slot = 0;
        std::string policy;
        int64_t prompt_tokens = 0, prompt_done = 0, generated = 0;
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
    int64_t pool_pages_in_use = 0, pool_pages_capacity = 0, pool_page_bytes = 0;
    int64_t requests_finished = 0, requests_failed = 0, requests_cancelled = 0, requests_refused = 0;
    int64_t prompt_tokens = 0, generated_tokens = 0;  ///< of requests admitted / tokens sampled
    int64_t prefill_rows = 0, decode_rows = 0, steps = 0;
    double prefill_s = 0, decode_s = 0;  ///< step time split between prefill and decode rows in proportion to rows
    std::map<std::string, PolicyTotals> by_policy;  ///< finished requests per policy spec
    bool running = true;
};

/// Runs generation requests on one thread that owns the model's compute. Up to `slots` sequences are active;
/// each step runs every active sequence once in one LlamaModel::forward_batch: a decode token for those that
/// generate, the next prompt chunk for those that prefill (so new requests interleave with ongoing decoding).
/// Every sequence has its own KVCache and policy over the one shared KVPool: compressed sequences hold fewer
/// pages, so more of them fit. Before each step the pages the step may need (per KV head, at most one page per
/// 16 new entries plus one per region) are checked against the pool's free pages, oldest sequences first; a
/// sequence that does not fit fails alone with status 503 (or waits, SchedulerOptions::wait_for_memory), and the
/// others go on untouched. A cancelled request is dropped and its pages freed at the next step.
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
    /// ServerBusy when the queue is full or the scheduler has stopped.
    std::shared_ptr<RequestHandle> submit(GenerationRequest req);
    /// Stops the thread; requests still queued or running end with a 503 error event.
    void stop();
    SchedulerSnapshot snapshot() const;
    const SchedulerOptions& options() const { return opts_; }
    const KVPool& pool() const { return *pool_; }

private:
    struct Queued;
    struct Slot;
    void loop();
    /// A slot for a queued request (its cache, and the saved sequence it restores), or null when it was cancelled
    /// or failed (its client told).
    std::unique_ptr<Slot> admit(std::unique_ptr<Queued> q, const std::vector<std::unique_ptr<Slot>>& active);
    void step(std::vector<std::unique_ptr<Slot>>& active);
    void finish(Slot& s, const std::string& reason);
    void fail(Slot& s, int status, const std::string& message);
    void sampled(Slot& s, int32_t id);
    int64_t pages_needed(int64_t rows) const;

    const LlamaModel& model_;
    const Tokenizer& tok_;
    std::shared_ptr<KVPool> pool_;
    SchedulerOptions opts_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Queued>> queue_;
    bool stop_ = false;
    SchedulerSnapshot snap_;  // guarded by mu_
    std::thread thread_;
};

}  // namespace kvsieve
