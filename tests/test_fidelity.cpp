// Decode-heavy fidelity (eval/fidelity.h) on stories260K: the teacher is the full cache's greedy generation; the greedy
// prefix under teacher forcing is the free-running agreement; the KL over every token is the full KL; a rolling
// cache's memory stays flat; the report is written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "eval/fidelity.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "session/session.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {
namespace {

std::string corpus() {
    std::string t;
    for (int i = 0; i < 12; ++i)
        t += "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
             "friend Ben. One day, they saw a big red ball under a tree. ";
    return t;
}

/// Free-running greedy generation of n tokens after `prompt` under `spec`, with its logits at each step.
std::vector<int32_t> greedy(const std::string& spec, const std::vector<int32_t>& prompt, int64_t n,
                            std::vector<std::vector<float>>* all = nullptr) {
    const LlamaModel& m = test::stories260k();
    const auto tok = Tokenizer::from_gguf(m.file());
    KVCache cache(m.config(), 256, parse_policy(spec), std::make_shared<KVPool>(m.config().head_dim, KVType::kF16));
    Session s(m, *tok, cache);
    std::vector<float> logits;
    s.prefill(prompt, PrefillPlan{}, logits);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < n; ++i) {
        if (all) all->push_back(logits);
        out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
        if (i + 1 < n) s.decode(out.back(), logits);
    }
    return out;
}

TEST(EvalFidelity, TeacherForcedMetricsEqualFreeRunningAndFullKl) {
    const LlamaModel& m = test::stories260k();
    const auto tok = Tokenizer::from_gguf(m.file());
    FidelityOptions o;
    o.prompt_tokens = 48;
    o.gen_tokens = 64;
    o.samples = 1;
    o.top = m.config().n_vocab;  // every token: the bucketed KL is the full KL
    o.memory_every = 8;
    o.progress = false;
    const auto teachers = fidelity_teachers(m, *tok, corpus(), o);
    ASSERT_EQ(teachers.size(), 1u);
    ASSERT_EQ(static_cast<int64_t>(teachers[0].prompt.size()), 48);
    EXPECT_EQ(teachers[0].tokens, greedy("full", teachers[0].prompt, 64));

    const FidelityResult full = evaluate_fidelity(m, *tok, teachers, "full", o);
    EXPECT_EQ(full.mean_prefix, 64);
    EXPECT_EQ(full.mean_accuracy, 1.0);
    EXPECT_NEAR(full.mean_kl, 0.0, 1e-6);  // the teacher's probabilities are stored as float

    const std::string spec = "streaming_llm:window=12,sinks=2";
    const FidelityResult r = evaluate_fidelity(m, *tok, teachers, spec, o);
    // The greedy prefix is where the policy's own free-running greedy generation first leaves the teacher's.
    const auto free_run = greedy(spec, teachers[0].prompt, 64);
    int64_t agree = 0;
    while (agree < 64 && free_run[agree] == teachers[0].tokens[agree]) ++agree;
    EXPECT_EQ(r.prefix[0], agree);
    EXPECT_LT(r.mean_accuracy, 1.0);
    // KL(teacher ‖ policy) at each step from the two models' logits under teacher forcing, computed here directly.
    std::vector<std::vector<float>> tl, pl;
    greedy("full", teachers[0].prompt, 64, &tl);
    {
        KVCache cache(m.config(), 256, parse_policy(spec), std::make_shared<KVPool>(m.config().head_dim, KVType::kF16));
        Session s(m, *tok, cache);
        std::vector<float> logits;
        s.prefill(teachers[0].prompt, PrefillPlan{}, logits);
        for (int64_t i = 0; i < 64; ++i) {
            pl.push_back(logits);
            if (i + 1 < 64) s.decode(teachers[0].tokens[i], logits);
        }
    }
    auto logsm = [](const std::vector<float>& x) {
        double mx = *std::max_element(x.begin(), x.end()), z = 0;
        for (float v : x) z += std::exp(v - mx);
        std::vector<double> o(x.size());
        for (size_t i = 0; i < x.size(); ++i) o[i] = x[i] - mx - std::log(z);
        return o;
    };
    double kl = 0;
    for (int64_t i = 0; i < 64; ++i) {
        const auto a = logsm(tl[i]), b = logsm(pl[i]);
        for (size_t j = 0; j < a.size(); ++j) kl += std::exp(a[j]) * (a[j] - b[j]);
    }
    EXPECT_NEAR(r.mean_kl, kl / 64, 1e-4);
    EXPECT_GT(r.mean_kl, 0.0);
    // A rolling cache of 2 + 12 entries per head: flat memory over the generation, below the full cache's.
    ASSERT_GE(r.memory.size(), 8u);
    for (const auto& [t, b] : r.memory) EXPECT_EQ(b, r.memory[0].second) << "at " << t;
    EXPECT_GT(full.memory.back().second, 3 * r.memory.back().second);
    EXPECT_GT(full.memory.back().second, full.memory.front().second);
    EXPECT_GT(r.compression, 0.8);

    test::TempFile dir(".fidelity");
    write_fidelity_report(dir.path(), "stories260K", o, {full, r});
    const auto j = nlohmann::json::parse(std::ifstream(dir.path() + "/fidelity.json"));
    EXPECT_EQ(j["results"].size(), 2u);
    EXPECT_EQ(j["results"][1]["policy"], spec);
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/fidelity.md"));
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/fidelity_memory.gp"));
    std::filesystem::remove_all(dir.path());
}

TEST(EvalFidelity, ASampledTeacherIsSeededAndComparedByItsMostLikelyToken) {
    const LlamaModel& m = test::stories260k();
    const auto tok = Tokenizer::from_gguf(m.file());
    FidelityOptions o;
    o.prompt_tokens = 32;
    o.gen_tokens = 48;
    o.samples = 2;
    o.temp = 1.0;
    o.seed = 9;
    o.progress = false;
    const auto a = fidelity_teachers(m, *tok, corpus(), o), b = fidelity_teachers(m, *tok, corpus(), o);
    EXPECT_EQ(a[0].tokens, b[0].tokens);  // the seed fixes the sample
    EXPECT_NE(a[0].tokens, a[0].best);    // sampled, not greedy
    EXPECT_NE(a[0].tokens, a[1].tokens);
    o.seed = 10;
    EXPECT_NE(fidelity_teachers(m, *tok, corpus(), o)[0].tokens, a[0].tokens);
    const FidelityResult full = evaluate_fidelity(m, *tok, a, "full", o);
    EXPECT_EQ(full.mean_accuracy, 1.0);
    EXPECT_EQ(full.mean_prefix, 48);
    EXPECT_NEAR(full.mean_kl, 0.0, 1e-6);
    const FidelityResult r = evaluate_fidelity(m, *tok, a, "streaming_llm:window=8,sinks=2", o);
    EXPECT_LT(r.mean_accuracy, 1.0);
    EXPECT_GT(r.mean_kl, 0.0);
}

TEST(EvalFidelity, BadInputIsOneClearError) {
    const LlamaModel& m = test::stories260k();
    const auto tok = Tokenizer::from_gguf(m.file());
    FidelityOptions o;
    o.progress = false;
    o.prompt_tokens = 400;
    o.gen_tokens = 400;  // beyond the 512-token context
    EXPECT_THROW(fidelity_teachers(m, *tok, corpus(), o), Error);
    o.gen_tokens = 8;
    o.samples = 50;  // the corpus is too short
    EXPECT_THROW(fidelity_teachers(m, *tok, corpus(), o), Error);
    o.samples = 1;
    o.prompt_tokens = 16;
    const auto t = fidelity_teachers(m, *tok, corpus(), o);
    EXPECT_THROW(evaluate_fidelity(m, *tok, t, "nosuchpolicy", o), Error);
    o.temp = -1;
    EXPECT_THROW(fidelity_teachers(m, *tok, corpus(), o), Error);
}

TEST(EvalFidelity, AReportReadsBackAndOnlyWithItsOwnSettings) {
    const LlamaModel& m = test::stories260k();
    const auto tok = Tokenizer::from_gguf(m.file());
    FidelityOptions o;
    o.progress = false;
    o.prompt_tokens = 24;
    o.gen_tokens = 20;
    o.samples = 2;
    o.memory_every = 8;
    o.corpus = "stories.txt";
    const auto t = fidelity_teachers(m, *tok, corpus(), o);
    std::vector<FidelityResult> rs = {evaluate_fidelity(m, *tok, t, "full", o),
                                      evaluate_fidelity(m, *tok, t, "streaming_llm:window=8,sinks=2", o)};
    rs[0].policy = "full";
    rs[1].policy = "streaming_llm:window=8,sinks=2";
    const std::string dir = (std::filesystem::temp_directory_path() / "kvsieve_fidelity_resume").string();
    std::filesystem::remove_all(dir);
    EXPECT_TRUE(read_fidelity_results(dir, "m", o).empty());  // nothing there yet
    write_fidelity_report(dir, "m", o, rs);
    const auto back = read_fidelity_results(dir, "m", o);
    ASSERT_EQ(back.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(back[i].policy, rs[i].policy);
        EXPECT_EQ(back[i].prefix, rs[i].prefix);
        EXPECT_EQ(back[i].kl, rs[i].kl);
        EXPECT_EQ(back[i].accuracy_by_step, rs[i].accuracy_by_step);
        EXPECT_EQ(back[i].memory, rs[i].memory);
        EXPECT_EQ(back[i].kv_bytes_peak, rs[i].kv_bytes_peak);
        EXPECT_DOUBLE_EQ(back[i].mean_kl, rs[i].mean_kl);
    }
    EXPECT_GT(back[1].mean_kl, 0.0);
    // Another protocol or model never mixes into the table.
    FidelityOptions other = o;
    other.gen_tokens = 21;
    EXPECT_THROW(read_fidelity_results(dir, "m", other), Error);
    other = o;
    other.temp = 0.7;
    EXPECT_THROW(read_fidelity_results(dir, "m", other), Error);
    other = o;
    other.corpus = "wiki.txt";
    EXPECT_THROW(read_fidelity_results(dir, "m", other), Error);
    EXPECT_THROW(read_fidelity_results(dir, "another model", o), Error);
    // A damaged file is one clear error, not a crash.
    std::ofstream(dir + "/fidelity.json") << "{\"results\": [{\"policy\": \"full\"}]}";
    EXPECT_THROW(read_fidelity_results(dir, "m", o), Error);
    std::ofstream(dir + "/fidelity.json") << "{not json";
    EXPECT_THROW(read_fidelity_results(dir, "m", o), Error);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvsieve
