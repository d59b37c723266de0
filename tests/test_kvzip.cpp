// KVzip / KVzip+ against kvpress KVzipPress on the tiny Qwen3 model. Fixtures: tests/data/kvzip/*.json, made
// by tools/make_kvzip_fixtures.py (kvpress's own scores and evictions; the prompt strings' ids are stored).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "cache/kv_cache.h"
#include "session/model_access.h"
#include "session/prefill.h"
#include "model/llama_model.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {
namespace {

class KVzipParity : public ::testing::TestWithParam<std::string> {};

TEST_P(KVzipParity, ScoresAndEvictionsMatchKvpress) {
    std::ifstream in(test::data_dir() + "/kvzip/" + GetParam() + ".json");
    ASSERT_TRUE(in);
    const auto j = nlohmann::json::parse(in);
    const auto prompt = j.at("prompt_tokens").get<std::vector<int32_t>>();
    LlamaModel m(test::model_path("tiny-qwen3-f32.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    for (const auto& [text, ids] : j.at("string_ids").items())  // the fixture used kvsieve's ids for its prompts
        EXPECT_EQ(tok->encode(text, false, false), ids.get<std::vector<int32_t>>());
    const std::string preset = j.at("plus").get<bool>() ? "kvzip_plus" : "kvzip";
    const std::string chunk = std::to_string(j.at("chunk").get<int>());
    auto run = [&](const std::string& ratio) {
        auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF32);
        auto c = std::make_unique<KVCache>(m.config(), 512,
                                           parse_policy(preset + ":ratio=" + ratio + ",chunk=" + chunk), pool);
        std::vector<float> logits;
        m.forward(StepPhase::kPrefill, prompt, *c, logits);
        finish_prefill(m, *tok, *c, prompt);
        return std::make_pair(std::move(c), pool);
    };
    const auto [all, p1] = run("0");
    const auto [cut, p2] = run("0.5");
    double worst = 0;
    for (const auto& layer : j.at("layers")) {
        const int l = layer.at("layer").get<int>();
        const auto scores = layer.at("scores").get<std::vector<std::vector<double>>>();
        std::set<std::pair<int, int>> evicted;
        for (const auto& e : layer.at("evicted")) evicted.insert({e[0].get<int>(), e[1].get<int>()});
        for (int h = 0; h < m.config().n_head_kv; ++h) {
            std::map<int32_t, float> mine;
            const HeadCache& hc = all->head(l, h);
            for (Region r : kRegionsInOrder)
                for (int64_t i = 0; i < hc.region(r)->size(); ++i)
                    mine[hc.region(r)->positions()[i]] = hc.region(r)->scores()[i];
            std::set<int32_t> kept;
            for (Region r : kRegionsInOrder)
                for (int32_t p : cut->head(l, h).region(r)->positions()) kept.insert(p);
            for (size_t t = 0; t < prompt.size(); ++t) {
                const double ref = scores[h][t];
                worst = std::max(worst, std::fabs(mine[static_cast<int32_t>(t)] - ref) / std::max(1.0, std::fabs(ref)));
                EXPECT_EQ(kept.count(static_cast<int32_t>(t)) == 0, evicted.count({h, static_cast<int>(t)}) == 1)
                    << "layer " << l << " head " << h << " token " << t << " score " << ref;
            }
        }
    }
    EXPECT_LE(worst, 1e-4);
    EXPECT_NEAR(cut->stats().compression_ratio, 0.5, 1e-9);
    std::printf("[ kvzip ] %s: max relative score diff %.2e\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Presses, KVzipParity, ::testing::Values("kvzip", "kvzip_plus", "kvzip_plus_chunk64"));

TEST(KVzip, RepeatRowsOnlyScoresAreAMaxOverFewerRows) {
    // rows=repeat (KVzap eq. 3) maxes over the rows that repeat the context, a subset of rows=all: never higher,
    // and lower somewhere (the instruction's rows attend to the context too).
    LlamaModel m(test::model_path("tiny-qwen3-f32.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    std::ifstream in(test::data_dir() + "/kvzip/kvzip_plus.json");
    const auto prompt = nlohmann::json::parse(in).at("prompt_tokens").get<std::vector<int32_t>>();
    auto run = [&](const std::string& rows) {
        auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF32);
        auto c = std::make_unique<KVCache>(m.config(), 512, parse_policy("kvzip_plus:ratio=0,rows=" + rows), pool);
        std::vector<float> logits;
        m.forward(StepPhase::kPrefill, prompt, *c, logits);
        finish_prefill(m, *tok, *c, prompt);
        std::map<std::tuple<int, int, int32_t>, float> s;
        for (int l = 0; l < m.config().n_layer; ++l)
            for (int h = 0; h < m.config().n_head_kv; ++h)
                for (Region r : kRegionsInOrder) {
                    const PageStore* ps = c->head(l, h).region(r);
                    for (int64_t i = 0; i < ps->size(); ++i) s[{l, h, ps->positions()[i]}] = ps->scores()[i];
                }
        return s;
    };
    const auto all = run("all"), rep = run("repeat");
    ASSERT_EQ(all.size(), rep.size());
    int lower = 0;
    for (const auto& [key, a] : all) {
        if (std::get<2>(key) < 4) continue;  // sinks: max + 1 of each run
        EXPECT_LE(rep.at(key), a * (1 + 1e-6f) + 1e-12f);
        lower += rep.at(key) < a * (1 - 1e-4f);
    }
    EXPECT_GT(lower, 0);
    EXPECT_THROW(parse_policy("kvzip:rows=some"), Error);
}

/// SessionModelAccess that counts the replays it runs.
class CountingAccess : public SessionModelAccess {
public:
    using SessionModelAccess::SessionModelAccess;
    void replay(const std::vector<int32_t>& ids, const std::function<bool(int32_t)>& wanted,
                const std::function<void(const StepEvent&)>& observe) override {
        ++replays;
        SessionModelAccess::replay(ids, wanted, observe);
    }
    int replays = 0;
};

TEST(KVzip, OneReplayGivesBothVariantsWhenAsked) {
    LlamaModel m(test::model_path("tiny-qwen3-f32.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    std::ifstream in(test::data_dir() + "/kvzip/kvzip_plus.json");
    const auto prompt = nlohmann::json::parse(in).at("prompt_tokens").get<std::vector<int32_t>>();
    auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF32);
    // chunk=16: several chunks, so several replays per variant.
    const Policy plain = parse_policy("kvzip:ratio=0.5,chunk=16"), plus = parse_policy("kvzip_plus:ratio=0.5,chunk=16");
    ASSERT_NE(plain.after_prefill_key, plus.after_prefill_key);
    KVCache c(m.config(), 512, plain, pool);
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, prompt, c, logits);
    const int chunks = static_cast<int>((prompt.size() + 15) / 16);
    auto own = [&](const Policy& p) {
        CountingAccess a(m, *tok, c);
        EntryScores es = p.after_prefill(a, prompt, nullptr);
        EXPECT_EQ(a.replays, chunks);
        return es;
    };
    const EntryScores own_plain = own(plain), own_plus = own(plus);
    for (const Policy* first : {&plain, &plus}) {
        const Policy* second = first == &plain ? &plus : &plain;
        CountingAccess a(m, *tok, c);
        OtherEntryScores also;
        also[second->after_prefill_key];
        also["kvzip:chunk=99"];  // a key the step cannot give stays empty
        const EntryScores es = first->after_prefill(a, prompt, &also);
        EXPECT_EQ(a.replays, chunks);  // one replay for both
        EXPECT_EQ(es.by_pos, first == &plain ? own_plain.by_pos : own_plus.by_pos);
        EXPECT_EQ(also.at(second->after_prefill_key).by_pos, first == &plain ? own_plus.by_pos : own_plain.by_pos);
        EXPECT_TRUE(also.at("kvzip:chunk=99").by_pos.empty());
    }
    EXPECT_NE(own_plain.by_pos, own_plus.by_pos);
}

}  // namespace
}  // namespace kvsieve
