// Weight types through the whole model: kvsieve's quantizer against llama-quantize's files, and the BF16 /
// Q4_0 paths (no llama.cpp golden) against llama.cpp's F32 logits with tolerances that follow from the formats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "model/llama_model.h"
#include "model/quantize.h"
#include "test_util.h"

namespace kvsieve {
namespace {

TEST(Quantize, F16AndQ8_0MatchLlamaQuantizeBitForBit) {
    // tiny-qwen3-{f16,q8_0}.gguf were written by llama.cpp's llama-quantize from tiny-qwen3-f32.gguf.
    for (auto [type, ref] : {std::pair{TensorType::F16, "tiny-qwen3-f16.gguf"}, std::pair{TensorType::Q8_0, "tiny-qwen3-q8_0.gguf"}}) {
        SCOPED_TRACE(ref);
        test::TempFile out(".gguf");
        quantize_model(test::model_path("tiny-qwen3-f32.gguf"), out.path(), type);
        GGUFFile a(out.path()), b(test::model_path(ref));
        ASSERT_EQ(a.tensors().size(), b.tensors().size());
        for (const auto& tb : b.tensors()) {
            const GGUFTensorInfo* ta = a.find_tensor(tb.name);
            ASSERT_NE(ta, nullptr) << tb.name;
            EXPECT_EQ(ta->type, tb.type) << tb.name;
            ASSERT_EQ(ta->nbytes, tb.nbytes) << tb.name;
            EXPECT_EQ(std::memcmp(ta->data, tb.data, tb.nbytes), 0) << tb.name;
        }
    }
}

const std::vector<int32_t>& prompt() {
    static const std::vector<int32_t> p = [] {
        std::ifstream in(test::golden_dir() + "/tiny/tiny-qwen3-f32__lily_and_ben.json");
        return nlohmann::json::parse(in).at("prompt_tokens").get<std::vector<int32_t>>();
    }();
    return p;
}

std::vector<float> prompt_logits(const std::string& model) {
    LlamaModel m(model);
    DenseKVCache cache = m.make_cache(64);
    std::vector<float> logits;
    m.forward(prompt(), cache, logits, true);
    return logits;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
    return d;
}

TEST(Quantize, Bf16AndQ4_0KernelsComputeTheirWeightsExactly) {
    // The BF16 / Q4_0 model against the F32 model holding exactly its dequantized weights: only float
    // summation order differs (both paths keep activations in float32).
    for (TensorType type : {TensorType::BF16, TensorType::Q4_0}) {
        SCOPED_TRACE(type_name(type));
        test::TempFile q(".gguf"), back(".gguf");
        quantize_model(test::model_path("tiny-qwen3-f32.gguf"), q.path(), type);
        quantize_model(q.path(), back.path(), TensorType::F32);
        const double d = max_diff(prompt_logits(q.path()), prompt_logits(back.path()));
        std::printf("[ types  ] tiny-qwen3 %s vs F32 of the same weights: max |Δ| %.2e\n", type_name(type).c_str(), d);
        EXPECT_LE(d, 1e-4);
    }
}

TEST(Quantize, Bf16AndQ4_0StayNearLlamaCppF32Logits) {
    // Against llama.cpp's F32 logits (golden): its own Q8_0 file is 2.1e-2 away from exact math (golden
    // README). BF16 keeps 8 significant bits (Q8_0 ~8), Q4_0 4 bits: ~16× coarser steps than Q8_0.
    std::ifstream in(test::golden_dir() + "/tiny/tiny-qwen3-f32__lily_and_ben.json");
    const auto j = nlohmann::json::parse(in);
    std::vector<float> golden;
    for (const auto& row : j.at("logits"))
        for (const auto& v : row.at("values")) golden.push_back(v.get<float>());
    const std::pair<TensorType, double> cases[] = {{TensorType::BF16, 5e-2}, {TensorType::Q4_0, 16 * 3e-2}};
    for (auto [type, bound] : cases) {
        SCOPED_TRACE(type_name(type));
        test::TempFile out(".gguf");
        quantize_model(test::model_path("tiny-qwen3-f32.gguf"), out.path(), type);
        const double d = max_diff(prompt_logits(out.path()), golden);
        std::printf("[ types  ] tiny-qwen3 %s vs llama.cpp F32 logits: max |Δ| %.2e\n", type_name(type).c_str(), d);
        EXPECT_LE(d, bound);
        EXPECT_GT(d, 0.0);  // the weights really changed type
    }
}

}  // namespace
}  // namespace kvsieve
