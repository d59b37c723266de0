// CTest label: server (tests/test_labels.h)
// The server's engine and API layer without HTTP: the batched scheduler against one sequence run alone, the KV
// pool shared and exhausted, cancellation, stop strings, the OpenAI request parser and the metrics text.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <thread>
#include <tuple>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "serve/client_socket.h"
#include "serve/connection_threads.h"
#include "serve/http_front.h"
#include "serve/metrics.h"
#include "serve/openai_api.h"
#include "serve/scheduler.h"
#include "session/stop_strings.h"
#include "session/prefill_plan.h"
#include "session/session.h"
#include "test_util.h"
#include "text/chat_prompt.h"

namespace kvsieve {
namespace {

using json = nlohmann::json;

const LlamaModel& model() { return test::stories260k(); }
const Tokenizer& tokenizer() {
    static const auto tok = Tokenizer::from_gguf(model().file());
    return *tok;
}

/// Everything a request produced: its text and its last event.
struct Result {
    std::string text;
    GenerationEvent last;
};

Result collect(RequestHandle& h) {
    Result r;
    GenerationEvent ev;
    for (;;) {
        ev = h.next();
        if (ev.kind != GenerationEvent::Kind::kText) break;
        r.text += ev.text;
    }
    r.last = ev;
    return r;
}

GenerationRequest greedy(const std::string& prompt, int64_t n, const std::string& policy = "full") {
    GenerationRequest g;
    g.prompt = tokenizer().encode(prompt, true, false);
    g.max_tokens = n;
    g.sampling.temp = 0;
    g.policy_spec = policy;
    g.policy = parse_policy(policy);
    return g;
}

/// Up to n greedy tokens from `logits` on, as the scheduler generates them (the last one sampled, not run): the
/// text of their pieces, ending before an end-of-generation token.
std::string greedy_text(Session& s, std::vector<float>& logits, int64_t n) {
    std::string text;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t id = argmax(logits.data(), model().config().n_vocab);
        if (tokenizer().is_eog(id)) break;
        text += tokenizer().token_to_piece(id);
        if (i + 1 < n) s.decode(id, logits);
    }
    return text;
}

/// The same generation with one Session alone: prefill in one batch, greedy decode, text of the pieces.
std::string alone(const GenerationRequest& g, int64_t n_ctx) {
    KVCache cache(model().config(), n_ctx, g.policy, std::make_shared<KVPool>(model().config().head_dim, KVType::kF16));
    Session s(model(), tokenizer(), cache);
    std::vector<float> logits;
    s.prefill(g.prompt, PrefillPlan{}, logits);
    return greedy_text(s, logits, g.max_tokens);
}

/// The greedy answer (n tokens at most) of one full-cache sequence that runs the steps a resumed conversation
/// runs: `first` prefilled, `decoded` fed one decode step each, then `rest` prefilled.
std::string answer_after_steps(const std::vector<int32_t>& first, const std::vector<int32_t>& decoded,
                               const std::vector<int32_t>& rest, int64_t n) {
    KVCache cache(model().config(), 256, parse_policy("full"),
                  std::make_shared<KVPool>(model().config().head_dim, KVType::kF16));
    Session s(model(), tokenizer(), cache);
    std::vector<float> logits;
    s.prefill(first, PrefillPlan{}, logits);
    for (int32_t id : decoded) s.decode(id, logits);
    s.prefill(rest, PrefillPlan{}, logits);
    return greedy_text(s, logits, n);
}

SchedulerOptions options(int slots, int64_t n_ctx = 256) {
    SchedulerOptions o;
    o.slots = slots;
    o.n_ctx = n_ctx;
    o.prefill_chunk = 64;
    return o;
}

TEST(Scheduler, ConcurrentRequestsEachEqualTheSequenceRunAlone) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(3));
    const std::vector<GenerationRequest> reqs = {
        greedy("Once upon a time, there was a little girl named Lily.", 40),
        greedy("The cat sat on the mat and", 25, "h2o:budget=16"),
        greedy("Tom had a big red ball. One day", 30, "streaming_llm:window=12,sinks=2"),
        greedy("Sue liked to sing.", 35, "snapkv:ratio=0.5"), greedy("A dog ran to the park", 20, "tova:budget=10")};
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (const auto& r : reqs) hs.push_back(sched.submit(r));  // five requests, three slots: two wait their turn
    for (size_t i = 0; i < reqs.size(); ++i) {
        SCOPED_TRACE(reqs[i].policy_spec);
        const Result r = collect(*hs[i]);
        ASSERT_EQ(r.last.kind, GenerationEvent::Kind::kDone) << r.last.error;
        EXPECT_EQ(r.text, alone(reqs[i], 256));
        EXPECT_EQ(r.last.usage.prompt_tokens, static_cast<int64_t>(reqs[i].prompt.size()));
        EXPECT_GE(r.last.usage.completion_tokens, 1);
        EXPECT_LE(r.last.usage.completion_tokens, reqs[i].max_tokens);
        if (r.last.finish_reason == "length") EXPECT_EQ(r.last.usage.completion_tokens, reqs[i].max_tokens);
        if (reqs[i].policy_spec == "full") {
            EXPECT_DOUBLE_EQ(r.last.usage.compression_ratio, 0.0);
        } else {
            EXPECT_GT(r.last.usage.compression_ratio, 0.0);
        }
    }
    // Every sequence's pages went back to the shared pool.
    sched.wait_for([](const SchedulerSnapshot& s) { return s.pool_pages_in_use == 0; }, 2.0);
    const SchedulerSnapshot snap = sched.snapshot();
    EXPECT_EQ(snap.pool_pages_in_use, 0);
    EXPECT_EQ(snap.requests_finished, 5);
    EXPECT_GT(snap.decode_rows, 0);
    EXPECT_LT(snap.steps, snap.decode_rows);  // decode steps were batched
    EXPECT_EQ(snap.by_policy.at("full").finished, 1);
}

/// log softmax(row)[id] in long double, written out here (not serve's token_logprob).
double reference_logprob(const float* row, int n_vocab, int32_t id) {
    long double m = row[0];
    for (int i = 1; i < n_vocab; ++i) m = std::max<long double>(m, row[i]);
    long double z = 0;
    for (int i = 0; i < n_vocab; ++i) z += std::exp(static_cast<long double>(row[i]) - m);
    return static_cast<double>(static_cast<long double>(row[id]) - m - std::log(z));
}

TEST(Scheduler, WaitForReturnsOnceTheStateHoldsAndFalseWhenItNeverDoes) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(2));
    // Holds at the call: true without a round.
    EXPECT_TRUE(sched.wait_for([](const SchedulerSnapshot& s) { return s.pool_pages_in_use == 0; }, 0.0));
    // Never holds: false once the time is up (or the scheduler stops), whatever the rounds did.
    EXPECT_FALSE(sched.wait_for([](const SchedulerSnapshot& s) { return s.requests_finished > 0; }, 0.05));
    // A state reached by the scheduler's rounds: the request's pages back in the pool after its last event.
    const auto h = sched.submit(greedy("Once upon a time, there was a little girl named Lily.", 12));
    EXPECT_TRUE(sched.wait_for([](const SchedulerSnapshot& s) { return s.requests_finished == 1; }, 60.0));
    EXPECT_TRUE(sched.wait_for([](const SchedulerSnapshot& s) { return s.pool_pages_in_use == 0; }, 60.0));
    EXPECT_EQ(collect(*h).last.kind, GenerationEvent::Kind::kDone);
    // A stopped scheduler wakes its waiters: the state is checked once more and the answer given.
    sched.stop();
    EXPECT_FALSE(sched.wait_for([](const SchedulerSnapshot& s) { return s.requests_finished > 1; }, 60.0));
}

TEST(Scheduler, PromptAndSampledLogprobsAreTheLogSoftmaxOfOneForwardOverTheWholeText) {
    // The scheduler's chunked prefill (chunks of 5) and its decode steps against one plain forward of the prompt and
    // the answer together on a fresh full cache, all rows' logits, log-softmax computed here. F32 pages: with F16
    // ones a chunk reads the earlier chunks' keys rounded and its own exact, and the two runs cut differently.
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF32);
    SchedulerOptions o = options(2);
    o.prefill_chunk = 5;
    Scheduler sched(model(), tokenizer(), pool, o);
    GenerationRequest g = greedy("Once upon a time, there was a little girl named Lily.", 6);
    g.logprobs = 3;
    g.prompt_logprobs = true;
    const auto h = sched.submit(g);
    std::vector<TokenLogprob> prompt_lp, sampled;
    GenerationEvent ev;
    for (ev = h->next(); ev.kind == GenerationEvent::Kind::kText; ev = h->next()) {
        prompt_lp.insert(prompt_lp.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());
        sampled.insert(sampled.end(), ev.logprobs.begin(), ev.logprobs.end());
    }
    ASSERT_EQ(ev.kind, GenerationEvent::Kind::kDone) << ev.error;
    ASSERT_EQ(prompt_lp.size(), g.prompt.size());
    ASSERT_GE(sampled.size(), 1u);
    EXPECT_TRUE(std::isnan(prompt_lp[0].logprob));
    EXPECT_TRUE(prompt_lp[0].top.empty());
    std::vector<int32_t> all = g.prompt;
    for (const TokenLogprob& t : sampled) all.push_back(t.token);
    KVCache cache(model().config(), 256, parse_policy("full"), pool);
    std::vector<float> logits;
    model().forward(StepPhase::kPrefill, all, cache, logits, true);
    const int V = model().config().n_vocab;
    for (size_t i = 1; i < all.size(); ++i) {
        const TokenLogprob& t = i < g.prompt.size() ? prompt_lp[i] : sampled[i - g.prompt.size()];
        SCOPED_TRACE(i);
        EXPECT_EQ(t.token, all[i]);
        EXPECT_NEAR(t.logprob, reference_logprob(logits.data() + (i - 1) * V, V, all[i]), 1e-4);
        ASSERT_EQ(t.top.size(), 3u);
        for (size_t k = 0; k < 3; ++k)
            EXPECT_NEAR(t.top[k].second, reference_logprob(logits.data() + (i - 1) * V, V, t.top[k].first), 1e-4);
        EXPECT_GE(t.top[0].second, t.top[1].second);
        EXPECT_GE(t.top[1].second, t.top[2].second);
        if (i >= g.prompt.size()) EXPECT_EQ(t.top[0].first, t.token);  // greedy: the sampled token is the top one
    }
}

TEST(Scheduler, ChoicesShareThePromptsPrefillAndEachEqualsARequestWithItsSeed) {
    for (const std::string policy : {"full", "streaming_llm:window=12,sinks=2"}) {
        SCOPED_TRACE(policy);
        auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
        Scheduler sched(model(), tokenizer(), pool, options(2));
        GenerationRequest g = greedy("Once upon a time, there was a little girl named Lily.", 12, policy);
        g.sampling.temp = 1.0f;
        g.sampling.seed = 40;
        g.logprobs = 0;
        g.prompt_logprobs = true;
        const auto hs = sched.submit_choices(g, 3);
        ASSERT_EQ(hs.size(), 3u);
        std::vector<std::string> texts;
        std::vector<std::vector<TokenLogprob>> prompts(3);
        for (size_t i = 0; i < hs.size(); ++i) {
            std::string text;
            GenerationEvent ev;
            for (ev = hs[i]->next(); ev.kind == GenerationEvent::Kind::kText; ev = hs[i]->next()) {
                text += ev.text;
                prompts[i].insert(prompts[i].end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());
            }
            ASSERT_EQ(ev.kind, GenerationEvent::Kind::kDone) << ev.error;
            texts.push_back(text);
        }
        // The prompt ran once: the other choices started from its prefilled sequence.
        EXPECT_EQ(sched.snapshot().prefill_rows, static_cast<int64_t>(g.prompt.size()));
        ASSERT_EQ(prompts[0].size(), g.prompt.size());
        for (size_t i = 1; i < 3; ++i) {
            ASSERT_EQ(prompts[i].size(), prompts[0].size());
            for (size_t j = 1; j < prompts[0].size(); ++j) EXPECT_EQ(prompts[i][j].logprob, prompts[0][j].logprob);
        }
        // Each choice is the request of one choice with the seed + i, run alone.
        for (size_t i = 0; i < 3; ++i) {
            GenerationRequest one = g;
            one.sampling.seed = 40 + i;
            one.prompt_logprobs = false;
            EXPECT_EQ(collect(*sched.submit(one)).text, texts[i]) << i;
        }
        EXPECT_NE(texts[0] + texts[1], texts[1] + texts[2]);  // the seeds differ
    }
}

TEST(Scheduler, MaxTokensZeroRunsThePromptAndSamplesNothing) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(1));
    GenerationRequest g = greedy("The cat sat on the mat and", 0);
    g.logprobs = 0;
    g.prompt_logprobs = true;
    const Result r = collect(*sched.submit(g));
    ASSERT_EQ(r.last.kind, GenerationEvent::Kind::kDone) << r.last.error;
    EXPECT_EQ(r.text, "");
    EXPECT_EQ(r.last.usage.completion_tokens, 0);
    EXPECT_EQ(r.last.finish_reason, "length");
}

TEST(Sampler, PresenceAndFrequencyPenaltiesFollowOpenAIsFormula) {
    // Greedy over logits where token 0 leads by 1.5: drawn once it loses 0.5 + 1·0.6 = 1.1 (still ahead), twice
    // 0.5 + 2·0.6 = 1.7 (behind token 1, which then pays 1.1 and token 0 wins again: 1.5 − 1.7 vs −1.1).
    SamplerParams p;
    p.temp = 0;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.6f;
    Sampler s(p);
    const std::vector<float> logits = {1.5f, 0.0f, -5.0f};
    std::vector<int32_t> drawn;
    for (int i = 0; i < 4; ++i) drawn.push_back(s.sample(logits.data(), 3));
    EXPECT_EQ(drawn, (std::vector<int32_t>{0, 0, 1, 0}));
    p.presence_penalty = std::nanf("");
    EXPECT_THROW(p.validate(), Error);
}

TEST(Scheduler, AnAfterPrefillPolicyIsFedInOnePieceAsOnTheCommandLine) {
    // The one chunk planner (session/prefill_plan.h): KVzip scores the whole prompt after the prefill, so the server
    // feeds its prompt in one piece however small --prefill-chunk is, and answers as one Session prefilled in one
    // batch does; H2O scores from each chunk's queries, so it is fed in one
    // piece unless compressing during the prefill; a per-entry scorer is fed in chunks of the given size.
    const Policy kvzip = parse_policy("kvzip:ratio=0.5"), h2o = parse_policy("h2o:budget=16"),
                 stream = parse_policy("streaming_llm:window=12,sinks=2");
    EXPECT_EQ(planned_chunk(kvzip, 16, true, true), 0);
    EXPECT_TRUE(chunk_overruled(kvzip, 16, true, true));
    EXPECT_EQ(planned_chunk(kvzip, 16), 0);
    EXPECT_EQ(planned_chunk(kvzip, 16, false, true), 16);  // only extending the cache: no step runs, chunks are fine
    EXPECT_EQ(planned_chunk(h2o, 16), 0);
    EXPECT_EQ(planned_chunk(h2o, 16, true, true), 16);
    EXPECT_EQ(planned_chunk(stream, 16), 16);
    EXPECT_FALSE(chunk_overruled(kvzip, 0, true, true));
    const PrefillChunk a = next_prefill_chunk(40, 0, 16), b = next_prefill_chunk(40, 32, 16),
                       c = next_prefill_chunk(40, 5, 0);
    EXPECT_EQ(std::make_tuple(a.begin, a.end, a.last), std::make_tuple(int64_t{0}, int64_t{16}, false));
    EXPECT_EQ(std::make_tuple(b.begin, b.end, b.last), std::make_tuple(int64_t{32}, int64_t{40}, true));
    EXPECT_EQ(std::make_tuple(c.begin, c.end, c.last), std::make_tuple(int64_t{5}, int64_t{40}, true));
    EXPECT_THROW(next_prefill_chunk(40, 40, 16), Error);
    EXPECT_THROW(planned_chunk(h2o, -1), Error);

    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    SchedulerOptions o = options(1);
    o.prefill_chunk = 8;
    Scheduler sched(model(), tokenizer(), pool, o);
    const GenerationRequest req = greedy(
        "Once upon a time, there was a little girl named Lily. She loved to play "
        "outside in the park with her friend Ben.",
        16, "kvzip:ratio=0.5");
    ASSERT_GT(req.prompt.size(), 8u);
    const Result r = collect(*sched.submit(req));
    ASSERT_EQ(r.last.kind, GenerationEvent::Kind::kDone) << r.last.error;
    EXPECT_EQ(r.text, alone(req, 256));
    EXPECT_GT(r.last.usage.compression_ratio, 0.0);
    EXPECT_EQ(sched.snapshot().steps, sched.snapshot().decode_rows + 1);  // one prefill step, then one per token
}

TEST(Scheduler, ExhaustedPoolFailsOnlyTheRequestThatDoesNotFit) {
    const ModelConfig& c = model().config();
    // Room for one sequence of ~64 tokens per head (4 pages of 16), not two.
    const int64_t pages = static_cast<int64_t>(c.n_layer) * c.n_head_kv * 6;
    auto pool =
        std::make_shared<KVPool>(c.head_dim, KVType::kF16, 16, static_cast<uint64_t>(pages) * 16 * c.head_dim * 2 * 2);
    ASSERT_EQ(pool->capacity_pages(), pages);
    Scheduler sched(model(), tokenizer(), pool, options(2));
    const GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily. She loved to play.", 40);
    auto ha = sched.submit(a);
    GenerationEvent ev = ha->next();
    ASSERT_EQ(ev.kind, GenerationEvent::Kind::kText);  // a runs
    std::string text_a = ev.text;
    auto hb = sched.submit(greedy("Once upon a time, there was a little girl named Lily. She loved to play.", 40));
    const Result rb = collect(*hb);
    ASSERT_EQ(rb.last.kind, GenerationEvent::Kind::kError);
    EXPECT_EQ(rb.last.status, 503);
    EXPECT_NE(rb.last.error.find("KV pool is exhausted"), std::string::npos) << rb.last.error;
    const Result ra = collect(*ha);
    ASSERT_EQ(ra.last.kind, GenerationEvent::Kind::kDone) << ra.last.error;
    EXPECT_EQ(text_a + ra.text, alone(a, 256));  // untouched by b's failure
    EXPECT_GE(sched.snapshot().requests_refused, 1);
    // Once a has finished, the same request fits.
    const Result again = collect(*sched.submit(greedy("Once upon a time", 10)));
    EXPECT_EQ(again.last.kind, GenerationEvent::Kind::kDone) << again.last.error;
}

TEST(Scheduler, QueueWaitsForMemoryInsteadOfFailing) {
    const ModelConfig& c = model().config();
    const int64_t pages = static_cast<int64_t>(c.n_layer) * c.n_head_kv * 6;
    auto pool =
        std::make_shared<KVPool>(c.head_dim, KVType::kF16, 16, static_cast<uint64_t>(pages) * 16 * c.head_dim * 2 * 2);
    SchedulerOptions o = options(2);
    o.wait_for_memory = true;
    Scheduler sched(model(), tokenizer(), pool, o);
    const GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily. She loved to play.", 40);
    auto ha = sched.submit(a);
    auto hb = sched.submit(a);
    const Result ra = collect(*ha), rb = collect(*hb);
    EXPECT_EQ(ra.last.kind, GenerationEvent::Kind::kDone) << ra.last.error;
    EXPECT_EQ(rb.last.kind, GenerationEvent::Kind::kDone) << rb.last.error;
    EXPECT_EQ(ra.text, rb.text);
}

TEST(Scheduler, CancelFreesThePagesAndOthersGoOn) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(2, 512));
    const GenerationRequest b = greedy("The cat sat on the mat and", 30);
    auto ha = sched.submit(greedy("Once upon a time", 400));
    auto hb = sched.submit(b);
    GenerationEvent ev = ha->next();
    ha->cancel();
    const Result rb = collect(*hb);
    ASSERT_EQ(rb.last.kind, GenerationEvent::Kind::kDone);
    EXPECT_EQ(rb.text, alone(b, 512));
    sched.wait_for([](const SchedulerSnapshot& s) { return s.pool_pages_in_use == 0; }, 2.0);
    EXPECT_EQ(sched.snapshot().pool_pages_in_use, 0);
    EXPECT_EQ(sched.snapshot().requests_cancelled, 1);
}

TEST(Scheduler, StopStringEndsTheAnswerBeforeIt) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(1));
    GenerationRequest g = greedy("Once upon a time, there was a little girl named Lily.", 40);
    const std::string full = alone(g, 256);
    const size_t cut = full.find(' ', 8);
    ASSERT_NE(cut, std::string::npos);
    const std::string stop = full.substr(cut, 3);
    g.stop = {stop};
    const Result r = collect(*sched.submit(g));
    ASSERT_EQ(r.last.kind, GenerationEvent::Kind::kDone);
    EXPECT_EQ(r.last.finish_reason, "stop");
    EXPECT_EQ(r.text, full.substr(0, full.find(stop)));
}

TEST(Scheduler, BadRequestsAndAFullQueueAreOneErrorEach) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    SchedulerOptions o = options(1, 64);
    o.max_queue = 0;
    Scheduler sched(model(), tokenizer(), pool, o);
    GenerationRequest g = greedy("Once", 5);
    g.prompt.clear();
    EXPECT_THROW(sched.submit(g), Error);
    g = greedy("Once", 5);
    g.prompt.assign(64, 5);
    EXPECT_THROW(sched.submit(g), Error);  // no room left for an answer
    g = greedy("Once", -1);
    EXPECT_THROW(sched.submit(g), Error);
    g = greedy("Once", 5);
    g.logprobs = 21;
    EXPECT_THROW(sched.submit(g), Error);
    g = greedy("Once", 5);
    g.prompt_logprobs = true;
    g.conversation = "c";
    EXPECT_THROW(sched.submit(g), Error);  // its first tokens may come from a kept sequence
    g = greedy("Once", 5, "tova:budget=100");
    EXPECT_THROW(sched.submit(g), Error);  // budget larger than the context
    auto h1 = sched.submit(greedy("Once upon a time", 50));
    try {
        auto h2 = sched.submit(greedy("Once upon a time", 50));
        auto h3 = sched.submit(greedy("Once upon a time", 50));
        ADD_FAILURE() << "a third request found room in a queue of 0";
    } catch (const ServerBusy& e) {
        EXPECT_NE(std::string(e.what()).find("--max-queue"), std::string::npos) << e.what();
    }
    EXPECT_THROW(SchedulerOptions bad = options(0); Scheduler(model(), tokenizer(), pool, bad), Error);
}

TEST(Scheduler, SavedSequenceContinuesAsIfNeverSaved) {
    // 10 greedy tokens saved at the end, then 15 more from the file with no new text == 25 in one request; then
    // new text after a saved sequence equals the same text appended in one prompt.
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(2));
    test::TempFile file(".kvseq");
    for (const std::string policy : {"full", "h2o:budget=16"}) {
        SCOPED_TRACE(policy);
        GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily.", 10, policy);
        a.save_path = file.path();
        const Result ra = collect(*sched.submit(a));
        ASSERT_EQ(ra.last.kind, GenerationEvent::Kind::kDone) << ra.last.error;
        EXPECT_GT(ra.last.usage.saved_bytes, 0u);
        GenerationRequest b = greedy("", 15, policy);
        b.prompt.clear();
        b.restore = std::make_shared<const SavedSequence>(read_sequence(file.path(), model()));
        const Result rb = collect(*sched.submit(b));
        ASSERT_EQ(rb.last.kind, GenerationEvent::Kind::kDone) << rb.last.error;
        EXPECT_EQ(ra.text + rb.text,
                  alone(greedy("Once upon a time, there was a little girl named Lily.", 25, policy), 256));
    }
    // The slot is dropped, and its pages returned, just after its last event.
    sched.wait_for([](const SchedulerSnapshot& s) { return s.pool_pages_in_use == 0; }, 2.0);
    EXPECT_EQ(sched.snapshot().pool_pages_in_use, 0);
}

TEST(Scheduler, AFailedSaveKeepsTheAnswerAndSaysWhy) {
    // The folder does not exist, so the file cannot be written: the request still ends normally with its whole
    // answer, and the usage says why nothing was saved (without the server's folders).
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(1));
    GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily.", 6);
    a.save_path = (std::filesystem::temp_directory_path() / "kvsieve_no_such_folder_x9" / "s.kvseq").string();
    const Result r = collect(*sched.submit(a));
    ASSERT_EQ(r.last.kind, GenerationEvent::Kind::kDone) << r.last.error;
    EXPECT_EQ(r.text, alone(greedy("Once upon a time, there was a little girl named Lily.", 6), 256));
    EXPECT_EQ(r.last.usage.saved_bytes, 0u);
    EXPECT_NE(r.last.usage.cache_save_error.find("'s.kvseq'"), std::string::npos) << r.last.usage.cache_save_error;
    EXPECT_EQ(r.last.usage.cache_save_error.find("kvsieve_no_such_folder_x9"), std::string::npos)
        << r.last.usage.cache_save_error;
    EXPECT_EQ(usage_json(r.last.usage)["cache_save_error"], r.last.usage.cache_save_error);
    EXPECT_FALSE(usage_json(GenerationUsage{}).contains("cache_save_error"));
}

/// The greedy ids a sequence alone generates after `prompt` (n of them, the last one sampled and not run).
std::vector<int32_t> greedy_ids(const std::vector<int32_t>& prompt, int64_t n) {
    KVCache cache(model().config(), 256, parse_policy("full"),
                  std::make_shared<KVPool>(model().config().head_dim, KVType::kF16));
    Session s(model(), tokenizer(), cache);
    std::vector<float> logits;
    s.prefill(prompt, PrefillPlan{}, logits);
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < n; ++i) {
        ids.push_back(argmax(logits.data(), model().config().n_vocab));
        if (i + 1 < n) s.decode(ids.back(), logits);
    }
    return ids;
}

void wait_for_pages(const Scheduler& sched, int64_t pages) {
    sched.wait_for([pages](const SchedulerSnapshot& s) { return s.pool_pages_in_use == pages; }, 2.0);
}

TEST(Scheduler, AConversationsNextTurnFeedsOnlyItsNewTokens) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(1));
    GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily.", 10);
    a.conversation = "c1";
    const std::vector<int32_t> p1 = a.prompt;
    const Result ra = collect(*sched.submit(a));
    ASSERT_EQ(ra.last.kind, GenerationEvent::Kind::kDone) << ra.last.error;
    ASSERT_EQ(ra.last.finish_reason, "length");
    EXPECT_EQ(ra.last.usage.cached_tokens, 0);
    // Kept: the prompt and the answer but its last token (sampled, not run), in pages of the pool.
    SchedulerSnapshot snap = sched.snapshot();
    ASSERT_EQ(snap.conversations.size(), 1u);
    EXPECT_EQ(snap.conversations[0].id, "c1");
    EXPECT_EQ(snap.conversations[0].tokens, static_cast<int64_t>(p1.size()) + 9);
    EXPECT_GT(snap.pool_pages_in_use, 0);
    EXPECT_EQ(static_cast<int64_t>(snap.conversations[0].kv_bytes), snap.pool_pages_in_use * snap.pool_page_bytes);

    // The next turn: the whole history (prompt, answer, new text) is sent; only the new part is run, and the
    // answer is that of one sequence that ran the same steps (prefill, 9 decode steps, then the new text).
    const std::vector<int32_t> gen = greedy_ids(p1, 10);
    const std::vector<int32_t> more = tokenizer().encode(" She saw a big dog.", false, false);
    GenerationRequest b = greedy("", 12);
    b.prompt = p1;
    b.prompt.insert(b.prompt.end(), gen.begin(), gen.end());
    b.prompt.insert(b.prompt.end(), more.begin(), more.end());
    b.conversation = "c1";
    const Result rb = collect(*sched.submit(b));
    ASSERT_EQ(rb.last.kind, GenerationEvent::Kind::kDone) << rb.last.error;
    EXPECT_EQ(rb.last.usage.cached_tokens, static_cast<int64_t>(p1.size()) + 9);
    EXPECT_EQ(rb.last.usage.prompt_tokens, static_cast<int64_t>(b.prompt.size()));
    std::vector<int32_t> rest = {gen[9]};
    rest.insert(rest.end(), more.begin(), more.end());
    EXPECT_EQ(rb.text, answer_after_steps(p1, std::vector<int32_t>(gen.begin(), gen.begin() + 9), rest, 12));
    EXPECT_EQ(sched.snapshot().prompt_tokens_cached, static_cast<int64_t>(p1.size()) + 9);
    // The same prompt again: all but its last token are reused (that one runs to give the next token's logits).
    GenerationRequest same = b;
    same.max_tokens = 3;
    const Result rs = collect(*sched.submit(same));
    ASSERT_EQ(rs.last.kind, GenerationEvent::Kind::kDone) << rs.last.error;
    EXPECT_EQ(rs.last.usage.cached_tokens, static_cast<int64_t>(b.prompt.size()) - 1);
    // A prompt that leaves the kept tokens part way rolls the conversation back to where they agree.
    GenerationRequest a2 = a;
    a2.conversation = "c2";
    ASSERT_EQ(collect(*sched.submit(a2)).last.kind, GenerationEvent::Kind::kDone);
    GenerationRequest e = greedy("", 8);
    e.prompt = p1;
    e.prompt.insert(e.prompt.end(), gen.begin(), gen.begin() + 5);
    e.prompt.insert(e.prompt.end(), more.begin(), more.end());
    e.conversation = "c2";
    const Result re = collect(*sched.submit(e));
    ASSERT_EQ(re.last.kind, GenerationEvent::Kind::kDone) << re.last.error;
    EXPECT_EQ(re.last.usage.cached_tokens, static_cast<int64_t>(p1.size()) + 5);
    EXPECT_EQ(re.text, answer_after_steps(p1, std::vector<int32_t>(gen.begin(), gen.begin() + 5), more, 8));
    EXPECT_TRUE(sched.drop("c2"));
    // A prompt that shares nothing with the kept tokens starts afresh (nothing cached) and replaces them.
    GenerationRequest c = greedy("", 5);
    c.prompt = tokenizer().encode("The cat sat on the mat and", false, false);
    c.conversation = "c1";
    const Result rc = collect(*sched.submit(c));
    ASSERT_EQ(rc.last.kind, GenerationEvent::Kind::kDone) << rc.last.error;
    EXPECT_EQ(rc.last.usage.cached_tokens, 0);
    EXPECT_EQ(rc.text, alone(c, 256));
    // Another policy for a kept conversation is refused (409); dropping it frees its pages.
    GenerationRequest d = greedy("The cat sat on the mat and", 5, "h2o:budget=16");
    d.conversation = "c1";
    d.policy_given = true;
    const Result rd = collect(*sched.submit(d));
    ASSERT_EQ(rd.last.kind, GenerationEvent::Kind::kError);
    EXPECT_EQ(rd.last.status, 409);
    EXPECT_NE(rd.last.error.find("runs kv_policy 'full'"), std::string::npos) << rd.last.error;
    EXPECT_TRUE(sched.drop("c1"));
    EXPECT_FALSE(sched.drop("c1"));
    wait_for_pages(sched, 0);
    EXPECT_EQ(sched.snapshot().pool_pages_in_use, 0);
    EXPECT_TRUE(sched.snapshot().conversations.empty());
}

TEST(Scheduler, KeptConversationsGiveTheirPagesToRunningRequests) {
    const ModelConfig& c = model().config();
    const int64_t pages = static_cast<int64_t>(c.n_layer) * c.n_head_kv * 6;  // one ~64-token sequence
    auto pool =
        std::make_shared<KVPool>(c.head_dim, KVType::kF16, 16, static_cast<uint64_t>(pages) * 16 * c.head_dim * 2 * 2);
    SchedulerOptions o = options(1);
    o.max_conversations = 2;
    Scheduler sched(model(), tokenizer(), pool, o);
    GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily. She loved to play.", 30);
    a.conversation = "kept";
    ASSERT_EQ(collect(*sched.submit(a)).last.kind, GenerationEvent::Kind::kDone);
    ASSERT_EQ(sched.snapshot().conversations.size(), 1u);
    // The kept conversation holds most of the pool: a new request gets its pages instead of a 503.
    const GenerationRequest b = greedy("Once upon a time, there was a little girl named Lily. She loved to play.", 30);
    const Result rb = collect(*sched.submit(b));
    ASSERT_EQ(rb.last.kind, GenerationEvent::Kind::kDone) << rb.last.error;
    EXPECT_EQ(rb.text, alone(b, 256));
    const SchedulerSnapshot snap = sched.snapshot();
    EXPECT_TRUE(snap.conversations.empty());
    EXPECT_EQ(snap.conversations_dropped, 1);
    // At most max_conversations are kept: the least recently used goes.
    for (const std::string id : {"x", "y", "z"}) {
        GenerationRequest g = greedy("Once upon a time", 3);
        g.conversation = id;
        ASSERT_EQ(collect(*sched.submit(g)).last.kind, GenerationEvent::Kind::kDone);
    }
    std::vector<std::string> ids;
    for (const auto& k : sched.snapshot().conversations) ids.push_back(k.id);
    EXPECT_EQ(ids, (std::vector<std::string>{"y", "z"}));
}

TEST(Scheduler, OneOwnersNewConversationsEvictItsOwnNotAnothers) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    SchedulerOptions o = options(1);
    o.max_conversations = 3;
    Scheduler sched(model(), tokenizer(), pool, o);
    auto keep = [&](const std::string& owner, const std::string& id) {
        GenerationRequest g = greedy("Once upon a time", 3);
        g.owner = owner;
        g.conversation = scoped_id(owner, id);
        ASSERT_EQ(collect(*sched.submit(g)).last.kind, GenerationEvent::Kind::kDone);
    };
    keep("alice", "kept");  // the oldest of all
    for (int i = 0; i < 5; ++i) keep("bob", std::to_string(i));
    std::vector<std::string> ids;
    for (const auto& k : sched.snapshot().conversations) ids.push_back(k.id);
    // Bob keeps the most, so his least recently used go; Alice's one conversation stays although it is the oldest.
    EXPECT_EQ(ids,
              (std::vector<std::string>{scoped_id("alice", "kept"), scoped_id("bob", "3"), scoped_id("bob", "4")}));
    // Once Alice keeps the most, her own least recently used goes first.
    keep("alice", "a");
    keep("alice", "b");
    ids.clear();
    for (const auto& k : sched.snapshot().conversations) ids.push_back(k.id);
    EXPECT_EQ(ids, (std::vector<std::string>{scoped_id("alice", "a"), scoped_id("alice", "b"), scoped_id("bob", "4")}));
}

TEST(Scheduler, PagesForARunningRequestComeFromTheOwnerKeepingTheMostBytes) {
    const ModelConfig& c = model().config();
    const int64_t pages = static_cast<int64_t>(c.n_layer) * c.n_head_kv * 6;  // 6 pages of 16 entries per KV head
    auto pool =
        std::make_shared<KVPool>(c.head_dim, KVType::kF16, 16, static_cast<uint64_t>(pages) * 16 * c.head_dim * 2 * 2);
    SchedulerOptions o = options(1);
    o.max_conversations = 4;
    Scheduler sched(model(), tokenizer(), pool, o);
    GenerationRequest a = greedy("Once upon a time", 2);  // one page per KV head, kept first (least recently used)
    a.owner = "alice";
    a.conversation = scoped_id("alice", "short");
    ASSERT_EQ(collect(*sched.submit(a)).last.kind, GenerationEvent::Kind::kDone);
    GenerationRequest b = greedy("Once upon a time, there was a little girl named Lily.", 24);  // three pages
    b.owner = "bob";
    b.conversation = scoped_id("bob", "long");
    ASSERT_EQ(collect(*sched.submit(b)).last.kind, GenerationEvent::Kind::kDone);
    ASSERT_EQ(sched.snapshot().conversations.size(), 2u);
    // A third key's request needs more than the free pages: Bob's conversation, holding the most, gives its pages,
    // and Alice's older one stays.
    GenerationRequest r = greedy("Once upon a time, there was a little girl named Lily. She loved to play.", 30);
    r.owner = "carol";
    const Result rr = collect(*sched.submit(r));
    ASSERT_EQ(rr.last.kind, GenerationEvent::Kind::kDone) << rr.last.error;
    EXPECT_EQ(rr.text, alone(r, 256));
    const SchedulerSnapshot snap = sched.snapshot();
    ASSERT_EQ(snap.conversations.size(), 1u);
    EXPECT_EQ(snap.conversations[0].id, scoped_id("alice", "short"));
    EXPECT_EQ(snap.conversations_dropped, 1);
}

TEST(Scheduler, FreeSlotsGoToTheOwnerRunningTheFewest) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    SchedulerOptions o = options(1, 512);
    Scheduler sched(model(), tokenizer(), pool, o);
    // Alice's first request holds the one slot (its first token is out) while three more arrive: two of Alice's,
    // then Bob's. When it stops (cancelled, so no timing decides when), Bob's goes next; Alice's own keep their order.
    GenerationRequest first = greedy("Once upon a time", 480);
    first.owner = "alice";
    auto holder = sched.submit(first);
    ASSERT_EQ(holder->next().kind, GenerationEvent::Kind::kText);
    std::vector<std::pair<std::string, GenerationRequest>> reqs;
    for (const std::string name : {"alice-2", "alice-3", "bob-1"}) {
        GenerationRequest g = greedy("Once upon a time", 4);
        g.owner = name.substr(0, name.find('-'));
        reqs.emplace_back(name, std::move(g));
    }
    // The order is read from when each one started (its submission plus its queue time), not from when a client
    // thread got to record it: with one slot they run one after another, so their starts are whole runs apart.
    std::mutex mu;
    std::vector<std::pair<double, std::string>> started;
    std::vector<std::thread> clients;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& [name, g] : reqs) {
        const double submitted = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        auto h = sched.submit(g);
        clients.emplace_back([h, name = name, submitted, &mu, &started] {
            const Result r = collect(*h);
            std::lock_guard<std::mutex> lk(mu);
            started.emplace_back(submitted + r.last.usage.queue_s, r.last.kind == GenerationEvent::Kind::kDone
                                                                       ? name
                                                                       : name + " failed: " + r.last.error);
        });
    }
    holder->cancel();  // as a client that goes away: its request ends without a last event
    for (auto& t : clients) t.join();
    std::sort(started.begin(), started.end());
    std::vector<std::string> finished;
    for (const auto& s : started) finished.push_back(s.second);
    EXPECT_EQ(finished, (std::vector<std::string>{"bob-1", "alice-2", "alice-3"}));
}

TEST(Scheduler, ARequestThatCanNeverFitIsA413BeforeAnyConversationIsDropped) {
    const ModelConfig& c = model().config();
    const int64_t pages = static_cast<int64_t>(c.n_layer) * c.n_head_kv * 6;  // one ~96-token sequence in all
    auto pool =
        std::make_shared<KVPool>(c.head_dim, KVType::kF16, 16, static_cast<uint64_t>(pages) * 16 * c.head_dim * 2 * 2);
    SchedulerOptions o = options(1);
    o.max_conversations = 2;
    Scheduler sched(model(), tokenizer(), pool, o);
    GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily.", 10);
    a.conversation = "kept";
    ASSERT_EQ(collect(*sched.submit(a)).last.kind, GenerationEvent::Kind::kDone);
    ASSERT_EQ(sched.snapshot().conversations.size(), 1u);
    // Prompt and 200 tokens under a policy that drops nothing: more pages than the whole pool has.
    try {
        sched.submit(greedy("Once upon a time, there was a little girl named Lily.", 200));
        FAIL() << "a request larger than the pool was queued";
    } catch (const StatusError& e) {
        EXPECT_EQ(e.status(), 413);
        EXPECT_NE(std::string(e.what()).find("can never fit"), std::string::npos) << e.what();
    }
    const SchedulerSnapshot snap = sched.snapshot();
    EXPECT_EQ(snap.conversations.size(), 1u);  // nobody's kept conversation was dropped for it
    EXPECT_EQ(snap.conversations_dropped, 0);
    // The same without a max_tokens of the client's (a default that may stop early) is not refused up front.
    GenerationRequest d = greedy("Once upon a time, there was a little girl named Lily.", 200);
    d.max_tokens_given = false;
    EXPECT_NO_THROW(collect(*sched.submit(d)));
    // A compressing policy may hold it: it is not refused up front.
    const Result r =
        collect(*sched.submit(greedy("Once upon a time, there was a little girl named Lily.", 200, "h2o:budget=16")));
    EXPECT_EQ(r.last.kind, GenerationEvent::Kind::kDone) << r.last.error;
}

TEST(Scheduler, DrainRefusesNewRequestsAndLetsRunningOnesFinish) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(1));
    EXPECT_TRUE(sched.idle());
    EXPECT_EQ(sched.snapshot().stalled_s, 0.0);
    const GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily.", 20);
    auto h = sched.submit(a);
    auto queued = sched.submit(greedy("Once upon a time", 5));  // waits for the one slot
    EXPECT_FALSE(sched.idle());
    sched.drain();
    EXPECT_TRUE(sched.snapshot().draining);
    EXPECT_THROW(sched.submit(greedy("Once upon a time", 5)), ServerBusy);
    const Result r = collect(*h);
    ASSERT_EQ(r.last.kind, GenerationEvent::Kind::kDone) << r.last.error;
    EXPECT_EQ(r.text, alone(a, 256));                                     // untouched by the drain
    EXPECT_EQ(collect(*queued).last.kind, GenerationEvent::Kind::kDone);  // the queued one runs too
    sched.wait_for([&sched](const SchedulerSnapshot&) { return sched.idle(); }, 2.0);
    EXPECT_TRUE(sched.idle());
}

TEST(Scheduler, FinishedRequestsFillTheLatencyAndSizeHistograms) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(2));
    const GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily.", 8);
    const Result r = collect(*sched.submit(a));
    ASSERT_EQ(r.last.kind, GenerationEvent::Kind::kDone) << r.last.error;
    const SchedulerSnapshot s = sched.snapshot();
    EXPECT_EQ(s.time_to_first_token_s.count, 1);
    EXPECT_EQ(s.request_duration_s.count, 1);
    EXPECT_EQ(s.queue_time_s.count, 1);
    EXPECT_GE(s.request_duration_s.sum, s.time_to_first_token_s.sum);
    EXPECT_EQ(s.request_prompt_tokens.sum, static_cast<double>(a.prompt.size()));
    EXPECT_EQ(s.request_generated_tokens.sum, static_cast<double>(r.last.usage.completion_tokens));
    EXPECT_EQ(s.inter_token_s.count, r.last.usage.completion_tokens - 1);  // one per token after the first
    EXPECT_EQ(s.finish_reasons.at(r.last.finish_reason), 1);
}

TEST(Scheduler, ACancelledTurnKeepsItsConversation) {
    // A client that stops a turn keeps its history: what ran before the cancel stays under the id.
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(1, 512));
    GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily.", 400);
    a.conversation = "stopped";
    auto h = sched.submit(a);
    ASSERT_EQ(h->next().kind, GenerationEvent::Kind::kText);
    h->cancel();
    sched.wait_for([](const SchedulerSnapshot& s) { return !s.conversations.empty(); }, 2.0);
    const SchedulerSnapshot snap = sched.snapshot();
    ASSERT_EQ(snap.conversations.size(), 1u);
    EXPECT_EQ(snap.conversations[0].id, "stopped");
    EXPECT_GE(snap.conversations[0].tokens, static_cast<int64_t>(a.prompt.size()));
    EXPECT_EQ(snap.requests_cancelled, 1);
    // The next turn goes on from it.
    GenerationRequest b = greedy("", 4);
    b.prompt = a.prompt;
    const auto more = tokenizer().encode(" The end.", false, false);
    b.prompt.insert(b.prompt.end(), more.begin(), more.end());
    b.conversation = "stopped";
    const Result rb = collect(*sched.submit(b));
    ASSERT_EQ(rb.last.kind, GenerationEvent::Kind::kDone) << rb.last.error;
    EXPECT_EQ(rb.last.usage.cached_tokens, static_cast<int64_t>(a.prompt.size()));
}

TEST(Scheduler, ASavedRunningSlotContinuesExactlyAsTheRequestDoes) {
    // Save slot 0 while it generates; the request goes on untouched, and the file restored with no new text
    // generates exactly the rest of its answer (greedy, and sampled with a seed: the sampler's state is saved).
    for (const bool sampled : {false, true}) {
        SCOPED_TRACE(sampled);
        auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
        Scheduler sched(model(), tokenizer(), pool, options(2));
        test::TempFile file(".kvseq");
        GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily.", 40, "h2o:budget=24");
        if (sampled) {
            a.sampling.temp = 0.9f;
            a.sampling.seed = 7;
        }
        const GenerationRequest reference = a;
        const std::string whole = collect(*sched.submit(reference)).text;  // the same request, never saved
        auto h = sched.submit(a);
        std::string text = h->next().text;  // it generates
        EXPECT_THROW(sched.save({"", 5}, file.path()), CacheOpError);
        const CacheOpResult saved = sched.save({"", 0}, file.path());
        EXPECT_EQ(saved.slot, 0);
        EXPECT_GT(saved.file_bytes, 0u);
        EXPECT_EQ(saved.policy, "h2o:budget=24");
        const Result rest = collect(*h);
        ASSERT_EQ(rest.last.kind, GenerationEvent::Kind::kDone) << rest.last.error;
        EXPECT_EQ(text + rest.text, whole);  // the save did not disturb the request
        const int64_t generated =
            saved.tokens - static_cast<int64_t>(a.prompt.size());  // run, incl. the one run for the save
        ASSERT_GT(generated, 0);
        GenerationRequest b = greedy("", 40 - generated, "h2o:budget=24");
        b.prompt.clear();
        b.sampling = a.sampling;
        b.restore = std::make_shared<const SavedSequence>(read_sequence(file.path(), model()));
        b.restore_sampler = true;
        const Result rb = collect(*sched.submit(b));
        ASSERT_EQ(rb.last.kind, GenerationEvent::Kind::kDone) << rb.last.error;
        ASSERT_FALSE(rb.text.empty());
        ASSERT_LT(rb.text.size(), whole.size());
        EXPECT_EQ(whole.substr(whole.size() - rb.text.size()), rb.text);
    }
}

TEST(Scheduler, ARestoredFileBecomesAConversationToGoOnFrom) {
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    Scheduler sched(model(), tokenizer(), pool, options(1));
    test::TempFile file(".kvseq");
    GenerationRequest a = greedy("Once upon a time, there was a little girl named Lily.", 6, "snapkv:ratio=0.5");
    a.conversation = "first";
    ASSERT_EQ(collect(*sched.submit(a)).last.kind, GenerationEvent::Kind::kDone);
    EXPECT_THROW(sched.save({"nobody", -1}, file.path()), CacheOpError);
    {  // A full disk (here the process's file size limit) is a 507, not a 500.
        rlimit old{};
        ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
        rlimit lim = old;
        lim.rlim_cur = 1024;
        auto* prev = std::signal(SIGXFSZ, SIG_IGN);
        ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
        int status = 0;
        try {
            sched.save({"first", -1}, file.path());
        } catch (const CacheOpError& e) { status = e.status(); }
        setrlimit(RLIMIT_FSIZE, &old);
        std::signal(SIGXFSZ, prev);
        EXPECT_EQ(status, 507);
    }
    const CacheOpResult saved = sched.save({"first", -1}, file.path());
    EXPECT_EQ(saved.tokens, static_cast<int64_t>(a.prompt.size()) + 5);
    EXPECT_EQ(saved.slot, -1);
    EXPECT_TRUE(sched.drop("first"));
    const auto seq = std::make_shared<const SavedSequence>(read_sequence(file.path(), model()));
    const CacheOpResult r = sched.restore(seq, "second");
    EXPECT_EQ(r.tokens, saved.tokens);
    EXPECT_EQ(r.policy, "snapkv:ratio=0.5");
    EXPECT_EQ(r.kv_bytes, saved.kv_bytes);
    ASSERT_EQ(sched.snapshot().conversations.size(), 1u);
    // A request naming it, with the kept tokens and more, feeds only the new ones.
    GenerationRequest b = greedy("", 5);
    b.prompt = seq->tokens;
    const auto more = tokenizer().encode(" The end.", false, false);
    b.prompt.insert(b.prompt.end(), more.begin(), more.end());
    b.conversation = "second";
    const Result rb = collect(*sched.submit(b));
    ASSERT_EQ(rb.last.kind, GenerationEvent::Kind::kDone) << rb.last.error;
    EXPECT_EQ(rb.last.usage.cached_tokens, saved.tokens);
    // Refused restores: no id, a context too small.
    EXPECT_THROW(sched.restore(seq, ""), CacheOpError);
    SchedulerOptions small = options(1, 16);
    Scheduler tiny(model(), tokenizer(), pool, small);
    try {
        tiny.restore(seq, "x");
        ADD_FAILURE() << "a sequence longer than the context was restored";
    } catch (const CacheOpError& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_NE(std::string(e.what()).find("context holds 16"), std::string::npos) << e.what();
    }
    // A server whose pool stores keys and values of other types (--kv-type, --cache-type-k/-v) refuses it, naming
    // the file's types and its own.
    Scheduler other(model(), tokenizer(), std::make_shared<KVPool>(model().config().head_dim, KVType::kF32),
                    options(1));
    try {
        other.restore(seq, "y");
        ADD_FAILURE() << "an F16 sequence was restored into an F32 pool";
    } catch (const CacheOpError& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_NE(
            std::string(e.what()).find("keys of type f16 and values of type f16; this cache stores keys as f32 and "
                                       "values as f32"),
            std::string::npos)
            << e.what();
    }
}

TEST(Scheduler, APoolQuantizedAtAdmissionReportsRealBytesAndItsSavesAreRefusedByOneQuantizedAtWrite) {
    // tiny-2k (head size 32) on Q8_0 pages quantized at admission: a kept conversation under a policy with 4 sinks
    // and a window of 16 holds F16 pages and Q8_0 pages; the snapshot's bytes are theirs, and a saved sequence is
    // refused with 400 by a server whose pool quantizes at write, naming both.
    static const LlamaModel m(test::model_path("kvsieve-tiny-2k.gguf"));
    static const auto tok = Tokenizer::from_gguf(m.file());
    const int d = m.config().head_dim;
    auto pool = std::make_shared<KVPool>(d, KVType::kQ8_0, KVType::kQ8_0, 16, 0, KVQuantAt::kAdmission);
    Scheduler sched(m, *tok, pool, options(1));
    GenerationRequest a;
    a.prompt = tok->encode("Once upon a time there was a little girl who liked to play in the park with her dog.", true,
                           false);
    a.max_tokens = 24;
    a.sampling.temp = 0;
    a.policy_spec = "tova:budget=200,window=16,sinks=4";
    a.policy = parse_policy(a.policy_spec);
    a.conversation = "kept";
    ASSERT_EQ(collect(*sched.submit(a)).last.kind, GenerationEvent::Kind::kDone);
    const SchedulerSnapshot snap = sched.snapshot();
    ASSERT_EQ(snap.conversations.size(), 1u);
    const uint64_t f16_page = 16ull * 4 * d, q8_page = 16ull * 2 * 34 * d / 32;
    EXPECT_EQ(static_cast<uint64_t>(snap.pool_bytes_in_use),
              pool->local().layout_pages_in_use() * f16_page + pool->layout_pages_in_use() * q8_page);
    EXPECT_GT(pool->layout_pages_in_use(), 0);
    EXPECT_GT(pool->local().layout_pages_in_use(), 0);
    EXPECT_EQ(snap.pool_page_bytes, static_cast<int64_t>(f16_page));
    test::TempFile file(".kvseq");
    sched.save({"kept", -1}, file.path());
    const auto seq = std::make_shared<const SavedSequence>(read_sequence(file.path(), m));
    Scheduler at_write(m, *tok, std::make_shared<KVPool>(d, KVType::kQ8_0), options(1));
    try {
        at_write.restore(seq, "y");
        ADD_FAILURE() << "a sequence quantized at admission was restored into a pool quantized at write";
    } catch (const CacheOpError& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_NE(
            std::string(e.what()).find("(sinks and window: keys f16, values f16); this cache stores keys as q8_0"),
            std::string::npos)
            << e.what();
    }
    Scheduler again(m, *tok, std::make_shared<KVPool>(d, KVType::kQ8_0, KVType::kQ8_0, 16, 0, KVQuantAt::kAdmission),
                    options(1));
    EXPECT_NO_THROW(again.restore(seq, "z"));
}

TEST(StopMatcher, HoldsBackWhatMayStartAStopStringAndCutsBeforeIt) {
    StopMatcher m({"END", "\n\n"});
    EXPECT_EQ(m.push("abc E"), "abc ");
    EXPECT_EQ(m.push("N"), "");
    EXPECT_EQ(m.push("x"), "ENx");
    EXPECT_EQ(m.push("y\n"), "y");
    EXPECT_FALSE(m.stopped());
    EXPECT_EQ(m.push("\nzz"), "");
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(m.push("more"), "");
    StopMatcher n({"stop"});
    EXPECT_EQ(n.push("a st"), "a ");
    EXPECT_EQ(n.finish(), "st");
    StopMatcher none;
    EXPECT_EQ(none.push("anything"), "anything");
    StopMatcher utf({"é!"});
    EXPECT_EQ(utf.push("caféé"), "café");
    EXPECT_EQ(utf.push("!x"), "");
    EXPECT_TRUE(utf.stopped());
}

ApiContext context(const ChatTemplate* t) {
    ApiContext c;
    c.tok = &tokenizer();
    c.chat_template = t;
    c.model_id = "stories";
    c.n_ctx = 256;
    return c;
}

/// parse_api_request throws ApiError with this status and a one-line message containing needle.
void expect_api_error(const json& body, bool chat, const std::string& needle, int status = 400) {
    static const ChatTemplate chatml = chat_template_by_name("chatml");
    try {
        parse_api_request(body, chat, context(&chatml));
        ADD_FAILURE() << "accepted " << body.dump();
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), status);
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
}

TEST(OpenAIApi, ParsesCompletionAndChatRequests) {
    const ChatTemplate chatml = chat_template_by_name("chatml");
    const ApiContext ctx = context(&chatml);
    ApiRequest r = parse_api_request(json::parse(R"({"model":"x","prompt":"Once upon","max_tokens":7,"temperature":0,
        "seed":3,"stop":["a","b"],"stream":true,"stream_options":{"include_usage":true},"n":1,"kv_policy":"snapkv:ratio=0.5",
        "user":"u","logprobs":null,"presence_penalty":0})"),
                                     false, ctx);
    EXPECT_EQ(r.gen.prompt, tokenizer().encode("Once upon", true, false));
    EXPECT_EQ(r.gen.max_tokens, 7);
    EXPECT_TRUE(r.gen.max_tokens_given);
    EXPECT_EQ(r.gen.sampling.temp, 0.0f);
    EXPECT_EQ(r.gen.sampling.seed, 3u);
    EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.gen.policy.name, "snapkv");
    // Defaults: OpenAI's sampling (temperature 1, top_p 1), 16 tokens, the server's policy.
    r = parse_api_request(json{{"prompt", json::array({"Once"})}}, false, ctx);
    EXPECT_EQ(r.gen.sampling.temp, 1.0f);
    EXPECT_EQ(r.gen.sampling.top_p, 1.0f);
    EXPECT_EQ(r.gen.sampling.top_k, 0);
    EXPECT_EQ(r.gen.max_tokens, 16);
    EXPECT_FALSE(r.gen.max_tokens_given);  // a default is not held against the pool (413)
    EXPECT_EQ(r.gen.policy_spec, "full");
    r = parse_api_request(json{{"prompt", json::array({1, 5, 9})}}, false, ctx);
    EXPECT_EQ(r.gen.prompt, (std::vector<int32_t>{1, 5, 9}));
    EXPECT_TRUE(r.gen.sampling.logit_bias.empty());
    // logit_bias: OpenAI's {"token id": bias} object.
    r = parse_api_request(json::parse(R"({"prompt":"x","logit_bias":{"2":-100,"17":2.5}})"), false, ctx);
    std::vector<std::pair<int32_t, float>> bias = r.gen.sampling.logit_bias;
    std::sort(bias.begin(), bias.end());
    EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{2, -100.0f}, {17, 2.5f}}));
    // Chat: the template's rendering, the end-of-turn token, the rest of the context by default.
    const json msgs = json::array({{{"role", "system"}, {"content", "Be brief."}},
                                   {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "Hi"}}})}}});
    r = parse_api_request(json{{"messages", msgs}}, true, ctx);
    EXPECT_EQ(r.gen.prompt, encode_conversation(tokenizer(), chatml, {{"system", "Be brief."}, {"user", "Hi"}}, true));
    EXPECT_EQ(r.gen.end_token, tokenizer().vocab().find("<|im_end|>"));
    EXPECT_EQ(r.gen.max_tokens, 256 - static_cast<int64_t>(r.gen.prompt.size()));
    r = parse_api_request(json{{"messages", msgs}, {"max_completion_tokens", 5}}, true, ctx);
    EXPECT_EQ(r.gen.max_tokens, 5);
}

TEST(OpenAIApi, ReadsLogprobsEchoChoicesPenaltiesAndModelNames) {
    const ChatTemplate chatml = chat_template_by_name("chatml");
    ApiContext ctx = context(&chatml);
    ApiRequest r = parse_api_request(json{{"prompt", json::array({json::array({3, 4, 5})})},
                                          {"echo", true},
                                          {"logprobs", 2},
                                          {"max_tokens", 0},
                                          {"n", 3},
                                          {"best_of", 3},
                                          {"presence_penalty", -2},
                                          {"frequency_penalty", 1.5}},
                                     false, ctx);
    EXPECT_EQ(r.gen.prompt, (std::vector<int32_t>{3, 4, 5}));
    EXPECT_TRUE(r.echo);
    EXPECT_EQ(r.echo_text, tokenizer().decode({3, 4, 5}, true));
    EXPECT_TRUE(r.gen.prompt_logprobs);
    EXPECT_EQ(r.gen.logprobs, 2);
    EXPECT_EQ(r.gen.max_tokens, 0);
    EXPECT_EQ(r.n, 3);
    EXPECT_EQ(r.gen.sampling.presence_penalty, -2.0f);
    EXPECT_EQ(r.gen.sampling.frequency_penalty, 1.5f);
    const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}};
    json c = chat;
    c["logprobs"] = true;
    c["top_logprobs"] = 20;
    EXPECT_EQ(parse_api_request(c, true, ctx).gen.logprobs, 20);
    c["logprobs"] = false;  // top_logprobs alone changes nothing
    EXPECT_EQ(parse_api_request(c, true, ctx).gen.logprobs, -1);
    EXPECT_EQ(parse_api_request(chat, true, ctx).gen.logprobs, -1);
    // Model names: any without a list, else only the listed ones (404 model_not_found).
    c = chat;
    c["model"] = "gpt-4o";
    EXPECT_NO_THROW(parse_api_request(c, true, ctx));
    ctx.model_names = {"stories", "alias"};
    try {
        parse_api_request(c, true, ctx);
        ADD_FAILURE() << "an unknown model was taken";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 404);
        EXPECT_EQ(e.code(), "model_not_found");
        EXPECT_EQ(error_body(e.status(), e.what(), e.code())["error"]["code"], "model_not_found");
    }
    c["model"] = "alias";
    EXPECT_NO_THROW(parse_api_request(c, true, ctx));
}

TEST(OpenAIApi, LogprobsBodiesHaveTheChatAndTheLegacyShapes) {
    ApiRequest r;
    r.gen.logprobs = 1;
    const int32_t a = 100, b = 200;
    TokenLogprob first;
    first.token = a;
    first.logprob = std::nan("");
    TokenLogprob second;
    second.token = b;
    second.logprob = -0.5;
    second.top = {{b, -0.5}};
    json legacy = logprobs_json(r, tokenizer(), {first}, {second});
    const std::string pa = tokenizer().token_to_piece(a, true), pb = tokenizer().token_to_piece(b, true);
    EXPECT_EQ(legacy["tokens"], json::array({pa, pb}));
    EXPECT_TRUE(legacy["token_logprobs"][0].is_null());
    EXPECT_EQ(legacy["token_logprobs"][1], -0.5);
    EXPECT_TRUE(legacy["top_logprobs"][0].is_null());
    EXPECT_EQ(legacy["top_logprobs"][1][pb], -0.5);
    EXPECT_EQ(legacy["text_offset"], json::array({0, pa.size()}));
    r.chat = true;
    json chat = logprobs_json(r, tokenizer(), {}, {second});
    ASSERT_EQ(chat["content"].size(), 1u);
    EXPECT_EQ(chat["content"][0]["token"], pb);
    EXPECT_EQ(chat["content"][0]["logprob"], -0.5);
    EXPECT_EQ(chat["content"][0]["bytes"].size(), pb.size());
    EXPECT_EQ(chat["content"][0]["top_logprobs"][0]["token"], pb);
    // token_logprob: log-softmax, the top alternatives most likely first.
    const std::vector<float> logits = {1.0f, 3.0f, 2.0f};
    const TokenLogprob t = token_logprob(logits.data(), 3, 2, 2);
    const double z = std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0));
    EXPECT_NEAR(t.logprob, 2.0 - z, 1e-12);
    ASSERT_EQ(t.top.size(), 2u);
    EXPECT_EQ(t.top[0].first, 1);
    EXPECT_NEAR(t.top[0].second, 3.0 - z, 1e-12);
    EXPECT_EQ(t.top[1].first, 2);
    EXPECT_THROW(token_logprob(logits.data(), 3, 3, 0), Error);
}

TEST(OpenAIApi, RefusesWhatItCannotDoWithOneClearError) {
    expect_api_error(json::array(), false, "JSON object");
    expect_api_error(json{{"prompt", "x"}, {"foo", 1}}, false, "unknown field 'foo'");
    expect_api_error(json{{"prompt", "x"}, {"messages", json::array()}}, false, "unknown field 'messages'");
    expect_api_error(json{{"max_tokens", 3}}, false, "'prompt' is required");
    expect_api_error(json{{"prompt", json::array({"a", "b"})}}, false, "batched prompts");
    expect_api_error(json{{"prompt", json::array({1, 999999})}}, false, "outside the vocabulary");
    expect_api_error(json{{"prompt", ""}, {"max_tokens", 0}}, false, "max_tokens");
    expect_api_error(json{{"prompt", "x"}, {"max_tokens", "ten"}}, false, "'max_tokens' must be an integer");
    expect_api_error(json{{"prompt", "x"}, {"temperature", 3}}, false, "'temperature' must be in [0");
    expect_api_error(json{{"prompt", "x"}, {"top_p", 0}}, false, "top_p");
    expect_api_error(json{{"prompt", "x"}, {"n", 9}}, false, "'n' must be in [1, 8]");
    expect_api_error(json{{"prompt", "x"}, {"n", 2}, {"conversation", "c"}}, false, "'n' > 1");
    expect_api_error(json{{"prompt", "x"}, {"best_of", 2}}, false, "'best_of'");
    expect_api_error(json{{"prompt", "x"}, {"echo", "yes"}}, false, "'echo' must be true or false");
    expect_api_error(json{{"prompt", "x"}, {"echo", true}, {"conversation", "c"}}, false, "'echo' is not supported");
    expect_api_error(json{{"prompt", "x"}, {"max_tokens", 0}}, false, "'max_tokens' must be in [1");
    expect_api_error(json{{"prompt", "x"}, {"logprobs", 6}}, false, "'logprobs' must be in [0, 5]");
    expect_api_error(json{{"prompt", "x"}, {"logprobs", true}}, false, "'logprobs' must be an integer");
    expect_api_error(json{{"prompt", "x"}, {"presence_penalty", 2.5}}, false, "'presence_penalty' must be in [-2");
    expect_api_error(json{{"prompt", "x"}, {"frequency_penalty", "x"}}, false, "'frequency_penalty' must be a number");
    expect_api_error(json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}, {"top_logprobs", 21}},
                     true, "'top_logprobs' must be in [0, 20]");
    expect_api_error(json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}, {"logprobs", 2}}, true,
                     "'logprobs' must be true or false");
    expect_api_error(json{{"prompt", "x"}, {"logit_bias", json::array({1})}}, false, "'logit_bias' must be an object");
    expect_api_error(json{{"prompt", "x"}, {"logit_bias", {{"999999", 1}}}}, false,
                     "logit_bias: '999999' is not a token id");
    expect_api_error(json{{"prompt", "x"}, {"logit_bias", {{"-1", 1}}}}, false, "logit_bias: '-1'");
    expect_api_error(json{{"prompt", "x"}, {"logit_bias", {{"3x", 1}}}}, false, "logit_bias: '3x'");
    expect_api_error(json{{"prompt", "x"}, {"logit_bias", {{"3", 101}}}}, false, "'logit_bias[3]' must be in [-100");
    expect_api_error(json{{"prompt", "x"}, {"logit_bias", {{"3", "up"}}}}, false, "'logit_bias[3]' must be a number");
    expect_api_error(json{{"prompt", "x"}, {"stop", json::array({"a", "b", "c", "d", "e"})}}, false, "at most 4");
    expect_api_error(json{{"prompt", "x"}, {"stream", "yes"}}, false, "'stream' must be true or false");
    expect_api_error(json{{"prompt", "x"}, {"stream_options", {{"x", true}}}}, false, "stream_options.x");
    expect_api_error(json{{"prompt", "x"}, {"kv_policy", "nosuch"}}, false, "kv_policy:");
    expect_api_error(json{{"prompt", "x"}, {"kv_policy", "h2o:budget=1000"}}, false, "larger than the context");
    expect_api_error(json{{"prompt", "x"}, {"kv_policy", 5}}, false, "'kv_policy' must be a string");
    expect_api_error(json{{"prompt", std::string(2000, 'a') + " b c d e f g h i j k l m n o p q r s t u v w x y z " +
                                         std::string(600, 'z')}},
                     false, "the context holds 256");
    expect_api_error(json{{"messages", "hi"}}, true, "'messages' must be a non-empty array");
    expect_api_error(json{{"messages", json::array({{{"role", "tool"}, {"content", "x"}}})}}, true, "role 'tool'");
    expect_api_error(json{{"messages", json::array({{{"role", "user"}, {"content", "x"}, {"tool_calls", 1}}})}}, true,
                     "unknown field 'tool_calls'");
    expect_api_error(
        json{{"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"}}})}}})}},
        true, "only parts");
    // A part whose type is not a string (found by schemathesis: it was a 500).
    expect_api_error(
        json{{"messages",
              json::array({{{"role", "user"}, {"content", json::array({{{"type", json::object()}, {"text", ""}}})}}})}},
        true, "only parts");
    expect_api_error(json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}, {"tools", json::array()}},
                     true, "unknown field 'tools'");
    // Saved sequences need --cache-dir and a plain name; a missing one is 404; chat cannot restore.
    expect_api_error(json{{"prompt", "x"}, {"cache_save", "a"}}, false, "--cache-dir");
    expect_api_error(json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}, {"cache_restore", "a"}},
                     true, "unknown field 'cache_restore'");
    {
        const ChatTemplate chatml = chat_template_by_name("chatml");
        ApiContext c = context(&chatml);
        c.cache_dir = std::filesystem::temp_directory_path().string();
        c.model = &model();
        for (const char* name : {"../etc/passwd", ".hidden", "a/b", ""}) {
            try {
                parse_api_request(json{{"prompt", "x"}, {"cache_save", name}}, false, c);
                ADD_FAILURE() << "accepted the name " << name;
            } catch (const ApiError& e) { EXPECT_EQ(e.status(), 400); }
        }
        try {
            parse_api_request(json{{"prompt", "x"}, {"cache_restore", "no-such-sequence-here"}}, false, c);
            ADD_FAILURE();
        } catch (const ApiError& e) { EXPECT_EQ(e.status(), 404); }
        const ApiRequest r = parse_api_request(json{{"prompt", "x"}, {"cache_save", "conv-1.a"}}, false, c);
        EXPECT_EQ(r.gen.save_path, c.cache_dir + "/conv-1.a.kvseq");
    }
    // No chat template: chat requests are refused.
    try {
        parse_api_request(json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}}, true,
                          context(nullptr));
        ADD_FAILURE();
    } catch (const ApiError& e) { EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos); }
}

TEST(OpenAIApi, ConversationAndCacheOperationBodies) {
    const ChatTemplate chatml = chat_template_by_name("chatml");
    ApiContext ctx = context(&chatml);
    ApiRequest r = parse_api_request(json{{"prompt", "Once"}, {"conversation", "chat-1.a"}}, false, ctx);
    EXPECT_EQ(r.gen.conversation, "chat-1.a");
    EXPECT_FALSE(r.gen.policy_given);
    r = parse_api_request(json{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                               {"conversation", "c"},
                               {"kv_policy", "snapkv:ratio=0.5"}},
                          true, ctx);
    EXPECT_EQ(r.gen.conversation, "c");
    EXPECT_TRUE(r.gen.policy_given);
    expect_api_error(json{{"prompt", "x"}, {"conversation", "../etc"}}, false, "'conversation' must be a name");
    expect_api_error(json{{"prompt", "x"}, {"conversation", 5}}, false, "'conversation' must be a name");
    // Cache operation bodies.
    const auto refuse = [&](const json& body, bool restore, const std::string& needle) {
        try {
            parse_cache_op(body, restore, ctx);
            ADD_FAILURE() << "accepted " << body.dump();
        } catch (const ApiError& e) {
            EXPECT_EQ(e.status(), 400);
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    refuse(json{{"name", "a"}, {"slot", 0}}, false, "--cache-dir");
    ctx.cache_dir = "/tmp/kv";
    CacheOpRequest op = parse_cache_op(json{{"name", "a"}, {"slot", 2}}, false, ctx);
    EXPECT_EQ(op.path, "/tmp/kv/a.kvseq");
    EXPECT_EQ(op.ref.slot, 2);
    EXPECT_TRUE(op.ref.conversation.empty());
    op = parse_cache_op(json{{"name", "a"}, {"conversation", "c"}}, false, ctx);
    EXPECT_EQ(op.ref.conversation, "c");
    op = parse_cache_op(json{{"name", "a"}}, true, ctx);
    EXPECT_EQ(op.ref.conversation, "a");  // a restore keeps the file under its own name unless told
    refuse(json{{"name", "a"}}, false, "'conversation' (an id) or 'slot'");
    refuse(json{{"name", "a"}, {"slot", 0}, {"conversation", "c"}}, false, "'conversation' (an id) or 'slot'");
    refuse(json{{"name", "a"}, {"slot", -1}}, false, "'slot' must be a slot index");
    refuse(json{{"name", "a"}, {"slot", 0}}, true, "unknown field 'slot'");
    refuse(json{{"slot", 0}}, false, "'name' is required");
    refuse(json{{"name", ".hidden"}, {"slot", 0}}, false, "'name' must be a name");
    refuse(json::array(), false, "JSON object");
    CacheOpResult res;
    res.slot = 1;
    res.tokens = 40;
    res.kv_bytes = 4096;
    res.file_bytes = 5000;
    res.policy = "full";
    const json j = cache_op_body("kv_cache.saved", "a", res);
    EXPECT_EQ(j["slot"], 1);
    EXPECT_TRUE(j["conversation"].is_null());
    EXPECT_EQ(j["file_bytes"], 5000);
    GenerationUsage u;
    u.cached_tokens = 12;
    EXPECT_EQ(usage_json(u)["prompt_tokens_details"]["cached_tokens"], 12);
}

TEST(OpenAIApi, ResponseBodiesFollowTheSchema) {
    ApiRequest r;
    r.chat = true;
    GenerationEvent done;
    done.kind = GenerationEvent::Kind::kDone;
    done.finish_reason = "stop";
    done.usage.prompt_tokens = 7;
    done.usage.completion_tokens = 3;
    done.usage.density = 0.25;
    done.usage.compression_ratio = 0.6;
    done.usage.kv_bytes = 4096;
    json b = completion_body(r, "chatcmpl-1", 5, "m", "Hello", done);
    EXPECT_EQ(b["object"], "chat.completion");
    EXPECT_EQ(b["choices"][0]["message"]["content"], "Hello");
    EXPECT_EQ(b["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(b["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(b["usage"]["total_tokens"], 10);
    EXPECT_EQ(b["usage"]["kv_bytes"], 4096);
    EXPECT_EQ(b["usage"]["density"], 0.25);
    EXPECT_EQ(b["usage"]["compression_ratio"], 0.6);
    json c = chunk_body(r, "chatcmpl-1", 5, "m", "He", "");
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["choices"][0]["delta"]["content"], "He");
    EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
    c = chunk_body(r, "chatcmpl-1", 5, "m", "", "length");
    EXPECT_TRUE(c["choices"][0]["delta"].empty());
    EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
    r.chat = false;
    b = completion_body(r, "cmpl-1", 5, "m", "Hello", done);
    EXPECT_EQ(b["object"], "text_completion");
    EXPECT_EQ(b["choices"][0]["text"], "Hello");
    json e = error_body(503, "full");
    EXPECT_EQ(e["error"]["type"], "server_error");
    EXPECT_EQ(e["error"]["status"], 503);
    EXPECT_EQ(e["error"]["code"], "server_busy");
    EXPECT_TRUE(e["error"]["param"].is_null());
    EXPECT_EQ(error_body(400, "x")["error"]["type"], "invalid_request_error");
}

TEST(Metrics, PrometheusTextHasTheCountersAndEscapesLabels) {
    SchedulerSnapshot s;
    s.slots = 4;
    s.pool_pages_in_use = 10;
    s.pool_pages_capacity = 100;
    s.pool_page_bytes = 4096;
    s.pool_bytes_in_use = 10 * 4096;
    s.pool_bytes_capacity = 100 * 4096;
    s.requests_finished = 3;
    s.decode_rows = 200;
    s.decode_s = 2;
    s.by_policy["snapkv:ratio=0.5"] = {2, 1.0, 1.2};
    SchedulerSnapshot::SlotInfo a;
    a.slot = 1;
    a.policy = "we\"ird";
    a.live_entries = 77;
    s.active.push_back(a);
    HttpCounters http;
    http.count("/v1/completions", 200);
    http.count("/v1/completions", 200);
    const std::string t = prometheus_text(s, http, "m");
    EXPECT_NE(t.find("kvsieve_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n"), std::string::npos)
        << t;
    EXPECT_NE(t.find("kvsieve_kv_bytes_in_use 40960\n"), std::string::npos);
    EXPECT_NE(t.find("kvsieve_kv_bytes_free 368640\n"), std::string::npos);
    EXPECT_NE(t.find("kvsieve_decode_tokens_per_second 100\n"), std::string::npos);
    EXPECT_NE(t.find("kvsieve_policy_density{policy=\"snapkv:ratio=0.5\"} 0.5\n"), std::string::npos);
    EXPECT_NE(t.find("kvsieve_policy_compression_ratio{policy=\"snapkv:ratio=0.5\"} 0.6\n"), std::string::npos);
    EXPECT_NE(t.find("kvsieve_slot_live_entries{slot=\"1\",policy=\"we\\\"ird\"} 77\n"), std::string::npos);
    EXPECT_NE(t.find("kvsieve_slots_busy 1\n"), std::string::npos);
    EXPECT_NE(t.find("# TYPE kvsieve_requests_finished_total counter\n"), std::string::npos);
}

TEST(Scheduler, ARestoredSpecNamesRegisteredPredictorsAndNeverFiles) {
    // A saved sequence's policy spec is read again at restore: its model= must resolve among the server's registered
    // predictors, as a request's does, never as a path (a file written by another tool may name one).
    const std::string dir = test::model_path("kvzap/stories260K-linear");
    NamedPredictors preds;
    preds.add("stories-kvzap", dir);
    preds.validate(model().config());
    auto pool = std::make_shared<KVPool>(model().config().head_dim, KVType::kF16);
    SchedulerOptions named = options(1);
    named.policy_options = preds.parse_options();
    Scheduler sched(model(), tokenizer(), pool, named);
    test::TempFile by_name(".kvseq"), by_path(".kvseq");
    for (const auto& [spec, file] : {std::pair{std::string("kvzap:model=stories-kvzap,tau=-3"), &by_name},
                                     std::pair{"kvzap:model=" + dir + ",tau=-3", &by_path}}) {
        GenerationRequest g = greedy("Once upon a time, there was a little girl named Lily.", 4);
        g.policy_spec = spec;
        // The server's reading for the name; the command line's (a path) for the other, as another tool wrote it.
        g.policy = spec.find('/') == std::string::npos ? parse_policy(spec, named.policy_options) : parse_policy(spec);
        g.conversation = "c";
        ASSERT_EQ(collect(*sched.submit(g)).last.kind, GenerationEvent::Kind::kDone);
        sched.save({"c", -1}, file->path());
        ASSERT_TRUE(sched.drop("c"));
    }
    const auto seq_name = std::make_shared<const SavedSequence>(read_sequence(by_name.path(), model()));
    const auto seq_path = std::make_shared<const SavedSequence>(read_sequence(by_path.path(), model()));
    EXPECT_EQ(sched.restore(seq_name, "restored").policy, "kvzap:model=stories-kvzap,tau=-3");
    // A path in the saved spec, or a name this server did not register: 400, with nothing of the file system.
    Scheduler bare(model(), tokenizer(), pool, options(1));
    for (const auto& [s, seq] : {std::pair{&sched, seq_path}, std::pair{&bare, seq_name}, std::pair{&bare, seq_path}}) {
        try {
            s->restore(seq, "x");
            ADD_FAILURE() << "restored " << seq->policy_spec;
        } catch (const CacheOpError& e) {
            EXPECT_EQ(e.status(), 400);
            const std::string m = e.what();
            EXPECT_NE(m.find("registered predictors"), std::string::npos) << m;
            EXPECT_EQ(m.find('/'), std::string::npos) << m;
        }
    }
}

TEST(OpenAIApi, KvPolicyNamesRegisteredPredictorsAndNeverFiles) {
    const std::string dir = test::model_path("kvzap/stories260K-linear");
    NamedPredictors preds;
    preds.add("stories-kvzap", dir);
    preds.validate(model().config());
    ApiContext ctx = context(nullptr);
    ctx.policy_options = preds.parse_options();
    const ApiRequest r =
        parse_api_request(json{{"prompt", "x"}, {"kv_policy", "kvzap:model=stories-kvzap,tau=-3"}}, false, ctx);
    EXPECT_EQ(r.gen.policy.name, "kvzap");
    EXPECT_DOUBLE_EQ(r.gen.policy.admission.tau, -3);
    // A file, a device, the registered folder's own path or an unknown name: 400 listing the names, no path or file
    // content in the message.
    for (const std::string& spec :
         std::vector<std::string>{"kvpop:model=/etc/shadow,budget=1024", "wgkv:model=/dev/zero", "kvzap:model=" + dir,
                                  "kvzap:model=../../etc/passwd", "kvzap:model=nosuch"}) {
        try {
            parse_api_request(json{{"prompt", "x"}, {"kv_policy", spec}}, false, ctx);
            ADD_FAILURE() << "accepted " << spec;
        } catch (const ApiError& e) {
            const std::string m = e.what();
            EXPECT_EQ(e.status(), 400);
            EXPECT_NE(m.find("registered predictors: stories-kvzap (kvzap)"), std::string::npos) << m;
            EXPECT_EQ(m.find('/'), std::string::npos) << m;
            EXPECT_EQ(m.find("root"), std::string::npos) << m;
        }
    }
    // The default context has no predictors: every reference is refused.
    expect_api_error(json{{"prompt", "x"}, {"kv_policy", "kvzap:model=" + dir}}, false, "registered predictors: none");
}

}  // namespace

namespace {
/// A loopback TCP connection: the listening socket, the client's end and the accepted (server's) end.
struct LoopbackPair {
    int listener = -1, client = -1, server = -1;
    LoopbackPair() {
        listener = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        EXPECT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        EXPECT_EQ(::listen(listener, 4), 0);
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
        client = ::socket(AF_INET, SOCK_STREAM, 0);
        EXPECT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        server = ::accept(listener, nullptr, nullptr);
    }
    ~LoopbackPair() {
        for (int fd : {listener, client, server})
            if (fd >= 0) ::close(fd);
    }
};
}  // namespace

TEST(ClientSocket, SeesItsClientLeave) {
    LoopbackPair c;
    ASSERT_GE(c.server, 0);
    EXPECT_FALSE(client_gone(c.server));
    // Bytes waiting (a pipelined next request) are not a departure, and are not consumed.
    ASSERT_EQ(::write(c.client, "GET", 3), 3);
    pollfd in{c.server, POLLIN, 0};
    ASSERT_EQ(::poll(&in, 1, 5000), 1);  // the bytes have arrived
    EXPECT_FALSE(client_gone(c.server));
    ::close(c.client);
    c.client = -1;
    pollfd hup{c.server, POLLRDHUP, 0};
    ASSERT_EQ(::poll(&hup, 1, 5000), 1);  // the FIN has arrived
    EXPECT_TRUE(client_gone(c.server));
    char buf[8];
    EXPECT_EQ(::recv(c.server, buf, sizeof buf, MSG_DONTWAIT), 3);  // still there after the polls
    EXPECT_FALSE(client_gone(-1));
}

TEST(ConnectionThreads, OneThreadPerConnectionUpToTheLimitThenTheyWait) {
    ConnectionThreads q(4);
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
    std::atomic<int> started{0}, finished{0};
    std::condition_variable started_cv;
    for (int i = 0; i < 10; ++i)
        q.enqueue([&] {
            std::unique_lock<std::mutex> lk(mu);
            ++started;
            started_cv.notify_all();
            cv.wait(lk, [&] { return release; });
            ++finished;
        });
    {
        std::unique_lock<std::mutex> lk(mu);
        started_cv.wait_for(lk, std::chrono::seconds(10), [&] { return started >= 4; });
    }
    EXPECT_EQ(started.load(), 4);
    EXPECT_EQ(q.threads(), 4u);
    EXPECT_EQ(q.waiting(), 6u);
    {
        std::lock_guard<std::mutex> lk(mu);
        release = true;
    }
    cv.notify_all();
    q.shutdown();  // runs what is queued, then joins
    EXPECT_EQ(started.load(), 10);
    EXPECT_EQ(finished.load(), 10);
    EXPECT_THROW(ConnectionThreads(0), Error);
}

TEST(ConnectionThreads, IdleThreadsAreReusedBeforeNewOnesStart) {
    ConnectionThreads q(8);
    std::atomic<int> done{0};
    for (int i = 0; i < 20; ++i) {
        q.enqueue([&] { ++done; });
        // A short pause after each task, so that its thread is back among the idle ones (parked, which no event
        // tells) when the next task comes: what the test is about. Bounded.
        for (int k = 0; k < 500 && done < i + 1; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(done.load(), 20);
    // One connection at a time: a thread is idle whenever the next one arrives (the first may still be parking).
    EXPECT_LE(q.threads(), 2u);
}

namespace {
/// An HttpFront on a free loopback port, served on a thread: GET /a, POST /echo (its body back), GET /item/{id}; a
/// head check refuses (401) a request whose X-Key header is "bad".
struct FrontFixture {
    HttpFront front;
    int port = 0;
    std::thread t;
    explicit FrontFixture(HttpLimits l = {}) : front(l) {
        front.on("GET", "/a", [](const HttpRequest&, HttpResponse& r) { r.set_content("A", "text/plain"); });
        front.on("POST", "/echo", [](const HttpRequest& q, HttpResponse& r) { r.set_content(q.body, "text/plain"); });
        front.on("GET", "/item/{id}",
                 [](const HttpRequest& q, HttpResponse& r) { r.set_content(q.matches.at(1), "text/plain"); });
        front.set_head_check([](const HttpRequest& q, HttpResponse& r) {
            if (q.header("x-key") != "bad") return false;
            r.status = 401;
            r.set_content("no", "text/plain");
            return true;
        });
        port = front.bind("127.0.0.1", 0);
        t = std::thread([this] { front.listen(); });
    }
    ~FrontFixture() {
        front.stop();
        t.join();
    }
    int connect() const {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(port));
        EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        timeval tv{5, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        return fd;
    }
    /// Sends `req` on a new connection and reads until the server closes it (or 5 s pass).
    std::string exchange(const std::string& req) const {
        const int fd = connect();
        EXPECT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
        std::string out;
        char buf[4096];
        for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
        ::close(fd);
        return out;
    }
};

int count_of(const std::string& s, const std::string& what) {
    int n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
}
}  // namespace

TEST(HttpFront, PercentDecodingAndPathTemplates) {
    EXPECT_EQ(percent_decode("/a%20b%2Fc%zz%4"), "/a b/c%zz%4");
    EXPECT_EQ(percent_decode("/x%00y"), "/x%00y");
    std::vector<std::string> p;
    EXPECT_TRUE(match_path_template("/item/{id}", "/item/42", p));
    EXPECT_EQ(p, std::vector<std::string>{"42"});
    EXPECT_FALSE(match_path_template("/item/{id}", "/item/", p));
    EXPECT_FALSE(match_path_template("/item/{id}", "/item/4/2", p));
    EXPECT_TRUE(match_path_template("/a", "/a", p));
    EXPECT_FALSE(match_path_template("/a", "/ab", p));
}

TEST(HttpRequestReader, ReadsARequestByteByByteAndLeavesTheNextOneInTheBuffer) {
    using Step = HttpRequestReader::Step;
    const std::string one = "\r\nPOST /a%20b?x=1 HTTP/1.1\r\nHost: h\r\nX-Two: a\r\nContent-Length: 5\r\n\r\nhello";
    const std::string next = "GET / HTTP/1.0\r\n\r\n";
    HttpRequestReader r{HttpLimits{}};
    std::string in;
    Step step = Step::kMore;
    size_t i = 0;
    for (; i < one.size() && step == Step::kMore; ++i) {
        in += one[i];
        step = r.feed(in);
    }
    ASSERT_EQ(step, Step::kHead);
    EXPECT_EQ(i, one.size() - 5);        // the head, and not a byte of the body
    EXPECT_EQ(r.feed(in), Step::kHead);  // the body waits for read_body()
    EXPECT_EQ(r.want(0), 0u);
    const HttpRequest& q = r.request();
    EXPECT_EQ(q.method, "POST");
    EXPECT_EQ(q.path, "/a b");
    EXPECT_EQ(q.query, "x=1");
    EXPECT_EQ(q.version, "HTTP/1.1");
    EXPECT_EQ(q.header("x-two"), "a");
    EXPECT_EQ(q.headers.size(), 3u);
    EXPECT_EQ(r.body_length(), 5u);
    EXPECT_TRUE(r.keep_alive());
    r.read_body();
    EXPECT_EQ(r.want(0), 5u);
    in += one.substr(i, 2);
    EXPECT_EQ(r.feed(in), Step::kMore);
    EXPECT_EQ(r.want(in.size()), 3u);
    in += one.substr(i + 2) + next;
    EXPECT_EQ(r.feed(in), Step::kDone);
    EXPECT_EQ(r.request().body, "hello");
    EXPECT_EQ(in, next);
    HttpRequestReader r2{HttpLimits{}};
    ASSERT_EQ(r2.feed(in), Step::kHead);
    EXPECT_FALSE(r2.keep_alive());
    EXPECT_EQ(r2.body_length(), 0u);
    r2.read_body();
    EXPECT_EQ(r2.feed(in), Step::kDone);
    EXPECT_TRUE(in.empty());
}

TEST(HttpRequestReader, AChunkedBodyIsDecodedAsItComesNotBufferedWhole) {
    // The connection may buffer at most kChunkReadAhead undecoded bytes of a chunked body: the body limit and the
    // read-ahead bound what a client can make the server hold, not twice the limit on the wire.
    using Step = HttpRequestReader::Step;
    using R = HttpRequestReader;
    HttpLimits l;
    l.max_body_bytes = 8u << 20;
    R r(l);
    std::string in = "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    ASSERT_EQ(r.feed(in), Step::kHead);
    r.read_body();
    EXPECT_EQ(r.want(0), R::kChunkReadAhead);
    EXPECT_EQ(r.want(R::kChunkReadAhead - 10), 10u);
    EXPECT_EQ(r.want(R::kChunkReadAhead), 0u);
    EXPECT_GT(R::kChunkReadAhead, R::kChunkFramingSlack);  // a too long chunk-size line is seen before the bound
    // 1 MiB chunks fed a read-ahead at a time: decoded until the body passes its limit, then a 413.
    const std::string chunk = "100000\r\n" + std::string(1u << 20, 'x') + "\r\n";
    std::string wire;
    for (int i = 0; i < 10; ++i) wire += chunk;
    Step step = Step::kMore;
    size_t at = 0;
    while (step == Step::kMore && at < wire.size()) {
        const size_t n = std::min(r.want(in.size()), wire.size() - at);
        ASSERT_GT(n, 0u);
        in.append(wire, at, n);
        at += n;
        EXPECT_LE(in.size(), R::kChunkReadAhead);
        step = r.feed(in);
    }
    ASSERT_EQ(step, Step::kRefused);
    EXPECT_EQ(r.status(), 413);
    EXPECT_LT(at, 9 * chunk.size());  // refused once past 8 MiB, not at the wire limit
}

TEST(HttpRequestReader, RefusesOnTheHeadWithTheStatusOfEachProblem) {
    HttpLimits l;
    l.max_headers = 10;
    l.max_header_bytes = 2048;
    auto status = [&](const std::string& head) {
        HttpRequestReader r(l);
        std::string in = head;
        const auto step = r.feed(in);
        return step == HttpRequestReader::Step::kRefused ? r.status() : step == HttpRequestReader::Step::kHead ? 0 : -1;
    };
    EXPECT_EQ(status("GET /a HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n"), 400);
    EXPECT_EQ(status("GET /a HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n"), 0);
    EXPECT_EQ(status("GET /a HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n"), 400);
    EXPECT_EQ(status("POST /a HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 501);
    EXPECT_EQ(status("POST /a HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
    EXPECT_EQ(status("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), 0);
    EXPECT_EQ(status("POST /a HTTP/1.1\r\nTransfer-Encoding: gzip\r\nContent-Length: 1\r\n\r\n"), 400);
    EXPECT_EQ(status("POST /a HTTP/1.1\r\nContent-Encoding: identity\r\n\r\n"), 0);
    EXPECT_EQ(status("POST /a HTTP/1.1\r\nContent-Encoding: br\r\n\r\n"), 415);
    EXPECT_EQ(status("GET http://x/a HTTP/1.1\r\n\r\n"), 400);
    EXPECT_EQ(status("GET /a HTTP/1.1\r\nX: a\x01"
                     "b\r\n\r\n"),
              400);
    EXPECT_EQ(status("GET /a HTTP/1.1\r\nX: a\rb\r\n\r\n"), 400);
    EXPECT_EQ(status("GET /a HTTP/1.1 \r\n\r\n"), 400);
    EXPECT_EQ(status("GET /a HTTP/3.0"), 505);  // refused before the line ends
    EXPECT_EQ(status("GET /a HTTP/1.1\r\n"), -1);
    // Header fields are counted as the parser takes them (a field once the next line starts), before the block ends.
    std::string many = "GET /a HTTP/1.1\r\n";
    for (int i = 0; i < 11; ++i) many += "X-" + std::to_string(i) + ": 1\r\n";
    EXPECT_EQ(status(many + "X"), 431);
    EXPECT_EQ(status("GET /a HTTP/1.1\r\nX: " + std::string(2100, 'x')), 431);
    // Over the byte limit when the head arrives in pieces, each under it.
    HttpRequestReader r(l);
    std::string in = "GET /a HTTP/1.1\r\nX: " + std::string(1500, 'x') + "\r\n";
    EXPECT_EQ(r.feed(in), HttpRequestReader::Step::kMore);
    EXPECT_LT(r.want(in.size()), 600u);
    in += "Y: " + std::string(1000, 'y') + "\r\n\r\n";
    EXPECT_EQ(r.feed(in), HttpRequestReader::Step::kRefused);
    EXPECT_EQ(r.status(), 431);
}

TEST(HttpFront, PipelinedRequestsAreAnsweredInOrder) {
    FrontFixture f;
    const std::string out = f.exchange(
        "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
        "POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
        "GET /item/7 HTTP/1.1\r\n\r\n"
        "GET /a HTTP/1.1\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(count_of(out, "HTTP/1.1 200"), 4) << out;
    const size_t a = out.find("\r\n\r\nA"), hello = out.find("hello"), seven = out.find("\r\n\r\n7");
    EXPECT_LT(a, hello);
    EXPECT_LT(hello, seven);
    EXPECT_NE(out.find("Connection: close"), std::string::npos);
}

TEST(HttpFront, FramingAndLimitsAreCheckedOnTheHead) {
    HttpLimits l;
    l.max_headers = 10;
    l.max_header_bytes = 2048;
    l.max_body_bytes = 100;
    l.keep_alive_s = 0.2;  // the answers that keep the connection open: closed soon after
    FrontFixture f(l);
    auto status = [&](const std::string& req) { return f.exchange(req).substr(0, 12); };
    EXPECT_EQ(status("POST /echo HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc"), "HTTP/1.1 400");
    EXPECT_EQ(status("POST /echo HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab"), "HTTP/1.1 200");
    EXPECT_EQ(status("POST /echo HTTP/1.1\r\nContent-Length: +2\r\n\r\nab"), "HTTP/1.1 400");
    const std::string echoed =
        f.exchange("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1;x=y\r\nc\r\n0\r\n\r\n");
    EXPECT_EQ(echoed.substr(0, 12), "HTTP/1.1 200");
    EXPECT_EQ(echoed.substr(echoed.size() - 5), "\r\nabc") << echoed;
    EXPECT_EQ(status("POST /echo HTTP/1.1\r\nX-Key: bad\r\nTransfer-Encoding: chunked\r\n\r\n"), "HTTP/1.1 401");
    // Decoded bytes past the limit (60 + 60 > 100), a malformed chunk, and framing that would take the wire past
    // twice the limit plus its slack.
    const std::string chunk60 = "3c\r\n" + std::string(60, 'x') + "\r\n";
    EXPECT_EQ(status("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk60 + chunk60 + "0\r\n\r\n"),
              "HTTP/1.1 413");
    EXPECT_EQ(status("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n"), "HTTP/1.1 400");
    EXPECT_EQ(status("POST /echo HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\nab"), "HTTP/1.1 415");
    EXPECT_EQ(status("POST /echo HTTP/1.1\r\nContent-Length: 101\r\n\r\n"), "HTTP/1.1 413");
    EXPECT_EQ(status("POST /echo HTTP/1.1\r\nX-Key: bad\r\nContent-Length: 99\r\n\r\n"), "HTTP/1.1 401");
    EXPECT_EQ(status("GET /nowhere HTTP/1.1\r\n\r\n"), "HTTP/1.1 404");
    EXPECT_EQ(status("DELETE /a HTTP/1.1\r\n\r\n"), "HTTP/1.1 405");
    EXPECT_EQ(status("GET /a HTTP/2.0\r\n\r\n"), "HTTP/1.1 505");
    EXPECT_EQ(status("GET /a HTTP/1.1\r\n folded: x\r\n\r\n"), "HTTP/1.1 400");
    EXPECT_EQ(status("GET /a HTTP/1.1\nHost: x\r\n\r\n"), "HTTP/1.1 400");
    std::string many = "GET /a HTTP/1.1\r\n";
    for (int i = 0; i < 11; ++i) many += "X-" + std::to_string(i) + ": 1\r\n";
    EXPECT_EQ(status(many + "\r\n"), "HTTP/1.1 431");
    EXPECT_EQ(status("GET /a HTTP/1.1\r\nX-Big: " + std::string(3000, 'b') + "\r\n\r\n"), "HTTP/1.1 431");
}

TEST(HttpFront, ARequestHasOneDeadlineAndConnectionsOverTheLimitAreRefused) {
    HttpLimits l;
    l.request_timeout_s = 0.5;
    l.max_connections = 2;
    FrontFixture f(l);
    const int a = f.connect(), b = f.connect();
    // b's answer shows both taken (the front accepts in arrival order); b then stays open, kept alive.
    const std::string get = "GET /a HTTP/1.1\r\n\r\n";
    ASSERT_EQ(::send(b, get.data(), get.size(), MSG_NOSIGNAL), static_cast<ssize_t>(get.size()));
    char head[12];
    ASSERT_EQ(::recv(b, head, sizeof head, MSG_WAITALL), static_cast<ssize_t>(sizeof head));
    EXPECT_EQ(std::string(head, sizeof head), "HTTP/1.1 200");
    EXPECT_EQ(f.front.open_connections(), 2);
    // A third connection is refused at once.
    EXPECT_EQ(f.exchange("GET /a HTTP/1.1\r\n\r\n").substr(0, 12), "HTTP/1.1 503");
    // A byte every 100 ms does not extend the deadline: the request is cut off after 0.5 s.
    const auto start = std::chrono::steady_clock::now();
    std::string out;
    char buf[512];
    for (char ch : std::string("GET /a HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaa")) {
        if (::send(a, &ch, 1, MSG_NOSIGNAL) != 1) break;
        pollfd p{a, POLLIN, 0};
        if (::poll(&p, 1, 100) > 0) {
            const ssize_t n = ::recv(a, buf, sizeof buf, 0);
            if (n > 0) out.assign(buf, static_cast<size_t>(n));
            break;
        }
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(out.substr(0, 12), "HTTP/1.1 408");
    EXPECT_LT(took, 2.0);
    ::close(a);
    ::close(b);
}

}  // namespace kvsieve
