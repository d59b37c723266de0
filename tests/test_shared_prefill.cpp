// One prefill shared by several sequences (session/shared_prefill.h): each cache ends up as its own prefill leaves
// it, and what cannot share is refused.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "attend/prefill_stat_share.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "session/prefill.h"
#include "session/session.h"
#include "session/shared_prefill.h"
#include "session/shared_prefill_cache.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {
namespace {

/// Kept positions and values of every (layer, KV head), region by region: two caches that agree here hold the same.
struct Contents {
    std::vector<std::vector<int32_t>> pos;
    std::vector<std::vector<float>> k, v, scores;
};
Contents contents(const KVCache& c, const ModelConfig& cfg) {
    Contents out;
    const int d = cfg.head_dim;
    for (int l = 0; l < cfg.n_layer; ++l)
        for (int h = 0; h < cfg.n_head_kv; ++h)
            for (Region r : kRegionsInOrder) {
                const PageStore* ps = c.head(l, h).region(r);
                out.pos.emplace_back(ps->positions().begin(), ps->positions().end());
                out.scores.emplace_back(ps->scores().begin(), ps->scores().end());
                std::vector<float> k(ps->size() * d), v(ps->size() * d);
                for (int64_t i = 0; i < ps->size(); ++i) ps->read(i, k.data() + i * d, v.data() + i * d);
                out.k.push_back(k);
                out.v.push_back(v);
            }
    return out;
}

const std::string kKvzap = "kvzap:model=" + test::model_path("kvzap/stories260K-linear");

TEST(SharedPrefill, EveryCacheHoldsWhatItsOwnPrefillGives) {
    const LlamaModel& m = test::stories260k();
    const auto tok = Tokenizer::from_gguf(m.file());
    // Over 128 tokens: more than one block of queries in the prefill kernel (TOVA's shadow computes the last only).
    std::vector<int32_t> ids = test::story_prompt_ids();
    const std::vector<int32_t> story(ids.begin() + 1, ids.end());
    for (int r = 0; r < 3; ++r) ids.insert(ids.end(), story.begin(), story.end());
    ASSERT_GT(ids.size(), 140u);
    // Scorers that read the attention (H2O: every query's, TOVA: the last query's), that recompute it (SnapKV), that
    // read the hidden state at write (KVzap) or the queries' statistics (Expected Attention), that replay the context
    // after the prefill (KVzip), and none (full, StreamingLLM).
    const std::vector<std::string> specs = {"full",
                                            "h2o:ratio=0.5",
                                            "tova:ratio=0.5",
                                            "h2o:ratio=0.75",   // the statistics of h2o:ratio=0.5, taken from it
                                            "tova:ratio=0.75",  // and those of tova:ratio=0.5
                                            "snapkv:ratio=0.5,obs_window=8",
                                            "expected_attention:ratio=0.5",
                                            "kvzip:ratio=0.5",
                                            "kvzip:ratio=0.75",  // the replay above, once for both
                                            "kvzip_plus:ratio=0.5",
                                            "streaming_llm:ratio=0.5",
                                            kKvzap + ",rule=threshold,tau=-3",
                                            kKvzap + ",rule=head,ratio=0.5,sinks=4,window=8"};
    auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF16);
    std::vector<std::unique_ptr<KVCache>> shared_caches, own_caches;
    std::vector<std::unique_ptr<Session>> shared, own;
    std::vector<Session*> ptrs;
    for (const auto& s : specs) {
        shared_caches.push_back(std::make_unique<KVCache>(m.config(), 640, parse_policy(s), pool));
        own_caches.push_back(std::make_unique<KVCache>(m.config(), 640, parse_policy(s), pool));
        shared.push_back(std::make_unique<Session>(m, *tok, *shared_caches.back()));
        own.push_back(std::make_unique<Session>(m, *tok, *own_caches.back()));
        ptrs.push_back(shared.back().get());
    }
    // The h2o cache first: the output comes from a cache whose policy compresses, and the full one is a shadow.
    std::swap(ptrs[0], ptrs[1]);
    std::vector<float> lg;
    // h2o:ratio=0.75 and tova:ratio=0.75 take every (layer, KV head) statistic from the caches at 0.5.
    EXPECT_EQ(prefill_shared(ptrs, ids, lg), 2 * m.config().n_layer * m.config().n_head_kv);
    for (size_t i = 0; i < specs.size(); ++i) {
        SCOPED_TRACE(specs[i]);
        std::vector<float> own_lg;
        own[i]->prefill(ids, PrefillPlan{}, own_lg);
        EXPECT_EQ(lg, own_lg);
        EXPECT_EQ(shared[i]->tokens(), own[i]->tokens());
        const Contents a = contents(*shared_caches[i], m.config()), b = contents(*own_caches[i], m.config());
        EXPECT_EQ(a.pos, b.pos);
        EXPECT_EQ(a.k, b.k);
        EXPECT_EQ(a.v, b.v);
        EXPECT_EQ(a.scores, b.scores);
        // And the next step sees the same cache, no longer a shadow's (a shadow refuses a decode step).
        std::vector<float> x, y;
        EXPECT_NO_THROW(shared[i]->decode(ids[5], x));
        own[i]->decode(ids[5], y);
        EXPECT_EQ(x, y);
    }
    // Something was dropped, so the comparison is not between full caches.
    EXPECT_LT(shared_caches[1]->stats().density, 0.7);
}

TEST(SharedPrefill, AttentionStatisticsAreSharedOnlyOverTheSameKeys) {
    PrefillStatShare share;
    const std::vector<int32_t> pos = {0, 1, 2, 5};
    const std::vector<float> a = {0.1f, 0.2f, 0.3f, 0.4f};
    share.put(3, 1, KeyStat::kSum, KVType::kF16, KVType::kF16, pos, a);
    ASSERT_NE(share.find(3, 1, KeyStat::kSum, KVType::kF16, KVType::kF16, pos), nullptr);
    EXPECT_EQ(*share.find(3, 1, KeyStat::kSum, KVType::kF16, KVType::kF16, pos), a);
    EXPECT_EQ(share.hits(), 2);
    // Another layer, head, statistic, element type (global or local), or other keys (one more, another order, another one) miss.
    EXPECT_EQ(share.find(2, 1, KeyStat::kSum, KVType::kF16, KVType::kF16, pos), nullptr);
    EXPECT_EQ(share.find(3, 0, KeyStat::kSum, KVType::kF16, KVType::kF16, pos), nullptr);
    EXPECT_EQ(share.find(3, 1, KeyStat::kLast, KVType::kF16, KVType::kF16, pos), nullptr);
    EXPECT_EQ(share.find(3, 1, KeyStat::kSum, KVType::kF32, KVType::kF32, pos), nullptr);
    // Keys of the same global type with other sinks' and window's types (quantization at admission) miss too.
    share.put(3, 1, KeyStat::kSum, KVType::kQ8_0, KVType::kQ8_0, pos, a);
    EXPECT_EQ(share.find(3, 1, KeyStat::kSum, KVType::kQ8_0, KVType::kF16, pos), nullptr);
    EXPECT_EQ(share.find(3, 1, KeyStat::kSum, KVType::kF16, KVType::kF16, {0, 1, 2, 5, 6}), nullptr);
    EXPECT_EQ(share.find(3, 1, KeyStat::kSum, KVType::kF16, KVType::kF16, {0, 2, 1, 5}), nullptr);
    EXPECT_EQ(share.find(3, 1, KeyStat::kSum, KVType::kF16, KVType::kF16, {0, 1, 2, 4}), nullptr);
    EXPECT_EQ(share.hits(), 2);
    share.clear();
    EXPECT_EQ(share.find(3, 1, KeyStat::kSum, KVType::kF16, KVType::kF16, pos), nullptr);
}

TEST(SharedPrefill, WhatCannotShareIsRefused) {
    const LlamaModel& m = test::stories260k();
    const auto tok = Tokenizer::from_gguf(m.file());
    const auto ids = test::story_prompt_ids();
    auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF32);
    KVCache a(m.config(), 256, parse_policy("full"), pool), b(m.config(), 256, parse_policy("h2o:ratio=0.5"), pool),
        small(m.config(), 16, parse_policy("full"), pool);
    Session sa(m, *tok, a), sb(m, *tok, b), sa2(m, *tok, a), ss(m, *tok, small);
    std::vector<float> lg;
    EXPECT_THROW(prefill_shared({}, ids, lg), Error);
    EXPECT_THROW(prefill_shared({&sa, &sb}, {}, lg), Error);
    EXPECT_THROW(prefill_shared({&sa, &sa2}, ids, lg), Error);  // one cache twice
    EXPECT_THROW(prefill_shared({&sa, &ss}, ids, lg), Error);   // beyond a context
    EXPECT_EQ(a.n_tokens(), 0);
    EXPECT_EQ(b.n_tokens(), 0);
    sb.prefill(ids, PrefillPlan{}, lg);
    EXPECT_THROW(prefill_shared({&sa, &sb}, ids, lg), Error);  // not fresh
    EXPECT_EQ(a.n_tokens(), 0);                                // nothing half done
    // A gated prefill (SP-KV's) is not the dense one.
    const LlamaModel spkv(test::model_path("kvsieve-tiny-2k-spkv.gguf"));
    const auto stok = Tokenizer::from_gguf(spkv.file());
    auto spool = std::make_shared<KVPool>(spkv.config().head_dim, KVType::kF32);
    const Policy gated = parse_policy("spkv:tau=0.5,window=16");
    EXPECT_FALSE(shares_dense_prefill(gated));
    EXPECT_TRUE(shares_dense_prefill(parse_policy("h2o:ratio=0.5")));
    KVCache g(spkv.config(), 256, gated, spool), f(spkv.config(), 256, parse_policy("full"), spool);
    Session sg(spkv, *stok, g), sf(spkv, *stok, f);
    const auto sids = stok->encode("Once upon a time there was a cat.", true, false);
    EXPECT_THROW(prefill_shared({&sf, &sg}, sids, lg), Error);
    EXPECT_THROW(SharedPrefillCache(g, nullptr, true), Error);
    // A shadow cache takes no decode step.
    SharedPrefillCache shadow(f, nullptr, true);
    std::vector<float> out;
    EXPECT_THROW(spkv.forward(StepPhase::kDecode, {1}, shadow, out), Error);
}

}  // namespace
}  // namespace kvsieve
