// WG-KV inference (policy/wgkv.cpp, predict/wgkv_gates.h, tools/convert_wgkv.py): a reference-layout state dict
// written by PyTorch (tests/data/wgkv, tools/make_wgkv_fixture.cpp) converted to safetensors gives the gates PyTorch
// computed; the gates' shapes are checked against the model; lazy promotion keeps exactly the admitted entries; the
// sparse prefill sees what decode steps see. The fixture is shaped for stories260K (5 layers, 4 KV heads, d = 8).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "cli_runner.h"
#include "io/safetensors.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "predict/wgkv_gates.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

using json = nlohmann::json;

/// Runs a shell command; exit status and stderr.
test::CmdResult sh(const std::string& cmd) {
    test::TempFile err(".err");
    test::CmdResult r;
    const int st = std::system((cmd + " >/dev/null 2>" + err.path()).c_str());
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    std::ifstream e(err.path());
    r.err.assign(std::istreambuf_iterator<char>(e), {});
    return r;
}

std::string converter() { return std::string(KVSIEVE_SOURCE_DIR) + "/tools/convert_wgkv.py"; }
std::string fixture(const std::string& f) { return test::data_dir() + "/wgkv/" + f; }

/// The fixture converted by tools/convert_wgkv.py (once per test program).
const std::string& converted() {
    static test::TempFile out(".safetensors");
    static const bool done = [] {
        const auto r = sh("python3 " + converter() + " " + fixture("gates.pt") + " " + out.path());
        EXPECT_EQ(r.status, 0) << r.err;
        return true;
    }();
    (void)done;
    return out.path();
}

const ModelConfig& config() { return test::stories260k().config(); }

TEST(Wgkv, ConvertedReferenceCheckpointGivesPyTorchsGates) {
    const auto tensors = read_safetensors(converted());
    EXPECT_EQ(tensors.size(), 30u) << "6 gate tensors per layer; the q_proj weight is left out";
    for (const auto& [name, t] : tensors) EXPECT_EQ(name.rfind("model.layers.", 0), 0u) << name << ": prefix kept";
    const json fx = json::parse(std::ifstream(fixture("gates.json")));
    const int L = fx["n_layer"], H = fx["n_head_kv"], d = fx["head_dim"], T = fx["T"];
    ASSERT_EQ(L, config().n_layer);
    ASSERT_EQ(H, config().n_head_kv);
    ASSERT_EQ(d, config().head_dim);
    const WgkvGates g = WgkvGates::load(converted(), L, H, d);
    EXPECT_EQ(g.inner(), fx["inner"].get<int>());
    double worst = 0;
    for (int l = 0; l < L; ++l) {
        const auto k_pre = fx["layers"][l]["k_pre"].get<std::vector<float>>();
        const auto k_post = fx["layers"][l]["k_post"].get<std::vector<float>>();
        const auto want = fx["layers"][l]["gate"].get<std::vector<float>>();  // [T][H]
        std::vector<float> got(static_cast<size_t>(T) * H);
        g.predict(l, k_pre.data(), k_post.data(), T, got.data());
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    }
    EXPECT_LT(worst, 2e-6) << "layer 1 is BF16 in the checkpoint; every other tensor F32";
    // The gates spread over (0, 1), so a transposed or mis-grouped weight would show.
    const auto all = fx["layers"][0]["gate"].get<std::vector<float>>();
    EXPECT_LT(*std::min_element(all.begin(), all.end()), 0.3f);
    EXPECT_GT(*std::max_element(all.begin(), all.end()), 0.7f);
}

TEST(Wgkv, TheConverterSaysWhatIsWrongWithItsInput) {
    test::TempFile out(".safetensors"), notzip(".pt");
    std::ofstream(notzip.path()) << "not a checkpoint";
    auto r = sh("python3 " + converter() + " " + notzip.path() + " " + out.path());
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("is not a PyTorch checkpoint"), std::string::npos) << r.err;
    r = sh("python3 " + converter() + " /nonexistent.pt " + out.path());
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
}

TEST(Wgkv, GatesOfTheWrongShapeOrNoneAreOneClearError) {
    // A model with 2 KV heads cannot use gates trained for 4.
    try {
        (void)WgkvGates::load(converted(), config().n_layer, 2, config().head_dim);
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("are for 4 KV heads, the model has 2"), std::string::npos) << e.what();
    }
    try {
        (void)WgkvGates::load(converted(), config().n_layer, config().n_head_kv, 16);
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("pre_key_norm.weight has shape [8], expected [16]"), std::string::npos)
            << e.what();
    }
    try {
        (void)WgkvGates::load(converted(), 3, config().n_head_kv, config().head_dim);
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("more layers than the model's 3"), std::string::npos) << e.what();
    }
    test::TempFile empty(".safetensors");
    write_safetensors(empty.path(), {{"x", SafeTensor{"F32", {1}, {1.0f}}}});
    EXPECT_THROW((void)WgkvGates::load(empty.path(), 5, 4, 8), Error);
    const auto r =
        test::run_cli("generate -m " + test::model_path("stories260K.gguf") + " --policy wgkv -n 2 -p 'Once'");
    EXPECT_NE(r.status, 0);
    // No model=: the predictor trained for the loaded model, and there is none for stories260K: one error that says
    // so and how to train one.
    EXPECT_NE(r.err.find("policy wgkv: no wgkv predictor was trained for stories260K.gguf"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("kvsieve train wgkv -m MODEL.gguf"), std::string::npos) << r.err;
}

TEST(Wgkv, TheGatesTrainingWindowAndTauAreThePresetsDefaults) {
    const auto dir = std::filesystem::temp_directory_path() / ("kvsieve_wgkv_cfg_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(converted(), dir / "model.safetensors");
    EXPECT_EQ(parse_policy("wgkv:model=" + dir.string()).window, 256) << "no config.json: the paper's window";
    std::ofstream(dir / "config.json") << R"({"model_type": "wgkv", "window": 8, "tau": 0.3})";
    const Policy p = parse_policy("wgkv:model=" + dir.string());
    EXPECT_EQ(p.window, 8);
    EXPECT_DOUBLE_EQ(p.admission.tau, 0.3);
    EXPECT_EQ(parse_policy("wgkv:model=" + dir.string() + ",window=16,tau=0.5").window, 16) << "given values win";
    std::ofstream(dir / "config.json") << "{not json";
    EXPECT_THROW(parse_policy("wgkv:model=" + dir.string()), Error);
    std::filesystem::remove_all(dir);
}

std::map<int32_t, float> entries(const KVCache& c, int l, int h, std::set<int32_t>* kept = nullptr) {
    std::map<int32_t, float> m;
    for (Region r : kRegionsInOrder) {
        const auto* st = c.head(l, h).region(r);
        for (size_t i = 0; i < st->positions().size(); ++i) {
            m[st->positions()[i]] = st->scores()[i];
            if (kept) kept->insert(st->positions()[i]);
        }
    }
    return m;
}

TEST(Wgkv, LazyPromotionKeepsExactlyTheAdmittedEntries) {
    const LlamaModel& m = test::stories260k();
    const auto ids = test::story_prompt_ids();
    const int N = 30, S = 5, w = 8;
    auto run = [&](double tau) {
        auto c = std::make_unique<KVCache>(
            m.config(), 128, parse_policy("wgkv:model=" + converted() + ",tau=" + std::to_string(tau) + ",window=8"),
            std::make_shared<KVPool>(m.config().head_dim, KVType::kF32));
        std::vector<float> logits;
        m.forward(StepPhase::kPrefill, std::vector<int32_t>(ids.begin(), ids.begin() + N), *c, logits);
        c->end_prefill();
        for (int s = 0; s < S; ++s) m.forward(StepPhase::kDecode, {ids[N + s]}, *c, logits);
        return c;
    };
    const auto all = run(0.0), some = run(0.5);  // τ = 0 admits everything: every entry's gate is its stored score
    int64_t admitted = 0, dropped = 0;
    for (int l = 0; l < m.config().n_layer; ++l)
        for (int h = 0; h < m.config().n_head_kv; ++h) {
            std::set<int32_t> kept;
            const auto gates = entries(*some, l, h, &kept);
            for (int32_t p = N + S - w; p < N + S; ++p) EXPECT_TRUE(kept.count(p)) << "the window is always kept";
            for (const auto& [p, g] : gates)
                if (p < N + S - w) EXPECT_GE(g, 0.5f) << "layer " << l << " head " << h << " position " << p;
            if (l > 0) continue;
            // Layer 0's keys do not depend on the policy: the entries beyond the window are exactly those whose gate
            // (from the τ = 0 run) is ≥ τ.
            const auto g0 = entries(*all, l, h);
            ASSERT_EQ(g0.size(), static_cast<size_t>(N + S));
            for (const auto& [p, g] : g0) {
                if (p >= N + S - w) continue;
                EXPECT_EQ(kept.count(p) > 0, g >= 0.5f) << "head " << h << " position " << p << " gate " << g;
                (g >= 0.5f ? admitted : dropped)++;
            }
        }
    EXPECT_GT(admitted, 5) << "the fixture's gates must admit some entries and drop others";
    EXPECT_GT(dropped, 5);
    EXPECT_LT(some->stats().density, 0.9);
}

TEST(Wgkv, SparsePrefillSeesWhatDecodeStepsSee) {
    const LlamaModel& m = test::stories260k();
    const auto ids = test::story_prompt_ids();
    const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 30);
    auto logits_of = [&](const std::string& spec, bool stepwise) {
        return test::logits_under(m, spec, prompt, stepwise);
    };
    const std::string spec = "wgkv:model=" + converted() + ",tau=0.5,window=8";
    const auto steps = logits_of(spec, true), sparse = logits_of(spec, false);
    const auto dense = logits_of(spec + ",sparse_prefill=0", false);
    const double d_sparse = test::max_abs_diff(steps, sparse), d_dense = test::max_abs_diff(steps, dense);
    EXPECT_LT(d_sparse, 1e-3);
    EXPECT_GT(d_dense, 1e-2) << "dropped keys must change what later queries see";
}

}  // namespace
}  // namespace kvsieve
