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

namespace kvsieve::test {

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
    std::filesystem::path dir_;
    nlohmann::json cfg_;

private:
    int n_ = 0;
};

}  // namespace kvsieve::test
