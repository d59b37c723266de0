// Parity of the forward pass with llama.cpp (build 10587) on the reference models.
// Golden data: tests/data/golden (packed in tests/data/golden.tar.xz; see tests/data/README.md): llama.cpp's logits
// at every prompt position, its greedy continuation and the top-5 logits of every greedy step, all computed
// by llama.cpp, not by kvsieve. Tolerances: tests/data/README.md.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "model/llama_model.h"
#include "model/sampler.h"
#include "test_util.h"

namespace kvsieve {
namespace {

struct GoldenCase {
    std::string file;   // path of the JSON
    std::string model;  // model file name
};

std::vector<GoldenCase> golden_cases() {
    std::vector<GoldenCase> out;
    for (const char* sub : {"stories260K", "tiny"}) {
        std::vector<std::string> files;
        for (const auto& e : std::filesystem::directory_iterator(test::golden_dir() + "/" + sub))
            if (e.path().extension() == ".json") files.push_back(e.path().string());
        std::sort(files.begin(), files.end());
        // The model is named by the file: stories260K/<slug>.json, tiny/<model-stem>__<slug>.json (the
        // tests check it against the JSON's "model" field).
        for (const auto& f : files) {
            const std::string stem = std::filesystem::path(f).stem().string();
            const size_t sep = stem.find("__");
            out.push_back({f, sep == std::string::npos ? "stories260K.gguf" : stem.substr(0, sep) + ".gguf"});
        }
    }
    return out;
}

/// Max-abs tolerance for a model's weight type (golden README §"Tolerances a test should use").
double tolerance(const std::string& model) {
    if (model.find("f16") != std::string::npos) return 5e-3;
    if (model.find("q8_0") != std::string::npos || model.find("q4_k") != std::string::npos) return 5e-2;
    return 1e-3;
}

const LlamaModel& load(const std::string& name) {
    static std::map<std::string, std::unique_ptr<LlamaModel>> cache;
    auto& m = cache[name];
    if (!m) m = std::make_unique<LlamaModel>(test::model_path(name));
    return *m;
}

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.file; }

class GoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenTest, PromptLogitsMatchLlamaCpp) {
    std::ifstream in(GetParam().file);
    const auto j = nlohmann::json::parse(in);
    const LlamaModel& m = load(GetParam().model);
    const auto prompt = j.at("prompt_tokens").get<std::vector<int32_t>>();
    const int V = j.at("n_vocab").get<int>();
    ASSERT_EQ(j.at("model").get<std::string>(), GetParam().model);
    ASSERT_EQ(V, m.config().n_vocab);

    DenseKVCache cache = m.make_cache(static_cast<int64_t>(prompt.size()) + 80);
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, prompt, cache, logits, /*all_logits=*/true);
    ASSERT_EQ(logits.size(), prompt.size() * V);

    double max_abs = 0, sum_abs = 0;
    for (const auto& row : j.at("logits")) {
        const int p = row.at("position").get<int>();
        const auto& vals = row.at("values");
        for (int v = 0; v < V; ++v) {
            const double d = std::fabs(logits[p * V + v] - vals[v].get<double>());
            max_abs = std::max(max_abs, d);
            sum_abs += d;
        }
    }
    const double tol = tolerance(GetParam().model);
    const double mean_abs = sum_abs / (prompt.size() * V);
    RecordProperty("max_abs", std::to_string(max_abs));
    std::printf("[ golden ] %s prompt logits: max |Δ| %.2e, mean |Δ| %.2e (tolerance %.0e)\n",
                std::filesystem::path(GetParam().file).filename().c_str(), max_abs, mean_abs, tol);
    EXPECT_LE(max_abs, tol);
    EXPECT_LE(mean_abs, 1e-2);
}

TEST_P(GoldenTest, DecodeStepsMatchLlamaCpp) {
    std::ifstream in(GetParam().file);
    const auto j = nlohmann::json::parse(in);
    const LlamaModel& m = load(GetParam().model);
    const auto prompt = j.at("prompt_tokens").get<std::vector<int32_t>>();
    const auto greedy = j.at("greedy_tokens").get<std::vector<int32_t>>();
    const int V = m.config().n_vocab;
    const double tol = tolerance(GetParam().model);

    // Teacher-forced: prefill the prompt, then feed the golden greedy tokens one at a time and compare
    // the logits of the five ids llama.cpp listed at each step.
    DenseKVCache cache = m.make_cache(static_cast<int64_t>(prompt.size() + greedy.size()) + 8);
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, prompt, cache, logits);
    double max_abs = 0;
    const auto& tops = j.at("greedy_top");
    for (size_t s = 0; s < tops.size(); ++s) {
        if (s > 0) m.forward(StepPhase::kDecode, {greedy[s - 1]}, cache, logits);
        for (const auto& pair : tops[s].at("top")) {
            const int id = pair[0].get<int>();
            max_abs = std::max(max_abs, std::fabs(logits[id] - pair[1].get<double>()));
        }
    }
    std::printf("[ golden ] %s decode steps: max |Δ| %.2e over %zu steps\n",
                std::filesystem::path(GetParam().file).filename().c_str(), max_abs, tops.size());
    EXPECT_LE(max_abs, tol);

    // Free-running greedy decode equals llama.cpp's up to the first near-tie (margin < 2 × tolerance).
    cache.clear();
    m.forward(StepPhase::kPrefill, prompt, cache, logits);
    for (size_t s = 0; s < greedy.size(); ++s) {
        const auto& top = tops[s].at("top");
        const double margin = top[0][1].get<double>() - top[1][1].get<double>();
        if (margin < 2 * tol) break;
        const int32_t next = argmax(logits.data(), V);
        ASSERT_EQ(next, greedy[s]) << "greedy step " << s;
        if (s + 1 < greedy.size()) m.forward(StepPhase::kDecode, {next}, cache, logits);
    }
}

std::string case_name(const ::testing::TestParamInfo<GoldenCase>& info) {
    std::string s = std::filesystem::path(info.param.file).stem().string();
    for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, GoldenTest, ::testing::ValuesIn(golden_cases()), case_name);

}  // namespace
}  // namespace kvsieve
