// KVzap: checkpoints in kvpress's layout load as they are, and its threshold decisions equal kvpress's
// DMSPress(KVzapPress). Fixtures: tests/data/kvzap/ (random-weight checkpoints saved by kvpress's KVzapModel
// and the scores / evictions kvpress computed), made by tools/make_kvzap_fixtures.py.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <map>
#include <set>

#include "cache/kv_cache.h"
#include "io/safetensors.h"
#include "model/llama_model.h"
#include "fit/kvzap_fit.h"
#include "predict/kvzap_model.h"
#include "text/tokenizer.h"
#include <filesystem>
#include <unistd.h>
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

class KVzapParity : public ::testing::TestWithParam<std::string> {};

TEST_P(KVzapParity, ScoresAndEvictionsMatchKvpress) {
    const std::string dir = test::data_dir() + "/kvzap/tiny-qwen3-" + GetParam();
    std::ifstream in(dir + ".json");
    const auto j = nlohmann::json::parse(in);
    const auto prompt = j.at("prompt_tokens").get<std::vector<int32_t>>();
    const double tau = j.at("tau").get<double>();
    const int window = j.at("window").get<int>();
    LlamaModel m(test::model_path("tiny-qwen3-f32.gguf"));
    auto run = [&](double t) {
        auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF32);
        auto c = std::make_unique<KVCache>(m.config(), 256,
                                           parse_policy("kvzap:model=" + dir + ",tau=" + std::to_string(t) +
                                                        ",window=" + std::to_string(window)),
                                           pool);
        std::vector<float> logits;
        m.forward(prompt, *c, logits);
        c->end_prefill();
        return std::make_pair(std::move(c), pool);
    };
    const auto [all, p1] = run(-1e30);
    const auto [cut, p2] = run(tau);
    double worst = 0;
    int compared = 0;
    for (const auto& layer : j.at("layers")) {
        const int l = layer.at("layer").get<int>();
        const auto scores = layer.at("scores").get<std::vector<std::vector<double>>>();
        std::set<std::pair<int, int>> evicted;
        for (const auto& e : layer.at("evicted")) evicted.insert({e[0].get<int>(), e[1].get<int>()});
        for (int h = 0; h < 2; ++h) {
            std::map<int32_t, float> mine;
            const HeadCache& hc = all->head(l, h);
            for (int r = 0; r < 3; ++r)
                for (int64_t i = 0; i < hc.region(r)->size(); ++i) mine[hc.region(r)->positions()[i]] = hc.region(r)->scores()[i];
            ASSERT_EQ(mine.size(), prompt.size());
            std::set<int32_t> kept;
            const HeadCache& hk = cut->head(l, h);
            for (int r = 0; r < 3; ++r)
                for (int32_t p : hk.region(r)->positions()) kept.insert(p);
            for (size_t t = 0; t < prompt.size(); ++t) {
                const double ref = scores[h][t];
                worst = std::max(worst, std::fabs(mine[static_cast<int32_t>(t)] - ref));
                // Decisions compared away from the threshold itself (float32 vs float64 rounding there).
                if (std::fabs(ref - tau) < 1e-4) continue;
                ++compared;
                EXPECT_EQ(kept.count(static_cast<int32_t>(t)) == 0, evicted.count({h, static_cast<int>(t)}) == 1)
                    << "layer " << l << " head " << h << " token " << t;
            }
        }
    }
    EXPECT_LE(worst, 1e-4);
    EXPECT_GT(compared, 700);
    std::printf("[ kvzap ] %s: max |score diff| %.2e, %d decisions compared, compression ratio %.3f\n", GetParam().c_str(),
                worst, compared, cut->stats().compression_ratio);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, KVzapParity, ::testing::Values("linear", "mlp"));

TEST(KVzap, DecodeKeepsMemoryInLineWithCompression) {
    LlamaModel m(test::model_path("tiny-qwen3-f32.gguf"));
    const std::string dir = test::data_dir() + "/kvzap/tiny-qwen3-mlp";
    std::ifstream in(dir + ".json");
    const double tau = nlohmann::json::parse(in).at("tau").get<double>();
    auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF16);
    KVCache c(m.config(), 512, parse_policy("kvzap:model=" + dir + ",tau=" + std::to_string(tau) + ",window=16"), pool);
    std::vector<float> logits;
    std::vector<int32_t> prompt(100);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + (i * 37) % 500);
    m.forward(prompt, c, logits);
    c.end_prefill();
    for (int i = 0; i < 200; ++i) m.forward({static_cast<int32_t>(3 + (i * 11) % 500)}, c, logits);
    const KVStats s = c.stats();
    EXPECT_GT(s.compression_ratio, 0.2);
    // Bytes follow the kept entries: pages hold 16 entries, so at most one partly filled page per region.
    const double per_entry = 2.0 * m.config().head_dim * 2;
    int64_t kept = 0;
    for (const auto& l : s.entries)
        for (int64_t e : l) kept += e;
    EXPECT_GE(s.kv_bytes_final, kept * per_entry);
    EXPECT_LE(s.kv_bytes_final, kept * per_entry + 3.0 * 16 * per_entry * m.config().n_layer * m.config().n_head_kv);
    EXPECT_LE(s.kv_bytes_final, (1 - s.compression_ratio) * s.kv_bytes_full * 1.5);
}

TEST(KVzap, BadCheckpointsAreReported) {
    LlamaModel stories(test::model_path("stories260K.gguf"));
    const std::string dir = test::data_dir() + "/kvzap/tiny-qwen3-linear";
    auto pool = std::make_shared<KVPool>(stories.config().head_dim, KVType::kF32);
    try {
        KVCache c(stories.config(), 64, parse_policy("kvzap:model=" + dir), pool);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("has 2 layers, the model 5"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parse_policy("kvzap:model=" + dir + ",tau=abc"), Error);
    EXPECT_THROW(parse_policy("kvzap:tau=-4"), Error);
    EXPECT_THROW(parse_policy("kvzap:model=/nonexistent"), Error);
    // A truncated safetensors file.
    test::TempFile t(".safetensors");
    {
        std::ifstream f(dir + "/model.safetensors", std::ios::binary);
        std::vector<char> b(std::istreambuf_iterator<char>(f), {});
        std::ofstream o(t.path(), std::ios::binary);
        o.write(b.data(), static_cast<std::streamsize>(b.size() - 100));
    }
    try {
        read_safetensors(t.path());
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("beyond the end of the file"), std::string::npos) << e.what();
    }
    const auto ok = read_safetensors(dir + "/model.safetensors");
    EXPECT_EQ(ok.at("layers.0.weight").shape, (std::vector<int64_t>{2, 256}));
}

}  // namespace
}  // namespace kvsieve

namespace kvsieve {
namespace {

TEST(KVzapFit, LinearSurrogateLearnsKVzipPlusScoresAndServes) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    std::string corpus;
    for (int i = 0; i < 40; ++i)
        corpus += "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
                  "friend Ben number " + std::to_string(i) + ". One day, they saw a big red ball under a tree. Lily "
                  "wanted the ball, but Ben said it was his. They were sad and did not talk. Then Lily had an idea. ";
    const std::string dir = (std::filesystem::temp_directory_path() / ("kvsieve_kvzap_" + std::to_string(::getpid()))).string();
    KVzapFitOptions o;
    o.prompts = 10;
    o.min_tokens = 120;
    o.max_tokens = 160;
    o.tokens_per_prompt = 100;
    o.validation = 0.2;
    o.progress = false;
    const KVzapPairs pairs = collect_kvzap_pairs(m, *tok, corpus, o);
    const KVzapFitReport r = fit_kvzap_linear(pairs, dir, o);
    EXPECT_EQ(r.r2.size(), 5u);
    EXPECT_EQ(r.train_pairs, 8 * 100);  // 8 training prompts × 100 sampled positions
    // Better than predicting the mean log-score on held-out prompts (R² > 0) on average.
    EXPECT_GT(r.mean_r2(), 0.05) << r.table();
    const KVzapModel k = KVzapModel::load(dir);
    EXPECT_EQ(k.n_layers(), 5);
    EXPECT_EQ(k.input_dim(), 64);
    EXPECT_EQ(k.output_dim(), 4);
    EXPECT_FALSE(k.is_mlp());
    // The checkpoint drives the kvzap preset.
    auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF16);
    KVCache c(m.config(), 512, parse_policy("kvzap:model=" + dir + ",tau=-3,window=32"), pool);
    std::vector<float> logits;
    m.forward(tok->encode(corpus.substr(0, 600)), c, logits);
    EXPECT_GT(c.stats().compression_ratio, 0.0);
    std::filesystem::remove_all(dir);
    EXPECT_THROW(collect_kvzap_pairs(m, *tok, "", o), Error);
}

}  // namespace
}  // namespace kvsieve
