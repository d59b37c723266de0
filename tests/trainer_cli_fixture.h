#pragma once
// A fixture for the end-to-end tests of config-driven trainers (`kvsieve train NAME --config FILE`): a temporary
// directory removed after the test, the test's base config `cfg_`, and numbered config files written into the
// directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvsieve::test {

/// A run's log.jsonl (train/loop.h) split into its training lines (those with "loss") and its evaluations (the
/// "eval" objects), each in order.
struct RunLog {
    std::vector<nlohmann::json> steps, evals;
};
inline RunLog read_run_log(const std::filesystem::path& run_dir) {
    RunLog r;
    std::ifstream f(run_dir / "log.jsonl");
    for (std::string line; std::getline(f, line);) {
        auto j = nlohmann::json::parse(line);
        if (j.contains("eval")) r.evals.push_back(j["eval"]);
        if (j.contains("loss")) r.steps.push_back(std::move(j));
    }
    return r;
}

class TrainerCliTest : public ::testing::Test {
protected:
    /// dir_ = <temp>/<prefix><pid>, created.
    explicit TrainerCliTest(const std::string& prefix)
        : dir_(std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()))) {
        std::filesystem::create_directories(dir_);
    }
    ~TrainerCliTest() override { std::filesystem::remove_all(dir_); }
    /// Writes `j` to a new cfg<N>.json in dir_ and returns its path.
    std::string write(const nlohmann::json& j) {
        const auto p = dir_ / ("cfg" + std::to_string(n_++) + ".json");
        std::ofstream(p) << j.dump(2);
        return p.string();
    }
    /// The base config of a short continued training of stories260K: writes a small story corpus to dir_/text.txt;
    /// out dir_/run, 96-token rows, 192 tokens per batch, 30% held out, 4 steps with one warm-up step, held-out
    /// evaluation over two 64-token windows, one thread, a log line every step, a checkpoint every 2 steps.
    nlohmann::json continued_training_config(const std::string& init) {
        std::string text;
        for (int i = 0; i < 40; ++i)
            text += "Once upon a time there was a little cat named Tom number " + std::to_string(i) +
                    ". She liked to sit in the sun and watch the birds fly.\n";
        std::ofstream(dir_ / "text.txt") << text;
        return {{"out", (dir_ / "run").string()},
                {"init", init},
                {"data",
                 {{"text", {(dir_ / "text.txt").string()}},
                  {"lengths", {96}},
                  {"tokens_per_batch", 192},
                  {"synthetic_fraction", 0.0},
                  {"holdout_fraction", 0.3}}},
                {"optim", {{"steps", 4}, {"warmup_steps", 1}, {"lr", 1e-3}}},
                {"eval", {{"window", 64}, {"text_windows", 2}}},
                {"threads", 1},
                {"log_every", 1},
                {"checkpoint_every", 2}};
    }
    std::filesystem::path dir_;
    nlohmann::json cfg_;

private:
    int n_ = 0;
};

}  // namespace kvsieve::test
