// A decode step allocates nothing on the heap (docs/architecture.md, "Decode reuses its buffers"): the model's
// activations, the attention plan and its partial softmax states, the scorers' inputs and the compression rule's
// candidates live in buffers that are sized on first use and grow only with the context. Counted with the test
// program's replacement operator new (tests/counting_allocator.h) over 64 decode steps of kvsieve-tiny-2k under
// each kind of policy (a read-time selection and an admission stacked on an eviction included), on binary16 and Q8_0 pages; a step that takes a new page from the pool may allocate.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "counting_allocator.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "session/session.h"
#include "test_util.h"
#include "text/tokenizer.h"

namespace kvsieve {
namespace {

const LlamaModel& tiny2k() {
    static const LlamaModel m(test::model_path("kvsieve-tiny-2k.gguf"));
    return m;
}

struct Case {
    const char* name;
    std::string spec;
    /// Prompt tokens, and decode steps before counting: enough for the buffers to reach the size they keep. A policy
    /// whose budget fills slowly (an admission in front of a budget) gets a prompt that fills it and a longer warm-up,
    /// so that what is counted is the steady state, not growth.
    int prompt = 100, warmup = 4;
};

std::vector<Case> cases() {
    return {
        {"full", "full"},
        {"snapkv", "snapkv:ratio=0.5"},
        {"h2o", "h2o:budget=64"},
        {"kvpop", "kvpop:model=" + test::model_path("kvpop/tiny2k-mlstm") + ",capacity=96,window=32,sinks=4"},
        {"kvzap", "kvzap:model=" + test::model_path("kvzap/kvsieve-tiny-2k-mlp") + ",tau=-4,window=32"},
        {"wgkv", "wgkv:model=" + test::model_path("wgkv/tiny2k-lambda0.08") + ",window=16"},
        {"adakv", "adakv_expected_attention_e2:budget=64"},
        {"quest", "full:sinks=4+quest:read_budget=64"},
        {"kvzap>kvpop",
         "kvzap:model=" + test::model_path("kvzap/kvsieve-tiny-2k-mlp") +
             ",tau=-4>kvpop:model=" + test::model_path("kvpop/tiny2k-mlstm") + ",capacity=96,window=32,sinks=4",
         300, 40},
    };
}

/// What 64 decode steps allocated: the steps checked (no page taken from the pool) and their allocations.
struct Counts {
    int checked = 0;
    int64_t allocations = 0;
    std::string where;  // the first steps that allocated
};

Counts count_decode_allocations(const Case& k, KVType type) {
    const LlamaModel& m = tiny2k();
    const auto tok = Tokenizer::from_gguf(m.file());
    auto pool = std::make_shared<KVPool>(m.config().head_dim, type);
    KVCache cache(m.config(), 512, parse_policy(k.spec), pool);
    Session s(m, *tok, cache);
    const int32_t V = m.config().n_vocab;
    std::vector<int32_t> prompt(k.prompt);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(1 + (i * 37) % (V - 1));
    std::vector<float> logits;
    s.prefill(prompt, PrefillPlan{}, logits);
    auto token = [V](int i) { return static_cast<int32_t>(1 + (i * 101 + 7) % (V - 1)); };
    for (int i = 0; i < k.warmup; ++i) s.decode(token(i), logits);  // warm-up: buffers sized on first use
    Counts c;
    for (int i = 0; i < 64; ++i) {
        const uint64_t bytes = pool->bytes_in_use();
        int64_t n = 0;
        {
            test::AllocationCount count;
            s.decode(token(k.warmup + i), logits);
            n = count.count();
        }
        if (pool->bytes_in_use() > bytes) continue;  // a page was taken: growth may allocate
        ++c.checked;
        c.allocations += n;
        if (n > 0 && c.where.size() < 200) c.where += " step " + std::to_string(i) + ": " + std::to_string(n) + ";";
    }
    return c;
}

class DecodeAllocations : public ::testing::TestWithParam<KVType> {};

TEST_P(DecodeAllocations, NoneInAStepThatTakesNoPage) {
    if (!test::allocations_countable())
        GTEST_SKIP() << "AddressSanitizer build: the allocation counter needs the test's own operator new";
    for (const Case& k : cases()) {
        SCOPED_TRACE(k.name);
        const Counts c = count_decode_allocations(k, GetParam());
        std::printf("%s %s: %lld allocations in %d steps without a new page\n", kv_type_name(GetParam()).c_str(),
                    k.name, static_cast<long long>(c.allocations), c.checked);
        EXPECT_GE(c.checked, 32) << "most steps take no new page";
        EXPECT_EQ(c.allocations, 0) << c.where;
    }
}

INSTANTIATE_TEST_SUITE_P(PageTypes, DecodeAllocations, ::testing::Values(KVType::kF16, KVType::kQ8_0),
                         [](const auto& info) { return kv_type_name(info.param) == "f16" ? "F16" : "Q8_0"; });

}  // namespace
}  // namespace kvsieve
