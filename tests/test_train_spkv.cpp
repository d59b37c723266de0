// SP-KV training (train/spkv.h, train/spkv_predictor.h): the TAHG schedule, the gate of each training variant,
// and the trained model with its gates: the engine under --policy spkv computes what the trainer's hard-gated
// forward computes, and `kvsieve train spkv` trains, resumes and writes it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "cli_runner.h"
#include "io/gguf.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "predict/spkv_gates.h"
#include "test_util.h"
#include "trainer_cli_fixture.h"
#include "train/mirror.h"
#include "train/spkv.h"
#include "train/spkv_predictor.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve {
namespace {

using test::run_cli;

TEST(SpkvTraining, TahgStartsAtThreeQuartersAndAnnealsLinearly) {
    train::SpkvOptions o;
    o.tahg_fraction = 0.25;
    o.tahg_anneal_steps = 10;
    EXPECT_EQ(train::tahg_start(o, 200), 150);
    EXPECT_EQ(train::tahg_alpha(o, 0, 200), 0.0);
    EXPECT_EQ(train::tahg_alpha(o, 149, 200), 0.0);
    EXPECT_DOUBLE_EQ(train::tahg_alpha(o, 150, 200), 0.1);  // the first TAHG step already moves
    EXPECT_DOUBLE_EQ(train::tahg_alpha(o, 154, 200), 0.5);
    EXPECT_DOUBLE_EQ(train::tahg_alpha(o, 159, 200), 1.0);
    EXPECT_DOUBLE_EQ(train::tahg_alpha(o, 199, 200), 1.0);
    o.tahg_anneal_steps = 0;
    EXPECT_DOUBLE_EQ(train::tahg_alpha(o, 150, 200), 1.0);
    o.tahg_fraction = 0;
    EXPECT_EQ(train::tahg_start(o, 200), 200);
    EXPECT_EQ(train::tahg_alpha(o, 199, 200), 0.0);
    o.tahg_fraction = 0.25;
    o.mode = "hard";  // TAHG belongs to soft gating
    EXPECT_EQ(train::tahg_alpha(o, 199, 200), 0.0);
}

TEST(SpkvTraining, EachVariantGivesItsGateAndGradient) {
    train::SpkvOptions o;
    o.tau = 0.5;
    auto u = torch::tensor({0.1f, 0.4f, 0.6f, 0.9f}).reshape({1, 1, 4}).requires_grad_(true);
    const auto hard = torch::tensor({0.f, 0.f, 1.f, 1.f}).reshape({1, 1, 4});
    // Evaluation: the inference decision, no gradient.
    auto e = train::spkv_training_gate(o, u, 0.0, false);
    EXPECT_TRUE(torch::equal(e, hard));
    EXPECT_FALSE(e.requires_grad());
    // Soft (eq. 6): the utility itself.
    auto s = train::spkv_training_gate(o, u, 0.0, true);
    s.sum().backward();
    EXPECT_TRUE(torch::allclose(s, u));
    EXPECT_TRUE(torch::allclose(u.grad(), torch::ones_like(u)));
    // TAHG (eq. 7): (1 − α) u + α 1[u ≥ τ], the predictor frozen (no gradient).
    auto t = train::spkv_training_gate(o, u, 0.25, true);
    EXPECT_TRUE(torch::allclose(t, 0.75 * u.detach() + 0.25 * hard));
    EXPECT_FALSE(t.requires_grad());
    EXPECT_TRUE(torch::equal(train::spkv_training_gate(o, u, 1.0, true), hard));
    // Hard (eqs. 10–12): 0/1 samples with P(open) = max(u, p_min), the gradient straight through to u.
    o.mode = "hard";
    o.p_min = 0.2;
    torch::manual_seed(5);
    auto many = torch::tensor({0.0f, 0.5f, 1.0f}).reshape({3, 1, 1}).expand({3, 1, 20000}).contiguous();
    many.requires_grad_(true);
    auto z = train::spkv_training_gate(o, many, 0.0, true);
    EXPECT_TRUE(torch::equal(z.detach() * (1 - z.detach()), torch::zeros_like(z)));  // every value is 0 or 1
    auto rate = z.detach().mean(-1).squeeze();
    EXPECT_NEAR(rate[0].item<float>(), 0.2, 0.02);  // clipped up to p_min
    EXPECT_NEAR(rate[1].item<float>(), 0.5, 0.02);
    EXPECT_EQ(rate[2].item<float>(), 1.0f);
    (z * 3).sum().backward();
    EXPECT_TRUE(torch::allclose(many.grad(), torch::full_like(many, 3.0f)));  // straight through
    // Dense: no gate.
    o.mode = "dense";
    EXPECT_FALSE(train::spkv_training_gate(o, u, 0.0, true).defined());
}

/// A mirror of stories260K with random gates (bias 0: about half of them closed), saved with its gates; the
/// engine under --policy spkv must compute the logits the trainer's hard-gated forward computes.
TEST(SpkvTraining, TheEngineComputesWhatTheHardGatedTrainingForwardComputes) {
    auto m = train::load_mirror(test::model_path("stories260K.gguf"));
    const ModelConfig& c = m->config();
    for (int hidden : {0, 16}) {
        torch::manual_seed(9 + hidden);
        train::SpkvPredictor g(c, hidden, 0.0);
        test::TempFile file(".gguf");
        train::save_mirror(m, file.path(), train::tokenizer_metadata(test::model_path("stories260K.gguf")),
                           g->gguf_tensors());

        train::SpkvOptions o;
        o.window = 8;
        const auto ids = test::story_prompt_ids();
        const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 40);
        train::MirrorHooks hooks;
        hooks.gate_window = {o.window, 0};
        hooks.attn_block = 16;
        double closed = 0, total = 0;
        hooks.key_gate = [&](int l, const train::AttnTensors& a) {
            auto gate = train::spkv_training_gate(o, torch::sigmoid(g->logits(l, a.h)), 0.0, false);
            closed += (gate == 0).sum().item<double>();
            total += static_cast<double>(gate.numel());
            return gate;
        };
        torch::NoGradGuard ng;
        auto toks = torch::tensor(std::vector<int64_t>(prompt.begin(), prompt.end())).unsqueeze(0);
        auto ref = m->forward(toks, hooks).select(1, static_cast<int64_t>(prompt.size()) - 1).squeeze(0);
        EXPECT_GT(closed / total, 0.2) << "the test needs closed gates";
        EXPECT_LT(closed / total, 0.8);

        LlamaModel em(file.path());
        auto run = [&](const std::string& spec) {
            KVCache kc(em.config(), 64, parse_policy(spec),
                       std::make_shared<KVPool>(em.config().head_dim, KVType::kF32));
            std::vector<float> logits;
            em.forward(StepPhase::kPrefill, prompt, kc, logits);
            return torch::tensor(logits);
        };
        auto gated = run("spkv:tau=0.5,window=8");
        auto dense = run("full");
        EXPECT_TRUE(torch::allclose(gated, ref, 1e-3, 1e-3))
            << "hidden " << hidden << ": " << (gated - ref).abs().max().item<float>();
        EXPECT_GT((dense - ref).abs().max().item<float>(), 1e-2) << "closed gates must change the logits";
    }
}

class SpkvCli : public test::TrainerCliTest {
protected:
    SpkvCli() : TrainerCliTest("kvsieve_spkv_") {}
    void SetUp() override {
        cfg_ = continued_training_config(test::model_path("stories260K.gguf"));
        cfg_["output"] = (dir_ / "out.gguf").string();
        cfg_["spkv"] = {{"window", 16}, {"hidden", 8}, {"tahg_anneal_steps", 1}};
    }
};

TEST_F(SpkvCli, TrainsResumesAndWritesAModelWithGatesThatSpkvRuns) {
    auto cfg = cfg_;
    cfg["optim"]["steps"] = 2;
    ASSERT_EQ(run_cli("train spkv -q --config " + write(cfg)).status, 0);
    cfg["optim"]["steps"] = 4;  // resume to step 4: the last step is TAHG (α = 1, predictor frozen)
    const auto r = run_cli("train spkv -q --resume --config " + write(cfg));
    ASSERT_EQ(r.status, 0) << r.err;
    GGUFFile f((dir_ / "out.gguf").string());
    const ModelConfig c = ModelConfig::from_gguf(f);
    const SpkvGates g = SpkvGates::load(f, c.n_layer, c.n_embd, c.n_head_kv);
    EXPECT_EQ(g.hidden(), 8);
    EXPECT_EQ(f.get_int("kvsieve.predictor.spkv.window"), 16);
    const auto log = test::read_run_log(dir_ / "run");
    for (const auto& j : log.steps)
        EXPECT_GT(j["density"].get<double>(), 0.5) << j.dump();  // bias +5: gates start open
    for (const auto& e : log.evals) {
        ASSERT_TRUE(e.contains("head_density")) << e.dump();
        EXPECT_TRUE(e.contains("nll_text")) << e.dump();
        EXPECT_EQ(e["head_density"].size(), static_cast<size_t>(c.n_layer));
    }
    ASSERT_EQ(log.steps.size(), 4u);
    EXPECT_EQ(log.steps.back()["tahg_alpha"].get<double>(), 1.0);
    const auto gen = run_cli("generate -m " + (dir_ / "out.gguf").string() +
                             " --policy spkv:window=16 -n 8 --temp 0 -p 'Once upon a time'");
    EXPECT_EQ(gen.status, 0) << gen.err;
    EXPECT_FALSE(gen.out.empty());
}

TEST_F(SpkvCli, EvalOnlyEvaluatesTheCheckpointAndWritesNothing) {
    auto cfg = cfg_;
    cfg["optim"]["steps"] = 2;
    const std::string path = write(cfg);
    const auto none = run_cli("train spkv -q --eval-only --config " + path);  // no checkpoint yet
    EXPECT_NE(none.status, 0);
    EXPECT_NE(none.err.find("nothing to evaluate"), std::string::npos) << none.err;
    ASSERT_EQ(run_cli("train spkv -q --config " + path).status, 0);
    const auto log_before = read_whole_file((dir_ / "run" / "log.jsonl").string(), "log");
    const auto ckpt_time = std::filesystem::last_write_time(dir_ / "run" / "checkpoint.pt");
    const auto r = run_cli("train spkv -q --eval-only --config " + path);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["step"].get<int64_t>(), 2);
    // The same evaluation the run logged at its last step (same checkpoint, same held-out rows).
    const auto log = test::read_run_log(dir_ / "run");
    ASSERT_FALSE(log.evals.empty());
    EXPECT_NEAR(j["eval"]["nll_text"].get<double>(), log.evals.back()["nll_text"].get<double>(), 1e-5) << r.out;
    EXPECT_EQ(j["eval"]["head_density"], log.evals.back()["head_density"]);
    EXPECT_EQ(read_whole_file((dir_ / "run" / "log.jsonl").string(), "log"), log_before);
    EXPECT_EQ(std::filesystem::last_write_time(dir_ / "run" / "checkpoint.pt"), ckpt_time);
    const auto both = run_cli("train spkv -q --eval-only --resume --config " + path);
    EXPECT_NE(both.status, 0);
    EXPECT_NE(both.err.find("exclude each other"), std::string::npos) << both.err;
}

TEST_F(SpkvCli, TheDenseTwinHasNoGatesAndBadOptionsAreClearErrors) {
    auto cfg = cfg_;
    cfg["spkv"] = {{"mode", "dense"}};
    cfg["optim"]["steps"] = 1;
    ASSERT_EQ(run_cli("train spkv -q --config " + write(cfg)).status, 0);
    const auto r = run_cli("generate -m " + (dir_ / "out.gguf").string() + " --policy spkv -n 2 -p 'Once'");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("has no SP-KV gates"), std::string::npos) << r.err;
    for (auto [key, value, message] :
         {std::tuple<const char*, nlohmann::json, const char*>{"mode", "sparse", "is not soft, hard, dense or local"},
          {"tau", 1.5, "spkv.tau must be in (0, 1)"},
          {"windw", 8, "unknown config key 'spkv.windw'"}}) {
        auto bad = cfg_;
        bad["out"] = (dir_ / "bad").string();
        bad["spkv"][key] = value;
        const auto b = run_cli("train spkv -q --config " + write(bad));
        EXPECT_EQ(b.status, 1) << key;
        EXPECT_NE(b.err.find(message), std::string::npos) << b.err;
        EXPECT_FALSE(std::filesystem::exists(dir_ / "bad" / "checkpoint.pt"));
    }
}

}  // namespace
}  // namespace kvsieve
