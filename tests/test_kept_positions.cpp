// eval/kept_positions.h: the positions and scores each head keeps after a prefill, checked against kvpress's own
// decisions on the tiny Qwen3 model (tests/data/kvpress/*.json, tools/make_kvpress_fixtures.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "eval/kept_positions.h"
#include "model/llama_model.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

TEST(KeptPositions, EveryHeadsKeptSetIsKvpresssOnItsFixture) {
    const LlamaModel m(test::model_path("tiny-qwen3-f32.gguf"));
    for (const char* press : {"snapkv", "tova", "knorm", "streaming_llm"}) {
        SCOPED_TRACE(press);
        std::ifstream in(test::data_dir() + "/kvpress/" + press + ".json");
        ASSERT_TRUE(in) << "fixture missing";
        const auto j = nlohmann::json::parse(in);
        const auto prompt = j.at("prompt_tokens").get<std::vector<int32_t>>();
        const auto heads = kept_after_prefill(m, prompt, std::string(press) + ":ratio=0.5", "f32", "auto");
        ASSERT_EQ(heads.size(), static_cast<size_t>(m.config().n_layer * m.config().n_head_kv));
        for (const auto& layer : j.at("layers")) {
            const int l = layer.at("layer").get<int>();
            const auto want = layer.at("kept").get<std::vector<std::vector<int32_t>>>();
            for (size_t h = 0; h < want.size(); ++h) {
                const HeadKept& got = heads[static_cast<size_t>(l * m.config().n_head_kv) + h];
                EXPECT_EQ(got.layer, l);
                EXPECT_EQ(got.head, static_cast<int>(h));
                EXPECT_EQ(got.positions, want[h]) << "layer " << l << " head " << h;
                EXPECT_EQ(got.scores.size(), got.positions.size());
            }
        }
    }
    // ratio=0 keeps every position of the prompt, in order, each with its score.
    const std::vector<int32_t> prompt = {1, 5, 9, 13, 17, 21, 25, 29};
    for (const auto& h : kept_after_prefill(m, prompt, "snapkv:ratio=0", "f32", "auto")) {
        ASSERT_EQ(h.positions.size(), prompt.size());
        for (size_t i = 0; i < prompt.size(); ++i) EXPECT_EQ(h.positions[i], static_cast<int32_t>(i));
    }
}

// On a Q8_0 cache every score is computed from the stored entries. KNorm's score is the negated L2 norm of the stored
// key; Q8_0 rounds each element of a 32-element block to a multiple of d = max|x|/127 (d itself kept in binary16),
// an error of at most d/2 + 127·d·2⁻¹¹ < max|x|/226 per element, so over a head of 32 elements the norm moves by at
// most √32/226 < 2.6% of the key's own norm (reverse triangle inequality; max|x| ≤ ‖k‖). ratio=0 keeps every entry.
TEST(KeptPositions, QuantizedCacheScoresTheStoredEntries) {
    const LlamaModel m(test::model_path("kvsieve-tiny-2k.gguf"));
    ASSERT_EQ(m.config().head_dim % 32, 0);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 96; ++i) prompt.push_back(3 + (i * 37) % 1900);
    const auto f32 = kept_after_prefill(m, prompt, "knorm:ratio=0", "f32", "auto");
    const auto q8 = kept_after_prefill(m, prompt, "knorm:ratio=0", "q8_0", "auto");
    ASSERT_EQ(f32.size(), q8.size());
    int moved = 0;
    for (size_t i = 0; i < f32.size(); ++i) {
        ASSERT_EQ(q8[i].positions, f32[i].positions);
        ASSERT_EQ(q8[i].positions.size(), prompt.size());
        for (size_t j = 0; j < f32[i].scores.size(); ++j) {
            const float a = f32[i].scores[j], b = q8[i].scores[j];
            EXPECT_LE(std::fabs(a - b), 0.026f * std::fabs(a)) << "head " << i << " position " << j;
            moved += a != b;
        }
    }
    EXPECT_GT(moved, 0) << "the Q8_0 cache's scores equal the F32 cache's: the stored entries were not read";
}

TEST(KeptPositions, BadInputIsReported) {
    const LlamaModel m(test::model_path("tiny-qwen3-f32.gguf"));
    EXPECT_THROW(kept_after_prefill(m, {}, "snapkv:ratio=0.5", "f32", "auto"), Error);
    EXPECT_THROW(kept_after_prefill(m, {1, 2, 3}, "nosuchpolicy", "f32", "auto"), Error);
    EXPECT_THROW(kept_after_prefill(m, {1, 2, 3}, "snapkv:ratio=0.5", "f8", "auto"), Error);
    EXPECT_THROW(kept_after_prefill(m, {1, 2, 3}, "snapkv:ratio=0.5", "f32", "sideways"), Error);
}

}  // namespace
}  // namespace kvsieve
