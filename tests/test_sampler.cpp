// Sampling: greedy, determinism, and the truncation rules against their definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "model/sampler.h"
#include "util/error.h"

namespace kvsieve {
namespace {

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
    const std::vector<float> l{0.1f, 2.0f, -1.0f, 2.0f};
    SamplerParams p;
    p.temp = 0;
    Sampler s(p);
    EXPECT_EQ(s.sample(l.data(), 4), 1);
    EXPECT_EQ(argmax(l.data(), 4), 1);
}

TEST(Sampler, LogitBiasShiftsTheLogitsBeforeSampling) {
    const std::vector<float> l{0.1f, 2.0f, -1.0f, 1.5f};
    SamplerParams p;
    p.temp = 0;
    p.logit_bias = {{1, -100.0f}};  // the argmax banned: the next best wins under greedy
    EXPECT_EQ(Sampler(p).sample(l.data(), 4), 3);
    p.logit_bias = {{2, 3.5f}};  // -1 + 3.5 = 2.5 > 2
    EXPECT_EQ(Sampler(p).sample(l.data(), 4), 2);
    // Sampling: a banned token is never drawn, even at a high temperature with nothing cut.
    p.temp = 2.0f;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.logit_bias = {{1, -100.0f}, {3, -100.0f}};
    Sampler s(p);
    std::set<int32_t> seen;
    for (int i = 0; i < 400; ++i) seen.insert(s.sample(l.data(), 4));
    EXPECT_EQ(seen, (std::set<int32_t>{0, 2}));
    // The caller's logits are not changed; an id outside the vocabulary is an error.
    EXPECT_EQ(l[1], 2.0f);
    p.logit_bias = {{4, 1.0f}};
    EXPECT_THROW(Sampler(p).sample(l.data(), 4), Error);
    p.logit_bias = {{-1, 1.0f}};
    EXPECT_THROW(Sampler{p}, Error);
}

TEST(Sampler, SameSeedSameDraws) {
    std::vector<float> l(50);
    for (int i = 0; i < 50; ++i) l[i] = std::sin(i * 1.3f);
    SamplerParams p;
    p.temp = 1.5f;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    Sampler a(p), b(p);
    std::vector<int32_t> da, db;
    for (int i = 0; i < 100; ++i) {
        da.push_back(a.sample(l.data(), 50));
        db.push_back(b.sample(l.data(), 50));
    }
    EXPECT_EQ(da, db);
    EXPECT_GT(std::set<int32_t>(da.begin(), da.end()).size(), 5u);
}

TEST(Sampler, FrequenciesFollowSoftmax) {
    const std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    SamplerParams p;
    p.temp = 1;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    Sampler s(p);
    std::vector<int> count(3);
    const int N = 20000;
    for (int i = 0; i < N; ++i) ++count[s.sample(l.data(), 3)];
    EXPECT_NEAR(count[0] / double(N), 0.5, 0.02);
    EXPECT_NEAR(count[1] / double(N), 0.3, 0.02);
    EXPECT_NEAR(count[2] / double(N), 0.2, 0.02);
}

TEST(Sampler, FrequenciesFollowSoftmaxAtTemperatureWithoutTruncation) {
    // Nothing cut at temperature 0.5: p ∝ q², i.e. 25 : 9 : 4 for q = 0.5, 0.3, 0.2.
    const std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f), -1e30f};
    SamplerParams p;
    p.temp = 0.5f;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    Sampler s(p);
    std::vector<int> count(4);
    const int N = 40000;
    for (int i = 0; i < N; ++i) ++count[s.sample(l.data(), 4)];
    EXPECT_NEAR(count[0] / double(N), 25.0 / 38, 0.015);
    EXPECT_NEAR(count[1] / double(N), 9.0 / 38, 0.015);
    EXPECT_NEAR(count[2] / double(N), 4.0 / 38, 0.015);
    EXPECT_EQ(count[3], 0);  // probability 0 is never drawn
}

TEST(Sampler, TruncationRules) {
    const std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    auto seen = [&](SamplerParams p) {
        Sampler s(p);
        std::set<int32_t> ids;
        for (int i = 0; i < 2000; ++i) ids.insert(s.sample(l.data(), 3));
        return ids;
    };
    SamplerParams p;
    p.temp = 1;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    EXPECT_EQ(seen(p), (std::set<int32_t>{0, 1, 2}));
    auto k = p;
    k.top_k = 2;
    EXPECT_EQ(seen(k), (std::set<int32_t>{0, 1}));
    auto tp = p;
    tp.top_p = 0.75f;  // 0.5 + 0.3 reaches 0.75
    EXPECT_EQ(seen(tp), (std::set<int32_t>{0, 1}));
    auto mp = p;
    mp.min_p = 0.5f;  // 0.3 ≥ 0.25 kept, 0.2 < 0.25 dropped
    EXPECT_EQ(seen(mp), (std::set<int32_t>{0, 1}));
    auto hot = p;
    hot.temp = 0.01f;  // nearly greedy
    EXPECT_EQ(seen(hot), (std::set<int32_t>{0}));
}

TEST(Sampler, InvalidParamsAreRejected) {
    SamplerParams p;
    p.temp = -1;
    EXPECT_THROW(p.validate(), Error);
    p = {};
    p.top_p = 0;
    EXPECT_THROW(p.validate(), Error);
    p = {};
    p.min_p = 1.5f;
    EXPECT_THROW(p.validate(), Error);
}

}  // namespace
}  // namespace kvsieve
