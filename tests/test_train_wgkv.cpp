// WG-KV training (train/wgkv.h, train/wgkv_predictor.h): the trainer's gate is the reference's grouped-convolution
// gate and saves what the engine loads; the engine under --policy wgkv computes the trainer's hard-gated forward; with
// open gates the student is the teacher and only the gates get gradients; `kvsieve train wgkv` trains, resumes and
// writes gates that `--policy wgkv` runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "cli_runner.h"
#include "io/model_digest.h"
#include "io/safetensors.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "predict/wgkv_gates.h"
#include "test_util.h"
#include "train/mirror.h"
#include "train/wgkv.h"
#include "train/wgkv_predictor.h"
#include "trainer_cli_fixture.h"

namespace kvsieve {
namespace {

using test::run_cli;
namespace fs = std::filesystem;
namespace F = torch::nn::functional;

TEST(WgkvTraining, TheGateIsTheReferencesGroupedConvolutionAndTheEngineLoadsWhatItSaves) {
    const ModelConfig& c = test::stories260k().config();
    torch::manual_seed(4);
    train::WgkvPredictor g(c, 4.0, 0.5);
    const int64_t H = c.n_head_kv, d = c.head_dim, I = g->inner(), B = 2, T = 7;
    ASSERT_EQ(I, 4 * d);
    {
        torch::NoGradGuard ng;  // norm weights away from 1, so a swapped pre/post norm would show
        for (auto& [name, t] : g->named_tensors())
            if (name.find("norm") != std::string::npos) t.copy_(1 + 0.3 * torch::randn_like(t));
    }
    auto k_pre = 2 * torch::randn({B, H, T, d}), k_post = 2 * torch::randn({B, H, T, d});
    const auto t = g->named_tensors();
    for (int l = 0; l < c.n_layer; ++l) {
        auto at = [&](const std::string& n) { return t.at(wgkv_tensor_name(l, n)).detach(); };
        // The reference's operations: per head [RMSNorm(k_pre); RMSNorm(k_post)] as 2d channels, grouped Conv1d.
        auto rms = [](const torch::Tensor& z, const torch::Tensor& w) {
            return z * torch::rsqrt(z.pow(2).mean(-1, true) + 1e-6) * w;
        };
        auto x = torch::cat({rms(k_pre, at("pre_key_norm.weight")), rms(k_post, at("post_key_norm.weight"))}, -1);
        auto xc = x.permute({0, 1, 3, 2}).reshape({B, H * 2 * d, T});
        auto a = F::gelu(F::conv1d(xc, at("conv1.weight"), F::Conv1dFuncOptions().bias(at("conv1.bias")).groups(H)));
        auto want =
            torch::sigmoid(F::conv1d(a, at("conv2.weight"), F::Conv1dFuncOptions().bias(at("conv2.bias")).groups(H)));
        auto got = g->gate(l, k_pre, k_post);
        EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-6))
            << "layer " << l << ": " << (got - want).abs().max().item<float>();
    }
    // The engine's gates from the saved file: the same values (engine layout [T][Hkv·d]).
    test::TempFile file(".safetensors");
    g->save_safetensors(file.path());
    const WgkvGates eg = WgkvGates::load(file.path(), c.n_layer, c.n_head_kv, c.head_dim);
    auto rows = [&](const torch::Tensor& k) { return k[1].permute({1, 0, 2}).contiguous(); };  // [T, H, d]
    auto kp = rows(k_pre), kq = rows(k_post);
    std::vector<float> got(T * H);
    for (int l = 0; l < c.n_layer; ++l) {
        eg.predict(l, kp.data_ptr<float>(), kq.data_ptr<float>(), T, got.data());
        auto want = g->gate(l, k_pre, k_post)[1].t().contiguous();  // [T, H]
        EXPECT_TRUE(torch::allclose(torch::tensor(got).view({T, H}), want, 1e-5, 1e-6)) << "layer " << l;
    }
}

TEST(WgkvTraining, TheEngineComputesWhatTheHardGatedStudentComputes) {
    auto m = train::load_mirror(test::model_path("stories260K.gguf"));
    const ModelConfig& c = m->config();
    torch::manual_seed(11);
    train::WgkvPredictor g(c, 4.0, 0.0);  // bias 0: a good share of the gates closed at τ = 0.5
    test::TempFile file(".safetensors");
    g->save_safetensors(file.path());
    const auto ids = test::story_prompt_ids();
    const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 40);
    train::MirrorHooks hooks;
    hooks.gate_window = {8, 0};
    hooks.attn_block = 16;
    double closed = 0, total = 0;
    hooks.key_gate = [&](int l, const train::AttnTensors& a) {
        auto gate = (g->gate(l, a.k_pre, a.k_post) >= 0.5).to(torch::kFloat32);
        closed += (gate == 0).sum().item<double>();
        total += static_cast<double>(gate.numel());
        return gate;
    };
    torch::NoGradGuard ng;
    auto toks = torch::tensor(std::vector<int64_t>(prompt.begin(), prompt.end())).unsqueeze(0);
    auto ref = m->forward(toks, hooks).select(1, static_cast<int64_t>(prompt.size()) - 1).squeeze(0);
    EXPECT_GT(closed / total, 0.1) << "the test needs closed gates";
    EXPECT_LT(closed / total, 0.9);
    const LlamaModel& em = test::stories260k();
    auto run = [&](const std::string& spec) {
        KVCache kc(em.config(), 64, parse_policy(spec), std::make_shared<KVPool>(em.config().head_dim, KVType::kF32));
        std::vector<float> logits;
        em.forward(StepPhase::kPrefill, prompt, kc, logits);
        return torch::tensor(logits);
    };
    auto gated = run("wgkv:model=" + file.path() + ",tau=0.5,window=8");
    auto dense = run("full");
    EXPECT_TRUE(torch::allclose(gated, ref, 1e-3, 1e-3)) << (gated - ref).abs().max().item<float>();
    EXPECT_GT((dense - ref).abs().max().item<float>(), 1e-2) << "closed gates must change the logits";
}

TEST(WgkvTraining, WithOpenGatesTheStudentIsTheTeacherAndOnlyTheGatesLearn) {
    auto m = train::load_mirror(test::model_path("stories260K.gguf"));
    for (auto& p : m->parameters()) p.set_requires_grad(false);
    const ModelConfig& c = m->config();
    auto toks = torch::randint(1, c.n_vocab, {2, 48}, torch::kInt64);
    train::MirrorHooks th;
    th.blocked = true;
    th.attn_block = 16;
    torch::Tensor teacher;
    {
        torch::NoGradGuard ng;
        teacher = m->hidden(toks, th);
    }
    for (double bias : {30.0, 0.0}) {
        train::WgkvPredictor g(c, 4.0, bias);
        train::MirrorHooks sh;
        sh.gate_window = {8, 0};
        sh.attn_block = 16;
        sh.key_gate = [&](int l, const train::AttnTensors& a) { return g->gate(l, a.k_pre, a.k_post).clamp_min(1e-3); };
        auto loss = torch::mse_loss(m->hidden(toks, sh), teacher);
        if (bias > 0) {
            EXPECT_LT(loss.item<double>(), 1e-10) << "open gates: the student is the teacher";
            continue;
        }
        EXPECT_GT(loss.item<double>(), 1e-6);
        loss.backward();
        double gate_grad = 0;
        for (const auto& p : g->parameters()) gate_grad += p.grad().defined() ? p.grad().abs().sum().item<double>() : 0;
        EXPECT_GT(gate_grad, 0);
        for (const auto& p : m->parameters()) EXPECT_FALSE(p.grad().defined()) << "the model is frozen";
    }
}

class WgkvCli : public test::TrainerCliTest {
protected:
    WgkvCli() : TrainerCliTest("kvsieve_wgkv_") {}
    void SetUp() override {
        cfg_ = continued_training_config(test::model_path("stories260K.gguf"));
        cfg_["output"] = (dir_ / "gates").string();
        cfg_["optim"]["lr"] = 1e-2;
        cfg_["optim"]["weight_decay"] = 0.01;
        cfg_["wgkv"] = {{"window", 16}, {"lambda", 1.0}, {"g_expand", 2.0}, {"save_f16", true}};
    }
};

TEST_F(WgkvCli, TrainsResumesAndWritesGatesThatWgkvRuns) {
    auto cfg = cfg_;
    cfg["optim"]["steps"] = 2;
    ASSERT_EQ(run_cli("train wgkv -q --config " + write(cfg)).status, 0);
    EXPECT_TRUE(std::filesystem::exists(dir_ / "run" / "gates" / "model.safetensors"));
    cfg["optim"]["steps"] = 4;
    const auto r = run_cli("train wgkv -q --resume --config " + write(cfg));
    ASSERT_EQ(r.status, 0) << r.err;
    const auto card = nlohmann::json::parse(std::ifstream(dir_ / "gates" / "config.json"));
    EXPECT_EQ(card["model_type"], "wgkv");
    EXPECT_EQ(card["inner"], 16);
    EXPECT_EQ(card["window"], 16);
    EXPECT_EQ(card["dtype"], "F16");
    EXPECT_EQ(read_safetensors((dir_ / "gates" / "model.safetensors").string()).begin()->second.dtype, "F16");
    const ModelConfig& c = test::stories260k().config();
    EXPECT_EQ(WgkvGates::load((dir_ / "gates").string(), c.n_layer, c.n_head_kv, c.head_dim).inner(), 16);
    const auto log = test::read_run_log(dir_ / "run");
    for (const auto& j : log.steps) {
        EXPECT_GE(j["distill"].get<double>(), 0.0) << j.dump();
        EXPECT_GT(j["gate_reg"].get<double>(), 0.0) << j.dump();
    }
    for (const auto& e : log.evals)
        for (const char* k : {"distill", "soft_distill", "density", "head_density", "nll_text", "full_nll_text"})
            EXPECT_TRUE(e.contains(k)) << k << ": " << e.dump();
    EXPECT_EQ(log.steps.size(), 4u);
    EXPECT_GE(log.evals.size(), 1u);
    const auto gen = run_cli("generate -m " + test::model_path("stories260K.gguf") + " --policy wgkv:model=" +
                             (dir_ / "gates").string() + ",window=16 -n 8 --temp 0 -p 'Once upon a time'");
    EXPECT_EQ(gen.status, 0) << gen.err;
    EXPECT_FALSE(gen.out.empty());
}

TEST_F(WgkvCli, OneCommandTrainsAPredictorThatThePresetFindsAndRunsAgainAsAResume) {
    // `kvsieve train wgkv -m MODEL`: the shipped SmolLM2 config's settings with this model, a small corpus and short
    // rows; the predictor lands in the user's folder, where `--policy wgkv` (no model=) finds it by the digest.
    const std::string home = (dir_ / "home").string();
    ::setenv("XDG_DATA_HOME", (home + "/data").c_str(), 1);
    ::setenv("XDG_CACHE_HOME", (home + "/cache").c_str(), 1);
    const std::string model = test::model_path("stories260K.gguf");
    const auto cmd = [&](int steps) {
        return "train wgkv -m " + model + " --corpus " + (dir_ / "text.txt").string() + " --steps " +
               std::to_string(steps) +
               " --set data.lengths=[96] --set data.tokens_per_batch=192 --set eval.window=64 "
               "--set data.holdout_fraction=0.3 --set wgkv.window=16 --set checkpoint_every=1";
    };
    const auto r = run_cli(cmd(2));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("a new run in " + home + "/cache/kvsieve/train/wgkv/stories260K"), std::string::npos) << r.err;
    const fs::path predictor = home + "/data/kvsieve/models/wgkv/stories260K";
    EXPECT_NE(r.err.find("predictor: " + predictor.string()), std::string::npos) << r.err;
    const auto card = nlohmann::json::parse(std::ifstream(predictor / "config.json"));
    EXPECT_EQ(card["model_type"], "wgkv");
    EXPECT_EQ(card["model_digest"], model_digest(test::stories260k().file()));
    EXPECT_EQ(card["window"], 16);
    EXPECT_EQ(card["lambda"], 0.16);  // the shipped config's, not changed by the command
    // Found for this model without model=, and listed as ready.
    const auto gen = run_cli("generate -m " + model + " --policy wgkv -n 8 --temp 0 -p 'Once upon a time'");
    EXPECT_EQ(gen.status, 0) << gen.err;
    EXPECT_FALSE(gen.out.empty());
    const auto pol = run_cli("policies -m " + model);
    EXPECT_NE(pol.out.find("  wgkv       stories260K  " + predictor.string()), std::string::npos) << pol.out;
    EXPECT_NE(pol.out.find("kvpop      none: give model=<folder> or train one: kvsieve train kvpop -m " + model),
              std::string::npos)
        << pol.out;
    // The same command again with more steps resumes the run from its checkpoint.
    const auto again = run_cli(cmd(3));
    ASSERT_EQ(again.status, 0) << again.err;
    EXPECT_NE(again.err.find("resuming the run"), std::string::npos) << again.err;
    EXPECT_EQ(test::read_run_log(home + "/cache/kvsieve/train/wgkv/stories260K").steps.size(), 3u);
    ::setenv("XDG_DATA_HOME", "/nonexistent/kvsieve-tests", 1);  // as test_main.cpp leaves it
    ::unsetenv("XDG_CACHE_HOME");
}

TEST_F(WgkvCli, BadOptionsAreClearErrorsBeforeTraining) {
    for (auto [key, value, message] :
         {std::tuple<const char*, nlohmann::json, const char*>{"lambda", -1, "wgkv.lambda must be ≥ 0"},
          {"tau", 0, "wgkv.tau must be in (0, 1)"},
          {"lamda", 1, "unknown config key 'wgkv.lamda'"}}) {
        auto bad = cfg_;
        bad["out"] = (dir_ / "bad").string();
        bad["wgkv"][key] = value;
        const auto b = run_cli("train wgkv -q --config " + write(bad));
        EXPECT_EQ(b.status, 1) << key;
        EXPECT_NE(b.err.find(message), std::string::npos) << b.err;
        EXPECT_FALSE(std::filesystem::exists(dir_ / "bad" / "checkpoint.pt"));
    }
    auto bad = cfg_;
    bad.erase("init");
    const auto b = run_cli("train wgkv -q --config " + write(bad));
    EXPECT_EQ(b.status, 1);
    EXPECT_NE(b.err.find("config needs \"init\""), std::string::npos) << b.err;
}

}  // namespace
}  // namespace kvsieve
