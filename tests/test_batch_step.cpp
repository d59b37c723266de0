// The one batched step (session/batch_step.h) on the bundled stories260K model: each sequence's step in a batch does
// what the same step alone does (logits, cache, history), a failed forward aborts every step, and misuse is an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "session/batch_step.h"
#include "session/prefill_plan.h"
#include "session/session.h"
#include "text/tokenizer.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

const LlamaModel& model() { return test::stories260k(); }

std::unique_ptr<KVCache> make(const std::string& spec, int64_t n_ctx = 256) {
    return std::make_unique<KVCache>(model().config(), n_ctx, parse_policy(spec),
                                     std::make_shared<KVPool>(model().config().head_dim, KVType::kF32));
}

/// Positions of every entry the cache holds, head by head.
std::vector<std::vector<int32_t>> kept(const KVCache& c) {
    std::vector<std::vector<int32_t>> out;
    for (int l = 0; l < model().config().n_layer; ++l)
        for (int h = 0; h < model().config().n_head_kv; ++h) {
            std::vector<int32_t> got;
            for (Region r : kRegionsInOrder)
                for (int32_t p : c.head(l, h).region(r)->positions()) got.push_back(p);
            std::sort(got.begin(), got.end());
            out.push_back(got);
        }
    return out;
}

using test::expect_error_contains;

TEST(BatchStep, EachStepOfABatchIsTheSameStepAlone) {
    // Three sequences in one step: a whole prompt under SnapKV (its compression at the prompt's end), a decode token
    // and a question that only extends a compressed cache; each against Session::prefill / decode alone.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = test::story_prompt_ids();
    ASSERT_GT(ids.size(), 24u);
    const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 20), head(ids.begin(), ids.begin() + 12);
    const std::vector<int32_t> one{ids[12]}, question(ids.begin() + 12, ids.begin() + 16);

    auto a1 = make("snapkv:ratio=0.5"), a2 = make("full"), a3 = make("streaming_llm:ratio=0.5");
    Session s1(model(), *tok, *a1), s2(model(), *tok, *a2), s3(model(), *tok, *a3);
    std::vector<float> l1, l2, l3;
    s2.prefill(head, PrefillPlan{}, l2);
    s3.prefill(head, PrefillPlan{}, l3);

    auto b1 = make("snapkv:ratio=0.5"), b2 = make("full"), b3 = make("streaming_llm:ratio=0.5");
    Session t1(model(), *tok, *b1), t2(model(), *tok, *b2), t3(model(), *tok, *b3);
    std::vector<float> m1, m2, m3;
    t2.prefill(head, PrefillPlan{}, m2);
    t3.prefill(head, PrefillPlan{}, m3);

    BatchStep step;
    EXPECT_EQ(step.add(t1, prompt, Session::StepKind::kPrefillLast, m1), 0u);
    EXPECT_EQ(step.add(t2, one, Session::StepKind::kDecode, m2), 1u);
    EXPECT_EQ(step.add(t3, question, Session::StepKind::kExtend, m3), 2u);
    EXPECT_EQ(step.size(), 3u);
    EXPECT_EQ(step.decode_rows(), 1);
    EXPECT_EQ(step.prefill_rows(), 24);
    step.forward();
    step.end_all();

    s1.prefill(prompt, PrefillPlan{}, l1);
    s2.decode(one[0], l2);
    PrefillPlan extend;
    extend.compress = false;
    s3.prefill(question, extend, l3);

    for (auto [s, t, ls, lt] : {std::tuple{&s1, &t1, &l1, &m1}, {&s2, &t2, &l2, &m2}, {&s3, &t3, &l3, &m3}}) {
        ASSERT_EQ(ls->size(), lt->size());
        for (size_t v = 0; v < ls->size(); ++v) ASSERT_NEAR((*ls)[v], (*lt)[v], 1e-4f) << "vocabulary entry " << v;
        EXPECT_EQ(s->tokens(), t->tokens());
        EXPECT_EQ(kept(s->cache()), kept(t->cache()));
    }
    // SnapKV compressed at the prompt's end: it keeps about half of what lies beyond its window.
    EXPECT_LT(b1->stats().density, 0.9);

    // Reused: cleared, the buffers stay and the next step runs.
    step.clear();
    EXPECT_EQ(step.size(), 0u);
    const std::vector<int32_t> next{ids[13]};  // lives until the forward, as add() asks
    step.add(t2, next, Session::StepKind::kDecode, m2);
    step.forward();
    step.end(0);
    s2.decode(ids[13], l2);
    EXPECT_EQ(s2.tokens(), t2.tokens());
}

TEST(BatchStep, AFailedForwardAbortsEveryStep) {
    // An id outside the vocabulary fails the forward before any cache changes; every history is what its cache holds.
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = test::story_prompt_ids();
    auto a = make("full"), b = make("full");
    Session s(model(), *tok, *a), t(model(), *tok, *b);
    std::vector<float> la, lb;
    s.prefill({ids.begin(), ids.begin() + 8}, PrefillPlan{}, la);
    const std::vector<int32_t> good{ids[8]}, bad{model().config().n_vocab + 5};
    BatchStep step;
    step.add(s, good, Session::StepKind::kDecode, la);
    step.add(t, bad, Session::StepKind::kPrefillLast, lb);
    EXPECT_EQ(s.tokens().size(), 9u);  // begun: the token joined the history
    EXPECT_THROW(step.forward(), Error);
    EXPECT_EQ(step.size(), 0u);
    EXPECT_EQ(s.tokens(), std::vector<int32_t>(ids.begin(), ids.begin() + 8));
    EXPECT_EQ(s.n_tokens(), 8);
    EXPECT_TRUE(t.tokens().empty());
    // The sequences go on as if the step had not been tried.
    step.add(s, good, Session::StepKind::kDecode, la);
    step.forward();
    step.end_all();
    EXPECT_EQ(s.n_tokens(), 9);
}

TEST(BatchStep, MisuseIsAnError) {
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = test::story_prompt_ids();
    auto a = make("full", 8), b = make("full");
    Session s(model(), *tok, *a), t(model(), *tok, *b);
    std::vector<float> la, lb;
    const std::vector<int32_t> nine(ids.begin(), ids.begin() + 9), two(ids.begin(), ids.begin() + 2);
    BatchStep step;
    // A step the session refuses is not added, and the session is unchanged.
    expect_error_contains([&] { step.add(s, nine, Session::StepKind::kPrefillLast, la); }, "the context holds 8");
    EXPECT_EQ(step.size(), 0u);
    EXPECT_TRUE(s.tokens().empty());
    expect_error_contains([&] { step.add(s, two, Session::StepKind::kDecode, la); }, "a decode step is one token");
    step.add(s, two, Session::StepKind::kPrefillLast, la);
    expect_error_contains([&] { step.add(s, two, Session::StepKind::kExtend, lb); }, "one step per batch");
    expect_error_contains([&] { step.end(0); }, "has not run");
    // abort() gives back what add() took.
    step.abort();
    EXPECT_TRUE(s.tokens().empty());
    step.add(s, two, Session::StepKind::kPrefillLast, la);
    step.forward();
    expect_error_contains([&] { step.forward(); }, "runs once");
    expect_error_contains([&] { step.add(t, two, Session::StepKind::kPrefillLast, lb); }, "after its forward");
    step.end(0);
    expect_error_contains([&] { step.end(0); }, "has ended");
    expect_error_contains([&] { step.end(1); }, "step 1");
    EXPECT_EQ(s.tokens(), two);
}

}  // namespace
}  // namespace kvsieve
