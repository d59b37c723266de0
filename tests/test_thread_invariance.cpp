// Results independent of the thread count: a prefill and decode steps give bit-identical logits at 1, 2, 3 and 8
// threads, for every weight type, KV element type and compressing policy tried here, and the command line prints
// the same text at -t 1 and -t 2. Every reduction whose order could follow the split of work across threads (the
// flash-decoding spans and their merge, the matmuls, SGEMM) must split by problem size only.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "cli_runner.h"
#include "kernels/parallel.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "test_util.h"

namespace kvsieve {
namespace {

/// Restores the thread count the test program ran with when it goes out of scope.
struct ThreadCountGuard {
    int saved = num_threads();
    ~ThreadCountGuard() { set_num_threads(saved); }
};

/// A prompt of n pseudo-random token ids below the vocabulary size (BOS-free: the ids only need to be valid).
std::vector<int32_t> random_ids(int n, int vocab, uint32_t seed) {
    std::vector<int32_t> ids(n);
    uint32_t s = seed;
    for (auto& id : ids) {
        s = s * 1664525u + 1013904223u;
        id = static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(vocab));
    }
    return ids;
}

/// Every logit row a run produces, one after another: a long prefill chunk (the SGEMM path), a short chunk (the
/// multi-row GEMV path), the end of the prompt (compression), then decode steps (the paged flash-decoding path).
/// The prompt is long enough (620 tokens, 39 pages of 16 per KV head) that the former thread-dependent split would
/// have cut each head's pages into a different number of spans at 1, 2, 3 and 8 threads.
std::vector<float> run_at(const LlamaModel& m, const std::string& spec, KVType kv, int threads) {
    set_num_threads(threads);
    EXPECT_EQ(num_threads(), threads);
    const int V = m.config().n_vocab;
    KVCache cache(m.config(), 1024, parse_policy(spec), std::make_shared<KVPool>(m.config().head_dim, kv));
    std::vector<float> all, logits;
    m.forward(StepPhase::kPrefill, random_ids(600, V, 7), cache, logits);
    all.insert(all.end(), logits.begin(), logits.end());
    m.forward(StepPhase::kPrefill, random_ids(20, V, 11), cache, logits);
    all.insert(all.end(), logits.begin(), logits.end());
    cache.end_prefill();
    for (int32_t id : random_ids(8, V, 13)) {
        m.forward(StepPhase::kDecode, {id}, cache, logits);
        all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
}

/// The logits at 2, 3 and 8 threads equal those at 1 thread bit for bit.
void expect_thread_invariant(const LlamaModel& m, const std::string& spec, KVType kv) {
    ThreadCountGuard guard;
    const std::vector<float> one = run_at(m, spec, kv, 1);
    ASSERT_FALSE(one.empty());
    for (int t : {2, 3, 8}) {
        const std::vector<float> other = run_at(m, spec, kv, t);
        ASSERT_EQ(other.size(), one.size()) << spec << " at " << t << " threads";
        size_t first = one.size();
        for (size_t i = 0; i < one.size() && first == one.size(); ++i)
            if (std::memcmp(&one[i], &other[i], sizeof(float)) != 0) first = i;
        EXPECT_EQ(std::memcmp(one.data(), other.data(), one.size() * sizeof(float)), 0)
            << spec << " at " << t << " threads: logit " << first << " of " << one.size() << " is "
            << (first < one.size() ? other[first] : 0.0f) << ", at 1 thread "
            << (first < one.size() ? one[first] : 0.0f) << " (max |diff| " << test::max_abs_diff(one, other) << ")";
    }
}

const LlamaModel& load(const std::string& name) {
    static std::map<std::string, std::unique_ptr<LlamaModel>> models;
    auto& m = models[name];
    if (!m) m = std::make_unique<LlamaModel>(test::model_path(name));
    return *m;
}

TEST(ThreadInvariance, TinyLlamaF32) {
    expect_thread_invariant(load("tiny-llama-f32.gguf"), "full", KVType::kF32);
    expect_thread_invariant(load("tiny-llama-f32.gguf"), "h2o:ratio=0.5", KVType::kF32);
}

TEST(ThreadInvariance, TinyQwen3Q8_0) {
    expect_thread_invariant(load("tiny-qwen3-q8_0.gguf"), "full", KVType::kF16);
    expect_thread_invariant(load("tiny-qwen3-q8_0.gguf"), "snapkv:ratio=0.5", KVType::kF32);
}

TEST(ThreadInvariance, KQuants) {
    expect_thread_invariant(load("tiny-qwen3-q4_k_m.gguf"), "full", KVType::kF16);
    expect_thread_invariant(load("tiny-llama-q5_k_s-pure.gguf"), "snapkv:ratio=0.5", KVType::kF16);
}

TEST(ThreadInvariance, KvsieveTiny2k) {
    const LlamaModel& m = load("kvsieve-tiny-2k.gguf");
    for (const char* spec : {"full", "snapkv:ratio=0.5", "h2o:ratio=0.5", "quest:budget=64"})
        expect_thread_invariant(m, spec, KVType::kF16);
    expect_thread_invariant(m, "full", KVType::kBF16);
}

/// The command line at -t 1 and -t 2: the same greedy token ids from generate, and the same NLL report (its JSON,
/// with the NLL to 16 digits) from eval nll's plain protocol (a prompt, then one decode step per token).
TEST(ThreadInvariance, CliGenerateAndNllMatchAcrossThreadCounts) {
    const std::string model = test::model_path("kvsieve-tiny-2k.gguf");
    const std::string sentence =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ";
    test::TempFile prompt(".txt"), corpus(".txt");
    {
        std::ofstream p(prompt.path()), c(corpus.path());
        for (int i = 0; i < 120; ++i) (i < 30 ? p : c) << sentence;
    }
    auto read = [](const std::string& path) {
        std::ifstream f(path);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    for (const std::string policy : {"full", "snapkv:ratio=0.5"}) {
        const std::string gen =
            "generate -m " + model + " -f " + prompt.path() + " -n 24 --temp 0 --ids -q --policy " + policy;
        const auto g1 = test::run_cli(gen + " -t 1"), g2 = test::run_cli(gen + " -t 2");
        ASSERT_EQ(g1.status, 0) << g1.err;
        ASSERT_EQ(g2.status, 0) << g2.err;
        EXPECT_FALSE(g1.out.empty());
        EXPECT_EQ(g1.out, g2.out) << policy;
        std::string reports[2];
        for (int i = 0; i < 2; ++i) {
            test::TempFile dir(".nll");
            const auto r = test::run_cli("eval nll -m " + model + " --corpus " + corpus.path() +
                                         " --samples 2 --length 600 --protocol plain --prefix 200 -q --out " +
                                         dir.path() + " --policy " + policy + " -t " + std::to_string(i + 1));
            ASSERT_EQ(r.status, 0) << r.err;
            reports[i] = r.out + read(dir.path() + "/nll_metrics.json");
            std::filesystem::remove_all(dir.path());
        }
        EXPECT_NE(reports[0].find("\"nll\""), std::string::npos) << reports[0];
        EXPECT_EQ(reports[0], reports[1]) << policy;
    }
}

}  // namespace
}  // namespace kvsieve
