// `kvsieve train METHOD -m MODEL.gguf` (cli/quick_train.h): the plan a command makes from the method's shipped config,
// and where the predictor goes (predict/data_dirs.h). The end-to-end run is WgkvCli.OneCommandTrainsAPredictor...
// (tests/test_train_wgkv.cpp, with the training stack).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "cli/quick_train.h"
#include "predict/bundled_predictors.h"
#include "predict/data_dirs.h"
#include "predict/learned_methods.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

namespace fs = std::filesystem;
using cli::plan_quick_train;
using cli::QuickTrainOptions;
using nlohmann::json;

/// Sets an environment variable for one test and puts back what was there.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const std::string& value) : name_(name) {
        if (const char* v = std::getenv(name)) old_ = v, had_ = true;
        ::setenv(name, value.c_str(), 1);
    }
    ~ScopedEnv() { had_ ? (void)::setenv(name_, old_.c_str(), 1) : (void)::unsetenv(name_); }

private:
    const char* name_;
    std::string old_;
    bool had_ = false;
};

std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) { return e.what(); }
    return "";
}

TEST(QuickTrain, TheShippedConfigGivesTheDefaultsAndTheFlagsChangeThem) {
    test::TempDir home;
    ScopedEnv data("XDG_DATA_HOME", home.path() + "/data"), cache("XDG_CACHE_HOME", home.path() + "/cache");
    const std::string model = test::model_path("stories260K.gguf");
    const std::string corpus = test::data_dir() + "/text/english.md";
    const LearnedMethod& wgkv = *find_learned_method("wgkv");
    // The shipped config, read from the source tree as this build-tree binary finds it.
    const std::string shipped = find_shipped("configs/wgkv/" + wgkv.smollm2_config);
    ASSERT_FALSE(shipped.empty());
    const json original = json::parse(std::ifstream(shipped));

    QuickTrainOptions o;
    o.model = model;
    const auto p = plan_quick_train(wgkv, "", o);
    EXPECT_EQ(p.config["init"], fs::absolute(model).lexically_normal().string());
    EXPECT_EQ(p.run_dir, home.path() + "/cache/kvsieve/train/wgkv/stories260K");
    EXPECT_EQ(p.predictor_dir, home.path() + "/data/kvsieve/models/wgkv/stories260K");
    EXPECT_EQ(p.config["out"], p.run_dir);
    EXPECT_EQ(p.config["output"], p.predictor_dir);  // WG-KV writes its gates to "output"
    EXPECT_EQ(p.config["name"], "stories260K-wgkv");
    EXPECT_EQ(p.config["optim"], original["optim"]);
    EXPECT_EQ(p.config["wgkv"], original["wgkv"]);
    // The config's corpora, relative to its folder, are absolute and exist.
    ASSERT_EQ(p.config["data"]["text"].size(), original["data"]["text"].size());
    for (const auto& f : p.config["data"]["text"]) {
        EXPECT_TRUE(fs::path(f.get<std::string>()).is_absolute()) << f;
        EXPECT_TRUE(fs::is_regular_file(f.get<std::string>())) << f;
    }
    // The user's predictor folder is searched before the shipped ones.
    fs::create_directories(home.path() + "/data/kvsieve/models");
    const auto dirs = predictor_search_path();
    ASSERT_FALSE(dirs.empty());
    EXPECT_EQ(dirs.front(), home.path() + "/data/kvsieve/models");

    o.corpus = {corpus};
    o.steps = 3;
    o.sets = {"optim.lr=0.005", "wgkv.window=16", "data.lengths=[96]", "eval.note=plain text"};
    const auto q = plan_quick_train(wgkv, "", o);
    EXPECT_EQ(q.config["data"]["text"], json::array({fs::absolute(corpus).lexically_normal().string()}));
    EXPECT_EQ(q.config["optim"]["steps"], 3);
    EXPECT_EQ(q.config["optim"]["lr"], 0.005);
    EXPECT_EQ(q.config["wgkv"]["window"], 16);
    EXPECT_EQ(q.config["wgkv"]["lambda"], original["wgkv"]["lambda"]);
    EXPECT_EQ(q.config["data"]["lengths"], json::array({96}));
    EXPECT_EQ(q.config["eval"]["note"], "plain text");
}

TEST(QuickTrain, EachMethodsPredictorGoesWhereItsTrainerWritesIt) {
    test::TempDir home;
    ScopedEnv data("XDG_DATA_HOME", home.path() + "/data"), cache("XDG_CACHE_HOME", home.path() + "/cache");
    QuickTrainOptions o;
    o.model = test::model_path("stories260K.gguf");
    for (const LearnedMethod& m : learned_methods()) {
        const auto p = plan_quick_train(m, "", o);
        const std::string want = home.path() + "/data/kvsieve/models/" + m.name + "/stories260K";
        EXPECT_EQ(p.predictor_dir, want) << m.name;
        EXPECT_EQ(p.config[m.predictor_key], want) << m.name;
        if (m.name == "kvzap") {
            EXPECT_EQ(p.config["model"], fs::absolute(o.model).lexically_normal().string());
            EXPECT_EQ(p.run_dir, want);  // KVzap has no checkpoints: its run folder is the predictor's
        } else {
            EXPECT_EQ(p.config["init"], fs::absolute(o.model).lexically_normal().string()) << m.name;
            EXPECT_EQ(p.config["out"], home.path() + "/cache/kvsieve/train/" + m.name + "/stories260K");
        }
        if (m.name == "spkv") {
            EXPECT_EQ(p.config["output"], p.run_dir + "/model.gguf");  // the trained GGUF stays in the run
            EXPECT_TRUE(p.config["spkv"]["freeze_lm"].get<bool>());    // gates for the model as it is
        }
    }
}

TEST(QuickTrain, BadInputIsOneErrorNamingIt) {
    test::TempDir home;
    ScopedEnv data("XDG_DATA_HOME", home.path());
    const LearnedMethod& wgkv = *find_learned_method("wgkv");
    QuickTrainOptions o;
    EXPECT_NE(message_of([&] { plan_quick_train(wgkv, "", o); }).find("give -m MODEL.gguf"), std::string::npos);
    o.model = home.path() + "/missing.gguf";
    EXPECT_NE(message_of([&] { plan_quick_train(wgkv, "", o); }).find("model '" + o.model + "' does not exist"),
              std::string::npos);
    o.model = test::model_path("stories260K.gguf");
    o.corpus = {home.path() + "/none.txt"};
    EXPECT_NE(message_of([&] { plan_quick_train(wgkv, "", o); }).find("corpus file '" + home.path() + "/none.txt'"),
              std::string::npos);
    o.corpus.clear();
    o.sets = {"optim.lr"};
    EXPECT_NE(message_of([&] { plan_quick_train(wgkv, "", o); }).find("give KEY=VALUE"), std::string::npos);
    o.sets = {"init.x=1"};  // "init" is a path, not an object
    EXPECT_NE(message_of([&] { plan_quick_train(wgkv, "", o); }).find("is not an object"), std::string::npos);
    o.sets = {"a..b=1"};
    EXPECT_NE(message_of([&] { plan_quick_train(wgkv, "", o); }).find("malformed key"), std::string::npos);
    o.sets.clear();
    o.steps = 5;
    EXPECT_NE(message_of([&] { plan_quick_train(*find_learned_method("kvzap"), "", o); }).find("no optimiser steps"),
              std::string::npos);
    // No home folder: the folders must be given.
    o.steps = 0;
    ScopedEnv no_data("XDG_DATA_HOME", ""), no_home("HOME", "");
    EXPECT_NE(message_of([&] { plan_quick_train(wgkv, "", o); }).find("--predictor-dir"), std::string::npos);
    o.predictor_dir = home.path() + "/p";
    o.run_dir = home.path() + "/r";
    EXPECT_EQ(plan_quick_train(wgkv, "", o).run_dir, home.path() + "/r");
}

}  // namespace
}  // namespace kvsieve
