// The predictors kvsieve finds by itself for the loaded model (predict/bundled_predictors.h), matched by the digest
// of the model's tensors (io/model_digest.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "gguf_edit.h"
#include "io/gguf.h"
#include "io/model_digest.h"
#include "policy/policy.h"
#include "predict/bundled_predictors.h"
#include "test_util.h"

namespace kvsieve {
namespace {

namespace fs = std::filesystem;

/// The digest of stories260K.gguf as tools/model_digest.py (an independent Python implementation of the same
/// definition) prints it.
constexpr const char* kStoriesDigest = "sha256:95db5c3c6d7c48b0e0960ea00a4cfb4251b8e9a786e859a17c1ceffa81296a2e";

TEST(ModelDigest, MatchesTheIndependentPythonDigest) {
    EXPECT_EQ(model_digest(GGUFFile(test::model_path("stories260K.gguf"))), kStoriesDigest);
}

TEST(ModelDigest, MetadataAndNameDoNotEnterItTensorsDo) {
    const std::string src = test::model_path("stories260K.gguf");
    test::TempFile renamed(".gguf"), edited(".gguf"), dropped(".gguf");
    test::GGUFEdit meta;
    meta.edit_kv = [](const std::string& k, GGUFValue& v) {
        if (k == "general.name") v = GGUFValue::make_string("another name");
        return true;
    };
    test::rewrite_gguf(src, renamed.path(), meta);
    EXPECT_EQ(model_digest(GGUFFile(renamed.path())), kStoriesDigest);
    // The same tensors with one of them zeroed (retype to the same type and shape: zero bytes).
    test::GGUFEdit zero;
    zero.retype = [](const std::string& name, uint32_t&, std::vector<int64_t>&) {
        return name == "blk.0.attn_norm.weight";
    };
    test::rewrite_gguf(src, edited.path(), zero);
    EXPECT_NE(model_digest(GGUFFile(edited.path())), kStoriesDigest);
    test::GGUFEdit drop;
    drop.keep_tensor = [](const std::string& name) { return name != "blk.4.ffn_norm.weight"; };
    test::rewrite_gguf(src, dropped.path(), drop);
    EXPECT_NE(model_digest(GGUFFile(dropped.path())), kStoriesDigest);
}

/// A predictor search path of its own: KVSIEVE_PREDICTOR_PATH set to a scratch folder for the test's life (the
/// folder comes first, so its names shadow the shipped ones).
class PredictorPath {
public:
    PredictorPath() {
        const char* old = std::getenv("KVSIEVE_PREDICTOR_PATH");
        if (old) old_ = old;
        had_ = old != nullptr;
        setenv("KVSIEVE_PREDICTOR_PATH", dir_.path().c_str(), 1);
    }
    ~PredictorPath() {
        if (had_)
            setenv("KVSIEVE_PREDICTOR_PATH", old_.c_str(), 1);
        else
            unsetenv("KVSIEVE_PREDICTOR_PATH");
        select_predictor_model_digest("", "");
    }
    /// Writes <dir>/<method>/<name>/config.json.
    void add(const std::string& method, const std::string& name, nlohmann::json cfg) const {
        const fs::path d = fs::path(dir_.path()) / method / name;
        fs::create_directories(d);
        std::ofstream(d / "config.json") << cfg.dump();
    }
    std::string path_of(const std::string& method, const std::string& name) const {
        return (fs::path(dir_.path()) / method / name).string();
    }

private:
    test::TempDir dir_;
    std::string old_;
    bool had_ = false;
};

TEST(BundledPredictors, SpecWithoutModelTakesTheDefaultPredictorOfTheLoadedModel) {
    PredictorPath pp;
    pp.add("wgkv", "a-gates", {{"model_type", "wgkv"}, {"model_digest", "sha256:aa"}});
    pp.add("wgkv", "b-gates", {{"model_type", "wgkv"}, {"model_digest", "sha256:aa"}, {"default", true}});
    pp.add("wgkv", "other-model", {{"model_type", "wgkv"}, {"model_digest", "sha256:bb"}, {"default", true}});
    pp.add("kvpop", "mlp-scorer", {{"model_type", "kvpop"}, {"kind", "mlp"}, {"model_digest", "sha256:aa"}});
    pp.add("kvpop", "mlstm-scorer", {{"model_type", "kvpop"}, {"kind", "mlstm"}, {"model_digest", "sha256:aa"}});
    select_predictor_model_digest("sha256:aa", "m.gguf");
    EXPECT_EQ(default_predictor_path("wgkv"), pp.path_of("wgkv", "b-gates"));  // the default one
    EXPECT_EQ(default_predictor_path("kvpop"), pp.path_of("kvpop", "mlstm-scorer"));
    EXPECT_EQ(default_predictor_path("kvpop_mlp"), pp.path_of("kvpop", "mlp-scorer"));
    EXPECT_EQ(predictor_path_by_name("wgkv", "a-gates"), pp.path_of("wgkv", "a-gates"));
    EXPECT_EQ(predictor_path_by_name("wgkv", "other-model"), std::nullopt);  // trained for another model
    EXPECT_EQ(predictor_path_by_name("kvzap", "a-gates"), std::nullopt);     // another method
    select_predictor_model_digest("sha256:bb", "n.gguf");
    EXPECT_EQ(default_predictor_path("wgkv"), pp.path_of("wgkv", "other-model"));
}

TEST(BundledPredictors, NoPredictorForTheModelIsOneErrorNamingThoseThatExistAndTheTrainCommand) {
    PredictorPath pp;
    pp.add("kvzap", "for-another",
           {{"model_type", "kvzap"}, {"model_digest", "sha256:bb"}, {"base_model", "x/B.gguf"}});
    select_predictor_model_digest("sha256:aa", "mine.gguf");
    const std::string e = test::error_of([] { default_predictor_path("kvzap"); });
    EXPECT_NE(e.find("no kvzap predictor was trained for mine.gguf"), std::string::npos) << e;
    EXPECT_NE(e.find("for-another (for B.gguf)"), std::string::npos) << e;
    EXPECT_NE(e.find("kvsieve train kvzap"), std::string::npos) << e;
    // Through a policy spec: the same error.
    test::expect_error_contains([] { parse_policy("kvzap"); }, "no kvzap predictor was trained for mine.gguf");
    // A name that is no predictor of the model: one error listing those that are.
    test::expect_error_contains([] { parse_policy("kvzap:model=for-another"); },
                                "model=for-another is neither a file nor a predictor trained for the loaded model "
                                "(kvzap predictors for it: none)");
    // No model selected: model= is required.
    select_predictor_model_digest("", "");
    test::expect_error_contains([] { parse_policy("kvzap"); }, "model=<predictor> is required");
}

TEST(BundledPredictors, ConfigsThatAreNotJsonAreSkipped) {
    PredictorPath pp;
    const fs::path bad = fs::path(pp.path_of("wgkv", "broken"));
    fs::create_directories(bad);
    std::ofstream(bad / "config.json") << "{not json";
    pp.add("wgkv", "good", {{"model_type", "wgkv"}, {"model_digest", "sha256:aa"}});
    select_predictor_model_digest("sha256:aa", "m.gguf");
    const auto ready = ready_predictors();
    ASSERT_EQ(ready.size(), 1u);
    EXPECT_EQ(ready[0].name, "good");
}

}  // namespace
}  // namespace kvsieve
