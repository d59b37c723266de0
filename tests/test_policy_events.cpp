// The policy events (policy/scorer.h): per-sequence scorer state, on_write before attention, on_window_exit with
// a rewritten score, effective_score at eviction, the selection-based top-k, and a policy's after-prefill step
// through the session's ModelAccess. On the bundled stories260K model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <map>
#include <random>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "counting_allocator.h"
#include "policy/policy.h"
#include "policy/position_scores.h"
#include "session/model_access.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "test_util.h"

namespace kvsieve {
namespace {

const LlamaModel& model() { return test::stories260k(); }

std::vector<int32_t> positions(const PageStore& ps) {
    std::vector<int32_t> p = ps.positions();
    std::sort(p.begin(), p.end());
    return p;
}

/// What one sequence saw: every on_write (layer, T, pos0) and on_window_exit (layer, head, pos, now).
struct Log : ScorerState {
    std::vector<std::array<int64_t, 3>> writes;
    std::vector<std::array<int64_t, 4>> exits;
};

/// Scores each entry by its position at write; at window exit admits even positions with a new score of 100 and
/// odd ones with −100 (a delayed readout that overrides the write-time score).
class EventScorer : public EntryScorer {
public:
    std::string name() const override { return "events"; }
    std::unique_ptr<ScorerState> new_state(const ModelConfig&) const override { return std::make_unique<Log>(); }
    void on_write(const StepEvent& ev, float* scores) const override {
        const LayerInputs& e = ev.step;
        EXPECT_TRUE(ev.heads.empty());  // a per-entry scorer is given no entries to rescore
        static_cast<Log*>(ev.state)->writes.push_back({e.layer, e.T, e.pos0});
        for (int64_t t = 0; t < e.T; ++t)
            for (int h = 0; h < e.n_head_kv; ++h) scores[t * e.n_head_kv + h] = static_cast<float>(e.pos0 + t);
    }
    float on_window_exit(const WindowExitEvent& e) const override {
        EXPECT_NE(e.read, nullptr);
        if (e.read) {  // the leaving entry's key and value, as the window holds them
            std::vector<float> k(e.head_dim), v(e.head_dim);
            (*e.read)(k.data(), v.data());
            EXPECT_TRUE(std::any_of(k.begin(), k.end(), [](float x) { return x != 0; }));
        }
        EXPECT_EQ(e.score, static_cast<float>(e.pos));  // the write-time score
        static_cast<Log*>(e.state)->exits.push_back({e.layer, e.head, e.pos, e.now});
        return e.pos % 2 == 0 ? 100.0f : -100.0f;
    }
};

Policy window_exit_policy(int window) {
    Policy p;
    p.name = "events";
    p.window = window;
    p.scorer = std::make_shared<EventScorer>();
    p.admission.kind = Rule::Kind::kThreshold;
    p.admission.tau = 0;
    p.timing = Timing::kAtWindowExit;
    return p;
}

TEST(PositionScores, AgreesWithAnOrderedMapUnderWindowAndRandomUse) {
    // The reference is std::map; the operations are those of a window (newer positions set, the oldest taken) mixed
    // with out-of-order sets, replacements, takes in the middle and takes of absent positions.
    PositionScores ps;
    std::map<int32_t, float> ref;
    std::mt19937 rng(7);
    int32_t next = 0;
    for (int i = 0; i < 20000; ++i) {
        const int op = static_cast<int>(rng() % 10);
        const float x = static_cast<float>(rng() % 1000) / 8.0f;
        if (op < 4) {  // a newer position
            ps.set(next, x);
            ref[next++] = x;
        } else if (op < 7 && !ref.empty()) {  // the oldest leaves
            float got = -1;
            ASSERT_TRUE(ps.take(ref.begin()->first, got));
            EXPECT_EQ(got, ref.begin()->second);
            ref.erase(ref.begin());
        } else if (op == 7) {  // any position up to the newest: a replacement or an insertion in the middle
            const int32_t p = static_cast<int32_t>(rng() % (next + 1));
            ps.set(p, x);
            ref[p] = x;
            next = std::max(next, p + 1);
        } else {  // a take anywhere, present or not
            const int32_t p = static_cast<int32_t>(rng() % (next + 2));
            float got = -7;
            const bool had = ref.count(p) > 0;
            ASSERT_EQ(ps.take(p, got), had) << p;
            if (had) {
                EXPECT_EQ(got, ref[p]);
                ref.erase(p);
            } else {
                EXPECT_EQ(got, -7);
            }
        }
        ASSERT_EQ(ps.size(), ref.size());
    }
    // The record lists the live scores sorted by position, and reads back into the same list.
    BinaryWriter w;
    ps.save(w);
    BinaryReader r(w.data().data(), w.data().size(), "scores");
    EXPECT_EQ(r.pod<uint64_t>(), ref.size());
    for (const auto& [p, x] : ref) {
        EXPECT_EQ(r.pod<int32_t>(), p);
        EXPECT_EQ(r.pod<float>(), x);
    }
    BinaryReader r2(w.data().data(), w.data().size(), "scores");
    PositionScores back;
    back.load(r2);
    ASSERT_EQ(back.size(), ref.size());
    for (const auto& [p, x] : ref) {
        float got = 0;
        ASSERT_TRUE(back.take(p, got));
        EXPECT_EQ(got, x);
    }
}

TEST(PositionScores, AWindowsWorthAllocatesNothingOnceHeld) {
    if (!test::allocations_countable()) GTEST_SKIP() << "AddressSanitizer build: no allocation counter";
    PositionScores ps;
    const int w = 32;
    for (int32_t p = 0; p < w; ++p) ps.set(p, 1.0f);
    for (int32_t p = w; p < 3 * w; ++p) {  // warm-up: the buffer reaches its size
        float x = 0;
        ASSERT_TRUE(ps.take(p - w, x));
        ps.set(p, 1.0f);
    }
    test::AllocationCount count;
    for (int32_t p = 3 * w; p < 1000; ++p) {
        float x = 0;
        ASSERT_TRUE(ps.take(p - w, x));
        ps.set(p, static_cast<float>(p));
    }
    EXPECT_EQ(count.count(), 0);
    EXPECT_EQ(ps.size(), static_cast<size_t>(w));
}

TEST(PolicyEvents, EachSequenceKeepsItsOwnStateAndSeesEventsInOrder) {
    const ModelConfig& c = model().config();
    const Policy pol = window_exit_policy(4);  // one scorer shared by both caches
    auto pool = std::make_shared<KVPool>(c.head_dim, KVType::kF32);
    KVCache a(c, 64, pol, pool), b(c, 64, pol, pool);
    const auto ids = test::story_prompt_ids();
    const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 12);
    std::vector<float> logits;
    model().forward(StepPhase::kPrefill, prompt, a, logits);
    model().forward(StepPhase::kPrefill, prompt, b, logits);
    for (int s = 0; s < 3; ++s) model().forward(StepPhase::kDecode, {ids[12 + s]}, a, logits);  // only a decodes

    // on_write: once per layer and step, before attention, with the step's T and first position.
    auto log_of = [&](KVCache& cache) -> const Log& { return *static_cast<const Log*>(cache.scorer_state()); };
    const Log& la = log_of(a);
    const Log& lb = log_of(b);
    ASSERT_EQ(la.writes.size(), static_cast<size_t>(c.n_layer) * 4);
    ASSERT_EQ(lb.writes.size(), static_cast<size_t>(c.n_layer));
    for (int l = 0; l < c.n_layer; ++l) EXPECT_EQ(la.writes[l], (std::array<int64_t, 3>{l, 12, 0}));
    for (int s = 0; s < 3; ++s)
        for (int l = 0; l < c.n_layer; ++l)
            EXPECT_EQ(la.writes[static_cast<size_t>(c.n_layer) * (1 + s) + l], (std::array<int64_t, 3>{l, 1, 12 + s}));
    // on_window_exit: entries 0 … 7 leave in the prefill (pushed by 4 … 11), 8 … 10 at the decode steps.
    ASSERT_EQ(la.exits.size(), static_cast<size_t>(c.n_layer * c.n_head_kv) * 11);
    ASSERT_EQ(lb.exits.size(), static_cast<size_t>(c.n_layer * c.n_head_kv) * 8);
    for (const auto& e : la.exits) EXPECT_EQ(e[3], e[2] + 4);
    // The rewritten score decided admission and is the one kept.
    for (int l = 0; l < c.n_layer; ++l)
        for (int h = 0; h < c.n_head_kv; ++h) {
            const PageStore& g = a.head(l, h).global();
            EXPECT_EQ(positions(g), (std::vector<int32_t>{0, 2, 4, 6, 8, 10}));
            for (float s : g.scores()) EXPECT_EQ(s, 100.0f);
            EXPECT_EQ(positions(a.head(l, h).window()), (std::vector<int32_t>{11, 12, 13, 14}));
            EXPECT_EQ(positions(b.head(l, h).global()), (std::vector<int32_t>{0, 2, 4, 6}));
        }
    // clear() starts the sequence's state afresh.
    a.clear();
    EXPECT_TRUE(log_of(a).writes.empty());
    EXPECT_EQ(log_of(b).writes.size(), static_cast<size_t>(c.n_layer));
}

/// Stored score: position mod 3 (high for 2, 5, 8, 11); effective score: −age, so the newest win.
class DecayScorer : public EntryScorer {
public:
    std::string name() const override { return "decay"; }
    void on_write(const StepEvent& ev, float* scores) const override {
        const LayerInputs& e = ev.step;
        for (int64_t t = 0; t < e.T; ++t)
            for (int h = 0; h < e.n_head_kv; ++h) scores[t * e.n_head_kv + h] = static_cast<float>((e.pos0 + t) % 3);
    }
    float effective_score(float stored, int32_t pos, int64_t now, int, int) const override {
        return decays_ ? -static_cast<float>(now - pos) : stored;
    }
    bool decays_ = true;
};

TEST(PolicyEvents, BudgetEvictionComparesEffectiveScores) {
    const ModelConfig& c = model().config();
    for (bool decays : {true, false}) {
        Policy p;
        p.name = "decay";
        auto sc = std::make_shared<DecayScorer>();
        sc->decays_ = decays;
        p.scorer = sc;
        p.compression.kind = Rule::Kind::kHeadBudget;
        p.compression.budget = 4;
        p.timing = Timing::kAfterPrefill;
        KVCache cache(c, 64, p, std::make_shared<KVPool>(c.head_dim, KVType::kF32));
        const auto ids = test::story_prompt_ids();
        std::vector<float> logits;
        model().forward(StepPhase::kPrefill, std::vector<int32_t>(ids.begin(), ids.begin() + 12), cache, logits);
        cache.end_prefill();
        const std::vector<int32_t> want =
            decays ? std::vector<int32_t>{8, 9, 10, 11} : std::vector<int32_t>{2, 5, 8, 11};
        for (int l = 0; l < c.n_layer; ++l)
            for (int h = 0; h < c.n_head_kv; ++h) EXPECT_EQ(positions(cache.head(l, h).global()), want);
    }
}

TEST(PolicyEvents, EachPresetsScorerIsOfOneKindAndAsksForItsStatistic) {
    // Per-entry scorers score at write; step scorers rescore after attention, asking for the statistic their paper
    // reads (H2O: accumulated mass; TOVA: the last query's) and, for those two, seeing every entry at a decode step.
    const std::string kvzap = "kvzap:model=" + test::model_path("kvzap/stories260K-linear");
    for (const std::string& spec : {kvzap, kvzap + ",rule=head,ratio=0.5", std::string("hybrid_heads:global=0.0")}) {
        const Policy p = parse_policy(spec);
        ASSERT_NE(p.scorer, nullptr) << spec;
        EXPECT_NE(p.scorer->entry(), nullptr) << spec;
        EXPECT_EQ(p.scorer->step(), nullptr) << spec;
    }
    struct Want {
        std::string spec;
        AttnStat stat;
        DecodeScope scope;
    };
    for (const Want& w : std::vector<Want>{{"h2o:ratio=0.5", AttnStat::kMassSum, DecodeScope::kAllEntries},
                                           {"tova:ratio=0.5", AttnStat::kMassLast, DecodeScope::kAllEntries},
                                           {"snapkv:ratio=0.5", AttnStat::kNone, DecodeScope::kNewEntry},
                                           {"pyramidkv:ratio=0.5", AttnStat::kNone, DecodeScope::kNewEntry},
                                           {"expected_attention:ratio=0.5", AttnStat::kNone, DecodeScope::kNewEntry},
                                           {"knorm:ratio=0.5", AttnStat::kNone, DecodeScope::kNewEntry},
                                           {"random:ratio=0.5", AttnStat::kNone, DecodeScope::kNewEntry},
                                           {"streaming_llm:ratio=0.5", AttnStat::kNone, DecodeScope::kNewEntry}}) {
        const Policy p = parse_policy(w.spec);
        ASSERT_NE(p.scorer, nullptr) << w.spec;
        EXPECT_EQ(p.scorer->entry(), nullptr) << w.spec;
        ASSERT_NE(p.scorer->step(), nullptr) << w.spec;
        EXPECT_EQ(p.scorer->step()->stat(), w.stat) << w.spec;
        EXPECT_EQ(p.scorer->step()->decode_scope(), w.scope) << w.spec;
    }
}

TEST(PolicyEvents, ScorersAreMadeForAModelWithoutChangingTheSharedOne) {
    // A scorer that serves any model is its own for_model; a learned one checks the model and returns a new scorer,
    // leaving the policy's (shared by every cache built from it) as it was, so that a refused model changes nothing.
    const ModelConfig& c = model().config();
    const Policy knorm = parse_policy("knorm:ratio=0.5");
    EXPECT_EQ(knorm.scorer->for_model(c), knorm.scorer);
    const Policy hybrid = parse_policy("hybrid_heads:global=0.0");
    EXPECT_EQ(hybrid.scorer->for_model(c), hybrid.scorer);
    auto error_of = [](const std::function<void()>& f) {
        try {
            f();
        } catch (const Error& e) { return std::string(e.what()); }
        return std::string("no error");
    };
    ModelConfig small = c;
    small.n_layer = 0;
    EXPECT_NE(error_of([&] { hybrid.scorer->for_model(small); }).find("outside the model"), std::string::npos);
    const Policy kvzap = parse_policy("kvzap:model=" + test::model_path("kvzap/stories260K-linear"));
    const auto bound = kvzap.scorer->for_model(c);
    ASSERT_NE(bound, nullptr);
    EXPECT_NE(bound->entry(), nullptr);
    ModelConfig other = c;
    other.n_embd += 1;
    EXPECT_NE(error_of([&] { kvzap.scorer->for_model(other); }).find("hidden size"), std::string::npos);
    // The refusal left the shared scorer serving the model it fits.
    EXPECT_NE(kvzap.scorer->for_model(c), nullptr);
    KVCache cache(c, 64, kvzap, std::make_shared<KVPool>(c.head_dim, KVType::kF32));
    std::vector<float> logits;
    model().forward(StepPhase::kPrefill, test::story_prompt_ids(), cache, logits);
    EXPECT_EQ(cache.n_tokens(), static_cast<int64_t>(test::story_prompt_ids().size()));
}

TEST(PolicyEvents, HeadBudgetSelectionKeepsWhatAStableSortKeeps) {
    // Scores with many ties and NaNs: the kept set must be the first k of a stable descending sort (NaN last).
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        const int64_t n = 1 + static_cast<int64_t>(rng() % 60);
        std::vector<float> s(n);
        for (auto& x : s) x = rng() % 7 == 0 ? NAN : static_cast<float>(rng() % 5);
        Rule r;
        r.kind = Rule::Kind::kHeadBudget;
        r.budget = 1 + static_cast<int64_t>(rng() % n);
        std::vector<HeadCandidates> hc(1);
        hc[0].scores = s.data();
        hc[0].n = n;
        apply_rule(r, hc);
        std::vector<int64_t> idx(n);
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
            const float x = std::isnan(s[a]) ? -INFINITY : s[a], y = std::isnan(s[b]) ? -INFINITY : s[b];
            return x > y;
        });
        std::vector<char> want(n, 0);
        for (int64_t i = 0; i < r.budget; ++i) want[idx[i]] = 1;
        ASSERT_EQ(hc[0].keep, want) << "trial " << trial;
    }
}

TEST(PolicyEvents, AfterPrefillStepReplaysWithoutChangingTheCache) {
    const ModelConfig& c = model().config();
    const auto tok = Tokenizer::from_gguf(model().file());
    const auto ids = test::story_prompt_ids();
    const int64_t n = static_cast<int64_t>(ids.size());
    Policy p = parse_policy("full");
    int observed = 0;
    p.after_prefill = [&](ModelAccess& m, const std::vector<int32_t>& context, OtherEntryScores*) {
        EXPECT_EQ(m.n_tokens(), n);
        EXPECT_EQ(context.size(), static_cast<size_t>(n));
        const auto extra = m.encode(" and then");
        m.replay(
            extra, [](int32_t pos) { return pos % 2 == 1; },
            [&](const StepEvent& ev) {
                const LayerInputs& in = ev.step;
                ++observed;
                EXPECT_EQ(in.T, static_cast<int64_t>(extra.size()));
                EXPECT_EQ(in.pos0, n);
                for (const HeadView& v : ev.heads) {
                    ASSERT_EQ(v.n, n / 2 + in.T);  // the odd positions, then the replayed tokens
                    for (int64_t i = 0; i < v.n - in.T; ++i) EXPECT_EQ(v.pos[i] % 2, 1);
                    for (int64_t t = 0; t < in.T; ++t) EXPECT_EQ(v.pos[v.n - in.T + t], n + t);
                }
            });
        EXPECT_EQ(m.n_tokens(), n);  // rolled back
        EXPECT_EQ(m.output_projection(0).size(), static_cast<size_t>(c.n_embd) * c.n_head * c.head_dim);
        EntryScores es;
        es.by_pos.assign(c.n_layer, std::vector<std::unordered_map<int32_t, float>>(c.n_head_kv));
        for (auto& layer : es.by_pos)
            for (auto& head : layer)
                for (int32_t q = 0; q < n; q += 3) head[q] = 10.0f + q;
        es.missing = -1;
        return es;
    };
    KVCache cache(c, 256, p, std::make_shared<KVPool>(c.head_dim, KVType::kF32));
    std::vector<float> logits;
    model().forward(StepPhase::kPrefill, ids, cache, logits);
    run_after_prefill(model(), *tok, cache, ids);
    EXPECT_EQ(observed, c.n_layer);
    EXPECT_EQ(cache.n_tokens(), n);
    for (int l = 0; l < c.n_layer; ++l)
        for (int h = 0; h < c.n_head_kv; ++h) {
            const PageStore& g = cache.head(l, h).global();
            ASSERT_EQ(g.size(), n);
            for (int64_t i = 0; i < g.size(); ++i) {
                const int32_t q = g.positions()[i];
                EXPECT_EQ(g.scores()[i], q % 3 == 0 ? 10.0f + q : -1.0f);
            }
        }
}

}  // namespace
}  // namespace kvsieve
