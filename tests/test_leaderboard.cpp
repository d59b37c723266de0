// eval leaderboard: sweep cells collected into tables with 95% intervals (eval/leaderboard.h).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "eval/leaderboard.h"
#include "eval/plot.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

namespace fs = std::filesystem;

/// A RULER cell with the given per-sample scores (0/1).
void cell(const fs::path& dir, const std::string& name, const std::string& policy, double compression,
          const std::vector<int>& scores, bool query_aware, const std::string& format = "") {
    fs::create_directories(dir / name);
    std::ofstream(dir / name / "config.yaml")
        << "task: ruler\npolicy: \"" << policy << "\"\nmodel: \"models/m.gguf\"\n";
    double mean = 0;
    std::ofstream csv(dir / name / "predictions.csv");
    csv << "task,length,index,score,density,compression_ratio,prediction,answers\n";
    for (size_t i = 0; i < scores.size(); ++i) {
        csv << "vt,1024," << i << "," << scores[i] << ",1," << compression << ",\"x\",\"y\"\n";
        mean += scores[i] / static_cast<double>(scores.size());
    }
    std::ofstream(dir / name / "metrics.json")
        << "{\"policy\": \"" << policy << "\", \"score\": " << 100 * mean << ", \"compression_ratio\": " << compression
        << ", \"density\": " << 1 - compression << ", \"samples\": " << scores.size()
        << ", \"query_aware\": " << (query_aware ? "true" : "false")
        << (format.empty() ? "" : ", \"format\": \"" + format + "\"") << "}\n";
}

TEST(Leaderboard, RawAndChatPromptsGetTablesOfTheirOwn) {
    test::TempFile root("_board_formats");
    // Sweep a: written before the format was recorded (raw); sweep b: chat prompts, other scores.
    const fs::path a = fs::path(root.path()) / "a", b = fs::path(root.path()) / "b";
    cell(a, "full", "full", 0.0, {1, 1, 1, 1}, false);
    cell(a, "snapkv_ratio_0.5", "snapkv:ratio=0.5", 0.5, {1, 1, 0, 0}, false);
    cell(b, "full", "full", 0.0, {1, 1, 1, 0}, false, "chat");
    cell(b, "snapkv_ratio_0.5", "snapkv:ratio=0.5", 0.5, {1, 0, 0, 0}, false, "chat");
    const auto rows = collect_leaderboard({a.string(), b.string()});
    ASSERT_EQ(rows.size(), 4u);
    for (const auto& r : rows) EXPECT_EQ(r.format, r.sweep == "a" ? "raw" : "chat") << r.sweep;
    const std::string md = write_leaderboard(rows, (fs::path(root.path()) / "out").string());
    const size_t raw = md.find("## m.gguf — ruler, query-agnostic, raw prompts\n");
    const size_t chat = md.find("## m.gguf — ruler, query-agnostic, chat prompts\n");
    ASSERT_NE(raw, std::string::npos) << md;
    ASSERT_NE(chat, std::string::npos) << md;
    // Each table holds its own sweep's cells, each Δ against its own full cache: raw 50 − 100, chat 25 − 75.
    const std::string chat_table = md.substr(chat, raw > chat ? raw - chat : std::string::npos);
    const std::string raw_table = md.substr(raw, chat > raw ? chat - raw : std::string::npos);
    EXPECT_NE(raw_table.find("| snapkv | `snapkv:ratio=0.5` | 0.500 | 0.500 | 50.00 ± "), std::string::npos) << md;
    EXPECT_NE(raw_table.find("| -50.00 ± "), std::string::npos) << md;
    EXPECT_EQ(raw_table.find("25.00"), std::string::npos) << md;
    EXPECT_NE(chat_table.find("| snapkv | `snapkv:ratio=0.5` | 0.500 | 0.500 | 25.00 ± "), std::string::npos) << md;
    EXPECT_NE(chat_table.find("| -50.00 ± "), std::string::npos) << md;
    EXPECT_EQ(chat_table.find("| full (a) |"), std::string::npos) << md;
    EXPECT_TRUE(fs::exists(fs::path(root.path()) / "out" / "score_vs_compression_m.gguf.dat"));
    EXPECT_TRUE(fs::exists(fs::path(root.path()) / "out" / "score_vs_compression_m.gguf_chat.dat"));
}

TEST(Leaderboard, TablesWithIntervalsAndTheNinetyFivePercentLine) {
    test::TempFile root("_board");
    const fs::path a = fs::path(root.path()) / "a";
    cell(a, "full", "full", 0.0, {1, 1, 1, 1, 1, 1, 1, 0}, false);  // 87.5
    cell(a, "snapkv_ratio_0.5", "snapkv:ratio=0.5", 0.5, {1, 1, 1, 1, 1, 1, 1, 0}, false);
    cell(a, "snapkv_ratio_0.75", "snapkv:ratio=0.75", 0.75, {1, 0, 1, 0, 1, 0, 1, 0}, false);
    cell(a, "knorm_ratio_0.5", "knorm:ratio=0.5", 0.5, {0, 0, 0, 0, 0, 0, 0, 1}, false);
    // Two surrogates of one learned policy are two methods, named by their checkpoints; a method is its spec without
    // the swept quantity, so a baseline with a protected window is another curve than without.
    cell(a, "kvzap_a", "kvzap:model=models/kvzap/m-linear,sinks=4,rule=threshold,tau=-3", 0.6, {1, 0}, false);
    cell(a, "kvzap_b", "kvzap:model=models/kvzap/m-mlp/,rule=threshold,tau=-3", 0.6, {1, 1}, false);
    cell(a, "knorm_w", "knorm:sinks=4,window=128,ratio=0.5", 0.4, {0, 1}, false);
    const auto rows = collect_leaderboard({a.string()});
    ASSERT_EQ(rows.size(), 7u);
    for (const auto& r : rows)
        if (r.policy.rfind("knorm", 0) == 0)
            EXPECT_EQ(r.method, r.policy == "knorm:ratio=0.5" ? "knorm" : "knorm (sinks=4, window=128)");
    int kvzap_rows = 0;
    for (const auto& r : rows)
        if (r.policy.rfind("kvzap", 0) == 0) {
            ++kvzap_rows;
            EXPECT_EQ(r.method, r.policy.find("m-mlp") != std::string::npos
                                    ? "kvzap m-mlp (rule=threshold)"
                                    : "kvzap m-linear (rule=threshold, sinks=4)");
        }
    EXPECT_EQ(kvzap_rows, 2);
    for (const auto& r : rows) {
        EXPECT_EQ(r.model, "m.gguf");
        EXPECT_DOUBLE_EQ(r.full, 87.5);
        if (r.policy == "snapkv:ratio=0.75") {
            EXPECT_DOUBLE_EQ(r.value, 50.0);
            // s = √(8·0.25/7), half-width 1.96·s/√8, in points.
            EXPECT_NEAR(r.ci95, 100 * 1.96 * std::sqrt(2.0 / 7.0) / std::sqrt(8.0), 1e-9);
        }
    }
    const std::string md = write_leaderboard(rows, (fs::path(root.path()) / "out").string());
    EXPECT_NE(md.find("## m.gguf — ruler, query-agnostic"), std::string::npos) << md;
    // Paired: d = (0,−1,0,−1,0,−1,0,0), mean −3/8, sd² = (5·(3/8)² + 3·(5/8)²)/7 = 15/56, half-width 1.96·sd/√8.
    EXPECT_NE(md.find("| snapkv | `snapkv:ratio=0.75` | 0.750 | 0.250 | 50.00 ± 37.04 | -37.50 ± 35.86 |"),
              std::string::npos)
        << md;
    EXPECT_NE(md.find("| snapkv | `snapkv:ratio=0.5` | 0.500 | 0.500 | 87.50 ± 24.50 | +0.00 ± 0.00 |"),
              std::string::npos)
        << md;
    EXPECT_NE(md.find("up to compression ratio: kvzap m-mlp (rule=threshold) 0.60, snapkv 0.50."), std::string::npos)
        << md;
    EXPECT_TRUE(fs::exists(fs::path(root.path()) / "out" / "leaderboard.md"));
    // The plot script draws each of the 5 methods in its own style.
    std::ifstream gp(fs::path(root.path()) / "out" / "score_vs_compression_m.gguf.gp");
    ASSERT_TRUE(gp) << "no plot script";
    const std::string script((std::istreambuf_iterator<char>(gp)), {});
    for (size_t i = 0; i < 5; ++i) EXPECT_NE(script.find(series_style(i) + " title"), std::string::npos) << i;
    // A second sweep of the same model and task with its own full cell, the same: the table shows the full cache once;
    // a full cell of another score (another run) is shown beside it.
    const fs::path c = fs::path(root.path()) / "c";
    cell(c, "full", "full", 0.0, {1, 1, 1, 1, 1, 1, 1, 0}, false);
    cell(c, "tova_ratio_0.5", "tova:ratio=0.5", 0.5, {1, 0}, false);
    auto count = [](const std::string& text, const std::string& what) {
        size_t n = 0;
        for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
        return n;
    };
    const std::string two =
        write_leaderboard(collect_leaderboard({a.string(), c.string()}), (fs::path(root.path()) / "out2").string());
    EXPECT_EQ(count(two, "| full | `full` |"), 1u) << two;
    EXPECT_NE(two.find("`tova:ratio=0.5`"), std::string::npos);
    cell(c, "full", "full", 0.0, {1, 1, 1, 1, 1, 1, 0, 0}, false);
    const std::string other =
        write_leaderboard(collect_leaderboard({a.string(), c.string()}), (fs::path(root.path()) / "out3").string());
    // Each named by its sweep, and the 95% line says every method is held against its own sweep's full cache.
    EXPECT_EQ(count(other, "| full (a) | `full` |"), 1u) << other;
    EXPECT_EQ(count(other, "| full (c) | `full` |"), 1u) << other;
    EXPECT_NE(other.find("Keeps ≥ 95% of the full score (75.00 / 87.50, each method against its own sweep's) up to"),
              std::string::npos)
        << other;
    // The plot starts each curve at its own sweep's full score: tova (sweep c) at 75, snapkv (sweep a) at 87.5.
    std::ifstream dat3(fs::path(root.path()) / "out3" / "score_vs_compression_m.gguf.dat");
    const std::string series((std::istreambuf_iterator<char>(dat3)), {});
    EXPECT_NE(series.find("# tova\n0 75 0\n"), std::string::npos) << series;
    EXPECT_NE(series.find("# snapkv\n0 87.5 0\n"), std::string::npos) << series;
    // A sweep without its full-cache cell, or an empty directory, is refused.
    const fs::path b = fs::path(root.path()) / "b";
    cell(b, "tova_ratio_0.5", "tova:ratio=0.5", 0.5, {1, 0}, true);
    EXPECT_THROW(collect_leaderboard({b.string()}), Error);
    fs::create_directories(fs::path(root.path()) / "empty");
    EXPECT_THROW(collect_leaderboard({(fs::path(root.path()) / "empty").string()}), Error);
    fs::remove_all(root.path());
}

/// Δ vs full is paired over the examples both cells ran: a cell with the full score but other examples right is not
/// "≥ 95% with confidence", one that matches the full cell example by example is; a cell with examples the full cell
/// lacks gets no paired interval; NLL's Δ and its interval are in percent of the full NLL.
TEST(Leaderboard, PairedIntervalsOnTheDifferenceFromTheFullCache) {
    test::TempFile root("_paired");
    const fs::path a = fs::path(root.path()) / "a";
    cell(a, "full", "full", 0.0, {1, 1, 1, 1, 1, 1, 1, 0}, false);
    cell(a, "tova", "tova:ratio=0.5", 0.5, {1, 1, 1, 1, 1, 1, 0, 1}, false);       // same mean, two examples swapped
    cell(a, "h2o", "h2o:ratio=0.3", 0.3, {1, 1, 1, 1, 1, 1, 1, 0}, false);         // the full cell's answers
    cell(a, "knorm", "knorm:ratio=0.5", 0.5, {1, 1, 1, 1, 1, 1, 1, 0, 1}, false);  // one example more than full
    const auto rows = collect_leaderboard({a.string()});
    for (const auto& r : rows) {
        if (r.policy == "tova:ratio=0.5") {
            EXPECT_DOUBLE_EQ(r.delta, 0.0);
            // d = (0,…,0,−1,+1): sd² = 2/7.
            EXPECT_NEAR(r.delta_ci95, 100 * 1.96 * std::sqrt(2.0 / 7.0) / std::sqrt(8.0), 1e-9);
        }
        if (r.policy == "h2o:ratio=0.3") EXPECT_DOUBLE_EQ(r.delta_ci95, 0.0);
        if (r.policy == "knorm:ratio=0.5") EXPECT_TRUE(std::isnan(r.delta_ci95));
    }
    const std::string md = write_leaderboard(rows, (fs::path(root.path()) / "out").string());
    EXPECT_NE(md.find("(unpaired) |"), std::string::npos) << md;
    EXPECT_NE(
        md.find("Keeps ≥ 95% of the full score (87.50) up to compression ratio: h2o 0.30, knorm 0.50, tova 0.50."),
        std::string::npos)
        << md;
    EXPECT_NE(md.find("lower end of the paired 95% interval up to compression ratio: h2o 0.30."), std::string::npos)
        << md;

    // NLL: per-sample NLLs paired by sample id; Δ% = 100·(x̄ − f̄)/f̄, its half-width 100·1.96·sd(d)/√n / f̄.
    const fs::path n = fs::path(root.path()) / "n";
    auto nll_cell = [&](const std::string& name, const std::string& policy, const std::vector<double>& v) {
        fs::create_directories(n / name);
        std::ofstream(n / name / "config.yaml") << "task: nll\npolicy: \"" << policy << "\"\nmodel: \"m.gguf\"\n";
        std::ofstream csv(n / name / "predictions.csv");
        csv << "sample,nll,density,compression_ratio\n";
        double mean = 0;
        for (size_t i = 0; i < v.size(); ++i) csv << i << "," << v[i] << ",1,0\n", mean += v[i] / v.size();
        std::ofstream(n / name / "metrics.json") << "{\"policy\": \"" << policy << "\", \"nll\": " << mean << "}\n";
    };
    nll_cell("full", "full", {2.0, 3.0, 4.0});
    nll_cell("h2o", "h2o:ratio=0.5", {2.1, 3.3, 4.0});
    for (const auto& r : collect_leaderboard({n.string()}))
        if (r.policy == "h2o:ratio=0.5") {
            EXPECT_NEAR(r.delta, 100 * 0.4 / 9.0, 1e-3);  // means 3.1333 vs 3 (metrics.json holds 6 digits)
            // d = (0.1, 0.3, 0): mean 0.1333, sd² = ((−0.0333)² + 0.1667² + 0.1333²)/2 = 0.023333.
            EXPECT_NEAR(r.delta_ci95, 100 * 1.96 * std::sqrt(0.07 / 3.0) / std::sqrt(3.0) / 3.0, 1e-9);
        }
    // A sample listed twice in one cell is refused, naming the file.
    cell(a, "twice", "tova:ratio=0.75", 0.75, {1, 1}, false);
    std::ofstream(a / "twice" / "predictions.csv", std::ios::app) << "vt,1024,0,1,1,0.75,\"x\",\"y\"\n";
    EXPECT_THROW(collect_leaderboard({a.string()}), Error);
    fs::remove_all(root.path());
}

/// The curves of one plot stay distinguishable well past gnuplot's own 8-colour cycle.
/// A RULER cell of two tasks: `a` rows (task "niah_single_1") then `b` rows (task "niah_multikey_2"), each
/// (score, compression) pair one sample; metrics.json says what the whole cell said.
void two_task_cell(const fs::path& dir, const std::string& name, const std::string& policy,
                   const std::vector<std::pair<int, double>>& a, const std::vector<std::pair<int, double>>& b) {
    fs::create_directories(dir / name);
    std::ofstream(dir / name / "config.yaml")
        << "task: ruler\npolicy: \"" << policy << "\"\nmodel: \"models/m.gguf\"\n";
    std::ofstream csv(dir / name / "predictions.csv");
    csv << "task,length,index,score,density,compression_ratio,prediction,answers\n";
    int index = 0;
    for (const auto& [rows, task] : {std::make_pair(&a, "niah_single_1"), std::make_pair(&b, "niah_multikey_2")})
        for (const auto& [score, c] : *rows)
            csv << task << ",4096," << index++ << "," << score << "," << 1 - c << "," << c << ",\"x\",\"y\"\n";
    std::ofstream(dir / name / "metrics.json")
        << "{\"policy\": \"" << policy << "\", \"compression_ratio\": 0.123, "
        << "\"density\": 0.877, \"samples\": " << index << ", \"query_aware\": false}\n";
}

/// A task at chance with the full cache is left out of every value: score, interval, Δ, compression and density are
/// over the other tasks' samples; the page names it; a task no cell has is refused.
TEST(Leaderboard, ExcludedTasksLeaveEveryValue) {
    test::TempFile root("_exclude");
    const fs::path a = fs::path(root.path()) / "a";
    two_task_cell(a, "full", "full", {{1, 0}, {1, 0}, {1, 0}, {0, 0}}, {{0, 0}, {0, 0}});
    two_task_cell(a, "tova", "tova:ratio=0.5", {{1, 0.4}, {0, 0.5}, {1, 0.6}, {0, 0.5}}, {{1, 0.9}, {1, 0.9}});
    // All samples: full 3/6 = 50, tova 4/6.
    for (const auto& r : collect_leaderboard({a.string()})) {
        if (r.policy == "full") EXPECT_DOUBLE_EQ(r.value, 50.0);
        if (r.policy == "tova:ratio=0.5") {
            EXPECT_NEAR(r.value, 400.0 / 6, 1e-9);
            EXPECT_DOUBLE_EQ(r.compression, 0.123);  // from metrics.json when nothing is left out
        }
    }
    const auto rows = collect_leaderboard({a.string()}, {"niah_multikey_2"});
    ASSERT_EQ(rows.size(), 2u);
    for (const auto& r : rows) {
        EXPECT_EQ(r.samples, 4);
        if (r.policy == "full") EXPECT_DOUBLE_EQ(r.value, 75.0);
        if (r.policy == "tova:ratio=0.5") {
            EXPECT_DOUBLE_EQ(r.value, 50.0);
            EXPECT_DOUBLE_EQ(r.delta, -25.0);
            EXPECT_NEAR(r.compression, 0.5, 1e-12);  // (0.4 + 0.5 + 0.6 + 0.5) / 4
            EXPECT_NEAR(r.density, 0.5, 1e-12);
            // d = (0, −1, 0, 0): mean −1/4, sd² = (3/16 + 9/16)/3 = 1/4, half-width 1.96 · 0.5 / 2 in points.
            EXPECT_NEAR(r.delta_ci95, 100 * 1.96 * 0.5 / 2, 1e-9);
        }
    }
    const std::string md = write_leaderboard(rows, (fs::path(root.path()) / "out").string(), {"niah_multikey_2"});
    EXPECT_NE(md.find("Left out of every value (scores, intervals, compression, density): niah_multikey_2."),
              std::string::npos)
        << md;
    try {
        collect_leaderboard({a.string()}, {"niah_multikey_9"});
        ADD_FAILURE() << "a task no cell has was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("niah_multikey_9"), std::string::npos) << e.what();
    }
    fs::remove_all(root.path());
}

TEST(Plot, FortyCurvesHaveFortyStyles) {
    std::set<std::string> styles;
    for (size_t i = 0; i < 40; ++i) styles.insert(series_style(i));
    EXPECT_EQ(styles.size(), 40u);
    // Colour alone repeats after 10; the dash type then tells the rounds apart.
    EXPECT_NE(series_style(0).find("dt 1"), std::string::npos);
    EXPECT_NE(series_style(10).find("dt 2"), std::string::npos);
    EXPECT_EQ(series_style(0).substr(0, 18), series_style(10).substr(0, 18));
}

}  // namespace
}  // namespace kvsieve
