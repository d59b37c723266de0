// Per-head density maps and the hybrid local/global layouts (eval/head_density.h, policy/hybrid_heads.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "eval/head_density.h"
#include "eval/nll.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve {
namespace {

HeadDensityMap eight_layers() {  // 8 layers × 2 heads, density = (l·2 + h) / 16, except head (5, 1) = 0.99
    HeadDensityMap m;
    for (int l = 0; l < 8; ++l) m.density.push_back({(2.0 * l) / 16, (2.0 * l + 1) / 16});
    m.density[5][1] = 0.99;
    return m;
}

std::string story_text() {
    std::string text;
    for (int i = 0; i < 6; ++i)
        text += "Once upon a time, there was a little girl named Lily. She loved to play outside. ";
    return text;
}

NllOptions one_window() {  // one chunked-protocol window of 96 tokens
    NllOptions o;
    o.sample_tokens = 96;
    o.samples = 1;
    o.progress = false;
    return o;
}

TEST(HeadDensity, StrategiesChooseTheirHeads) {
    const HeadDensityMap m = eight_layers();
    using S = HybridStrategy;
    EXPECT_EQ(hybrid_global_heads(m, S::kDensest, 3), (std::vector<HeadId>{{5, 1}, {7, 0}, {7, 1}}));
    EXPECT_EQ(hybrid_global_heads(m, S::kEvery4From0, 3), (std::vector<HeadId>{{0, 0}, {0, 1}, {4, 0}, {4, 1}}));
    EXPECT_EQ(hybrid_global_heads(m, S::kEvery4From3, 3), (std::vector<HeadId>{{3, 0}, {3, 1}, {7, 0}, {7, 1}}));
    const auto r1 = hybrid_global_heads(m, S::kRandom, 5, 7), r2 = hybrid_global_heads(m, S::kRandom, 5, 7);
    EXPECT_EQ(r1, r2);  // seeded
    EXPECT_EQ(r1.size(), 5u);
    EXPECT_THROW(hybrid_global_heads(m, S::kDensest, 17), Error);
    // Coverage: Σ chosen / Σ all.
    double total = 0;
    for (const auto& row : m.density)
        for (double d : row) total += d;
    EXPECT_NEAR(density_coverage(m, {{5, 1}, {7, 0}}), (0.99 + 14.0 / 16) / total, 1e-12);
    EXPECT_EQ(hybrid_policy_spec({{0, 1}, {3, 0}}, 128, 4), "hybrid_heads:global=0.1/3.0,window=128,sinks=4");
}

TEST(HeadDensity, HybridHeadsPolicyKeepsEverythingOnGlobalHeadsAndOnlyTheWindowElsewhere) {
    const LlamaModel& m = test::stories260k();
    const auto tok = Tokenizer::from_gguf(m.file());
    const std::string text = story_text();
    const NllOptions o = one_window();
    const NllResult r = evaluate_nll(m, *tok, text, "hybrid_heads:global=0.1/3.2,window=8", o);
    ASSERT_EQ(r.head_density.size(), 5u);
    for (int l = 0; l < 5; ++l)
        for (int h = 0; h < 4; ++h) {
            const bool global = (l == 0 && h == 1) || (l == 3 && h == 2);
            EXPECT_DOUBLE_EQ(r.head_density[l][h], global ? 1.0 : 0.0) << l << "." << h;
        }
    EXPECT_NEAR(r.mean_density, 2.0 / 20, 1e-12);
    // Every head local: with a window longer than the text it is the full cache; with 8 tokens it is not.
    const NllResult full = evaluate_nll(m, *tok, text, "full", o);
    const NllResult wide = evaluate_nll(m, *tok, text, "hybrid_heads:global=,window=200", o);
    const NllResult local = evaluate_nll(m, *tok, text, "hybrid_heads:global=,window=8", o);
    EXPECT_NEAR(wide.mean_nll, full.mean_nll, 1e-4);
    EXPECT_GT(std::abs(local.mean_nll - full.mean_nll), 1e-2);
    EXPECT_EQ(local.mean_density, 0.0);
    EXPECT_THROW(parse_policy("hybrid_heads:global=0-1"), Error);
    EXPECT_THROW(parse_policy("hybrid_heads:window=8"), Error);
    try {
        evaluate_nll(m, *tok, text, "hybrid_heads:global=9.0", o);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("outside the model's 5 layers"), std::string::npos) << e.what();
    }
}

TEST(HeadDensity, ReportWritesTheMapAndOneRowPerLayout) {
    const LlamaModel& m = test::stories260k();
    const auto tok = Tokenizer::from_gguf(m.file());
    const std::string text = story_text();
    const NllOptions o = one_window();
    const auto dir = std::filesystem::temp_directory_path() / ("kvsieve_density_" + std::to_string(::getpid()));
    const std::string md =
        head_density_report(m, *tok, text, "hybrid_heads:global=1.0/1.1/1.2/1.3,window=8", o, dir.string(), true, 4, 1);
    // The policy's own map: layer 1 dense, the rest local; the densest layout with 4 heads is layer 1 itself,
    // so it covers all the density.
    EXPECT_NE(md.find("| densest heads (SP-KV §4) | 4 | 1.000 | 0.200 |"), std::string::npos) << md;
    EXPECT_NE(md.find("| A: 3:1, global layers 0, 4, 8, … | 8 | 0.000 |"), std::string::npos) << md;
    EXPECT_NE(md.find("| every head local | 0 |"), std::string::npos) << md;
    for (const char* f :
         {"head_density.md", "head_density.json", "head_density.dat", "head_density.gp", "hybrid.md", "hybrid.json"})
        EXPECT_TRUE(std::filesystem::exists(dir / f)) << f;
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvsieve
