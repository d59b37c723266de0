// eval/kept_positions.h: the positions and scores each head keeps after a prefill, checked against kvpress's own
// decisions on the tiny Qwen3 model (tests/data/kvpress/*.json, tools/make_kvpress_fixtures.py) and, with the
// question inside the compressed prompt (eval ruler --query-aware), on SmolLM2
// (tests/data/kvpress/smollm2_snapkv_query_aware.json, tools/make_kvpress_query_aware_fixture.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "eval/kept_positions.h"
#include "eval/ruler_prompt.h"
#include "eval/tasks.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "session/session.h"
#include "session/shared_prefill.h"
#include "test_util.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve {
namespace {

TEST(KeptPositions, EveryHeadsKeptSetIsKvpresssOnItsFixture) {
    const LlamaModel m(test::model_path("tiny-qwen3-f32.gguf"));
    for (const char* press : {"snapkv", "tova", "knorm", "streaming_llm"}) {
        SCOPED_TRACE(press);
        std::ifstream in(test::data_dir() + "/kvpress/" + press + ".json");
        ASSERT_TRUE(in) << "fixture missing";
        const auto j = nlohmann::json::parse(in);
        const auto prompt = j.at("prompt_tokens").get<std::vector<int32_t>>();
        const auto heads = kept_after_prefill(m, prompt, std::string(press) + ":ratio=0.5", "f32", "auto");
        ASSERT_EQ(heads.size(), static_cast<size_t>(m.config().n_layer * m.config().n_head_kv));
        for (const auto& layer : j.at("layers")) {
            const int l = layer.at("layer").get<int>();
            const auto want = layer.at("kept").get<std::vector<std::vector<int32_t>>>();
            for (size_t h = 0; h < want.size(); ++h) {
                const HeadKept& got = heads[static_cast<size_t>(l * m.config().n_head_kv) + h];
                EXPECT_EQ(got.layer, l);
                EXPECT_EQ(got.head, static_cast<int>(h));
                EXPECT_EQ(got.positions, want[h]) << "layer " << l << " head " << h;
                EXPECT_EQ(got.scores.size(), got.positions.size());
            }
        }
    }
    // ratio=0 keeps every position of the prompt, in order, each with its score.
    const std::vector<int32_t> prompt = {1, 5, 9, 13, 17, 21, 25, 29};
    for (const auto& h : kept_after_prefill(m, prompt, "snapkv:ratio=0", "f32", "auto")) {
        ASSERT_EQ(h.positions.size(), prompt.size());
        for (size_t i = 0; i < prompt.size(); ++i) EXPECT_EQ(h.positions[i], static_cast<int32_t>(i));
    }
}

// On a Q8_0 cache every score is computed from the stored entries. KNorm's score is the negated L2 norm of the stored
// key; Q8_0 rounds each element of a 32-element block to a multiple of d = max|x|/127 (d itself kept in binary16),
// an error of at most d/2 + 127·d·2⁻¹¹ < max|x|/226 per element, so over a head of 32 elements the norm moves by at
// most √32/226 < 2.6% of the key's own norm (reverse triangle inequality; max|x| ≤ ‖k‖). ratio=0 keeps every entry.
TEST(KeptPositions, QuantizedCacheScoresTheStoredEntries) {
    const LlamaModel m(test::model_path("kvsieve-tiny-2k.gguf"));
    ASSERT_EQ(m.config().head_dim % 32, 0);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 96; ++i) prompt.push_back(3 + (i * 37) % 1900);
    const auto f32 = kept_after_prefill(m, prompt, "knorm:ratio=0", "f32", "auto");
    const auto q8 = kept_after_prefill(m, prompt, "knorm:ratio=0", "q8_0", "auto");
    ASSERT_EQ(f32.size(), q8.size());
    int moved = 0;
    for (size_t i = 0; i < f32.size(); ++i) {
        ASSERT_EQ(q8[i].positions, f32[i].positions);
        ASSERT_EQ(q8[i].positions.size(), prompt.size());
        for (size_t j = 0; j < f32[i].scores.size(); ++j) {
            const float a = f32[i].scores[j], b = q8[i].scores[j];
            EXPECT_LE(std::fabs(a - b), 0.026f * std::fabs(a)) << "head " << i << " position " << j;
            moved += a != b;
        }
    }
    EXPECT_GT(moved, 0) << "the Q8_0 cache's scores equal the F32 cache's: the stored entries were not read";
}

/// Every head's positions of a cache, layer-major, ascending.
std::vector<std::vector<int32_t>> cached_positions(const KVCache& cache, const ModelConfig& c) {
    std::vector<std::vector<int32_t>> out;
    for (int l = 0; l < c.n_layer; ++l)
        for (int h = 0; h < c.n_head_kv; ++h) {
            std::vector<int32_t> p;
            const HeadCache& hc = cache.head(l, h);
            for (Region r : kRegionsInOrder)
                for (int64_t i = 0; i < hc.region(r)->size(); ++i)
                    p.push_back(hc.region(r)->positions()[static_cast<size_t>(i)]);
            std::sort(p.begin(), p.end());
            out.push_back(std::move(p));
        }
    return out;
}

/// Positions set in a fixture's hexadecimal bit mask (position i is bit i % 4 of hex digit i / 4).
std::vector<int32_t> positions_of_hex_mask(const std::string& hex) {
    std::vector<int32_t> p;
    for (size_t d = 0; d < hex.size(); ++d) {
        const int v = std::stoi(hex.substr(d, 1), nullptr, 16);
        for (int b = 0; b < 4; ++b)
            if (v & (1 << b)) p.push_back(static_cast<int32_t>(4 * d + b));
    }
    return p;
}

// The query-aware protocol on the real model: the whole prompt (context, question, end of the chat turn, answer
// prefix) is prefilled and then compressed, so SnapKV's observation window is the question's end. kvsieve keeps
// what kvpress 0.5.5 keeps on every head (a tie at the budget's edge, Q4_1 kernels against transformers' float32,
// may swap one member on a head), both keep the observation window in every head, the next position after the
// compression is the prompt's length, and the greedy answer decoded from the compressed cache is kvpress's own:
// SnapKV keeps the needle's digits out of most heads of the first layers (its averaged window attention ranks them
// last there), and the model, in kvsieve's hands and in kvpress's, answers with a run of repeated digits.
TEST(SmolLM2, SnapKVQueryAwareKeptMatchesKvpress) {
    const std::string path = std::string(KVSIEVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run `bash scripts/get-model.sh`";
    const auto fx = nlohmann::json::parse(
        read_whole_file(test::data_dir() + "/kvpress/smollm2_snapkv_query_aware.json", "kvpress query-aware fixture"));
    const LlamaModel m(path);
    const auto tok = Tokenizer::from_gguf(m.file());
    // The fixture's prompt is still the one eval ruler --query-aware builds for its example.
    const TaskExample ex = make_task_example(fx["task"].get<std::string>(), fx["length"].get<int64_t>(), *tok, "",
                                             fx["seed"].get<uint64_t>());
    const RulerPromptIds ids =
        ruler_prompt_ids(*tok, ex, RulerFormat::kChat, chat_template_for_model(m.file(), tok->vocab(), ""));
    ASSERT_EQ(ids.context, fx["context_ids"].get<std::vector<int32_t>>());
    ASSERT_EQ(ids.question, fx["question_ids"].get<std::vector<int32_t>>());
    std::vector<int32_t> prompt = ids.context;
    prompt.insert(prompt.end(), ids.question.begin(), ids.question.end());
    const auto n = static_cast<int32_t>(prompt.size());
    const double ratio = fx["ratio"].get<double>();
    const std::string spec = "snapkv:ratio=" + std::to_string(ratio);

    // One prefill through the session, as eval ruler --query-aware and eval kept --query-aware run it.
    auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF32);
    KVCache cache(m.config(), 2 * static_cast<int64_t>(n), parse_policy(spec), pool);
    Session s(m, *tok, cache);
    std::vector<float> logits;
    s.prefill(prompt, PrefillPlan{}, logits);
    EXPECT_EQ(cache.n_tokens(), n) << "the next token's position after the compression";
    EXPECT_LT(cache.stats().density, 1.0 - ratio + 0.01);
    const auto heads = cached_positions(cache, m.config());
    const auto want = fx["kept_hex"].get<std::vector<std::vector<std::string>>>();
    ASSERT_EQ(want.size(), static_cast<size_t>(m.config().n_layer));
    ASSERT_EQ(heads.size(), static_cast<size_t>(m.config().n_layer * m.config().n_head_kv));
    int differ = 0;
    double jaccard = 0;
    for (size_t i = 0; i < heads.size(); ++i) {
        const auto& ours = heads[i];
        const int l = static_cast<int>(i) / m.config().n_head_kv, h = static_cast<int>(i) % m.config().n_head_kv;
        const auto theirs = positions_of_hex_mask(want[l][h]);
        std::vector<int32_t> both;
        std::set_intersection(ours.begin(), ours.end(), theirs.begin(), theirs.end(), std::back_inserter(both));
        EXPECT_EQ(ours.size(), theirs.size()) << "layer " << l << " head " << h;
        differ += ours != theirs;
        jaccard += static_cast<double>(both.size()) / static_cast<double>(ours.size() + theirs.size() - both.size());
        // SnapKV's observation window (64, its default) is kept whole, by kvpress too.
        for (int32_t p = n - 64; p < n; ++p) {
            EXPECT_TRUE(std::binary_search(ours.begin(), ours.end(), p))
                << "layer " << l << " head " << h << " lost window position " << p;
            EXPECT_TRUE(std::binary_search(theirs.begin(), theirs.end(), p));
        }
    }
    EXPECT_LE(differ, 2) << "heads whose kept set differs from kvpress's";
    EXPECT_GE(jaccard / static_cast<double>(heads.size()), 0.995);

    // The answer from the compressed cache, greedy, as eval ruler --query-aware decodes it.
    const auto kvpress_answer = fx["kvpress_answer_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> answer;
    for (size_t t = 0; t < kvpress_answer.size(); ++t) {
        const int32_t next = argmax(logits.data(), m.config().n_vocab);
        if (tok->is_eog(next)) break;
        answer.push_back(next);
        s.decode(next, logits);
    }
    EXPECT_EQ(answer, kvpress_answer) << "kvsieve: " << tok->decode(answer)
                                      << "\nkvpress: " << fx["kvpress_answer"].get<std::string>();
    EXPECT_EQ(tok->decode(answer).find(fx["answers"][0].get<std::string>()), std::string::npos);
}

// The query-aware path of eval ruler for every scored policy it runs with the question inside the prompt: the
// prompt's prefill shared by all the cells (prefill_shared, as eval ruler feeds them) compresses each to the very
// entries one sequence's prefill keeps (kept_after_prefill: Session::prefill alone, the path the kvpress cross-check
// compares), the next token's position is the prompt's length, and the entries each method protects at the prompt's
// end (SnapKV's observation window of 64, TOVA's last key) are still there.
TEST(KeptPositions, QueryAwarePrefillKeepsWhatOnePrefillKeeps) {
    const LlamaModel m(test::model_path("kvsieve-tiny-2k.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    std::vector<int32_t> prompt;
    for (int i = 0; i < 300; ++i) prompt.push_back(3 + (i * 37) % 1900);
    const auto n = static_cast<int32_t>(prompt.size());
    const std::vector<std::string> specs = {"snapkv:ratio=0.75", "tova:ratio=0.75", "h2o:ratio=0.75",
                                            "expected_attention:ratio=0.75", "kvzip:ratio=0.75"};
    auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF32);
    std::vector<std::unique_ptr<KVCache>> shared_caches;
    std::vector<std::unique_ptr<Session>> shared;
    std::vector<Session*> shared_ptrs;
    for (const auto& spec : specs) {
        shared_caches.push_back(std::make_unique<KVCache>(m.config(), 2 * n + 64, parse_policy(spec), pool));
        shared.push_back(std::make_unique<Session>(m, *tok, *shared_caches.back()));
        shared_ptrs.push_back(shared.back().get());
    }
    std::vector<float> logits;
    prefill_shared(shared_ptrs, prompt, logits);
    for (size_t i = 0; i < specs.size(); ++i) {
        SCOPED_TRACE(specs[i]);
        std::vector<std::vector<int32_t>> want;
        for (const HeadKept& h : kept_after_prefill(m, prompt, specs[i], "f32", "auto")) want.push_back(h.positions);
        const KVCache& c = *shared_caches[i];
        EXPECT_EQ(c.n_tokens(), n);
        const auto got = cached_positions(c, m.config());
        ASSERT_EQ(got.size(), want.size());
        for (size_t h = 0; h < got.size(); ++h) {
            EXPECT_EQ(got[h], want[h]) << "head " << h;
            // kvpress's per-head budget int(n (1 - 0.75)); KVzip's budget is over all heads at once.
            if (!specs[i].starts_with("kvzip")) EXPECT_EQ(got[h].size(), static_cast<size_t>(n / 4)) << "head " << h;
            const int32_t protect = specs[i].starts_with("snapkv") ? 64 : specs[i].starts_with("tova") ? 1 : 0;
            for (int32_t p = n - protect; p < n; ++p)
                EXPECT_TRUE(std::binary_search(got[h].begin(), got[h].end(), p)) << "head " << h << " lost " << p;
        }
    }
}

TEST(KeptPositions, BadInputIsReported) {
    const LlamaModel m(test::model_path("tiny-qwen3-f32.gguf"));
    EXPECT_THROW(kept_after_prefill(m, {}, "snapkv:ratio=0.5", "f32", "auto"), Error);
    EXPECT_THROW(kept_after_prefill(m, {1, 2, 3}, "nosuchpolicy", "f32", "auto"), Error);
    EXPECT_THROW(kept_after_prefill(m, {1, 2, 3}, "snapkv:ratio=0.5", "f8", "auto"), Error);
    EXPECT_THROW(kept_after_prefill(m, {1, 2, 3}, "snapkv:ratio=0.5", "f32", "sideways"), Error);
}

}  // namespace
}  // namespace kvsieve
