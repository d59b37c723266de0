#pragma once
// Shared helpers for the tests: paths of bundled data, temporary files, the bundled stories260K model.
#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <string>
#include <vector>

#include "model/llama_model.h"
#include "text/tokenizer.h"

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

/// The bundled stories260K model, loaded once per test program.
inline const LlamaModel& stories260k() {
    static const LlamaModel m(model_path("stories260K.gguf"));
    return m;
}

/// A story prompt of about 40 tokens (BOS first) in stories260K's vocabulary.
inline std::vector<int32_t> story_prompt_ids() {
    const auto tok = Tokenizer::from_gguf(stories260k().file());
    return tok->encode(
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friend "
        "Ben. One day, they saw a big red ball under a tree.",
        true, false);
}

}  // namespace kvsieve::test
