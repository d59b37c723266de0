// Read-time selection (policy/selection.h, policy/quest.cpp): Quest's page bound and choice against a direct
// computation, the selection's composition with any policy in a spec, and its effect at decode steps: the cache is
// unchanged, only the chosen pages are read, a budget covering every page reads everything; the key bounds kept
// beside the pages equal the keys' minimum and maximum (rounded outwards to binary16) through appends, overwrites
// and evictions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "cache/kv_cache.h"
#include "cache/page_store.h"
#include "kernels/fp16.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "policy/selection.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

TEST(Quest, ThePageBoundIsAnUpperBoundAndTheBestPagesAreChosen) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    const int G = 3, d = 8, n_pages = 12, P = 16, keep = 4;
    std::vector<float> q(G * d), keys(static_cast<size_t>(n_pages) * P * d), kmin(n_pages * d, INFINITY),
        kmax(n_pages * d, -INFINITY);
    for (auto& x : q) x = nd(rng);
    for (int i = 0; i < n_pages; ++i)
        for (int r = 0; r < P; ++r)
            for (int c = 0; c < d; ++c) {
                const float k = nd(rng) * (1 + 0.3f * static_cast<float>(i % 4));
                keys[(static_cast<size_t>(i) * P + r) * d + c] = k;
                kmin[i * d + c] = std::min(kmin[i * d + c], k);
                kmax[i * d + c] = std::max(kmax[i * d + c], k);
            }
    // The bounds as the page stores keep them: binary16 rounded outwards.
    std::vector<uint16_t> hmin(kmin.size()), hmax(kmax.size());
    for (size_t i = 0; i < kmin.size(); ++i) {
        hmin[i] = fp32_to_fp16_down(kmin[i]);
        hmax[i] = fp32_to_fp16_up(kmax[i]);
        kmin[i] = fp16_to_fp32(hmin[i]);
        kmax[i] = fp16_to_fp32(hmax[i]);
    }
    // The bound written out: U_i = Σ_g Σ_c max(q_gc·min_ic, q_gc·max_ic), ≥ every key's summed logit.
    std::vector<std::pair<double, int>> bound;
    for (int i = 0; i < n_pages; ++i) {
        double u = 0;
        for (int g = 0; g < G; ++g)
            for (int c = 0; c < d; ++c) u += std::max(q[g * d + c] * kmin[i * d + c], q[g * d + c] * kmax[i * d + c]);
        for (int r = 0; r < P; ++r) {
            double s = 0;
            for (int g = 0; g < G; ++g)
                for (int c = 0; c < d; ++c) s += q[g * d + c] * keys[(static_cast<size_t>(i) * P + r) * d + c];
            EXPECT_LE(s, u + 1e-9);
        }
        bound.push_back({-u, i});
    }
    std::sort(bound.begin(), bound.end());
    std::set<int> want;
    for (int j = 0; j < keep; ++j) want.insert(bound[j].second);
    const auto got = quest_choose_pages(q.data(), G, d, hmin.data(), hmax.data(), n_pages, keep);
    EXPECT_EQ(std::set<int>(got.begin(), got.end()), want);
    EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
    EXPECT_EQ(quest_choose_pages(q.data(), G, d, hmin.data(), hmax.data(), n_pages, 20).size(), 12u);
}

TEST(Quest, RankingOnStoredBoundsMatchesTheBoundWrittenOut) {
    // SmolLM2's shape (G = 3, d = 64) over 300 pages: the regrouped float32 ranking (quest_rank_pages, bounds read
    // where they lie, with this machine's f32 dot kernel; every ISA's is checked against the scalar one in
    // test_kernels.cpp) keeps pages whose bound, written out in double, is never below a left-out page's beyond
    // rounding; and the gathered form chooses the same pages.
    std::mt19937 rng(17);
    std::normal_distribution<float> nd;
    const int G = 3, d = 64, n_pages = 300, keep = 37;
    std::vector<float> q(G * d), lo(static_cast<size_t>(n_pages) * d), hi(lo.size());
    std::vector<uint16_t> hlo(lo.size()), hhi(lo.size());
    for (auto& x : q) x = nd(rng);
    for (size_t i = 0; i < lo.size(); ++i) {
        const float a = nd(rng), b = nd(rng);
        hlo[i] = fp32_to_fp16_down(std::min(a, b));
        hhi[i] = fp32_to_fp16_up(std::max(a, b));
        lo[i] = fp16_to_fp32(hlo[i]);
        hi[i] = fp16_to_fp32(hhi[i]);
    }
    std::vector<double> u(n_pages, 0.0);
    for (int i = 0; i < n_pages; ++i)
        for (int g = 0; g < G; ++g)
            for (int c = 0; c < d; ++c)
                u[i] += std::max(double(q[g * d + c]) * lo[i * d + c], double(q[g * d + c]) * hi[i * d + c]);
    std::vector<const uint16_t*> plo(n_pages), phi(n_pages);
    for (int i = 0; i < n_pages; ++i) plo[i] = hlo.data() + i * d, phi[i] = hhi.data() + i * d;
    {
        QuestRanking r;
        quest_rank_pages(q.data(), G, d, plo.data(), phi.data(), n_pages, keep, false, r);
        const std::vector<int>& got = r.chosen;
        ASSERT_EQ(got.size(), static_cast<size_t>(keep));
        EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
        const std::set<int> in(got.begin(), got.end());
        double worst_in = INFINITY, best_out = -INFINITY;
        for (int i = 0; i < n_pages; ++i) {
            if (in.count(i))
                worst_in = std::min(worst_in, u[i]);
            else
                best_out = std::max(best_out, u[i]);
        }
        EXPECT_GE(worst_in, best_out - 1e-4);
        EXPECT_EQ(quest_choose_pages(q.data(), G, d, hlo.data(), hhi.data(), n_pages, keep), got);
    }
}

TEST(Quest, KeyBoundsKeptBesideThePagesFollowEveryChange) {
    // A page store under random appends, overwrites, removals and compactions; after each change the bounds of
    // every page (asked for at random, so some are extended and some recomputed) equal a direct min/max of the keys.
    for (KVType type : {KVType::kF32, KVType::kF16}) {
        const int d = 8, P = 16;
        KVPool pool(d, type, P);
        PageStore src(&pool);
        PageStore st(&pool);
        std::mt19937 rng(11);
        std::normal_distribution<float> nd;
        std::vector<float> k(d), v(d);
        auto fill = [&] {
            for (int c = 0; c < d; ++c) k[c] = nd(rng), v[c] = nd(rng);
        };
        for (int i = 0; i < 40; ++i) {
            fill();
            src.push(k.data(), v.data(), i, 0);
        }
        int checked = 0;
        for (int step = 0; step < 600; ++step) {
            const int op = static_cast<int>(rng() % 10);
            if (op < 5 || st.size() < 3) {
                fill();
                st.push(k.data(), v.data(), step, 0);
            } else if (op == 5) {
                st.push_copy(src, static_cast<int64_t>(rng() % src.size()));
            } else if (op == 6) {
                fill();
                st.set(static_cast<int64_t>(rng() % st.size()), k.data(), v.data(), step, 0);
            } else if (op <= 8) {
                st.remove(static_cast<int64_t>(rng() % st.size()));
            } else {
                std::vector<char> keep(st.size());
                for (auto& x : keep) x = rng() % 4 != 0;
                st.retain(keep);
            }
            for (size_t p = 0; p < st.pages().size(); ++p) {
                if (rng() % 2) continue;
                const uint16_t *lo = nullptr, *hi = nullptr;
                st.key_bounds(p, &lo, &hi);
                const int64_t end = std::min<int64_t>(st.size(), static_cast<int64_t>(p + 1) * P);
                for (int c = 0; c < d; ++c) {
                    float mn = INFINITY, mx = -INFINITY;
                    for (int64_t i = static_cast<int64_t>(p) * P; i < end; ++i) {
                        st.read(i, k.data(), v.data());
                        mn = std::min(mn, k[c]);
                        mx = std::max(mx, k[c]);
                    }
                    // The exact minimum and maximum, rounded outwards to binary16.
                    ASSERT_EQ(lo[c], fp32_to_fp16_down(mn)) << "step " << step << " page " << p << " channel " << c;
                    ASSERT_EQ(hi[c], fp32_to_fp16_up(mx)) << "step " << step << " page " << p << " channel " << c;
                    ASSERT_LE(fp16_to_fp32(lo[c]), mn);
                    ASSERT_GE(fp16_to_fp32(hi[c]), mx);
                }
                ++checked;
            }
            EXPECT_EQ(st.bounds_bytes() <= st.pages().size() * 2 * d * sizeof(uint16_t), true);
        }
        EXPECT_GT(checked, 300);
        st.clear();
        EXPECT_EQ(st.bounds_bytes(), 0u);
    }
}

TEST(Quest, ComposesWithAnyPolicyInASpec) {
    const Policy alone = parse_policy("quest:read_budget=64");
    EXPECT_EQ(alone.name, "full");
    EXPECT_EQ(alone.selection.kind, "quest");
    EXPECT_EQ(alone.selection.budget, 64);
    EXPECT_EQ(alone.selection.skip_layers, 2);
    const Policy both = parse_policy("streaming_llm:window=64+quest:read_budget=32,skip_layers=0");
    EXPECT_EQ(both.name, "streaming_llm");
    EXPECT_EQ(both.window, 64);
    EXPECT_EQ(both.selection.skip_layers, 0);
    EXPECT_NE(both.describe().find("read-time selection quest(read_budget=32,page=16,skip_layers=0)"),
              std::string::npos);
    EXPECT_FALSE(parse_policy("full").selection.active());
    auto error_of = [](const std::string& spec) {
        try {
            (void)parse_policy(spec);
        } catch (const Error& e) { return std::string(e.what()); }
        return std::string("no error");
    };
    EXPECT_NE(error_of("quest").find("budget=<entries read per KV head> is required"), std::string::npos);
    EXPECT_NE(error_of("full+snapkv:ratio=0.5").find("unknown read-time selection 'snapkv'"), std::string::npos);
    EXPECT_NE(error_of("full+quest:read_budget=8+quest:read_budget=8").find("at most one read-time selection"),
              std::string::npos);
    EXPECT_NE(error_of("quest:read_budget=8,pages=4").find("unknown"), std::string::npos);
    EXPECT_NE(error_of("quest:read_budget=8,group=mean").find("group='mean' is not sum or max"), std::string::npos);
    EXPECT_TRUE(parse_policy("quest:read_budget=8,group=max").selection.group_max);
    EXPECT_FALSE(parse_policy("quest:read_budget=8").selection.group_max);
    EXPECT_NE(parse_policy("quest:read_budget=8,group=max").describe().find("group=max"), std::string::npos);
    EXPECT_EQ(parse_policy("full:sinks=4+quest:read_budget=8").sinks, 4);
    EXPECT_NE(error_of("full:sinks=-1").find("sinks must be ≥ 0"), std::string::npos);
}

/// group=max ranks a page by its best query head's bound, group=sum by the group's summed bound: a page that only
/// one head of the group wants strongly (bounds computed by hand, exact in binary16) wins under max and loses under
/// sum to a page both heads want moderately.
TEST(Quest, GroupMaxKeepsAPageOneQueryHeadNeeds) {
    const int G = 2, d = 2;
    const float q[G * d] = {1, 0,   // head 0 reads channel 0
                            0, 1};  // head 1 reads channel 1
    // Page 0: channel 0 up to 8, channel 1 down to −6 (head 0: 8, head 1: 0 at most → max 8, sum 8 + 0).
    // Page 1: both channels exactly 5 (head 0: 5, head 1: 5 → max 5, sum 10).
    const float lo[2][d] = {{8, -6}, {5, 5}}, hi[2][d] = {{8, 0}, {5, 5}};
    std::vector<uint16_t> hlo, hhi;
    for (int p = 0; p < 2; ++p)
        for (int c = 0; c < d; ++c)
            hlo.push_back(fp32_to_fp16_down(lo[p][c])), hhi.push_back(fp32_to_fp16_up(hi[p][c]));
    EXPECT_EQ(quest_choose_pages(q, G, d, hlo.data(), hhi.data(), 2, 1, false), std::vector<int>{1});
    EXPECT_EQ(quest_choose_pages(q, G, d, hlo.data(), hhi.data(), 2, 1, true), std::vector<int>{0});
}

/// Decode steps of stories260K (5 layers) after a 60-token prompt under `spec`; logits of the last step.
std::vector<float> decode(const std::string& spec, KVStats* st = nullptr) {
    const LlamaModel& m = test::stories260k();
    KVCache c(m.config(), 128, parse_policy(spec), std::make_shared<KVPool>(m.config().head_dim, KVType::kF32));
    auto ids = test::story_prompt_ids();
    while (ids.size() < 66) ids.insert(ids.end(), ids.begin() + 1, ids.end());
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, std::vector<int32_t>(ids.begin(), ids.begin() + 60), c, logits);
    c.end_prefill();
    for (int s = 0; s < 6; ++s) m.forward(StepPhase::kDecode, {ids[60 + s]}, c, logits);
    if (st) *st = c.stats();
    return logits;
}

TEST(Quest, DecodeReadsOnlyTheChosenPagesAndLeavesTheCacheWhole) {
    KVStats full_st, wide_st, narrow_st;
    const auto full = decode("full", &full_st);
    const auto wide = decode("quest:read_budget=128", &wide_st);  // every page fits the budget
    for (size_t i = 0; i < full.size(); ++i) ASSERT_EQ(full[i], wide[i]) << "a budget covering the cache reads it all";
    EXPECT_EQ(wide_st.read_fraction, 1.0);
    const auto narrow = decode("quest:read_budget=16", &narrow_st);
    // The cache is unchanged: every head still holds all 66 entries.
    EXPECT_EQ(narrow_st.entries, full_st.entries);
    EXPECT_EQ(narrow_st.density, 1.0);
    // Layers 2–4 read one chosen page and the current token's page of 61 … 66 entries (4–5 pages) at each step.
    int64_t read = 0, total = 0;
    for (int n = 61; n <= 66; ++n) {
        const int pages = (n + 15) / 16;
        const int last = n - 16 * (pages - 1);
        read += 16 + last;
        total += n;
    }
    EXPECT_NEAR(narrow_st.read_fraction, static_cast<double>(read) / total, 1e-12);
    // The key bounds kept beside the global pages: none without a selection, or when every page fits the budget.
    EXPECT_EQ(full_st.selection_bytes, 0u);
    EXPECT_EQ(wide_st.selection_bytes, 0u);
    EXPECT_GT(narrow_st.selection_bytes, 0u);
    EXPECT_LE(narrow_st.selection_bytes, narrow_st.kv_bytes_final / 2);
    double diff = 0;
    for (size_t i = 0; i < full.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(full[i] - narrow[i])));
    EXPECT_GT(diff, 1e-4) << "reading a subset changes the attention";
    // Composed with a windowed policy the window is always read; the global pages are chosen.
    KVStats sw;
    (void)decode("knorm:ratio=0.25,window=16+quest:read_budget=16,skip_layers=0", &sw);
    EXPECT_LT(sw.read_fraction, 1.0);
    EXPECT_GT(sw.read_fraction, 0.5);
    // full:sinks=4 keeps every entry, its first 4 in the sink region, which a selection reads at every step: one
    // chosen page + the current token's page as before, plus the 4 sinks (the first page's other 12 entries are
    // global ones, ranked with the rest).
    KVStats sinks_st;
    (void)decode("full:sinks=4+quest:read_budget=16", &sinks_st);
    EXPECT_EQ(sinks_st.entries, full_st.entries);
    EXPECT_GT(sinks_st.read_fraction, narrow_st.read_fraction);
    const LlamaModel& m = test::stories260k();
    KVCache c(m.config(), 128, parse_policy("full:sinks=4"),
              std::make_shared<KVPool>(m.config().head_dim, KVType::kF32));
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, test::story_prompt_ids(), c, logits);
    EXPECT_EQ(c.head(0, 0).sinks().size(), 4);
    EXPECT_EQ(c.head(0, 0).size(), static_cast<int64_t>(test::story_prompt_ids().size()));
}

}  // namespace
}  // namespace kvsieve
