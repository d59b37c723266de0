// The artifact registry (predict/predictor_registry.h): one load per file, shared, reloaded when the file changes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "policy/policy.h"
#include "predict/kvzap_model.h"
#include "predict/predictor_registry.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

namespace fs = std::filesystem;

const std::string kKvzapStories = std::string(KVSIEVE_SOURCE_DIR) + "/models/kvzap/stories260K-linear";

/// A fresh copy of a predictor folder under the temp folder, removed at the end.
struct CopiedDir {
    explicit CopiedDir(const std::string& from, const std::string& tag) {
        path = (fs::temp_directory_path() / ("kvsieve_pred_" + tag + "_" + std::to_string(::getpid()))).string();
        fs::remove_all(path);
        fs::create_directories(path);
        for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), fs::path(path) / e.path().filename());
    }
    ~CopiedDir() { fs::remove_all(path); }
    std::string path;
};

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "no error";
}

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
    EXPECT_NE(error_of([&] { reg.get<KVzapModel>("kvzap", dir.path + "/nope", "", load); }).find("nope"), std::string::npos);
    EXPECT_EQ(reg.loads(), before + 3);
}

}  // namespace
}  // namespace kvsieve
