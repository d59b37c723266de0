// The learned methods' registry (predict/learned_methods.h): every registered method has a trainer, a config folder
// with the config of its shipped SmolLM2 predictor, and the quantizer's exclusion of its tensors; SP-KV gates copied
// out of a model's GGUF into a predictor folder (predict/spkv_export.h) give what the gates inside the GGUF give,
// whether named by model= or found by the model's digest.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "io/model_digest.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "predict/bundled_predictors.h"
#include "predict/learned_methods.h"
#include "predict/predictor_tensors.h"
#include "predict/spkv_export.h"
#include "text/tokenizer.h"
#include "cli_runner.h"
#include "gguf_edit.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

namespace fs = std::filesystem;

TEST(LearnedMethods, EveryMethodHasATrainerAConfigAndTheQuantizeExclusion) {
    ASSERT_FALSE(learned_methods().empty());
    const test::CmdResult help = test::run_cli("train --help");
    ASSERT_EQ(help.status, 0) << help.err;
    for (const LearnedMethod& m : learned_methods()) {
        SCOPED_TRACE(m.name);
        EXPECT_FALSE(m.presets.empty());
        for (const std::string& p : m.presets) EXPECT_TRUE(presets().count(p)) << "preset " << p << " is registered";
        // kvsieve-train lists the trainer as a subcommand ("  kvzap  fit ...").
        EXPECT_NE(help.out.find("\n  " + m.trainer + " "), std::string::npos) << help.out;
        // The config the shipped SmolLM2 predictor was trained with is in the config folder and is a JSON object.
        const fs::path cfg = fs::path(KVSIEVE_SOURCE_DIR) / m.config_dir / m.smollm2_config;
        ASSERT_TRUE(fs::is_regular_file(cfg)) << cfg;
        EXPECT_TRUE(nlohmann::json::parse(std::ifstream(cfg)).is_object()) << cfg;
        // quantize keeps the method's tensors as they are; a model's own tensors of the same layer are quantized.
        EXPECT_TRUE(is_predictor_tensor(predictor_tensor_name(m.tensor_prefix, 3, "fc.weight")));
        EXPECT_FALSE(is_predictor_tensor("blk.3.attn_q.weight"));
        EXPECT_EQ(learned_method_of_preset(m.presets.front()), &m);
        EXPECT_EQ(find_learned_method(m.name), &m);
    }
    EXPECT_EQ(learned_method_of_preset("snapkv"), nullptr);
}

/// Greedy tokens and the entries kept per (layer, KV head) after decoding 8 tokens from a 400-token prompt.
struct Greedy {
    std::vector<int32_t> tokens;
    std::vector<std::vector<int64_t>> entries;
};

Greedy greedy(const LlamaModel& m, const std::string& spec) {
    const auto tok = Tokenizer::from_gguf(m.file());
    std::string text;
    while (tok->encode(text, true, false).size() < 400)
        text += "Lily found a red ball in the garden. She gave it to her brother Tom, who smiled and ran to the park. ";
    const std::vector<int32_t> ids = tok->encode(text, true, false);
    KVCache cache(m.config(), static_cast<int64_t>(ids.size()) + 16, parse_policy(spec),
                  std::make_shared<KVPool>(m.config().head_dim, KVType::kF32));
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, ids, cache, logits);
    Greedy r;
    for (int i = 0; i < 8; ++i) {
        const auto best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        r.tokens.push_back(best);
        m.forward(StepPhase::kDecode, {best}, cache, logits);
    }
    r.entries = cache.stats().entries;
    return r;
}

TEST(LearnedMethods, SpkvGatesInAFolderGiveWhatTheGatesInTheGgufGive) {
    const std::string with_gates = test::model_path("kvsieve-tiny-2k-spkv.gguf");
    // The same model without its gates (the frozen model a side folder serves).
    test::TempFile bare(".gguf");
    test::GGUFEdit e;
    e.keep_tensor = [](const std::string& name) { return !is_predictor_tensor(name); };
    test::rewrite_gguf(with_gates, bare.path(), e);
    test::TempDir search;
    const std::string dir = (fs::path(search.path()) / "spkv" / "tiny2k-gates").string();
    SpkvExportOptions o;
    o.base_model = bare.path();
    export_spkv_gates(with_gates, dir, o);
    const nlohmann::json cfg = nlohmann::json::parse(std::ifstream(fs::path(dir) / "config.json"));
    EXPECT_EQ(cfg.at("model_type"), "spkv");
    EXPECT_EQ(cfg.at("model_digest"), model_digest(GGUFFile(bare.path())));
    EXPECT_EQ(cfg.at("tau"), 0.5);  // the GGUF's kvsieve.predictor.spkv.tau
    EXPECT_EQ(cfg.at("window"), 128);

    const LlamaModel gguf_model(with_gates);
    const Greedy inside = greedy(gguf_model, "spkv");
    int64_t kept = 0, total = 0;
    for (const auto& l : inside.entries)
        for (int64_t n : l) kept += n, total += 400 + 8;
    ASSERT_LT(kept, total) << "the gates drop entries, so the comparison means something";

    // model= names the folder; it wins over the GGUF's own gates, which are the same.
    const Greedy named = greedy(gguf_model, "spkv:model=" + dir);
    EXPECT_EQ(named.tokens, inside.tokens);
    EXPECT_EQ(named.entries, inside.entries);

    // No model= on the model without gates: the folder trained for it, found by its digest on the search path.
    const LlamaModel bare_model(bare.path());
    ::setenv("KVSIEVE_PREDICTOR_PATH", search.path().c_str(), 1);
    select_predictor_model(bare_model.file());
    const Greedy found = greedy(bare_model, "spkv");
    select_predictor_model_digest("", "");
    ::unsetenv("KVSIEVE_PREDICTOR_PATH");
    EXPECT_EQ(found.tokens, inside.tokens);
    EXPECT_EQ(found.entries, inside.entries);

    // Without a folder for it, the model without gates is one error naming both places looked in.
    const std::string err = test::error_of([&] { (void)greedy(bare_model, "spkv"); });
    EXPECT_NE(err.find("has no SP-KV gates"), std::string::npos) << err;
}

}  // namespace
}  // namespace kvsieve
