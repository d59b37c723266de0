// The one prefill driver (session/prefill.h) on the bundled stories260K model: chunking, admission held until the
// prompt's end, compression between chunks under compress_during_prefill, the after-prefill step, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "session/prefill.h"
#include "session/prefill_plan.h"
#include "session/session.h"
#include "text/tokenizer.h"
#include "test_util.h"
#include "util/binary_io.h"
#include "util/error.h"

namespace kvsieve {
namespace {

const LlamaModel& model() { return test::stories260k(); }
std::vector<int32_t> prompt_ids() { return test::story_prompt_ids(); }

/// Positions of the entries a head holds (sinks, global and window regions), sorted.
std::vector<int32_t> kept_positions(const KVCache& c, int layer, int head) {
    std::vector<int32_t> got;
    for (Region r : kRegionsInOrder)
        for (int32_t p : c.head(layer, head).region(r)->positions()) got.push_back(p);
    std::sort(got.begin(), got.end());
    return got;
}

std::unique_ptr<KVCache> make(const std::string& spec) {
    return std::make_unique<KVCache>(model().config(), 256, parse_policy(spec),
                                     std::make_shared<KVPool>(model().config().head_dim, KVType::kF32));
}

using test::expect_error_contains;

TEST(Session, CompressDuringPrefillIsForwardAndCompressionPerChunk) {
    // The memory-bounded prefill (KVCache::set_compress_during_prefill) is the same steps written out by hand:
    // forward each chunk, compress after it (the last one too).
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    ASSERT_GT(ids.size(), 20u);
    for (const char* spec : {"snapkv:ratio=0.5", "streaming_llm:ratio=0.5", "h2o:budget=12"}) {
        SCOPED_TRACE(spec);
        auto a = make(spec), b = make(spec);
        a->set_compress_during_prefill(true);
        std::vector<float> la, lb;
        PrefillPlan plan;
        plan.chunk = planned_chunk(a->policy(), 8, true, true);
        ASSERT_EQ(plan.chunk, 8);
        std::vector<std::pair<int64_t, int64_t>> ranges;
        prefill(model(), *tok, *a, ids, ids, plan, la, [&](int64_t s, int64_t e, const std::vector<float>& lg) {
            ranges.emplace_back(s, e);
            EXPECT_EQ(lg.size(), static_cast<size_t>(model().config().n_vocab));
        });
        for (size_t i = 0; i < ids.size(); i += 8) {
            model().forward(StepPhase::kPrefill,
                            std::vector<int32_t>(ids.begin() + i, ids.begin() + std::min(ids.size(), i + 8)), *b, lb);
            b->end_prefill();
        }
        EXPECT_EQ(la, lb);
        EXPECT_EQ(a->stats().entries, b->stats().entries);
        EXPECT_LT(a->stats().density, 0.9);  // the policy really compressed
        ASSERT_EQ(ranges.size(), (ids.size() + 7) / 8);
        EXPECT_EQ(ranges.front().first, 0);
        EXPECT_EQ(ranges.back().second, static_cast<int64_t>(ids.size()));
        for (size_t i = 1; i < ranges.size(); ++i) EXPECT_EQ(ranges[i].first, ranges[i - 1].second);
    }
}

TEST(Session, OneBatchPrefillRunsTheAfterPrefillStep) {
    // KVzip+ rescoring through the driver equals finish_prefill called by hand; all_logits gives [n][V].
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    auto a = make("kvzip_plus:ratio=0.5"), b = make("kvzip_plus:ratio=0.5");
    std::vector<float> la, lb;
    PrefillPlan plan;
    plan.all_logits = true;
    prefill(model(), *tok, *a, ids, ids, plan, la);
    EXPECT_EQ(la.size(), ids.size() * static_cast<size_t>(model().config().n_vocab));
    model().forward(StepPhase::kPrefill, ids, *b, lb, true);
    finish_prefill(model(), *tok, *b, ids);
    EXPECT_EQ(la, lb);
    EXPECT_EQ(a->stats().entries, b->stats().entries);
    EXPECT_LT(a->stats().density, 0.6);
}

TEST(Session, ChunkingAPolicyThePlannerFeedsInOnePieceIsAnError) {
    // A step scorer scores from each chunk's queries: chunked, it is refused (the planner feeds it in one piece).
    // Even a chunk longer than the prompt: the reconstruction is never skipped silently.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    std::vector<float> l;
    PrefillPlan plan;
    plan.chunk = 4096;
    auto snap = make("snapkv:ratio=0.5");
    EXPECT_EQ(planned_chunk(snap->policy(), 8), 0);
    expect_error_contains([&] { prefill(model(), *tok, *snap, ids, ids, plan, l); },
                          "scores its entries from each chunk's queries; a chunked prefill cannot be used with it");
    // KVzip scores the whole context after the prompt, with or without compression during the prefill.
    auto c = make("kvzip:ratio=0.5");
    EXPECT_EQ(planned_chunk(c->policy(), 8), 0);
    EXPECT_EQ(planned_chunk(c->policy(), 8, true, true), 0);
    expect_error_contains([&] { prefill(model(), *tok, *c, ids, ids, plan, l); },
                          "scores the whole prompt after the prefill; a chunked prefill cannot be used with it");
    expect_error_contains([&] { prefill(model(), *tok, *c, {}, {}, PrefillPlan{}, l); }, "the prompt is empty");
}

TEST(Session, HeldAdmissionIsJudgedAtThePromptsEnd) {
    // KVzap-style admission at window exit (streaming_llm:window keeps nothing beyond its window): while the first
    // chunks run, the entries they push out of the window stay (held); after the prompt they are judged, and the
    // cache holds the sinks and the window, as one batch leaves it.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    const int64_t n = static_cast<int64_t>(ids.size());
    ASSERT_GT(n, 16);
    auto c = make("streaming_llm:window=6,sinks=2");
    ASSERT_EQ(planned_chunk(c->policy(), 4), 4);
    std::vector<float> logits;
    int64_t held_midway = -1;
    PrefillPlan plan;
    plan.chunk = 4;
    prefill(model(), *tok, *c, ids, ids, plan, logits, [&](int64_t, int64_t end, const std::vector<float>&) {
        if (end == 16) held_midway = c->n_held();
    });
    const int64_t heads = static_cast<int64_t>(model().config().n_layer) * model().config().n_head_kv;
    EXPECT_EQ(held_midway, (16 - 2 - 6) * heads);  // every entry that left the window, still in the cache
    EXPECT_EQ(c->n_held(), 0);
    std::vector<int32_t> want{0, 1};
    for (int64_t p = n - 6; p < n; ++p) want.push_back(static_cast<int32_t>(p));
    for (int l = 0; l < model().config().n_layer; ++l)
        for (int h = 0; h < model().config().n_head_kv; ++h) EXPECT_EQ(kept_positions(*c, l, h), want);
}

TEST(Session, PiecesOfWhole256TokenBlocksAreOneBatchBitForBit) {
    // A prompt cut in pieces of a multiple of 256 tokens (the server's default) takes every product with one batch's
    // shape (prefill_plan.h): the window's ring is read oldest first, attention's query blocks sit at fixed key
    // indices and a rest under 32 tokens joins the last piece, so the logits, the cache and the decode steps after it
    // are one batch's bit for bit, for a window that wraps (StreamingLLM) and for the full cache, on F32 and F16 pages.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto story = prompt_ids();
    std::vector<int32_t> ids;
    while (ids.size() < 500) ids.insert(ids.end(), story.begin() + (ids.empty() ? 0 : 1), story.end());
    ids.resize(500);
    EXPECT_EQ(next_prefill_chunk(500, 256, 256).end, 500);  // the 244 after the first piece: one piece
    EXPECT_EQ(next_prefill_chunk(270, 0, 256).end, 270);    // a rest of 14 joins the first
    EXPECT_EQ(next_prefill_chunk(40, 0, 16).end, 16);       // pieces under 32 tokens stay as asked
    for (KVType type : {KVType::kF32, KVType::kF16})
        for (const char* spec : {"full", "streaming_llm:window=64,sinks=4"}) {
            SCOPED_TRACE(std::string(spec) + (type == KVType::kF32 ? " f32" : " f16"));
            auto run = [&](int64_t chunk, std::vector<float>& logits) {
                auto c = std::make_unique<KVCache>(model().config(), 512, parse_policy(spec),
                                                   std::make_shared<KVPool>(model().config().head_dim, type));
                PrefillPlan plan;
                plan.chunk = planned_chunk(c->policy(), chunk);
                prefill(model(), *tok, *c, ids, ids, plan, logits);
                std::vector<float> step;
                for (int32_t t : {5, 17, 300}) {
                    model().forward(StepPhase::kDecode, {t}, *c, step);
                    logits.insert(logits.end(), step.begin(), step.end());
                }
                BinaryWriter w;
                c->save(w);
                return w.data();
            };
            std::vector<float> one, pieces;
            const std::string cache_one = run(0, one), cache_pieces = run(256, pieces);
            ASSERT_EQ(one.size(), pieces.size());
            EXPECT_EQ(std::memcmp(one.data(), pieces.data(), one.size() * sizeof(float)), 0)
                << "max |Δlogit| " << test::max_abs_diff(one, pieces);
            EXPECT_TRUE(cache_one == cache_pieces);
        }
}

TEST(Session, StreamingLlmRatioUnderChunkedPrefillKeepsSinksAndTheMostRecent) {
    // kvpress StreamingLLMPress keeps the first 4 and the most recent entries; in chunks, after every chunk the
    // cache must hold exactly that: positions 0-3 and the newest (keep − 4), keep = ⌊0.5·tokens seen⌋.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    const int64_t n = static_cast<int64_t>(ids.size());
    auto c = make("streaming_llm:ratio=0.5");
    c->set_compress_during_prefill(true);
    std::vector<float> logits;
    PrefillPlan plan;
    plan.chunk = 8;
    prefill(model(), *tok, *c, ids, ids, plan, logits);
    const int64_t keep = n / 2;
    std::vector<int32_t> want{0, 1, 2, 3};
    for (int64_t p = n - (keep - 4); p < n; ++p) want.push_back(static_cast<int32_t>(p));
    for (int l = 0; l < model().config().n_layer; ++l)
        for (int h = 0; h < model().config().n_head_kv; ++h)
            EXPECT_EQ(kept_positions(*c, l, h), want) << "layer " << l << " head " << h;
}

TEST(Session, PyramidKvLayerBudgetsDoNotCompoundOverChunks) {
    // kvpress PyramidKVPress sizes layer l from the prompt length q_len: in chunks the budgets must come from the
    // tokens seen, not from the entries left by earlier chunks, so chunked and one-shot prefill keep as many.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    auto one = make("pyramidkv:ratio=0.5,obs_window=4"), chunked = make("pyramidkv:ratio=0.5,obs_window=4");
    chunked->set_compress_during_prefill(true);
    std::vector<float> logits;
    prefill(model(), *tok, *one, ids, ids, PrefillPlan{}, logits);
    PrefillPlan plan;
    plan.chunk = 8;
    prefill(model(), *tok, *chunked, ids, ids, plan, logits);
    const auto a = one->stats().entries, b = chunked->stats().entries;
    EXPECT_EQ(a, b);
    EXPECT_GT(a.front().front(), a.back().front());  // a pyramid: the first layer keeps more than the last
}

TEST(Session, H2OBudgetKeepsItsRecentWindow) {
    // H2O Alg. 1: a budget K keeps the K/2 most recent entries and the K/2 heaviest hitters among the rest. After
    // every decode step each head holds exactly 16 entries, the newest 8 among them.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    auto c = make("h2o:budget=16");
    EXPECT_EQ(c->policy().window, 8);
    EXPECT_EQ(c->policy().compression.budget, 8);
    std::vector<float> logits;
    prefill(model(), *tok, *c, ids, ids, PrefillPlan{}, logits);
    for (int step = 0; step < 6; ++step) {
        model().forward(StepPhase::kDecode, {static_cast<int32_t>(300 + step)}, *c, logits);
        const int32_t newest = static_cast<int32_t>(c->n_tokens()) - 1;
        for (int l = 0; l < model().config().n_layer; ++l)
            for (int h = 0; h < model().config().n_head_kv; ++h) {
                const std::vector<int32_t> got = kept_positions(*c, l, h);
                ASSERT_EQ(got.size(), 16u) << "step " << step << " layer " << l << " head " << h;
                for (int32_t p = newest - 7; p <= newest; ++p)
                    EXPECT_TRUE(std::binary_search(got.begin(), got.end(), p)) << "position " << p << " step " << step;
            }
    }
    // window=0 gives the heavy-hitter-only variant; window must leave room for heavy hitters.
    EXPECT_EQ(parse_policy("h2o:budget=16,window=0").window, 0);
    expect_error_contains([] { parse_policy("h2o:budget=16,window=16"); }, "window");
}

/// Records whether each on_write came in a prefill or a decode step, and the step's length.
class PhaseScorer : public EntryScorer {
public:
    std::string name() const override { return "phase"; }
    void on_write(const StepEvent& e, float* scores) const override {
        if (e.step.layer == 0) seen.push_back({e.prefill(), e.step.T});
        std::fill(scores, scores + e.step.T * e.step.n_head_kv, 0.0f);
    }
    mutable std::vector<std::pair<bool, int64_t>> seen;
};

TEST(Session, ThePhaseIsTheSessionsNotTheStepLength) {
    // A chunked prefill whose last chunk is one token is still a prefill; decode steps are decode steps.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 9);
    Policy p;
    p.name = "phase";
    auto sc = std::make_shared<PhaseScorer>();
    p.scorer = sc;
    KVCache cache(model().config(), 64, p, std::make_shared<KVPool>(model().config().head_dim, KVType::kF32));
    Session s(model(), *tok, cache);
    PrefillPlan plan;
    plan.chunk = 4;
    std::vector<float> logits;
    s.prefill(prompt, plan, logits);
    s.decode(ids[9], logits);
    s.prefill({ids[10]}, PrefillPlan{}, logits);  // a one-token turn is a prefill too
    const std::vector<std::pair<bool, int64_t>> want{{true, 4}, {true, 4}, {true, 1}, {false, 1}, {true, 1}};
    EXPECT_EQ(sc->seen, want);
    EXPECT_EQ(s.tokens(), std::vector<int32_t>(ids.begin(), ids.begin() + 11));
    EXPECT_EQ(s.n_tokens(), 11);
    // The same steps outside a session take a one-token step for a decode step.
    sc->seen.clear();
    KVCache raw(model().config(), 64, p, std::make_shared<KVPool>(model().config().head_dim, KVType::kF32));
    model().forward(StepPhase::kDecode, {ids[0]}, raw, logits);
    EXPECT_EQ(sc->seen, (std::vector<std::pair<bool, int64_t>>{{false, 1}}));
    s.reset();
    EXPECT_EQ(s.n_tokens(), 0);
    EXPECT_TRUE(s.tokens().empty());
}

TEST(Session, AFullContextIsAnError) {
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    KVCache cache(model().config(), 8, parse_policy("full"),
                  std::make_shared<KVPool>(model().config().head_dim, KVType::kF32));
    Session s(model(), *tok, cache);
    std::vector<float> logits;
    expect_error_contains([&] { s.prefill(ids, PrefillPlan{}, logits); }, "but the context holds 8");
    EXPECT_EQ(s.n_tokens(), 0);
    s.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 8), PrefillPlan{}, logits);
    expect_error_contains([&] { s.decode(ids[8], logits); }, "the context of 8 positions is full");
    EXPECT_EQ(s.tokens().size(), 8u);
}

TEST(Session, APrefillWithoutCompressionOnlyExtendsTheCache) {
    // The query-agnostic protocol: the context is compressed, then the question is added whole.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    const int64_t n_ctx = 30;
    const std::vector<int32_t> context(ids.begin(), ids.begin() + n_ctx), question(ids.begin() + n_ctx, ids.end());
    auto c = make("snapkv:ratio=0.75,obs_window=4");
    Session s(model(), *tok, *c);
    std::vector<float> logits;
    s.prefill(context, PrefillPlan{}, logits);
    const auto after_context = c->stats().entries;
    PrefillPlan q;
    q.compress = false;
    s.prefill(question, q, logits);
    for (int l = 0; l < model().config().n_layer; ++l)
        for (int h = 0; h < model().config().n_head_kv; ++h) {
            const auto kept = kept_positions(*c, l, h);
            EXPECT_LE(after_context[l][h], n_ctx / 2);  // the context was compressed
            EXPECT_EQ(static_cast<int64_t>(kept.size()), after_context[l][h] + static_cast<int64_t>(question.size()));
            for (int64_t p = n_ctx; p < static_cast<int64_t>(ids.size()); ++p)
                EXPECT_TRUE(std::binary_search(kept.begin(), kept.end(), static_cast<int32_t>(p)));
        }
    // The same tokens with compression would have been cut again.
    auto d = make("snapkv:ratio=0.75,obs_window=4");
    Session s2(model(), *tok, *d);
    s2.prefill(context, PrefillPlan{}, logits);
    s2.prefill(question, PrefillPlan{}, logits);
    EXPECT_LT(d->stats().density, c->stats().density);
}

TEST(Session, EveryBudgetRuleKeepsSinksWindowAndItsBudget) {
    // B = s + w + k per head (KVpop eq. 1): the first s positions, the newest w, and k chosen by the scores.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    const int64_t n = static_cast<int64_t>(ids.size()) - 3;
    for (const char* spec : {"snapkv:budget=8,sinks=2,window=4,obs_window=4", "knorm:budget=8,sinks=2,window=4",
                             "tova:budget=8,sinks=2,window=4", "expected_attention:budget=8,sinks=2,window=4"}) {
        SCOPED_TRACE(spec);
        auto c = make(spec);
        Session s(model(), *tok, *c);
        std::vector<float> logits;
        s.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + n), PrefillPlan{}, logits);
        for (int step = 0; step <= 3; ++step) {
            const int64_t seen = n + step;
            for (int l = 0; l < model().config().n_layer; ++l)
                for (int h = 0; h < model().config().n_head_kv; ++h) {
                    const auto kept = kept_positions(*c, l, h);
                    ASSERT_EQ(kept.size(), 14u) << "step " << step;
                    EXPECT_EQ(kept[0], 0);
                    EXPECT_EQ(kept[1], 1);
                    for (int64_t p = seen - 4; p < seen; ++p)
                        EXPECT_TRUE(std::binary_search(kept.begin(), kept.end(), static_cast<int32_t>(p)));
                }
            if (step < 3) s.decode(ids[n + step], logits);
        }
    }
    // A ratio counts the tokens beyond the protected regions: 4 + 8 + ⌊(n − 12)·0.5⌋.
    auto c = make("knorm:ratio=0.5,sinks=4,window=8");
    Session s(model(), *tok, *c);
    std::vector<float> logits;
    s.prefill(ids, PrefillPlan{}, logits);
    const int64_t m = static_cast<int64_t>(ids.size());
    EXPECT_EQ(static_cast<int64_t>(kept_positions(*c, 0, 0).size()), 12 + (m - 12) / 2);
}

TEST(Session, TovaMakesOneChoicePerLayer) {
    // The last query's attention averaged over every query head of the layer: all KV heads keep the same positions,
    // after the prefill and after each decode-step eviction.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = prompt_ids();
    auto c = make("tova:budget=12");
    Session s(model(), *tok, *c);
    std::vector<float> logits;
    s.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 30), PrefillPlan{}, logits);
    for (int step = 0; step < 8; ++step) {
        s.decode(ids[30 + step], logits);
        for (int l = 0; l < model().config().n_layer; ++l) {
            const auto first = kept_positions(*c, l, 0);
            EXPECT_EQ(first.size(), 12u);
            for (int h = 1; h < model().config().n_head_kv; ++h)
                EXPECT_EQ(kept_positions(*c, l, h), first) << "layer " << l << " head " << h << " step " << step;
        }
    }
}

}  // namespace
}  // namespace kvsieve

namespace kvsieve {
namespace {
TEST(Session, RollbackForgetsTheLaterPositionsAndGoesOnFromThere) {
    // Full cache: rolled back to n, then fed the same tokens again, the logits are those of never having gone on.
    auto cache = make("full");
    const auto tok = Tokenizer::from_gguf(model().file());
    Session s(model(), *tok, *cache);
    const std::vector<int32_t> ids = prompt_ids();
    ASSERT_GT(ids.size(), 12u);
    std::vector<float> logits, again;
    s.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 8), PrefillPlan{}, logits);
    for (size_t i = 8; i < 12; ++i) s.decode(ids[i], logits);
    s.rollback(10);
    EXPECT_EQ(s.n_tokens(), 10);
    EXPECT_EQ(s.tokens(), std::vector<int32_t>(ids.begin(), ids.begin() + 10));
    for (int l = 0; l < model().config().n_layer; ++l)
        for (int h = 0; h < model().config().n_head_kv; ++h)
            for (int32_t p : kept_positions(*cache, l, h)) EXPECT_LT(p, 10);
    s.decode(ids[10], again);
    s.decode(ids[11], again);
    EXPECT_EQ(again, logits);
    expect_error_contains([&] { s.rollback(13); }, "cannot roll a sequence of 12 tokens back to 13");
    expect_error_contains([&] { s.rollback(-1); }, "back to -1");
}
}  // namespace
}  // namespace kvsieve
