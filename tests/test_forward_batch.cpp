// The batched forward step (LlamaModel::forward_batch): several sequences, each with its own cache and policy,
// share every weight matrix of a step; each sequence's logits must equal running it alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "attend/paged_attention.h"
#include "cache/kv_cache.h"
#include "kernels/matmul.h"
#include "model/llama_model.h"
#include "model/synth.h"
#include "policy/policy.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

std::unique_ptr<KVCache> make_cache(const LlamaModel& m, const std::string& spec) {
    return std::make_unique<KVCache>(m.config(), 128, parse_policy(spec),
                                     std::make_shared<KVPool>(m.config().head_dim, KVType::kF32));
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float m = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

int argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

/// Three sequences of different lengths and policies: one batched prefill of all three, then batched greedy
/// decode steps, against each sequence run alone with forward(). At step 3 a fourth sequence joins with a prompt
/// long enough for the SGEMM path (≥ kGemmMinTokens), so prefill and decode rows share those steps.
void check_batch_equals_alone(const LlamaModel& m, float tol) {
    const int V = m.config().n_vocab;
    const std::vector<std::string> specs = {"full", "h2o:budget=12", "streaming_llm:window=8,sinks=2", "full"};
    std::vector<std::vector<int32_t>> prompts = {
        {1, 5, 9, 13, 17, 21, 25},
        {1, 7, 3},
        {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
        {}};
    for (int i = 0; i < 40; ++i) prompts[3].push_back(1 + (7 * i) % 50);
    ASSERT_GE(static_cast<int64_t>(prompts[3].size()), kGemmMinTokens);
    for (auto& p : prompts)
        for (auto& id : p) id %= V;
    std::vector<std::unique_ptr<KVCache>> batched, alone;
    for (const auto& s : specs) {
        batched.push_back(make_cache(m, s));
        alone.push_back(make_cache(m, s));
    }
    std::vector<std::unique_ptr<PagedAttention>> views;  // the forward pass's view of each batched cache
    for (auto& c : batched) views.push_back(std::make_unique<PagedAttention>(*c));
    std::vector<std::vector<float>> lb(4), la(4);
    std::vector<LlamaModel::Segment> segs;
    for (int i = 0; i < 3; ++i) segs.push_back({&prompts[i], StepPhase::kPrefill, views[i].get(), &lb[i], i == 0});
    m.forward_batch(segs);
    for (int i = 0; i < 3; ++i) {
        m.forward(StepPhase::kPrefill, prompts[i], *alone[i], la[i], i == 0);
        batched[i]->end_prefill();
        alone[i]->end_prefill();
        ASSERT_EQ(lb[i].size(), (i == 0 ? prompts[0].size() : 1) * static_cast<size_t>(V));
        EXPECT_LE(max_abs_diff(lb[i], la[i]), tol) << specs[i];
    }
    int n_seq = 3;
    for (int step = 0; step < 12; ++step) {
        std::vector<std::vector<int32_t>> next(4);
        segs.clear();
        for (int i = 0; i < n_seq; ++i) {
            const std::vector<float> last(la[i].end() - V, la[i].end());
            next[i] = {argmax(last)};
            segs.push_back({&next[i], StepPhase::kDecode, views[i].get(), &lb[i], false});
        }
        const bool join = step == 3;
        if (join) segs.push_back({&prompts[3], StepPhase::kPrefill, views[3].get(), &lb[3], true});
        m.forward_batch(segs);
        if (join) {
            m.forward(StepPhase::kPrefill, prompts[3], *alone[3], la[3], true);
            EXPECT_LE(max_abs_diff(lb[3], la[3]), tol) << "the long prompt that joined";
            n_seq = 4;
        }
        for (int i = 0; i < n_seq - (join ? 1 : 0); ++i) {
            m.forward(StepPhase::kDecode, next[i], *alone[i], la[i]);
            EXPECT_LE(max_abs_diff(lb[i], la[i]), tol) << specs[i] << " step " << step;
            EXPECT_EQ(argmax(lb[i]), argmax(la[i])) << specs[i] << " step " << step;
            EXPECT_EQ(batched[i]->n_tokens(), alone[i]->n_tokens());
            EXPECT_EQ(batched[i]->stats().entries, alone[i]->stats().entries) << specs[i];
        }
    }
}

TEST(ForwardBatch, EqualsEachSequenceAloneF32) { check_batch_equals_alone(test::stories260k(), 1e-4f); }

TEST(ForwardBatch, EqualsEachSequenceAloneQuantized) {
    for (const char* f : {"tiny-qwen3-q4_k_m.gguf", "tiny-qwen3-q8_0.gguf", "tiny-llama-q2_k-pure.gguf"}) {
        SCOPED_TRACE(f);
        const LlamaModel m(test::model_path(f));
        check_batch_equals_alone(m, 0.0f);  // quantized weights: bit for bit
    }
}

TEST(ForwardBatch, QueriesWiderThanTheModelEqualEachSequenceAlone) {
    // Qwen3's shapes give the queries more width than the residual stream (Qwen3-0.6B: 16 heads of 128 = 2048
    // against D = 1024), so the attention output [N][Hq·d] is wider than the activations [N][D]; a step whose buffer
    // took [N][D] wrote past it (heap corruption on every Qwen3 model; the sanitizer build reports the overflow).
    // A 2-layer model of that kind: D 64, 4 query heads of 32 (Hq·d = 128), 2 KV heads.
    const SynthShape wide{"wide-queries", "qwen3", 2, 64, 4, 2, 32, 96, 300, 256, 1e6f, true};
    test::TempFile f(".gguf");
    write_synth_model(f.path(), wide, TensorType::F32, 7);
    const LlamaModel m(f.path());
    ASSERT_GT(m.config().n_head * m.config().head_dim, m.config().n_embd);
    check_batch_equals_alone(m, 1e-4f);
}

TEST(ForwardBatch, BadBatchIsOneErrorAndChangesNoCache) {
    const LlamaModel& m = test::stories260k();
    auto a = make_cache(m, "full"), b = make_cache(m, "full");
    std::vector<int32_t> ok = {1, 2, 3}, bad = {1, m.config().n_vocab}, empty;
    PagedAttention va(*a), vb(*b);
    const StepPhase P = StepPhase::kPrefill;
    std::vector<float> la, lb;
    EXPECT_THROW(m.forward_batch({}), Error);
    EXPECT_THROW(m.forward_batch({{&ok, P, &va, &la, false}, {&bad, P, &vb, &lb, false}}), Error);
    EXPECT_THROW(m.forward_batch({{&ok, P, &va, &la, false}, {&ok, P, &va, &lb, false}}), Error);
    EXPECT_THROW(m.forward_batch({{&ok, P, &va, &la, false}, {&empty, P, &vb, &lb, false}}), Error);
    EXPECT_EQ(a->n_tokens(), 0);
    EXPECT_EQ(b->n_tokens(), 0);
    EXPECT_EQ(a->pool().pages_in_use(), 0);
}

TEST(ForwardBatch, LongPrefillChunksTogetherEqualEachAloneBitForBit) {
    // Two chunks long enough for the SGEMM path in one step, with a decode-sized one.
    const LlamaModel m(test::model_path("tiny-qwen3-q4_k_m.gguf"));
    std::vector<int32_t> a, b, c = {1, 2, 3};
    for (int i = 0; i < 37; ++i) a.push_back(1 + (7 * i) % 50), b.push_back(2 + (5 * i) % 60);
    auto ca = make_cache(m, "full"), cb = make_cache(m, "full"), cc = make_cache(m, "full");
    auto da = make_cache(m, "full"), db = make_cache(m, "full"), dc = make_cache(m, "full");
    std::vector<float> la, lb, lc, ra, rb, rc;
    PagedAttention va(*ca), vb(*cb), vc(*cc);
    const StepPhase P = StepPhase::kPrefill;
    m.forward_batch({{&a, P, &va, &la, true}, {&c, P, &vc, &lc, false}, {&b, P, &vb, &lb, false}});
    m.forward(StepPhase::kPrefill, a, *da, ra, true);
    m.forward(StepPhase::kPrefill, b, *db, rb);
    m.forward(StepPhase::kPrefill, c, *dc, rc);
    EXPECT_EQ(max_abs_diff(la, ra), 0.0f);
    EXPECT_EQ(max_abs_diff(lb, rb), 0.0f);
    EXPECT_EQ(max_abs_diff(lc, rc), 0.0f);
}
}  // namespace
}  // namespace kvsieve
