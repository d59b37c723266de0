// Baseline scorers against NVIDIA kvpress on the same model and input. Fixtures: tests/data/kvpress/*.json,
// made by tools/make_kvpress_fixtures.py (kvpress 0.5.5, torch, transformers; float32, eager attention) from
// tests/data/models/tiny-qwen3-f32.gguf exported to Hugging Face format; the script checks the export
// reproduces llama.cpp's logits (6e-6). Not computed by kvsieve. PyramidKV's kept sets follow its layer budgets
// (kvpress get_layer_budget: 134 and 64 of 198 tokens here); StreamingLLM's fixture holds kept sets only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "test_util.h"

namespace kvsieve {
namespace {

struct CacheSnapshot {
    std::vector<std::vector<std::vector<std::pair<int32_t, float>>>> heads;  // [L][Hkv] (position, score)
};

CacheSnapshot run_policy(const std::string& spec, const std::vector<int32_t>& prompt) {
    static LlamaModel model(test::model_path("tiny-qwen3-f32.gguf"));
    auto pool = std::make_shared<KVPool>(model.config().head_dim, KVType::kF32);
    KVCache cache(model.config(), 256, parse_policy(spec), pool);
    std::vector<float> logits;
    model.forward(StepPhase::kPrefill, prompt, cache, logits);
    cache.end_prefill();
    CacheSnapshot r;
    r.heads.resize(model.config().n_layer);
    for (int l = 0; l < model.config().n_layer; ++l)
        for (int h = 0; h < model.config().n_head_kv; ++h) {
            std::vector<std::pair<int32_t, float>> e;
            const HeadCache& hc = cache.head(l, h);
            for (Region reg : kRegionsInOrder)
                for (int64_t i = 0; i < hc.region(reg)->size(); ++i)
                    e.emplace_back(hc.region(reg)->positions()[i], hc.region(reg)->scores()[i]);
            std::sort(e.begin(), e.end());
            r.heads[l].push_back(e);
        }
    return r;
}

class KvpressParity : public ::testing::TestWithParam<std::string> {};

TEST_P(KvpressParity, ScoresAndKeptSetsMatch) {
    std::ifstream in(test::data_dir() + "/kvpress/" + GetParam() + ".json");
    ASSERT_TRUE(in) << "fixture missing";
    const auto j = nlohmann::json::parse(in);
    const auto prompt = j.at("prompt_tokens").get<std::vector<int32_t>>();
    // StreamingLLM's fixture has no scores: kvpress marks kept / pruned with 1 / 0, which is no ranking.
    const bool has_scores = j.at("layers").at(0).contains("scores");
    const CacheSnapshot all = has_scores ? run_policy(GetParam() + ":ratio=0", prompt) : CacheSnapshot{};
    const CacheSnapshot kept = run_policy(GetParam() + ":ratio=" + std::to_string(j.at("ratio").get<double>()), prompt);
    double max_diff = 0;
    for (const auto& layer : j.at("layers")) {
        const int l = layer.at("layer").get<int>();
        const auto want = layer.at("kept").get<std::vector<std::vector<int32_t>>>();
        ASSERT_EQ(want.size(), kept.heads[l].size());
        const auto scores = has_scores ? layer.at("scores").get<std::vector<std::vector<double>>>()
                                       : std::vector<std::vector<double>>{};
        for (size_t h = 0; h < scores.size(); ++h) {
            const auto& e = all.heads[l][h];
            ASSERT_EQ(e.size(), scores[h].size());
            for (size_t i = 0; i < e.size(); ++i) {
                ASSERT_EQ(e[i].first, static_cast<int32_t>(i));
                const double d = std::fabs(e[i].second - scores[h][i]);
                max_diff = std::max(max_diff, d);
                EXPECT_LE(d, 1e-4 * std::max(1.0, std::fabs(scores[h][i])))
                    << "layer " << l << " head " << h << " token " << i;
            }
        }
        for (size_t h = 0; h < want.size(); ++h) {
            std::vector<int32_t> got;
            for (const auto& [p, s] : kept.heads[l][h]) got.push_back(p);
            EXPECT_EQ(got, want[h]) << "kept set, layer " << l << " head " << h;
        }
    }
    std::printf("[ kvpress ] %s: max |score diff| %.2e\n", GetParam().c_str(), max_diff);
}

INSTANTIATE_TEST_SUITE_P(Presses, KvpressParity,
                         ::testing::Values("snapkv", "tova", "knorm", "h2o", "expected_attention", "pyramidkv",
                                           "streaming_llm"));

}  // namespace
}  // namespace kvsieve
