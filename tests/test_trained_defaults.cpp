// The trained defaults block of the learned predictors (predict/trained_defaults.h) read from config.json and from
// GGUF metadata, and the precedence spec > trained defaults > preset defaults of each learned preset
// (policy/learned_rule.h): kvzap, spkv, wgkv, kvpop.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "cli_runner.h"
#include "cache/kv_pool.h"
#include "gguf_edit.h"
#include "io/gguf.h"
#include "model/llama_model.h"
#include "policy/catalog.h"
#include "policy/policy.h"
#include "predict/kvzap_model.h"
#include "predict/predictor_tensors.h"
#include "predict/trained_defaults.h"
#include "predict/learned_methods.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

namespace fs = std::filesystem;

/// The bundled predictors and models of tests/data/models (the KVzap surrogates in its kvzap/ folder).
const std::string kModels = test::data_dir() + "/models/";
const std::string kKvzap = kModels + "kvzap/";

/// A copy of a committed predictor folder whose config.json is replaced (or removed), deleted with the object.
class PredictorCopy {
public:
    explicit PredictorCopy(const std::string& committed) {
        static int n = 0;
        dir_ =
            fs::temp_directory_path() / ("kvsieve_trained_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
        fs::create_directories(dir_);
        for (const auto& e : fs::directory_iterator(kModels + committed))
            if (e.path().filename() != "README.md") fs::copy_file(e.path(), dir_ / e.path().filename());
        original_ = nlohmann::json::parse(std::ifstream(dir_ / "config.json"));
    }
    ~PredictorCopy() { fs::remove_all(dir_); }
    /// config.json = the committed one without `drop`, with `set` merged in.
    void config(const nlohmann::json& set, const std::vector<std::string>& drop = {}) {
        nlohmann::json j = original_;
        for (const auto& k : drop) j.erase(k);
        if (!set.is_null()) j.update(set);
        write(j.dump());
    }
    void write(const std::string& text) { std::ofstream(dir_ / "config.json") << text; }
    std::string path() const { return dir_.string(); }
    std::string config_path() const { return (dir_ / "config.json").string(); }

private:
    fs::path dir_;
    nlohmann::json original_;
};

using test::error_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(TrainedDefaults, ReadFromConfigJson) {
    const auto d = trained_defaults_from_json(
        nlohmann::json::parse(R"({"model_type": "kvpop", "tau": -3.5, "window": 64, "sinks": 2, "budget_k": 96,
                                  "delayed": false, "base_model": "m.gguf", "provenance": "kvsieve train kvpop",
                                  "softcap": 10.0})"),
        "x/config.json");
    EXPECT_DOUBLE_EQ(d.tau.value(), -3.5);
    EXPECT_EQ(d.window.value(), 64);
    EXPECT_EQ(d.sinks.value(), 2);
    EXPECT_EQ(d.budget.value(), 96);
    EXPECT_FALSE(d.delayed.value());
    EXPECT_EQ(d.base_model, "m.gguf");
    EXPECT_EQ(d.provenance, "kvsieve train kvpop");
    EXPECT_EQ(d.source, "x/config.json");
    const auto none = trained_defaults_from_json(nlohmann::json::parse(R"({"model_type": "kvzap"})"), "y");
    EXPECT_TRUE(none.empty());
    // Written back under the same keys, read back the same.
    nlohmann::json j;
    write_trained_defaults(d, j);
    const auto again = trained_defaults_from_json(j, "z");
    EXPECT_EQ(again.window, d.window);
    EXPECT_EQ(again.sinks, d.sinks);
    EXPECT_EQ(again.budget, d.budget);
    EXPECT_EQ(again.tau, d.tau);
    EXPECT_EQ(again.delayed, d.delayed);
    EXPECT_EQ(again.provenance, d.provenance);
}

TEST(TrainedDefaults, MalformedConfigJsonNamesTheFileAndTheKey) {
    PredictorCopy c("kvzap/stories260K-linear");
    const auto read = [&] { (void)read_trained_defaults(c.path(), "kvzap"); };
    const struct {
        nlohmann::json set;
        std::string key, want;
    } cases[] = {{{{"window", "128"}}, "window", "must be an integer ≥ 0, got \"128\""},
                 {{{"window", -1}}, "window", "must be an integer ≥ 0, got -1"},
                 {{{"sinks", 1.5}}, "sinks", "must be an integer ≥ 0, got 1.5"},
                 {{{"tau", "low"}}, "tau", "must be a number, got \"low\""},
                 {{{"budget_k", 0}}, "budget_k", "must be an integer ≥ 1, got 0"},
                 {{{"delayed", 1}}, "delayed", "must be true or false, got 1"},
                 {{{"provenance", 3}}, "provenance", "must be a string, got 3"}};
    for (const auto& k : cases) {
        c.config(k.set);
        const std::string e = error_of(read);
        EXPECT_TRUE(contains(e, "'" + c.config_path() + "': key '" + k.key + "' " + k.want)) << e;
        // The loader and the preset give the same error.
        EXPECT_TRUE(contains(error_of([&] { (void)KVzapModel::load(c.path()); }), "key '" + k.key + "'")) << k.key;
        EXPECT_TRUE(contains(error_of([&] { (void)parse_policy("kvzap:model=" + c.path()); }), "key '" + k.key + "'"))
            << k.key;
    }
    c.write("{not json");
    EXPECT_TRUE(contains(error_of(read), "'" + c.config_path() + "' is not JSON")) << error_of(read);
    c.write("[1, 2]");
    EXPECT_TRUE(contains(error_of(read), "'" + c.config_path() + "' must hold a JSON object")) << error_of(read);
}

TEST(TrainedDefaults, NoConfigGivesAnEmptyBlock) {
    EXPECT_TRUE(read_trained_defaults(kModels + "wgkv/tiny2k-lambda0.08/model.safetensors", "wgkv").empty());
    EXPECT_TRUE(read_trained_defaults(test::data_dir(), "wgkv").empty());  // a folder without config.json
}

/// tests/data/models/kvsieve-tiny-2k-spkv.gguf with its trained-default metadata changed by `edit` (dropped when it returns
/// false).
void spkv_copy(const std::string& dst, const std::function<bool(const std::string&, GGUFValue&)>& edit) {
    test::GGUFEdit e;
    e.edit_kv = edit;
    test::rewrite_gguf(kModels + "kvsieve-tiny-2k-spkv.gguf", dst, e);
}

TEST(TrainedDefaults, ReadFromGgufMetadata) {
    // The committed SP-KV model records τ = 0.5, w = 128, s = 0 (kvsieve train spkv).
    const auto committed = read_trained_defaults(kModels + "kvsieve-tiny-2k-spkv.gguf", "spkv");
    EXPECT_DOUBLE_EQ(committed.tau.value(), 0.5);
    EXPECT_EQ(committed.window.value(), 128);
    EXPECT_EQ(committed.sinks.value(), 0);
    EXPECT_FALSE(committed.budget.has_value());
    test::TempFile f(".gguf");
    spkv_copy(f.path(), [](const std::string& k, GGUFValue& v) {
        if (k == predictor_metadata_key("spkv", "tau")) v = GGUFValue::make_f32(0.25f);
        if (k == predictor_metadata_key("spkv", "window")) v = GGUFValue::make_u32(16);
        if (k == predictor_metadata_key("spkv", "sinks")) v = GGUFValue::make_u32(2);
        return true;
    });
    const auto d = read_trained_defaults(GGUFFile(f.path()), "spkv");
    EXPECT_DOUBLE_EQ(d.tau.value(), 0.25);
    EXPECT_EQ(d.window.value(), 16);
    EXPECT_EQ(d.sinks.value(), 2);
    EXPECT_EQ(d.source, f.path());
    // A value of the wrong type: the error names the file and the key.
    test::TempFile bad(".gguf");
    spkv_copy(bad.path(), [](const std::string& k, GGUFValue& v) {
        if (k == predictor_metadata_key("spkv", "window")) v = GGUFValue::make_string("wide");
        return true;
    });
    const std::string e = error_of([&] { (void)read_trained_defaults(bad.path(), "spkv"); });
    EXPECT_TRUE(contains(e, bad.path()) && contains(e, "kvsieve.predictor.spkv.window")) << e;
}

// ---- spec > trained defaults > preset defaults, per method ----

TEST(TrainedDefaultsPrecedence, Kvzap) {
    PredictorCopy c("kvzap/stories260K-linear");
    // The committed checkpoint records the paper's values: the same policy as before it recorded them.
    const Policy committed = parse_policy("kvzap:model=" + kKvzap + "stories260K-linear");
    EXPECT_DOUBLE_EQ(committed.admission.tau, -4);
    EXPECT_EQ(committed.window, 128);
    EXPECT_EQ(committed.sinks, 0);
    c.config({{"tau", -2.5}, {"window", 32}, {"sinks", 2}});
    const Policy trained = parse_policy("kvzap:model=" + c.path());
    EXPECT_DOUBLE_EQ(trained.admission.tau, -2.5);
    EXPECT_EQ(trained.window, 32);
    EXPECT_EQ(trained.sinks, 2);
    EXPECT_EQ(trained.timing, Timing::kAtWindowExit);
    const Policy spec = parse_policy("kvzap:model=" + c.path() + ",tau=-6,window=0,sinks=1");
    EXPECT_DOUBLE_EQ(spec.admission.tau, -6);
    EXPECT_EQ(spec.window, 0);
    EXPECT_EQ(spec.sinks, 1);
    EXPECT_EQ(spec.timing, Timing::kAtWrite);
    c.config({}, {"tau", "window", "sinks", "provenance"});
    const Policy preset = parse_policy("kvzap:model=" + c.path());
    EXPECT_DOUBLE_EQ(preset.admission.tau, -4);
    EXPECT_EQ(preset.window, 128);
    EXPECT_EQ(preset.sinks, 0);
    // A trained window beyond the largest size is refused naming the file.
    c.config({{"window", int64_t{1} << 30}});
    const std::string e = error_of([&] { (void)parse_policy("kvzap:model=" + c.path()); });
    EXPECT_TRUE(contains(e, "policy kvzap: the trained window=1073741824 of '" + c.config_path() + "'")) << e;
}

TEST(TrainedDefaultsPrecedence, Wgkv) {
    PredictorCopy c("wgkv/tiny2k-lambda0.08");
    c.config({{"tau", 0.3}, {"window", 16}, {"sinks", 3}});
    const Policy trained = parse_policy("wgkv:model=" + c.path());
    EXPECT_DOUBLE_EQ(trained.admission.tau, 0.3);
    EXPECT_EQ(trained.window, 16);
    EXPECT_EQ(trained.sinks, 3);
    const Policy spec = parse_policy("wgkv:model=" + c.path() + ",tau=0.2,window=8,sinks=0");
    EXPECT_DOUBLE_EQ(spec.admission.tau, 0.2);
    EXPECT_EQ(spec.window, 8);
    EXPECT_EQ(spec.sinks, 0);
    c.config({}, {"tau", "window", "sinks"});
    const Policy preset = parse_policy("wgkv:model=" + c.path());
    EXPECT_DOUBLE_EQ(preset.admission.tau, 0.1);
    EXPECT_EQ(preset.window, 256);
    EXPECT_EQ(preset.sinks, 0);
    c.config({{"tau", 1.5}});
    const std::string e = error_of([&] { (void)parse_policy("wgkv:model=" + c.path()); });
    EXPECT_TRUE(contains(e, "policy wgkv: the trained tau=1.5 of '" + c.config_path() + "' is outside [0, 1]")) << e;
    EXPECT_DOUBLE_EQ(parse_policy("wgkv:model=" + c.path() + ",tau=0.4").admission.tau, 0.4) << "the spec's wins";
}

TEST(TrainedDefaultsPrecedence, Kvpop) {
    PredictorCopy c("kvpop/tiny2k-mlstm");
    c.config({{"window", 32}, {"sinks", 2}, {"delayed", false}});
    const Policy trained = parse_policy("kvpop:model=" + c.path() + ",capacity=100");
    EXPECT_EQ(trained.window, 32);
    EXPECT_EQ(trained.sinks, 2);
    EXPECT_EQ(trained.compression.budget, 100 - 32 - 2);
    const Policy spec = parse_policy("kvpop:model=" + c.path() + ",capacity=100,window=16,sinks=4,delayed=1");
    EXPECT_EQ(spec.window, 16);
    EXPECT_EQ(spec.sinks, 4);
    EXPECT_EQ(spec.compression.budget, 100 - 16 - 4);
    c.config({}, {"window", "sinks", "delayed"});
    const Policy preset = parse_policy("kvpop:model=" + c.path() + ",capacity=300");
    EXPECT_EQ(preset.window, 256);
    EXPECT_EQ(preset.sinks, 4);
    EXPECT_EQ(preset.compression.budget, 300 - 256 - 4);
    c.config({{"sinks", "four"}});
    const std::string e = error_of([&] { (void)parse_policy("kvpop:model=" + c.path() + ",capacity=300"); });
    EXPECT_TRUE(contains(e, "'" + c.config_path() + "': key 'sinks' must be an integer ≥ 0")) << e;
}

TEST(TrainedDefaultsPrecedence, Spkv) {
    test::TempFile trained(".gguf"), bare(".gguf");
    spkv_copy(trained.path(), [](const std::string& k, GGUFValue& v) {
        if (k == predictor_metadata_key("spkv", "tau")) v = GGUFValue::make_f32(0.25f);
        if (k == predictor_metadata_key("spkv", "window")) v = GGUFValue::make_u32(16);
        if (k == predictor_metadata_key("spkv", "sinks")) v = GGUFValue::make_u32(2);
        return true;
    });
    spkv_copy(bare.path(), [](const std::string& k, GGUFValue&) {
        return k != predictor_metadata_key("spkv", "tau") && k != predictor_metadata_key("spkv", "window") &&
               k != predictor_metadata_key("spkv", "sinks");
    });
    LlamaModel m(trained.path()), mb(bare.path());
    auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF32);
    // The trained defaults apply when the cache binds the model (the gates live in its GGUF).
    auto policy_of = [&](const LlamaModel& model, const std::string& spec) {
        KVCache c(model.config(), 64, parse_policy(spec), pool);
        return c.policy();
    };
    const Policy t = policy_of(m, "spkv");
    EXPECT_DOUBLE_EQ(t.admission.tau, 0.25);
    EXPECT_EQ(t.window, 16);
    EXPECT_EQ(t.sinks, 2);
    const Policy s = policy_of(m, "spkv:tau=0.7,window=8,sinks=0");
    EXPECT_DOUBLE_EQ(s.admission.tau, 0.7);
    EXPECT_EQ(s.window, 8);
    EXPECT_EQ(s.sinks, 0);
    const Policy p = policy_of(mb, "spkv");
    EXPECT_DOUBLE_EQ(p.admission.tau, 0.5);
    EXPECT_EQ(p.window, 128);
    EXPECT_EQ(p.sinks, 0);
}

TEST(TrainedDefaultsPrecedence, PoliciesPrintsThePrecedence) {
    ASSERT_FALSE(learned_presets().empty());
    for (const std::string& preset : learned_presets()) {  // every preset of predict/learned_methods.h
        const std::string text = policies_text(preset);
        EXPECT_TRUE(contains(text, "precedence: ") && contains(text,
                                                               "the spec's value, else the predictor's trained "
                                                               "default"))
            << text;
    }
    EXPECT_FALSE(contains(policies_text("snapkv"), "precedence: "));
}

TEST(TrainKvzap, FlagsAndConfigGiveTheSameCheckpointWithItsTrainedDefaults) {
    const fs::path dir = fs::temp_directory_path() / ("kvsieve_train_kvzap_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string model = test::model_path("stories260K.gguf"), corpus = test::data_dir() + "/text/english.md";
    const std::string small = " --prompts 8 --min-tokens 64 --max-tokens 96 --tokens-per-prompt 24 --seed 3 -t 1 -q";
    // Flags only (the command line the committed checkpoints were made with), recording window 32.
    const auto r = test::run_cli("train kvzap --model " + model + " --corpus " + corpus + " --out " +
                                 (dir / "flags").string() + small + " --window 32");
    ASSERT_EQ(r.status, 0) << r.err;
    const KVzapModel flags = KVzapModel::load((dir / "flags").string());
    EXPECT_DOUBLE_EQ(flags.trained_defaults().tau.value(), -4);
    EXPECT_EQ(flags.trained_defaults().window.value(), 32);
    EXPECT_EQ(flags.trained_defaults().sinks.value(), 0);
    EXPECT_TRUE(contains(flags.trained_defaults().provenance, "kvsieve train kvzap"))
        << flags.trained_defaults().provenance;
    EXPECT_EQ(parse_policy("kvzap:model=" + (dir / "flags").string()).window, 32);
    // The same keys from a config file (relative paths from its folder), one overridden by a flag.
    fs::copy_file(corpus, dir / "corpus.md");
    std::ofstream(dir / "kvzap.json") << nlohmann::json{
        {"model", model},   {"corpus", {"corpus.md"}}, {"out", "config"}, {"prompts", 8}, {"min_tokens", 64},
        {"max_tokens", 96}, {"tokens_per_prompt", 24}, {"seed", 3},       {"threads", 1}, {"window", 16},
        {"tau", -3}}.dump();
    const auto rc = test::run_cli("train kvzap -q --config " + (dir / "kvzap.json").string() + " --window 32");
    ASSERT_EQ(rc.status, 0) << rc.err;
    const KVzapModel cfg = KVzapModel::load((dir / "config").string());
    EXPECT_DOUBLE_EQ(cfg.trained_defaults().tau.value(), -3);
    EXPECT_EQ(cfg.trained_defaults().window.value(), 32) << "the flag overrides the file";
    // Same pairs, same fit: the weights are the same bytes.
    auto bytes = [](const fs::path& p) {
        std::ifstream f(p, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    EXPECT_EQ(bytes(dir / "flags" / "model.safetensors"), bytes(dir / "config" / "model.safetensors"));
    // A key the trainer does not know, and a value of the wrong type, are named.
    std::ofstream(dir / "bad.json") << R"({"model": ")" + model + R"(", "corpus": "x", "out": "y", "ridg": 1})";
    const auto bad = test::run_cli("train kvzap --config " + (dir / "bad.json").string());
    EXPECT_NE(bad.status, 0);
    EXPECT_TRUE(contains(bad.err, "unknown config key 'ridg'")) << bad.err;
    std::ofstream(dir / "bad.json") << R"({"model": ")" + model + R"(", "corpus": "x", "out": "y", "window": -2})";
    const auto neg = test::run_cli("train kvzap --config " + (dir / "bad.json").string());
    EXPECT_TRUE(contains(neg.err, "config key 'window' must be an integer ≥ 0, got -2")) << neg.err;
    const auto none = test::run_cli("train kvzap --corpus " + corpus + " --out y");
    EXPECT_TRUE(contains(none.err, "config needs \"model\" (--model)")) << none.err;
    fs::remove_all(dir);
}

}  // namespace
}  // namespace kvsieve
