#include "serve/scheduler.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <limits>
#include <map>

#include "cache/kv_cache.h"
#include "serve/cache_quota.h"
#include "session/cache_file.h"
#include "session/decode_driver.h"
#include "session/prefill_plan.h"
#include "session/session.h"
#include "text/utf8_stream.h"
#include "util/atomic_file.h"
#include "util/binary_io.h"

namespace kvsieve {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

struct Scheduler::Queued {
    GenerationRequest req;
    std::shared_ptr<RequestHandle> handle;
    Clock::time_point submitted;
    /// The other choices of the request (submit_choices): they start from this one's prefilled sequence.
    std::vector<std::shared_ptr<RequestHandle>> forks;
};

namespace {
/// Tells every choice still waiting for `q`'s prefill that it will not come.
void abandon_forks(std::vector<std::shared_ptr<RequestHandle>>& forks, int status, const std::string& message) {
    for (auto& h : forks) {
        GenerationEvent ev;
        ev.kind = GenerationEvent::Kind::kError;
        ev.status = status;
        ev.error = message;
        h->push(std::move(ev));
    }
    forks.clear();
}
}  // namespace

struct Scheduler::Slot {
    int index = 0;
    std::unique_ptr<Queued> q;
    std::unique_ptr<KVCache> cache;
    std::unique_ptr<Session> session;
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<DecodeDriver> driver;  // samples with `sampler`; the request's stop rules and streamed text
    int64_t prompt_done = 0, generated = 0;
    int64_t cached = 0;        // prompt tokens a kept conversation already held
    std::vector<int32_t> ids;  // what the next step feeds
    Session::StepKind kind = Session::StepKind::kPrefillChunk;
    std::vector<float> logits;
    double queue_s = 0, first_token_s = 0;
    Clock::time_point last_token_at;  // when the previous token was sampled (inter-token latency)
    int32_t last = -1;                // the last sampled token, not yet run
    bool last_end = false;            // it ended the answer (end of turn or of text)
    bool done = false;
    GenerationState restored;             // a resumed conversation's pending logits and sampler state
    std::vector<TokenLogprob> prompt_lp;  // GenerationRequest::prompt_logprobs: one per prompt token fed so far
};

Scheduler::Scheduler(const LlamaModel& model, const Tokenizer& tok, std::shared_ptr<KVPool> pool, SchedulerOptions opts)
    : model_(model), tok_(tok), pool_(std::move(pool)), opts_(opts),
      conversations_(std::max(0, opts.max_conversations)) {
    require(opts_.slots >= 1, "--slots must be ≥ 1, got ", opts_.slots);
    require(opts_.n_ctx >= 2, "the context must hold at least 2 tokens, got ", opts_.n_ctx);
    require(opts_.prefill_chunk >= 1, "--prefill-chunk must be ≥ 1, got ", opts_.prefill_chunk);
    require(opts_.max_queue >= 0, "--max-queue must be ≥ 0, got ", opts_.max_queue);
    require(opts_.max_conversations >= 0, "--max-conversations must be ≥ 0, got ", opts_.max_conversations);
    require(pool_ && pool_->head_dim() == model_.config().head_dim,
            "the KV pool does not match the model's head dimension");
    snap_.slots = opts_.slots;
    thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::stop() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    round_done_.notify_all();
}

std::shared_ptr<RequestHandle> Scheduler::submit(GenerationRequest req) { return submit_choices(std::move(req), 1)[0]; }

std::vector<std::shared_ptr<RequestHandle>> Scheduler::submit_choices(GenerationRequest req, int n) {
    require(n >= 1, "a request has at least one choice, got ", n);
    require(n == 1 || (!req.restore && req.conversation.empty() && req.save_path.empty()),
            "several choices start from one prompt: not with a restored sequence, a conversation or a save");
    const int n_vocab = model_.config().n_vocab;
    require(!req.prompt.empty() || req.restore, "the prompt is empty");
    require(req.conversation.empty() || !req.restore,
            "a request starts from a saved sequence or a conversation, not both");
    for (int32_t id : req.prompt)
        require(id >= 0 && id < n_vocab, "token id ", id, " is outside the vocabulary of ", n_vocab);
    const int64_t held = req.restore ? static_cast<int64_t>(req.restore->tokens.size()) : 0;
    require(held + static_cast<int64_t>(req.prompt.size()) < opts_.n_ctx, "the prompt has ", req.prompt.size(),
            " tokens", held ? " after the " + std::to_string(held) + " of the restored sequence" : std::string(),
            "; the context holds ", opts_.n_ctx, " (prompt and answer together)");
    require(req.max_tokens >= 0, "max_tokens must be ≥ 0, got ", req.max_tokens);
    require(req.logprobs >= -1 && req.logprobs <= 20, "logprobs must be in [-1, 20], got ", req.logprobs);
    require(!req.prompt_logprobs || (!req.restore && req.conversation.empty()),
            "prompt log-probabilities need the whole prompt run: not with a restored sequence or a conversation");
    req.sampling.validate();
    check_policy_fits(req.policy, opts_.n_ctx);
    // A request the whole pool could never hold is refused now, before it waits or any kept conversation gives
    // its pages for it: its first step alone, or (a policy that drops nothing) its prompt and answer in full.
    {
        const ModelConfig& c = model_.config();
        const int64_t n_new = std::max<int64_t>(1, static_cast<int64_t>(req.prompt.size()));
        const PrefillChunk first = next_prefill_chunk(
            n_new, 0, planned_chunk(req.policy, opts_.prefill_chunk, true, opts_.compress_during_prefill));
        int64_t need = pages_needed(first.end);
        if (req.policy.is_full()) {
            const int64_t answer = req.max_tokens_given ? req.max_tokens : 1;  // a default may stop long before
            const int64_t tokens =
                std::min<int64_t>(held + static_cast<int64_t>(req.prompt.size()) + answer, opts_.n_ctx);
            const int64_t P = pool_->page_tokens();
            need = std::max(need, static_cast<int64_t>(c.n_layer) * c.n_head_kv * ((tokens + P - 1) / P));
        }
        if (need > pool_->capacity_pages()) {
            std::lock_guard<std::mutex> lk(mu_);
            ++snap_.requests_refused;
            throw StatusError(413, "this request can never fit: it needs " + std::to_string(need) +
                                       " KV pages and the "
                                       "server's whole pool has " +
                                       std::to_string(pool_->capacity_pages()) +
                                       "; lower max_tokens, shorten the prompt, or use a compressing kv_policy");
        }
    }
    auto q = std::make_unique<Queued>();
    q->handle = std::make_shared<RequestHandle>();
    q->submitted = Clock::now();
    q->req = std::move(req);
    std::vector<std::shared_ptr<RequestHandle>> hs = {q->handle};
    for (int i = 1; i < n; ++i) {
        q->forks.push_back(std::make_shared<RequestHandle>());
        hs.push_back(q->forks.back());
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_ || draining_) throw ServerBusy("the server is shutting down");
        if (queue_.empty() && !working_) last_progress_ = Clock::now();  // the stall clock starts now
        if (static_cast<int>(queue_.size()) >= opts_.max_queue + opts_.slots - static_cast<int>(snap_.active.size())) {
            ++snap_.requests_refused;
            throw ServerBusy("all " + std::to_string(opts_.slots) + " slots are busy and " +
                             std::to_string(queue_.size()) + " requests are waiting (--max-queue " +
                             std::to_string(opts_.max_queue) + "); try again later");
        }
        queue_.push_back(std::move(q));
        snap_.queued = static_cast<int>(queue_.size());
    }
    cv_.notify_all();
    return hs;
}

void Scheduler::drain() {
    std::lock_guard<std::mutex> lk(mu_);
    draining_ = true;
    snap_.draining = true;
}

bool Scheduler::idle() const {
    std::lock_guard<std::mutex> lk(mu_);
    return queue_.empty() && !working_;
}

SchedulerSnapshot Scheduler::snapshot() const {
    std::lock_guard<std::mutex> lk(mu_);
    SchedulerSnapshot s = snap_;
    s.max_queue = opts_.max_queue;
    s.stalled_s = queue_.empty() && !working_ ? 0.0 : seconds_since(last_progress_);
    s.pool_pages_in_use = pool_->pages_in_use();
    s.pool_pages_capacity = pool_->capacity_pages();
    s.pool_page_bytes = static_cast<int64_t>(pool_->unit_page_bytes());
    s.pool_bytes_in_use = static_cast<int64_t>(pool_->bytes_in_use());
    s.pool_bytes_capacity = static_cast<int64_t>(pool_->capacity_bytes());
    return s;
}

bool Scheduler::wait_for(const std::function<bool(const SchedulerSnapshot&)>& pred, double timeout_s) const {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(std::max(timeout_s, 0.0)));
    for (;;) {
        uint64_t seen = 0;
        {
            std::lock_guard<std::mutex> lk(mu_);
            seen = rounds_;  // read before the check, so that a round ending after it is not missed
        }
        if (pred(snapshot())) return true;
        std::unique_lock<std::mutex> lk(mu_);
        if (!round_done_.wait_until(lk, deadline, [&] { return rounds_ != seen || stop_; })) break;
        if (stop_) break;
    }
    return pred(snapshot());
}

int64_t Scheduler::pages_needed(int64_t rows) const {
    // Each appended entry goes to one of a head's three regions (sinks, window ring, global); a region opens a
    // page per page_tokens entries it gains, plus possibly one it had not started. The ring reuses its slots.
    const ModelConfig& c = model_.config();
    const int64_t P = pool_->page_tokens();
    const int64_t per_head = std::min<int64_t>(rows, (rows + P - 1) / P + 3);
    return static_cast<int64_t>(c.n_layer) * c.n_head_kv * per_head;
}

void Scheduler::fail(Slot& s, int status, const std::string& message) {
    {
        std::lock_guard<std::mutex> lk(mu_);  // counted before the client hears of it
        if (status == 503)
            ++snap_.requests_refused;
        else
            ++snap_.requests_failed;
    }
    GenerationEvent ev;
    ev.kind = GenerationEvent::Kind::kError;
    ev.status = status;
    ev.error = message;
    s.q->handle->push(std::move(ev));
    abandon_forks(s.q->forks, status, message);
    s.done = true;
}

void Scheduler::fork_choices(Slot& s) {
    // The prefilled sequence, as a saved one that each other choice restores (its own pages, the prompt not run
    // again) and samples from at once with its own seed.
    auto saved = std::make_shared<SavedSequence>();
    try {
        BinaryWriter w;
        s.cache->save(w);
        saved->policy_spec = s.cache->policy().spec;
        saved->n_ctx = s.session->n_ctx();
        saved->tokens = s.session->tokens();
        saved->extra = encode_generation_state(GenerationState{s.logits, ""});
        saved->cache_record = w.data();
    } catch (const std::exception&) {
        saved.reset();  // a cache that cannot be recorded: each choice runs the prompt itself
    }
    std::deque<std::unique_ptr<Queued>> forks;
    for (size_t i = 0; i < s.q->forks.size(); ++i) {
        auto f = std::make_unique<Queued>();
        f->req = s.q->req;
        f->req.sampling.seed += static_cast<uint64_t>(i + 1);
        f->req.restore_sampler = false;
        f->req.prompt_logprobs = false;
        if (saved) {
            f->req.restore = saved;
            f->req.prompt.clear();
        }
        f->handle = s.q->forks[i];
        f->submitted = s.q->submitted;
        if (!s.prompt_lp.empty()) {  // the prompt's log-probabilities are the same for every choice
            GenerationEvent ev;
            ev.prompt_logprobs = s.prompt_lp;
            f->handle->push(std::move(ev));
        }
        forks.push_back(std::move(f));
    }
    s.q->forks.clear();
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = forks.rbegin(); it != forks.rend(); ++it) queue_.push_front(std::move(*it));  // next, in order
    snap_.queued = static_cast<int>(queue_.size());
}

void Scheduler::finish(Slot& s, const std::string& reason) {
    uint64_t saved_bytes = 0;
    std::string save_error;
    bool keep = true;  // the sequence is whole (a failed last-token step leaves it unusable)
    if (!s.q->req.save_path.empty()) {
        // Run the last sampled token, so that the saved sequence can go on without new text. The answer is complete
        // whatever happens here: a save that fails is reported beside it, never instead of it.
        GenerationState g;
        g.sampler_state = s.sampler->state();
        const std::string shown = std::filesystem::path(s.q->req.save_path).filename().string();
        try {
            if (s.last >= 0 && !s.last_end && s.session->n_tokens() < opts_.n_ctx) {
                s.session->decode(s.last, s.logits);
                g.logits = s.logits;
            }
            try {
                const std::string bytes = encode_sequence(model_, *s.session, encode_generation_state(g));
                check_cache_quota(s.q->req.save_path, bytes.size(), opts_.cache_quota_bytes);
                write_file_atomic(s.q->req.save_path, bytes, shown);
                std::error_code ec;  // the size is a report only (its error would name the server's folders)
                const auto n = std::filesystem::file_size(s.q->req.save_path, ec);
                saved_bytes = ec ? 0 : static_cast<uint64_t>(n);
            } catch (const std::exception& e) {
                save_error = std::string("the sequence could not be saved: ") + e.what();
            }
        } catch (const KVPoolExhausted& e) {
            keep = false;
            save_error = std::string("the sequence could not be saved: the KV pool is exhausted: ") + e.what();
        } catch (const std::exception& e) {
            keep = false;
            save_error = std::string("the sequence could not be saved: ") + e.what();
        }
    }
    const KVStats st = s.cache->stats();
    GenerationEvent ev;
    ev.kind = GenerationEvent::Kind::kDone;
    ev.finish_reason = reason;
    GenerationUsage& u = ev.usage;
    u.prompt_tokens = static_cast<int64_t>(s.q->req.prompt.size());
    u.completion_tokens = s.generated;
    u.kv_bytes = st.kv_bytes_final;
    u.kv_bytes_full = st.kv_bytes_full;
    u.density = st.density;
    u.compression_ratio = st.compression_ratio;
    u.queue_s = s.queue_s;
    u.time_to_first_token_s = s.first_token_s;
    u.total_s = seconds_since(s.q->submitted);
    u.saved_bytes = saved_bytes;
    u.cached_tokens = s.cached;
    u.cache_save_error = save_error;
    if (keep) keep_conversation(s);  // before the client hears of the end, so that its next turn finds it
    {
        std::lock_guard<std::mutex> lk(mu_);  // counted before the client hears of it
        ++snap_.requests_finished;
        snap_.time_to_first_token_s.observe(u.time_to_first_token_s);
        snap_.request_duration_s.observe(u.total_s);
        snap_.queue_time_s.observe(u.queue_s);
        snap_.request_prompt_tokens.observe(static_cast<double>(u.prompt_tokens));
        snap_.request_generated_tokens.observe(static_cast<double>(u.completion_tokens));
        ++snap_.finish_reasons[reason];
        auto& p = snap_.by_policy[s.q->req.policy_spec];
        ++p.finished;
        p.density_sum += st.density;
        p.compression_ratio_sum += st.compression_ratio;
    }
    s.q->handle->push(std::move(ev));
    s.done = true;
}

void Scheduler::sample_next(Slot& s) {
    const int n_vocab = model_.config().n_vocab;
    if (s.driver->rules().max_tokens == 0) {  // the prompt alone was asked for (its log-probabilities)
        const std::string rest = s.driver->finish(FinishReason::kMaxTokens);
        if (!rest.empty()) {
            GenerationEvent ev;
            ev.text = rest;
            s.q->handle->push(std::move(ev));
        }
        return finish(s, finish_reason_name(s.driver->finish_reason()));
    }
    const DecodeStep st = s.driver->next(s.logits.data(), n_vocab, opts_.n_ctx - s.session->n_tokens());
    const Clock::time_point now = Clock::now();
    s.generated = s.driver->generated();
    if (s.generated == 1) s.first_token_s = seconds_since(s.q->submitted);
    {
        std::lock_guard<std::mutex> lk(mu_);
        ++snap_.generated_tokens;
        if (s.generated > 1) snap_.inter_token_s.observe(std::chrono::duration<double>(now - s.last_token_at).count());
    }
    s.last_token_at = now;
    s.last = st.token;
    s.last_end = st.end_token;
    GenerationEvent ev;
    ev.text = st.text;
    if (s.q->req.logprobs >= 0 && !st.end_token)
        ev.logprobs.push_back(token_logprob(s.logits.data(), n_vocab, st.token, s.q->req.logprobs));
    if (!ev.text.empty() || !ev.logprobs.empty()) s.q->handle->push(std::move(ev));
    if (st.finish != FinishReason::kNone) return finish(s, finish_reason_name(st.finish));
    s.ids = {st.token};
    s.kind = Session::StepKind::kDecode;
}

void Scheduler::score_prompt_rows(Slot& s) {
    // Row j of the chunk [prompt_done, prompt_done + rows) holds the logits of the token at prompt_done + j + 1.
    const int n_vocab = model_.config().n_vocab;
    const auto& prompt = s.q->req.prompt;
    const int64_t rows = static_cast<int64_t>(s.ids.size());
    const int top = std::max(0, s.q->req.logprobs);
    if (s.prompt_done == 0) {
        TokenLogprob first;  // nothing predicts the first token
        first.token = prompt[0];
        first.logprob = std::numeric_limits<double>::quiet_NaN();
        s.prompt_lp.push_back(first);
    }
    for (int64_t j = 0; j < rows; ++j) {
        const int64_t next = s.prompt_done + j + 1;
        if (next >= static_cast<int64_t>(prompt.size())) break;
        s.prompt_lp.push_back(token_logprob(s.logits.data() + j * n_vocab, n_vocab, prompt[next], top));
    }
    // The last row is the next token's: what sampling reads.
    if (rows > 1) s.logits.erase(s.logits.begin(), s.logits.begin() + (rows - 1) * n_vocab);
}

void Scheduler::drop_cancelled(std::vector<std::unique_ptr<Slot>>& active) {
    for (auto& s : active)
        if (s->q->handle->cancelled()) {
            s->done = true;
            abandon_forks(s->q->forks, 499, "the request was cancelled");
            {
                std::lock_guard<std::mutex> lk(mu_);
                ++snap_.requests_cancelled;
            }
            keep_conversation(*s);  // between steps the sequence is whole: a client that stops keeps its history
        }
    active.erase(std::remove_if(active.begin(), active.end(), [](const auto& s) { return s->done; }), active.end());
}

void Scheduler::plan_feeds(std::vector<std::unique_ptr<Slot>>& active) {
    // What each sequence feeds now: its next prompt chunk, or the token it sampled last.
    for (auto& s : active) {
        const auto& prompt = s->q->req.prompt;
        const int64_t n = static_cast<int64_t>(prompt.size());
        if (s->prompt_done < n) {
            const PrefillChunk c = next_prefill_chunk(
                n, s->prompt_done,
                planned_chunk(s->cache->policy(), opts_.prefill_chunk, true, s->cache->compress_during_prefill()));
            s->ids.assign(prompt.begin() + c.begin, prompt.begin() + c.end);
            s->kind = c.last ? Session::StepKind::kPrefillLast : Session::StepKind::kPrefillChunk;
        }
    }
}

std::vector<Scheduler::Slot*> Scheduler::fit_in_pool(std::vector<std::unique_ptr<Slot>>& active) {
    // The oldest sequences go first, as long as the pool can give the pages their rows may need; a sequence that
    // does not fit gets the pages of kept conversations (least recently used first) before it is left out.
    int64_t reserved = 0;
    auto free_now = [&] { return pool_->capacity_pages() - pool_->pages_in_use() - reserved; };
    std::vector<Slot*> batch, left_out;
    for (auto& s : active) {
        const int64_t need = pages_needed(static_cast<int64_t>(s->ids.size()));
        if (need > free_now()) free_pages_for(reserved + need);
        if (need <= free_now()) {
            reserved += need;
            batch.push_back(s.get());
        } else {
            left_out.push_back(s.get());
        }
    }
    const double mib = static_cast<double>(pool_->unit_page_bytes()) / 1048576.0;
    for (size_t i = 0; i < left_out.size(); ++i) {
        Slot* s = left_out[i];
        const bool may_wait = opts_.wait_for_memory && (!batch.empty() || i + 1 < left_out.size());
        if (may_wait) continue;
        const int64_t need = pages_needed(static_cast<int64_t>(s->ids.size()));
        char msg[400];
        std::snprintf(msg, sizeof msg,
                      "the KV pool is exhausted: this request's next step may need %lld pages (%.2f MiB) and %lld of "
                      "%lld are free; other requests hold the rest. Retry later, use a compressing kv_policy, or start "
                      "the server with a larger --kv-pool-mb",
                      static_cast<long long>(need), need * mib,
                      static_cast<long long>(pool_->capacity_pages() - pool_->pages_in_use()),
                      static_cast<long long>(pool_->capacity_pages()));
        fail(*s, 503, msg);
    }
    return batch;
}

std::vector<Scheduler::Slot*> Scheduler::run_batch(const std::vector<Slot*>& batch) {
    std::vector<Slot*> run;
    step_.clear();
    for (Slot* s : batch) {
        try {
            const bool rows = s->q->req.prompt_logprobs && s->kind != Session::StepKind::kDecode;
            step_.add(*s->session, s->ids, s->kind, s->logits, rows);
            run.push_back(s);
        } catch (const std::exception& e) { fail(*s, 500, e.what()); }
    }
    if (run.empty()) return run;
    const int64_t prefill_rows = step_.prefill_rows(), decode_rows = step_.decode_rows();
    const auto t0 = Clock::now();
    try {
        step_.forward();  // on a failure every step is aborted
    } catch (const KVPoolExhausted& e) {
        for (Slot* s : run) fail(*s, 503, std::string("the KV pool is exhausted: ") + e.what());
        return {};
    } catch (const std::exception& e) {
        for (Slot* s : run) fail(*s, 500, e.what());
        return {};
    }
    const double dt = seconds_since(t0);
    {
        std::lock_guard<std::mutex> lk(mu_);
        const double rows = static_cast<double>(prefill_rows + decode_rows);
        snap_.prefill_rows += prefill_rows;
        snap_.decode_rows += decode_rows;
        snap_.prefill_s += dt * prefill_rows / rows;
        snap_.decode_s += dt * decode_rows / rows;
        ++snap_.steps;
    }
    return run;
}

void Scheduler::finish_batch(const std::vector<Slot*>& run) {
    for (size_t i = 0; i < run.size(); ++i) {
        Slot* s = run[i];
        try {
            step_.end(i);  // run[i] is the batch's step i
        } catch (const KVPoolExhausted& e) {
            fail(*s, 503, std::string("the KV pool is exhausted: ") + e.what());
            continue;
        } catch (const std::exception& e) {
            fail(*s, 500, e.what());
            continue;
        }
        if (s->kind != Session::StepKind::kDecode) {
            if (s->q->req.prompt_logprobs) score_prompt_rows(*s);
            s->prompt_done += static_cast<int64_t>(s->ids.size());
        }
        if (s->kind == Session::StepKind::kPrefillChunk) continue;
        if (!s->q->forks.empty()) fork_choices(*s);
        if (s->q->req.prompt_logprobs && s->kind == Session::StepKind::kPrefillLast) {
            GenerationEvent ev;
            ev.prompt_logprobs = std::move(s->prompt_lp);
            s->q->handle->push(std::move(ev));
        }
        sample_next(*s);
    }
}

void Scheduler::step(std::vector<std::unique_ptr<Slot>>& active) {
    drop_cancelled(active);
    if (active.empty()) return;
    plan_feeds(active);
    const std::vector<Slot*> batch = fit_in_pool(active);
    if (batch.empty()) return;
    const std::vector<Slot*> run = run_batch(batch);
    finish_batch(run);
}

std::unique_ptr<Scheduler::Slot> Scheduler::admit(std::unique_ptr<Queued> q,
                                                  const std::vector<std::unique_ptr<Slot>>& active) {
    const ModelConfig& c = model_.config();
    if (q->handle->cancelled()) {
        abandon_forks(q->forks, 499, "the request was cancelled");
        std::lock_guard<std::mutex> lk(mu_);
        ++snap_.requests_cancelled;
        return nullptr;
    }
    auto s = std::make_unique<Slot>();
    for (int i = 0;; ++i)
        if (std::none_of(active.begin(), active.end(), [&](const auto& a) { return a->index == i; })) {
            s->index = i;
            break;
        }
    s->queue_s = seconds_since(q->submitted);
    s->sampler = std::make_unique<Sampler>(q->req.sampling);
    StopRules rules;
    rules.stop_strings = q->req.stop;
    rules.end_tokens = {q->req.end_token};
    rules.max_tokens = q->req.max_tokens;
    s->driver = std::make_unique<DecodeDriver>(tok_, *s->sampler, std::move(rules));
    s->q = std::move(q);
    GenerationState restored;
    try {
        if (!s->q->req.conversation.empty()) {
            resume_conversation(*s);
            if (s->cache) restored = std::move(s->restored);
        }
        const GenerationRequest& r = s->q->req;
        if (!s->cache) {
            open_sequence(r.policy, r.restore.get(), s->cache, s->session);
            if (r.restore) restored = decode_generation_state(r.restore->extra, c.n_vocab);
        }
        if (r.restore_sampler && !restored.sampler_state.empty()) s->sampler->set_state(restored.sampler_state);
    } catch (const KVPoolExhausted& e) {
        fail(*s, 503, std::string("the KV pool is exhausted: the restored sequence does not fit: ") + e.what());
        return nullptr;
    } catch (const CacheOpError& e) {
        fail(*s, e.status(), e.what());
        return nullptr;
    } catch (const std::exception& e) {
        fail(*s, 500, e.what());
        return nullptr;
    }
    const GenerationRequest& r = s->q->req;
    {
        std::lock_guard<std::mutex> lk(mu_);
        snap_.prompt_tokens += static_cast<int64_t>(r.prompt.size());
        snap_.prompt_tokens_cached += s->cached;
    }
    // A restored sequence with no new text samples from its saved logits at once.
    if (s->prompt_done == static_cast<int64_t>(r.prompt.size())) {
        if (restored.logits.empty()) {
            fail(*s, 400, "the restored sequence ended its answer; give a prompt to continue it");
            return nullptr;
        }
        s->logits = std::move(restored.logits);
        sample_next(*s);
        if (s->done) return nullptr;
    }
    return s;
}

void Scheduler::resume_conversation(Slot& s) {
    GenerationRequest& r = s.q->req;
    ConversationStore::Entry* e = conversations_.find(r.conversation);
    if (!e) return;  // a new conversation (or one dropped for its pages): the whole prompt is fed
    if (r.policy_given && e->policy_spec != r.policy_spec)
        throw CacheOpError(
            409, "conversation '" + r.conversation + "' runs kv_policy '" + e->policy_spec +
                     "' and this request asks for '" + r.policy_spec +
                     "'; leave kv_policy out, or delete the conversation first (DELETE /v1/cache/conversations/" +
                     r.conversation + ")");
    const std::vector<int32_t>& kept = e->session->tokens();
    size_t p = static_cast<size_t>(std::mismatch(kept.begin(), kept.end(), r.prompt.begin(), r.prompt.end()).first -
                                   kept.begin());
    // Something must run to give the next token's logits, unless the kept sequence has them (restored from a
    // file) and the prompt is exactly what it holds.
    if (p == r.prompt.size() && !(p == kept.size() && !e->pending.logits.empty())) p = r.prompt.size() - 1;
    if (p < kept.size()) {
        // The prompt leaves the kept tokens (an edited history, a reply that tokenizes otherwise): roll back to
        // where they agree; a policy whose scorer keeps a state cannot be rolled back, so it starts afresh.
        if (p == 0 || e->cache->scorer_state() != nullptr) {
            conversations_.drop(r.conversation);
            publish_conversations();
            return;
        }
        e->session->rollback(static_cast<int64_t>(p));
        e->pending = {};
    }
    ConversationStore::Entry taken = conversations_.take(r.conversation);
    s.cache = std::move(taken.cache);
    s.session = std::move(taken.session);
    r.policy_spec = taken.policy_spec;
    s.restored = std::move(taken.pending);
    s.prompt_done = static_cast<int64_t>(p);
    s.cached = static_cast<int64_t>(p);
    publish_conversations();
}

void Scheduler::keep_conversation(Slot& s) {
    const GenerationRequest& r = s.q->req;
    if (r.conversation.empty() || conversations_.capacity() == 0 || !s.cache) return;
    ConversationStore::Entry e;
    e.policy_spec = r.policy_spec;
    e.owner = r.owner;
    e.session = std::move(s.session);
    e.cache = std::move(s.cache);
    conversations_.put(r.conversation, std::move(e));
    publish_conversations();
}

void Scheduler::open_sequence(const Policy& policy, const SavedSequence* saved, std::unique_ptr<KVCache>& cache,
                              std::unique_ptr<Session>& session) {
    for (;;) {
        try {
            cache = std::make_unique<KVCache>(model_.config(), opts_.n_ctx, policy, pool_);
            cache->set_compress_during_prefill(opts_.compress_during_prefill);
            session = std::make_unique<Session>(model_, tok_, *cache);
            if (saved) restore_sequence(*session, *saved);
            return;
        } catch (const KVPoolExhausted&) {
            session.reset();
            cache.reset();
            if (!conversations_.drop_for_pages()) throw;
            note_conversations_dropped(1);
        } catch (...) {
            session.reset();
            cache.reset();
            throw;
        }
    }
}

bool Scheduler::free_pages_for(int64_t pages) {
    int64_t dropped = 0;
    while (pool_->capacity_pages() - pool_->pages_in_use() < pages && conversations_.drop_for_pages()) ++dropped;
    if (dropped > 0) note_conversations_dropped(dropped);
    return pool_->capacity_pages() - pool_->pages_in_use() >= pages;
}

void Scheduler::note_conversations_dropped(int64_t n) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        snap_.conversations_dropped += n;
    }
    publish_conversations();
}

void Scheduler::publish_conversations() {
    std::vector<ConversationStore::Info> info = conversations_.list();
    std::lock_guard<std::mutex> lk(mu_);
    snap_.conversations = std::move(info);
}

Scheduler::Slot* Scheduler::find_slot(const SequenceRef& ref) {
    for (auto& a : active_) {
        if (a->done) continue;
        if (ref.conversation.empty() ? a->index == ref.slot && a->q->req.owner == ref.owner
                                     : a->q->req.conversation == ref.conversation)
            return a.get();
    }
    return nullptr;
}

template <class T>
T Scheduler::on_loop(std::function<T()> fn) {
    auto task = std::make_shared<std::packaged_task<T()>>(std::move(fn));
    std::future<T> result = task->get_future();
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_) throw ServerBusy("the server is shutting down");
        commands_.push_back([task] { (*task)(); });
    }
    cv_.notify_all();
    return result.get();
}

CacheOpResult Scheduler::save(const SequenceRef& ref, const std::string& path) {
    return on_loop<CacheOpResult>([&]() -> CacheOpResult {
        CacheOpResult out;
        auto write = [&](const Session& session, const GenerationState& g) {
            const std::string bytes = encode_sequence(model_, session, encode_generation_state(g));
            check_cache_quota(path, bytes.size(), opts_.cache_quota_bytes);  // 403 past the owner's quota
            try {
                write_file_atomic(path, bytes, std::filesystem::path(path).filename().string());
                std::error_code ec;
                const auto n = std::filesystem::file_size(path, ec);
                out.file_bytes = ec ? 0 : static_cast<uint64_t>(n);
            } catch (const StorageFull& e) {  // the disk, a quota or a size limit: 507 Insufficient Storage
                throw CacheOpError(
                    507, std::string("the sequence could not be saved, the server's storage is full: ") + e.what());
            } catch (const std::exception& e) {
                throw CacheOpError(500, std::string("the sequence could not be saved: ") + e.what());
            }
            const KVStats st = session.cache().stats();
            out.tokens = session.n_tokens();
            out.kv_bytes = st.kv_bytes_final;
        };
        if (!ref.conversation.empty())
            if (ConversationStore::Entry* e = conversations_.find(ref.conversation)) {
                write(*e->session, e->pending);
                out.conversation = ref.conversation;
                out.policy = e->policy_spec;
                return out;
            }
        Slot* s = find_slot(ref);
        if (!s)
            throw CacheOpError(404, ref.conversation.empty()
                                        ? "no request is running in slot " + std::to_string(ref.slot)
                                        : "no conversation '" + ref.conversation + "' is kept or running");
        const int64_t n_prompt = static_cast<int64_t>(s->q->req.prompt.size());
        if (s->prompt_done < n_prompt)
            throw CacheOpError(409, "slot " + std::to_string(s->index) + " is still reading its prompt (" +
                                        std::to_string(s->prompt_done) + " of " + std::to_string(n_prompt) +
                                        " tokens); save it once it generates");
        // The token sampled last has not run yet: run it now, as the next step would, so that the file holds the
        // next token's logits; then the slot samples from them and goes on as if the step had run.
        if (!free_pages_for(pages_needed(1)))
            throw CacheOpError(503, "the KV pool has no page for the slot's next token; try again");
        try {
            s->session->decode(s->last, s->logits);
        } catch (const KVPoolExhausted& e) {  // the step is half done: the slot cannot go on
            fail(*s, 503, std::string("the KV pool is exhausted: ") + e.what());
            throw CacheOpError(503, std::string("the slot's next token did not fit in the KV pool: ") + e.what());
        } catch (const std::exception& e) {
            fail(*s, 500, e.what());
            throw CacheOpError(500, e.what());
        }
        out.slot = s->index;
        out.conversation = s->q->req.conversation;
        out.policy = s->q->req.policy_spec;
        std::string error;
        int status = 500;
        try {
            write(*s->session, GenerationState{s->logits, s->sampler->state()});
        } catch (const CacheOpError& e) {
            error = e.what();
            status = e.status();
        }
        sample_next(*s);
        if (!error.empty()) throw CacheOpError(status, error);
        return out;
    });
}

CacheOpResult Scheduler::restore(std::shared_ptr<const SavedSequence> saved, const std::string& conversation,
                                 const std::string& owner) {
    require(saved != nullptr, "restore: no saved sequence");
    if (conversation.empty()) throw CacheOpError(400, "restore needs a conversation id to keep the sequence under");
    if (opts_.max_conversations == 0)
        throw CacheOpError(409, "this server keeps no conversations (--max-conversations 0)");
    if (static_cast<int64_t>(saved->tokens.size()) >= opts_.n_ctx)
        throw CacheOpError(400, "the saved sequence holds " + std::to_string(saved->tokens.size()) +
                                    " tokens; the server's context holds " + std::to_string(opts_.n_ctx));
    Policy policy;
    GenerationState pending;
    try {
        policy = parse_policy(saved->policy_spec, opts_.policy_options);
        check_policy_fits(policy, opts_.n_ctx);
        pending = decode_generation_state(saved->extra, model_.config().n_vocab);
    } catch (const Error& e) { throw CacheOpError(400, e.what()); }
    return on_loop<CacheOpResult>([&]() -> CacheOpResult {
        for (const auto& a : active_)
            if (!a->done && a->q->req.conversation == conversation)
                throw CacheOpError(409, "a running request has conversation '" + conversation +
                                            "'; restore under another id, or once it ends");
        // The new sequence is built before the one kept under the id goes (a restore that does not fit keeps it,
        // unless the pool had to drop it for room like any other).
        ConversationStore::Entry e;
        try {
            open_sequence(policy, saved.get(), e.cache, e.session);
        } catch (const KVPoolExhausted& ex) {
            throw CacheOpError(503, std::string("the KV pool cannot hold the saved sequence: ") + ex.what());
        } catch (const Error& ex) { throw CacheOpError(400, ex.what()); }
        CacheOpResult out;
        out.conversation = conversation;
        out.tokens = e.session->n_tokens();
        out.kv_bytes = e.cache->stats().kv_bytes_final;
        out.policy = saved->policy_spec;
        e.policy_spec = saved->policy_spec;
        e.owner = owner;
        e.pending = std::move(pending);
        conversations_.put(conversation, std::move(e));
        publish_conversations();
        return out;
    });
}

bool Scheduler::drop(const std::string& conversation) {
    return on_loop<bool>([&] {
        const bool dropped = conversations_.drop(conversation);
        if (dropped) publish_conversations();
        return dropped;
    });
}

std::deque<std::unique_ptr<Scheduler::Queued>>::iterator Scheduler::fairest_queued(
    const std::vector<std::unique_ptr<Slot>>& active, const std::vector<std::unique_ptr<Queued>>& admitted) {
    std::map<std::string, int> running;  // slots each owner holds or is about to
    for (const auto& s : active)
        if (!s->done) ++running[s->q->req.owner];
    for (const auto& q : admitted) ++running[q->req.owner];
    auto rank = [&](const std::string& owner) {  // smaller goes first
        const auto r = running.find(owner);
        const auto t = last_admitted_.find(owner);
        return std::make_pair(r == running.end() ? 0 : r->second, t == last_admitted_.end() ? 0 : t->second);
    };
    auto best = queue_.begin();
    auto best_rank = rank((*best)->req.owner);
    for (auto it = std::next(queue_.begin()); it != queue_.end(); ++it) {
        const auto r = rank((*it)->req.owner);
        if (r < best_rank) {  // strictly: an owner's own requests keep their order
            best = it;
            best_rank = r;
        }
    }
    last_admitted_[(*best)->req.owner] = ++admissions_;
    return best;
}

void Scheduler::loop() {
    std::vector<std::unique_ptr<Slot>>& active = active_;
    auto erase_done = [&] {
        active.erase(std::remove_if(active.begin(), active.end(), [](const auto& s) { return s->done; }), active.end());
    };
    for (;;) {
        std::vector<std::unique_ptr<Queued>> admitted;
        std::deque<std::function<void()>> commands;
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stop_ || !queue_.empty() || !active.empty() || !commands_.empty(); });
            if (stop_) break;
            commands.swap(commands_);
            while (static_cast<int>(active.size() + admitted.size()) < opts_.slots && !queue_.empty()) {
                auto next = fairest_queued(active, admitted);
                admitted.push_back(std::move(*next));
                queue_.erase(next);
            }
            snap_.queued = static_cast<int>(queue_.size());
            working_ = !active.empty() || !admitted.empty();
        }
        for (auto& c : commands) c();  // cache operations, between two steps
        erase_done();
        for (auto& q : admitted)
            if (auto s = admit(std::move(q), active)) active.push_back(std::move(s));
        step(active);
        erase_done();
        std::vector<SchedulerSnapshot::SlotInfo> info;
        for (const auto& s : active) {
            const KVStats st = s->cache->stats();
            SchedulerSnapshot::SlotInfo i;
            i.slot = s->index;
            i.policy = s->q->req.policy_spec;
            i.conversation = s->q->req.conversation;
            i.prompt_tokens = static_cast<int64_t>(s->q->req.prompt.size());
            i.prompt_done = s->prompt_done;
            i.generated = s->generated;
            for (const auto& layer : st.entries)
                for (int64_t n : layer) i.live_entries += n;
            i.kv_bytes = st.kv_bytes_final;
            i.density = st.density;
            i.compression_ratio = st.compression_ratio;
            info.push_back(i);
        }
        {
            std::lock_guard<std::mutex> lk(mu_);
            snap_.active = std::move(info);
            working_ = !active.empty();
            last_progress_ = Clock::now();
            ++rounds_;
        }
        round_done_.notify_all();
    }
    // Stopping: everything still running or waiting ends with an error its client can read; cache operations
    // asked before the stop still run (and find no running slot).
    for (auto& s : active) fail(*s, 503, "the server is shutting down");
    active.clear();
    std::deque<std::function<void()>> commands;
    {
        std::lock_guard<std::mutex> lk(mu_);
        commands.swap(commands_);
    }
    for (auto& c : commands) c();
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& q : queue_) {
        GenerationEvent ev;
        ev.kind = GenerationEvent::Kind::kError;
        ev.status = 503;
        ev.error = "the server is shutting down";
        q->handle->push(std::move(ev));
        abandon_forks(q->forks, 503, "the server is shutting down");
    }
    queue_.clear();
    snap_.running = false;
    snap_.active.clear();
}

}  // namespace kvsieve
