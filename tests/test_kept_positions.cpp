// eval/kept_positions.h: the positions and scores each head keeps after a prefill, checked against kvpress's own
// decisions on the tiny Qwen3 model (tests/data/kvpress/*.json, tools/make_kvpress_fixtures.py).
#include <gtest/gtest.h>

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
        const auto heads = kept_after_prefill(m, prompt, std::string(press) + ":ratio=0.5", "f32");
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
    for (const auto& h : kept_after_prefill(m, prompt, "snapkv:ratio=0", "f32")) {
        ASSERT_EQ(h.positions.size(), prompt.size());
        for (size_t i = 0; i < prompt.size(); ++i) EXPECT_EQ(h.positions[i], static_cast<int32_t>(i));
    }
}

TEST(KeptPositions, BadInputIsReported) {
    const LlamaModel m(test::model_path("tiny-qwen3-f32.gguf"));
    EXPECT_THROW(kept_after_prefill(m, {}, "snapkv:ratio=0.5", "f32"), Error);
    EXPECT_THROW(kept_after_prefill(m, {1, 2, 3}, "nosuchpolicy", "f32"), Error);
    EXPECT_THROW(kept_after_prefill(m, {1, 2, 3}, "snapkv:ratio=0.5", "f8"), Error);
}

}  // namespace
}  // namespace kvsieve
