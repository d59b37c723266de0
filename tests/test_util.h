#pragma once
// Shared helpers for the tests: paths of bundled data, temporary files, the bundled stories260K model, Gaussian test
// vectors and the message of a thrown Error.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <unistd.h>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "text/tokenizer.h"
#include "util/error.h"

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

/// A fresh empty folder under the system temp folder (whatever an earlier process of the same id left there is
/// removed first), removed with its contents when the object dies.
class TempDir {
public:
    TempDir() : file_("_dir") {
        std::filesystem::remove_all(file_.path());
        std::filesystem::create_directories(file_.path());
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(file_.path(), ec);
    }
    const std::string& path() const { return file_.path(); }

private:
    TempFile file_;
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
        for (int32_t t : prompt) m.forward(StepPhase::kDecode, {t}, c, logits);
    else
        m.forward(StepPhase::kPrefill, prompt, c, logits);
    return logits;
}

/// max |a − b| over two vectors of one length.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, static_cast<double>(std::abs(a[i] - b[i])));
    return d;
}

/// n independent samples of the normal distribution N(0, sd²) (`std::normal_distribution<float>`), drawn in order
/// from `rng`, which advances: successive calls on one generator give different vectors. sd: the standard deviation.
inline std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.0f) {
    std::normal_distribution<float> dist(0.0f, sd);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

/// n samples of N(0, sd²) from a fresh `std::mt19937` seeded with `seed`: the same vector for the same arguments on
/// every run (the C++ standard fixes mt19937's sequence; the float normal draws are those of this standard library).
inline std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
    std::mt19937 rng(seed);
    return randn(n, rng, sd);
}

/// The one-token decode step at position `pos` after the step `in` of the same layer and shapes: the new token's
/// query q [Hq·d] and key and value k, v [Hkv·d] rows (after RoPE; the pre-RoPE pointers name the same rows).
inline LayerInputs decode_step_after(const LayerInputs& in, int64_t pos, const float* q, const float* k,
                                     const float* v) {
    LayerInputs one = in;
    one.pos0 = pos;
    one.T = 1;
    one.q = one.q_pre = q;
    one.k = one.k_pre = k;
    one.v = v;
    one.phase = StepPhase::kDecode;
    return one;
}

/// The message of the kvsieve::Error that `f()` throws, or "no error" when it returns normally. Any other exception
/// propagates (the test then fails on it). F: a callable taking no argument.
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) { return e.what(); }
    return "no error";
}

/// Expects `f()` to throw kvsieve::Error whose message contains `needle` and is one line (no '\n'), the project's
/// rule for bad input; a call that returns, or another message, adds a non-fatal failure to the running test that
/// names `needle` and the message. F: a callable taking no argument.
template <class F>
void expect_error_contains(F&& f, const std::string& needle) {
    try {
        f();
        ADD_FAILURE() << "no error (expected '" << needle << "')";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "message is not one line: " << e.what();
    }
}

}  // namespace kvsieve::test
