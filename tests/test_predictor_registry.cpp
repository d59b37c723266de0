// The artifact registry (predict/predictor_registry.h: one load per file, shared, reloaded when the file changes) and
// the server's predictor names (policy/predictor_names.h: a request names a registered predictor, never a file).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "policy/predictor_names.h"
#include "predict/kvzap_model.h"
#include "predict/predictor_registry.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

namespace fs = std::filesystem;

const std::string kKvzapStories = test::model_path("kvzap/stories260K-linear");

/// A fresh copy of a predictor folder under the temp folder, removed at the end.
struct CopiedDir {
    explicit CopiedDir(const std::string& from, const std::string& tag) {
        path = (fs::temp_directory_path() / ("kvsieve_pred_" + tag + "_" + std::to_string(::getpid()))).string();
        fs::remove_all(path);
        fs::create_directories(path);
        for (const auto& e : fs::directory_iterator(from))
            fs::copy_file(e.path(), fs::path(path) / e.path().filename());
    }
    ~CopiedDir() { fs::remove_all(path); }
    std::string path;
};

using test::error_of;

TEST(PredictorRegistry, OneLoadIsSharedAndAChangedFileIsLoadedAgain) {
    CopiedDir dir(kKvzapStories, "share");
    auto& reg = PredictorRegistry::instance();
    const std::function<KVzapModel(const std::string&)> load = [](const std::string& p) { return KVzapModel::load(p); };
    const uint64_t before = reg.loads();
    const auto a = reg.get<KVzapModel>("kvzap", dir.path, "", load);
    const auto b = reg.get<KVzapModel>("kvzap", dir.path + "/", "", load);  // the same folder, written otherwise
    EXPECT_EQ(a.get(), b.get());
    EXPECT_EQ(reg.loads(), before + 1);
    // Policies parsed from the same folder load nothing more: they share the artifact.
    parse_policy("kvzap:model=" + dir.path);
    parse_policy("kvzap:model=" + dir.path + ",tau=-3");
    EXPECT_EQ(reg.loads(), before + 1);
    // Another variant (a model shape) is another artifact.
    const auto v = reg.get<KVzapModel>("kvzap", dir.path, "other", load);
    EXPECT_NE(v.get(), a.get());
    EXPECT_EQ(reg.loads(), before + 2);
    // A new modification time of a file in the folder: the next request loads it again.
    const fs::path st = fs::path(dir.path) / "model.safetensors";
    fs::last_write_time(st, fs::last_write_time(st) + std::chrono::hours(1));
    const auto c = reg.get<KVzapModel>("kvzap", dir.path, "", load);
    EXPECT_NE(c.get(), a.get());
    EXPECT_EQ(reg.loads(), before + 3);
    EXPECT_EQ(reg.get<KVzapModel>("kvzap", dir.path, "", load).get(), c.get());
    EXPECT_EQ(c->n_layers(), a->n_layers());
    // A missing path goes to the loader, whose error names it, and nothing is kept.
    EXPECT_NE(error_of([&] { reg.get<KVzapModel>("kvzap", dir.path + "/nope", "", load); }).find("nope"),
              std::string::npos);
    EXPECT_EQ(reg.loads(), before + 3);
}

TEST(PredictorNames, NamesFollowTheRules) {
    EXPECT_TRUE(is_predictor_name("kvzap-smol_2.a"));
    EXPECT_TRUE(is_predictor_name(std::string(64, 'a')));
    EXPECT_FALSE(is_predictor_name(std::string(65, 'a')));
    EXPECT_FALSE(is_predictor_name(""));
    EXPECT_FALSE(is_predictor_name(".hidden"));
    EXPECT_FALSE(is_predictor_name("a/b"));
    EXPECT_FALSE(is_predictor_name("/etc/shadow"));
    EXPECT_FALSE(is_predictor_name("a b"));
    NamedPredictors p;
    EXPECT_NE(error_of([&] { p.add("../up", kKvzapStories); }).find("predictor name '../up'"), std::string::npos);
    p.add("a", kKvzapStories);
    EXPECT_NE(error_of([&] { p.add("a", kKvzapStories); }).find("registered twice"), std::string::npos);
    EXPECT_NE(error_of([&] { p.add_assignment("b"); }).find("NAME=PATH"), std::string::npos);
    EXPECT_NE(error_of([&] { p.add("c", kKvzapStories + "/missing"); }).find("does not exist"), std::string::npos);
}

TEST(PredictorNames, ARequestNamesARegisteredPredictorAndNeverAFile) {
    const LlamaModel& m = test::stories260k();
    NamedPredictors preds;
    preds.add_assignment("smol=" + kKvzapStories);
    preds.validate(m.config());
    EXPECT_EQ(preds.names_text(), "smol (kvzap)");
    const PolicyParseOptions o = preds.parse_options();

    // The registered name builds the policy the path builds, and it runs on the model with the same logits.
    const Policy named = parse_policy("kvzap:model=smol,tau=-3,sinks=2", o);
    const Policy by_path = parse_policy("kvzap:model=" + kKvzapStories + ",tau=-3,sinks=2");
    EXPECT_EQ(named.describe(), by_path.describe());
    const auto prompt = test::story_prompt_ids();
    auto run = [&](const Policy& p) {
        KVCache c(m.config(), 128, p, std::make_shared<KVPool>(m.config().head_dim, KVType::kF32));
        std::vector<float> logits;
        m.forward(StepPhase::kPrefill, prompt, c, logits);
        return logits;
    };
    const auto a = run(named), b = run(by_path);
    ASSERT_EQ(a.size(), static_cast<size_t>(m.config().n_vocab));
    EXPECT_EQ(test::max_abs_diff(a, b), 0.0);

    // Paths, devices, unknown names and another method's predictor: one error listing the names, no file system detail.
    for (const std::string& spec :
         std::vector<std::string>{"kvzap:model=/etc/shadow", "kvzap:model=" + kKvzapStories, "wgkv:model=/dev/zero",
                                  "kvpop:model=../../x,budget=300", "kvzap:model=.", "kvzap:model=nosuch",
                                  "wgkv:model=smol", "kvzap:model=smol>kvpop:model=/tmp/fifo,budget=300"}) {
        const std::string e = error_of([&] { parse_policy(spec, o); });
        EXPECT_NE(e, "no error") << spec;
        EXPECT_NE(e.find("registered predictors: smol (kvzap)"), std::string::npos) << spec << ": " << e;
        EXPECT_EQ(e.find('/'), std::string::npos) << spec << ": " << e;
        EXPECT_EQ(e.find("shadow"), std::string::npos) << e;
        EXPECT_EQ(e.find("zero"), std::string::npos) << e;
    }
    EXPECT_NE(error_of([&] { parse_policy("kvzap:model=nosuch", o); }).find("no predictor named 'nosuch'"),
              std::string::npos);
    EXPECT_NE(error_of([&] { parse_policy("wgkv:model=smol", o); }).find("is a kvzap predictor"), std::string::npos);
    // Without predictors every reference is refused.
    const std::string none = error_of([&] { parse_policy("kvzap:model=smol", NamedPredictors{}.parse_options()); });
    EXPECT_NE(none.find("registered predictors: none"), std::string::npos) << none;
    // The command line keeps taking paths.
    EXPECT_EQ(parse_policy("kvzap:model=" + kKvzapStories).window, 128);
}

TEST(PredictorNames, AFolderOfPredictorsAndBadOnesFailAtStart) {
    const LlamaModel& m = test::stories260k();
    const fs::path root = fs::temp_directory_path() / ("kvsieve_preds_" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root / ".hidden");
    fs::create_directories(root / "stories-kvzap");
    for (const auto& e : fs::directory_iterator(kKvzapStories))
        fs::copy_file(e.path(), root / "stories-kvzap" / e.path().filename());
    std::ofstream(root / "notes.txt") << "not a predictor folder";
    NamedPredictors preds;
    preds.add_dir(root.string());
    EXPECT_EQ(preds.names(), std::vector<std::string>{"stories-kvzap"});
    preds.validate(m.config());
    EXPECT_NO_THROW(parse_policy("kvzap:model=stories-kvzap", preds.parse_options()));

    // A predictor trained for another model: the start fails naming it.
    NamedPredictors other;
    other.add("tiny", test::model_path("kvzap/kvsieve-tiny-2k-linear"));
    const std::string e = error_of([&] { other.validate(m.config()); });
    EXPECT_NE(e.find("predictor 'tiny'"), std::string::npos) << e;
    EXPECT_NE(e.find("layers"), std::string::npos) << e;
    // A folder that holds no predictor.
    fs::create_directories(root / "plain");
    std::ofstream(root / "plain" / "config.json") << R"({"model_type": "streaming_plus"})";
    NamedPredictors bad;
    bad.add("plain", (root / "plain").string());
    EXPECT_NE(error_of([&] { bad.validate(m.config()); }).find("model_type 'streaming_plus'"), std::string::npos);
    fs::remove_all(root);
}

TEST(PredictorNames, KvpopPredictorsResolveForTheirOwnVariant) {
    const LlamaModel tiny(test::model_path("kvsieve-tiny-2k.gguf"));
    NamedPredictors preds;
    preds.add("t-mlstm", test::model_path("kvpop/tiny2k-mlstm"));
    preds.add("t-mlp", test::model_path("kvpop/tiny2k-mlp"));
    preds.validate(tiny.config());
    EXPECT_EQ(preds.names_text(), "t-mlp (kvpop_mlp), t-mlstm (kvpop)");
    const auto o = preds.parse_options();
    const Policy p = parse_policy("kvpop:model=t-mlstm,budget=300", o);
    EXPECT_EQ(p.sinks + p.window + p.compression.budget, 300);
    EXPECT_NO_THROW(parse_policy("kvpop_mlp:model=t-mlp,budget=300", o));
    EXPECT_NE(error_of([&] { parse_policy("kvpop:model=t-mlp,budget=300", o); }).find("is a kvpop_mlp predictor"),
              std::string::npos);
}

}  // namespace
}  // namespace kvsieve
