#pragma once
// Shared helpers for the tests: paths of bundled data and temporary files.
#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <string>

namespace kvsieve::test {

/// tests/data (copies of the reference models and golden outputs; see tests/data/README.md).
inline std::string data_dir() { return KVSIEVE_TEST_DATA; }
/// A reference model file: models/ of the repository for stories260K.gguf, tests/data/models otherwise.
inline std::string model_path(const std::string& name) {
    if (name == "stories260K.gguf") return std::string(KVSIEVE_SOURCE_DIR) + "/models/" + name;
    return data_dir() + "/models/" + name;
}
inline std::string golden_dir() { return data_dir() + "/golden"; }

/// A fresh path under the system temp folder, removed when the object dies.
class TempFile {
public:
    explicit TempFile(const std::string& suffix) {
        static int counter = 0;
        path_ = (std::filesystem::temp_directory_path() /
                 ("kvsieve_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + suffix))
                    .string();
    }
    ~TempFile() { std::remove(path_.c_str()); }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

}  // namespace kvsieve::test
