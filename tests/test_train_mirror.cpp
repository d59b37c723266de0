// The libtorch mirror of the forward pass against the engine (which itself matches llama.cpp, test_golden.cpp),
// its GGUF round trip and its hooks.
#include <gtest/gtest.h>

#include <cmath>

#include "model/llama_model.h"
#include "model/synth.h"
#include "predict/predictor_tensors.h"
#include "test_util.h"
#include "train/mirror.h"
#include "util/error.h"

namespace kvsieve {
namespace {

std::vector<int32_t> some_tokens(int n_vocab, int n) {
    std::vector<int32_t> t{1};
    for (int i = 1; i < n; ++i) t.push_back(3 + (i * 37 + i * i * 11) % (n_vocab - 3));
    return t;
}

std::vector<float> engine_logits(const std::string& path, const std::vector<int32_t>& toks) {
    LlamaModel m(path);
    auto cache = m.make_cache(static_cast<int64_t>(toks.size()));
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, toks, cache, logits, true);
    return logits;
}

torch::Tensor as_tensor(const std::vector<int32_t>& toks) {
    return torch::tensor(std::vector<int64_t>(toks.begin(), toks.end())).unsqueeze(0);
}

class MirrorParity : public ::testing::TestWithParam<std::string> {};

TEST_P(MirrorParity, LogitsEqualEngine) {
    const std::string path = test::model_path(GetParam());
    auto m = train::load_mirror(path);
    const auto toks = some_tokens(m->config().n_vocab, 48);
    const auto ref = engine_logits(path, toks);
    torch::NoGradGuard ng;
    auto got = m->forward(as_tensor(toks)).contiguous();
    ASSERT_EQ(static_cast<size_t>(got.numel()), ref.size());
    const float* g = got.data_ptr<float>();
    double maxd = 0;
    for (size_t i = 0; i < ref.size(); ++i) maxd = std::max(maxd, static_cast<double>(std::abs(g[i] - ref[i])));
    EXPECT_LT(maxd, 1e-4) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(F32Models, MirrorParity,
                         ::testing::Values("stories260K.gguf", "tiny-llama-f32.gguf", "tiny-qwen2-f32.gguf",
                                           "tiny-qwen3-f32.gguf"));

TEST(Mirror, QueriesWiderThanTheModelGiveTheEnginesLogits) {
    // Qwen3's query width Hq·d exceeds D (Qwen3-0.6B: 2048 against 1024); the tiny test models have Hq·d = D.
    // The libtorch mirror is the independent reference for the engine's forward on such a shape.
    const SynthShape wide{"wide-queries", "qwen3", 2, 64, 4, 2, 32, 96, 300, 256, 1e6f, true};
    test::TempFile f(".gguf");
    write_synth_model(f.path(), wide, TensorType::F32, 7);
    auto m = train::load_mirror(f.path());
    const auto toks = some_tokens(m->config().n_vocab, 40);
    const auto ref = engine_logits(f.path(), toks);
    torch::NoGradGuard ng;
    auto got = m->forward(as_tensor(toks)).contiguous();
    ASSERT_EQ(static_cast<size_t>(got.numel()), ref.size());
    double maxd = 0, scale = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        maxd = std::max(maxd, static_cast<double>(std::abs(got.data_ptr<float>()[i] - ref[i])));
        scale = std::max(scale, static_cast<double>(std::abs(ref[i])));
    }
    EXPECT_GT(scale, 0.0);  // the logits are not all zero
    EXPECT_LT(maxd, 1e-4);
}

TEST(Mirror, SavedGGUFRunsInTheEngineWithTheSameLogits) {
    const std::string src = test::model_path("tiny-qwen3-f32.gguf");
    auto m = train::load_mirror(src);
    {
        torch::NoGradGuard ng;  // perturb so the test does not pass by re-reading the source
        for (auto& p : m->parameters()) p.add_(torch::randn_like(p) * 0.01);
    }
    test::TempFile out(".gguf");
    train::save_mirror(m, out.path(), train::tokenizer_metadata(src));
    const auto toks = some_tokens(m->config().n_vocab, 20);
    const auto ref = engine_logits(out.path(), toks);
    torch::NoGradGuard ng;
    auto got = m->forward(as_tensor(toks)).contiguous();
    double maxd = 0;
    for (size_t i = 0; i < ref.size(); ++i)
        maxd = std::max(maxd, static_cast<double>(std::abs(got.data_ptr<float>()[i] - ref[i])));
    EXPECT_LT(maxd, 1e-4);
}

TEST(Mirror, PredictorTensorsRoundTripThroughTheGGUFAndTheModelStillRuns) {
    const std::string src = test::model_path("tiny-qwen3-f32.gguf");
    auto m = train::load_mirror(src);
    const int D = m->config().n_embd;
    auto fc1 = torch::arange(0, 4 * D, torch::kFloat32).reshape({4, D}) * 0.01f;  // [out, in]
    auto bias = torch::tensor({5.0f, 5.0f, 5.0f});
    std::map<std::string, torch::Tensor> pred{{predictor_tensor_name("spkv", 1, "fc1.weight"), fc1},
                                              {predictor_tensor_name("spkv", 1, "fc2.bias"), bias}};
    test::TempFile out(".gguf");
    train::save_mirror(m, out.path(), train::tokenizer_metadata(src), pred);
    GGUFFile f(out.path());
    const auto got = read_predictor_tensors(f, "spkv", 1);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got.at("fc1.weight").shape, (std::vector<int64_t>{4, D}));
    for (int64_t i = 0; i < 4 * D; ++i) EXPECT_FLOAT_EQ(got.at("fc1.weight").data[i], 0.01f * static_cast<float>(i));
    EXPECT_EQ(got.at("fc2.bias").data, (std::vector<float>{5, 5, 5}));
    EXPECT_TRUE(read_predictor_tensors(f, "spkv", 0).empty());
    EXPECT_TRUE(read_predictor_tensors(f, "wgkv", 1).empty());
    // The engine ignores predictor tensors: the file still runs, with the mirror's logits.
    const auto toks = some_tokens(m->config().n_vocab, 12);
    const auto ref = engine_logits(out.path(), toks);
    torch::NoGradGuard ng;
    auto logits = m->forward(as_tensor(toks)).contiguous();
    double maxd = 0;
    for (size_t i = 0; i < ref.size(); ++i)
        maxd = std::max(maxd, static_cast<double>(std::abs(logits.data_ptr<float>()[i] - ref[i])));
    EXPECT_LT(maxd, 1e-4);
    // A name outside the schema, or one that shadows a model tensor, is refused.
    EXPECT_THROW(train::save_mirror(m, out.path(), {}, {{"spkv_gate", bias}}), kvsieve::Error);
    EXPECT_THROW(train::save_mirror(m, out.path(), {}, {{"blk.0.attn_q.weight", fc1}}), kvsieve::Error);
}

TEST(Mirror, KeepMaskEqualsMinusInfinityBiasAndKvHeadHooksCoverTheGroup) {
    auto m = train::load_mirror(test::model_path("tiny-qwen3-f32.gguf"));
    const auto& c = m->config();
    const int64_t T = 24;
    auto toks = as_tensor(some_tokens(c.n_vocab, T));
    torch::NoGradGuard ng;
    // Drop key 5 for KV head 1 at every layer, once as a keep-mask, once as an additive −inf bias per query head.
    auto mask = torch::ones({1, c.n_head_kv, T, T}, torch::kBool);
    mask.index_put_({0, 1, torch::indexing::Slice(), 5}, false);
    train::MirrorHooks hm;
    hm.keep_mask = [&](int, const train::AttnTensors&) { return mask; };
    auto bias = torch::zeros({1, c.n_head, T, T});
    const int G = c.gqa_group();
    for (int g = 0; g < G; ++g)
        bias.index_put_({0, 1 * G + g, torch::indexing::Slice(6, T), 5}, -std::numeric_limits<float>::infinity());
    train::MirrorHooks hb;
    hb.attn_bias = [&](int, const train::AttnTensors&) { return bias; };
    auto a = m->forward(toks, hm), b = m->forward(toks, hb), full = m->forward(toks);
    EXPECT_LT((a - b).abs().max().item<double>(), 1e-5);
    // Positions before 6 cannot see the dropped key's effect except through query 5 itself (kept: a query keeps itself).
    EXPECT_LT((a.narrow(1, 0, 6) - full.narrow(1, 0, 6)).abs().max().item<double>(), 1e-5);
    EXPECT_GT((a.narrow(1, 6, T - 6) - full.narrow(1, 6, T - 6)).abs().max().item<double>(), 1e-4);
}

TEST(Mirror, CaptureExposesLayerTensorsAndLogSumExp) {
    auto m = train::load_mirror(test::model_path("tiny-qwen3-f32.gguf"));
    const auto& c = m->config();
    const int64_t T = 16;
    std::vector<train::AttnTensors> cap;
    train::MirrorHooks h;
    h.capture = &cap;
    torch::NoGradGuard ng;
    m->forward(as_tensor(some_tokens(c.n_vocab, T)), h);
    ASSERT_EQ(static_cast<int>(cap.size()), c.n_layer);
    for (const auto& a : cap) {
        EXPECT_EQ(a.h.sizes(), (std::vector<int64_t>{1, T, c.n_embd}));
        EXPECT_EQ(a.k_pre.sizes(), (std::vector<int64_t>{1, c.n_head_kv, T, c.head_dim}));
        EXPECT_EQ(a.k_post.sizes(), a.k_pre.sizes());
        EXPECT_EQ(a.v.sizes(), a.k_pre.sizes());
        EXPECT_EQ(a.lse.sizes(), (std::vector<int64_t>{1, c.n_head, T}));
        // RoPE at position 0 is the identity; later positions rotate but keep the norm of each key.
        EXPECT_LT((a.k_pre.select(2, 0) - a.k_post.select(2, 0)).abs().max().item<double>(), 1e-6);
        EXPECT_LT((a.k_pre.norm(2, -1) - a.k_post.norm(2, -1)).abs().max().item<double>(), 1e-4);
        EXPECT_GT((a.k_pre.select(2, 5) - a.k_post.select(2, 5)).abs().max().item<double>(), 1e-4);
        // lse values, recomputed in float64 from the captured queries and keys: causal, q·k/√d, query head h
        // reading KV head h / G.
        ASSERT_EQ(a.q_post.sizes(), (std::vector<int64_t>{1, c.n_head, T, c.head_dim}));
        const int G = c.n_head / c.n_head_kv;
        const auto q = a.q_post.to(torch::kFloat64), k = a.k_post.to(torch::kFloat64);
        double worst = 0;
        for (int h = 0; h < c.n_head; ++h)
            for (int64_t t = 0; t < T; ++t) {
                const auto logits = torch::matmul(k[0][h / G].slice(0, 0, t + 1), q[0][h][t]) /
                                    std::sqrt(static_cast<double>(c.head_dim));
                const double want = torch::logsumexp(logits, 0).item<double>();
                worst = std::max(worst, std::fabs(a.lse[0][h][t].item<double>() - want));
            }
        EXPECT_LT(worst, 1e-4);
    }
}

TEST(Mirror, GradientsReachEveryParameter) {
    auto m = train::load_mirror(test::model_path("tiny-llama-f32.gguf"));
    auto toks = as_tensor(some_tokens(m->config().n_vocab, 12));
    auto logits = m->forward(toks);
    logits.pow(2).mean().backward();
    for (const auto& [name, p] : m->gguf_tensors()) {
        ASSERT_TRUE(p.grad().defined()) << name;
        EXPECT_GT(p.grad().abs().sum().item<double>(), 0.0) << name;
    }
}

}  // namespace
}  // namespace kvsieve
