// Weight types through the whole model: kvsieve's quantizer against llama-quantize's files, and the BF16 /
// Q4_0 paths (no llama.cpp golden) against llama.cpp's F32 logits with tolerances that follow from the formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "model/llama_model.h"
#include "model/quantize.h"
#include "test_util.h"

namespace kvsieve {
namespace {

/// 64-bit FNV-1a of n bytes (the digest tools/gguf_tensor_digests.py records), as 16 hex digits.
std::string fnv1a64(const uint8_t* p, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

/// Every tensor of `file` has the type, size and data digest that `ref` (a file's entry of the digests JSON) records.
void expect_tensors_match(const std::string& file, const nlohmann::json& ref) {
    GGUFFile a(file);
    ASSERT_EQ(a.tensors().size(), ref.size());
    for (const auto& [name, r] : ref.items()) {
        const GGUFTensorInfo* t = a.find_tensor(name);
        ASSERT_NE(t, nullptr) << name;
        EXPECT_EQ(static_cast<int>(t->type), r.at("type").get<int>()) << name;
        ASSERT_EQ(t->nbytes, r.at("nbytes").get<size_t>()) << name;
        EXPECT_EQ(fnv1a64(t->data, t->nbytes), r.at("fnv1a64").get<std::string>()) << name;
    }
}

TEST(Quantize, F16AndQ8_0MatchLlamaQuantizeBitForBit) {
    // The per-tensor digests of tiny-qwen3-{f16,q8_0}.gguf as llama.cpp's llama-quantize wrote them from
    // tiny-qwen3-f32.gguf (tests/data/README.md). The build writes the two files with kvsieve's quantizer into the
    // tests' data folder; both that copy and a fresh quantize_model must have llama-quantize's bytes.
    const auto digests =
        nlohmann::json::parse(std::ifstream(test::data_dir() + "/models/tiny-qwen3-llama-quantize-digests.json"));
    for (auto [type, ref] :
         {std::pair{TensorType::F16, "tiny-qwen3-f16.gguf"}, std::pair{TensorType::Q8_0, "tiny-qwen3-q8_0.gguf"}}) {
        SCOPED_TRACE(ref);
        test::TempFile out(".gguf");
        quantize_model(test::model_path("tiny-qwen3-f32.gguf"), out.path(), type);
        expect_tensors_match(out.path(), digests.at(ref));
        expect_tensors_match(test::model_path(ref), digests.at(ref));
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
    m.forward(StepPhase::kPrefill, prompt(), cache, logits, true);
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

TEST(Quantize, EveryWeightTypeComputesItsDequantizedWeights) {
    // Each type kvsieve writes, as a whole model: its forward against the F32 forward of exactly its dequantized
    // weights (quantize_model to F32 is exact). Types dotted with float32 activations differ by summation order
    // only; Q8_0 / Q5_0 (Q8_0 activations), Q4_1 / Q5_1 (Q8_1) and Q2_K / Q3_K / Q5_K (Q8_K) also round every
    // activation vector to 8 bits per block before each product (≈ 0.4% of the block's largest value, as
    // llama.cpp does), measured here at < 2e-2 on this model's logits (|logit| ≈ 3).
    const std::pair<TensorType, double> cases[] = {
        {TensorType::F16, 1e-4},  {TensorType::BF16, 1e-4}, {TensorType::Q4_0, 1e-4}, {TensorType::Q8_0, 3e-2},
        {TensorType::Q4_1, 3e-2}, {TensorType::Q5_0, 3e-2}, {TensorType::Q5_1, 3e-2}, {TensorType::Q2_K, 3e-2},
        {TensorType::Q3_K, 3e-2}, {TensorType::Q5_K, 3e-2}};
    for (auto [type, bound] : cases) {
        SCOPED_TRACE(type_name(type));
        test::TempFile q(".gguf"), back(".gguf");
        quantize_model(test::model_path("tiny-qwen3-f32.gguf"), q.path(), type);
        {
            LlamaModel m(q.path());
            for (const auto& L : m.weights().layers) {
                EXPECT_EQ(L.wq.type, type);
                EXPECT_EQ(L.w_down.type, type);
            }
        }
        quantize_model(q.path(), back.path(), TensorType::F32);
        const double d = max_diff(prompt_logits(q.path()), prompt_logits(back.path()));
        std::printf("[ types  ] tiny-qwen3 %-4s vs F32 of the same weights: max |Δ| %.2e\n", type_name(type).c_str(),
                    d);
        EXPECT_LE(d, bound);
    }
}

TEST(Quantize, KQuantFilesFromLlamaQuantizeMatchLlamaCppLogits) {
    // tiny-llama-{q2_k,q3_k_s,q5_k_s}-pure.gguf: every block matrix and the output Q2_K / Q3_K / Q5_K, written by
    // llama.cpp's llama-quantize --pure --token-embedding-type f32 (an F32 embedding: a 2-bit one with this
    // model's unit norm weights puts activations exactly on Q8_K rounding ties, which either engine's last-bit
    // float differences then break either way); golden: llama.cpp's logits over the whole vocabulary on them (F32 cache column),
    // prompt then its greedy tokens (tests/data/README.md). Both engines quantize activations to Q8_K the same way.
    for (const char* name : {"tiny-llama-q2_k-pure", "tiny-llama-q3_k_s-pure", "tiny-llama-q5_k_s-pure"}) {
        SCOPED_TRACE(name);
        std::ifstream in(test::golden_dir() + "/kquants/" + name + "__lily_and_ben.json");
        const auto row = nlohmann::json::parse(in).at("rows").at(0);
        LlamaModel m(test::model_path(std::string(name) + ".gguf"));
        DenseKVCache cache = m.make_cache(64);
        std::vector<float> logits;
        m.forward(StepPhase::kPrefill, row.at("prompt_ids").get<std::vector<int32_t>>(), cache, logits);
        double worst = 0;
        int steps = 0;
        for (const auto& st : row.at("steps")) {
            const auto top = st.at("top").get<std::vector<int32_t>>();
            const auto want = st.at("logit_f32kv").get<std::vector<float>>();
            ASSERT_EQ(top.size(), logits.size());  // the whole vocabulary
            for (size_t k = 0; k < top.size(); ++k)
                worst = std::max(worst, double(std::fabs(logits[top[k]] - want[k])));
            // Same argmax as llama.cpp's F32-cache logits (its greedy "token" came from the F16-cache pass).
            EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(),
                      top[std::max_element(want.begin(), want.end()) - want.begin()]);
            m.forward(StepPhase::kDecode, {st.at("token").get<int32_t>()}, cache, logits);
            ++steps;
        }
        std::printf("[ types  ] %s vs llama.cpp over %d steps: max |Δlogit| %.2e\n", name, steps, worst);
        EXPECT_EQ(steps, 4);
        // Measured 5e-6 (the same integer dots, float order aside) until a last-bit difference elsewhere (exp,
        // summation order) moves one activation across a Q8_K rounding boundary: one quantum of one activation
        // moved these logits by 1.4e-3 (measured). A wrong scale, min or layout would change every product.
        EXPECT_LE(worst, 5e-3);
    }
}

}  // namespace
}  // namespace kvsieve
