#include "predict/bundled_predictors.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "io/model_digest.h"
#include "predict/data_dirs.h"
#include "predict/learned_methods.h"
#include "util/error.h"

namespace kvsieve {

namespace fs = std::filesystem;

namespace {
struct Selected {
    std::mutex mu;
    std::string digest, label;
};
Selected& selected() {
    static Selected s;
    return s;
}

/// The method folder, trainer and config folder of a preset (predict/learned_methods.h).
const LearnedMethod& method_of(const std::string& preset) {
    const LearnedMethod* m = learned_method_of_preset(preset);
    require(m != nullptr, "policy ", preset, " reads no learned predictor");
    return *m;
}
}  // namespace

std::vector<std::string> predictor_search_path() {
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("KVSIEVE_PREDICTOR_PATH")) {
        std::string s = env;
        size_t a = 0;
        while (a <= s.size()) {
            const size_t b = std::min(s.find(':', a), s.size());
            if (b > a) dirs.push_back(s.substr(a, b - a));
            a = b + 1;
        }
    }
    dirs.push_back(user_predictor_dir());
    for (const std::string& d : shipped_dirs()) dirs.push_back((fs::path(d) / "models").string());
    std::vector<std::string> out;
    for (const std::string& d : dirs) {
        std::error_code ec;
        if (!d.empty() && fs::is_directory(d, ec) && std::find(out.begin(), out.end(), d) == out.end())
            out.push_back(d);
    }
    return out;
}

std::vector<BundledPredictor> list_predictors() {
    std::vector<BundledPredictor> out;
    std::set<std::pair<std::string, std::string>> seen;  // (method, name)
    for (const std::string& dir : predictor_search_path()) {
        for (const LearnedMethod& method : learned_methods()) {
            std::error_code ec;
            const fs::path m = fs::path(dir) / method.name;
            if (!fs::is_directory(m, ec)) continue;
            std::vector<fs::path> folders;
            for (const auto& e : fs::directory_iterator(m, ec))
                if (e.is_directory() && fs::exists(e.path() / "config.json")) folders.push_back(e.path());
            std::sort(folders.begin(), folders.end());
            for (const fs::path& f : folders) {
                nlohmann::json j;
                try {
                    j = nlohmann::json::parse(std::ifstream(f / "config.json"));
                } catch (const nlohmann::json::exception&) {
                    std::fprintf(stderr, "warning: %s is not JSON; predictor skipped\n",
                                 (f / "config.json").string().c_str());
                    continue;
                }
                if (!j.is_object()) continue;
                if (j.value("model_type", std::string()) != method.name) continue;
                BundledPredictor p;
                p.preset = method.preset_for(j);
                p.name = f.filename().string();
                if (!seen.insert({method.name, p.name}).second) continue;
                p.path = f.string();
                p.model_digest = j.value("model_digest", std::string());
                p.base_model = j.value("base_model", std::string());
                p.is_default = j.value("default", false);
                out.push_back(std::move(p));
            }
        }
    }
    return out;
}

void select_predictor_model(const GGUFFile& f) {
    select_predictor_model_digest(model_digest(f), fs::path(f.path()).filename().string());
}

void select_predictor_model(const std::string& gguf_path) { select_predictor_model(GGUFFile(gguf_path)); }

void select_predictor_model_digest(const std::string& digest, const std::string& label) {
    std::lock_guard<std::mutex> lock(selected().mu);
    selected().digest = digest;
    selected().label = label;
}

std::string selected_model_digest() {
    std::lock_guard<std::mutex> lock(selected().mu);
    return selected().digest;
}

std::vector<BundledPredictor> ready_predictors() {
    const std::string digest = selected_model_digest();
    std::vector<BundledPredictor> out;
    if (digest.empty()) return out;
    for (BundledPredictor& p : list_predictors())
        if (p.model_digest == digest) out.push_back(std::move(p));
    return out;
}

std::string default_predictor_path(const std::string& preset) {
    std::string digest, label;
    {
        std::lock_guard<std::mutex> lock(selected().mu);
        digest = selected().digest;
        label = selected().label;
    }
    require(!digest.empty(), "policy ", preset,
            ": model=<predictor> is required (no model is loaded whose trained predictor could be picked)");
    const BundledPredictor* pick = nullptr;
    const std::vector<BundledPredictor> ready = ready_predictors();
    for (const BundledPredictor& p : ready)
        if (p.preset == preset && (!pick || (p.is_default && !pick->is_default))) pick = &p;
    if (pick) return pick->path;
    std::string others;
    for (const BundledPredictor& p : list_predictors())
        if (p.preset == preset)
            others += (others.empty() ? "" : ", ") + p.name + " (for " +
                      (p.base_model.empty() ? std::string("an unrecorded model")
                                            : fs::path(p.base_model).filename().string()) +
                      ")";
    fail("policy ", preset, ": no ", preset, " predictor was trained for ", label, " (", digest.substr(0, 19),
         "…); predictors found: ", others.empty() ? std::string("none") : others,
         ". Train one for this model with `kvsieve train ", method_of(preset).trainer,
         " -m MODEL.gguf` (docs/training.md), or give model=<folder>");
}

std::optional<std::string> predictor_path_by_name(const std::string& preset, const std::string& name) {
    for (const BundledPredictor& p : ready_predictors())
        if (p.preset == preset && p.name == name) return p.path;
    return std::nullopt;
}

std::string ready_predictor_names(const std::string& preset) {
    std::string out;
    for (const BundledPredictor& p : ready_predictors())
        if (p.preset == preset) out += (out.empty() ? "" : ", ") + p.name;
    return out.empty() ? "none" : out;
}

}  // namespace kvsieve
