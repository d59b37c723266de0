#pragma once
// Shared helpers for the tests: paths of bundled data, temporary files, the bundled stories260K model.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "text/tokenizer.h"

namespace kvsieve::test {

/// tests/data (copies of the reference models and golden outputs; see tests/data/README.md).
inline std::string data_dir() { return KVSIEVE_TEST_DATA; }
/// A bundled model file (a GGUF, or a predictor's folder such as "kvpop/tiny2k-mlstm") of tests/data/models.
inline std::string model_path(const std::string& name) { return data_dir() + "/models/" + name; }
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

/// The last logits of `prompt` on `m` under policy `spec` (F32 cache of 128 positions): one prefill, or one decode
/// step per token (`stepwise`).
inline std::vector<float> logits_under(const LlamaModel& m, const std::string& spec, const std::vector<int32_t>& prompt,
                                       bool stepwise) {
    KVCache c(m.config(), 128, parse_policy(spec), std::make_shared<KVPool>(m.config().head_dim, KVType::kF32));
    std::vector<float> logits;
    if (stepwise)
        for (int32_t t : prompt) m.forward({t}, c, logits);
    else
        m.forward(prompt, c, logits);
    return logits;
}

/// max |a − b| over two vectors of one length.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, static_cast<double>(std::abs(a[i] - b[i])));
    return d;
}

}  // namespace kvsieve::test
