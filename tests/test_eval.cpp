// Evaluation: NLL under policies (chunked and plain protocols), sweeps in kvpress's layout, bad input.
#include <gtest/gtest.h>

#include <cstdio>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "eval/nll.h"
#include "eval/ruler.h"
#include "eval/sweep.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "test_util.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve {
namespace {

const std::string kText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friend "
    "Ben. One day, they saw a big red ball under a tree. Lily wanted the ball, but Ben said it was his. They were "
    "sad and did not talk. Then Lily had an idea. She said, let us share the ball and play together. Ben smiled "
    "and they played all day. When the sun went down, they went home happy. The next morning, the ball was gone. "
    "Lily and Ben looked everywhere: under the slide, behind the bench and near the pond. A duck was sitting on "
    "it! They laughed and laughed, and the duck flew away.";

TEST(EvalNll, FullChunkedEqualsOneShotDenseNll) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    NllOptions o;
    o.sample_tokens = 128;
    o.samples = 2;
    o.kv_type = "f32";
    o.progress = false;
    const NllResult r = evaluate_nll(m, *tok, kText + " " + kText, "full", o);
    ASSERT_EQ(r.nll.size(), 2u);
    // Reference: one dense forward per window, log-softmax of every position.
    const auto ids = tok->encode(kText + " " + kText, false, false);
    double total = 0;
    int64_t n = 0;
    for (int s = 0; s < 2; ++s) {
        std::vector<int32_t> w{1};
        w.insert(w.end(), ids.begin() + s * 127, ids.begin() + (s + 1) * 127);
        DenseKVCache c = m.make_cache(128);
        std::vector<float> logits;
        m.forward(StepPhase::kPrefill, w, c, logits, true);
        for (size_t t = 0; t + 1 < w.size(); ++t, ++n) {
            const float* l = logits.data() + t * 512;
            double mx = -INFINITY, sum = 0;
            for (int v = 0; v < 512; ++v) mx = std::max(mx, double(l[v]));
            for (int v = 0; v < 512; ++v) sum += std::exp(l[v] - mx);
            total += std::log(sum) + mx - l[w[t + 1]];
        }
    }
    EXPECT_EQ(r.tokens, n);
    EXPECT_NEAR(r.mean_nll, total / n, 1e-5);
    EXPECT_DOUBLE_EQ(r.mean_density, 1.0);
}

TEST(EvalNll, CompressionShowsInDensityAndNll) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    NllOptions o;
    o.sample_tokens = 256;
    o.samples = 1;
    o.progress = false;
    const NllResult full = evaluate_nll(m, *tok, kText + " " + kText + " " + kText, "full", o);
    const NllResult half = evaluate_nll(m, *tok, kText + " " + kText + " " + kText, "knorm:ratio=0.5", o);
    // Density counts entries beyond the 128-token window: ⌊(n − 4 − 128)·0.5⌋ kept of n − 128.
    EXPECT_NEAR(half.mean_density, 0.5, 0.05);
    EXPECT_GT(half.mean_compression, 0.1);
    // Dropping half of the entries beyond the window loses information the repeated text needs: NLL rises.
    std::printf("[ nll ] full %.4f, knorm:ratio=0.5 %.4f\n", full.mean_nll, half.mean_nll);
    EXPECT_GT(half.mean_nll, full.mean_nll);
    // Bytes: the full cache's pages hold every position (at least a full F16 cache's bytes, page rounding at most one
    // partly filled page of 16 per head and region); the compressed one's hold fewer. Per position over the
    // fraction of full F16 is always the full F16 cache's 4·L·H_kv·d bytes.
    const ModelConfig& c = m.config();
    EXPECT_GE(full.mean_kv_bytes_vs_full_f16, 1.0);
    EXPECT_LE(full.mean_kv_bytes_vs_full_f16, 1.0 + 3 * 16.0 / 256);
    EXPECT_LT(half.mean_kv_bytes_per_token, full.mean_kv_bytes_per_token);
    for (const NllResult* r : {&full, &half})
        EXPECT_NEAR(r->mean_kv_bytes_per_token / r->mean_kv_bytes_vs_full_f16,
                    4.0 * c.n_layer * c.n_head_kv * c.head_dim, 1e-6);
    EXPECT_TRUE(half.to_json().contains("kv_bytes_vs_full_f16"));
    o.protocol = NllProtocol::kPlain;
    const NllResult plain = evaluate_nll(m, *tok, kText + " " + kText + " " + kText, "knorm:ratio=0.5", o);
    EXPECT_EQ(plain.tokens, 128);  // the continuation after a 128-token prefix
    EXPECT_NEAR(plain.mean_compression, 0.5 * 128 / 256, 0.05);
}

TEST(EvalNll, BadInputIsReportedBeforeWork) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    NllOptions o;
    o.progress = false;
    EXPECT_THROW(evaluate_nll(m, *tok, "", "full", o), Error);
    o.sample_tokens = 4096;  // beyond the 512-token context
    EXPECT_THROW(evaluate_nll(m, *tok, kText, "full", o), Error);
    o.sample_tokens = 2048;
    o.sample_tokens = 512;
    EXPECT_THROW(evaluate_nll(m, *tok, "short text", "full", o), Error);  // fewer tokens than one window
    EXPECT_THROW(evaluate_nll(m, *tok, kText, "nosuch", o), Error);
}

TEST(EvalSweep, ACellsParameterGoesToThePresetNotToTheSelection) {
    EXPECT_EQ(cell_spec("knorm", "ratio", 0.5), "knorm:ratio=0.5");
    EXPECT_EQ(cell_spec("kvzap:model=D", "tau", -4), "kvzap:model=D,rule=threshold,tau=-4");
    const std::string s = cell_spec("knorm:window=8+quest:read_budget=16", "ratio", 0.25);
    EXPECT_EQ(s, "knorm:window=8,ratio=0.25+quest:read_budget=16");
    EXPECT_EQ(parse_policy(s).compression.ratio, 0.25);
    EXPECT_EQ(parse_policy(s).selection.budget, 16);
}

// A quantized NLL cell records the rotation beside its types (an F16 cell's config keeps the settings it had).
TEST(EvalSweep, QuantizedNllCellsRecordTheirRotation) {
    LlamaModel m(test::model_path("kvsieve-tiny-2k.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    test::TempFile dir("_nll_q8");
    for (const char* type : {"f16", "q8_0"}) {
        SweepOptions o;
        o.policies = {"full"};
        o.out_dir = dir.path() + "/" + type;
        o.nll.sample_tokens = 64;
        o.nll.samples = 1;
        o.nll.progress = false;
        o.nll.kv_type = type;
        o.nll.kv_rotate = "off";
        run_nll_sweep(m, *tok, kText, o);
        const std::string yaml = read_whole_file(o.out_dir + "/full/config.yaml", "cell config");
        EXPECT_NE(yaml.find(std::string("kv_type: ") + type + "\n"), std::string::npos) << yaml;
        EXPECT_EQ(yaml.find("kv_rotate: off\n") != std::string::npos, std::string(type) == "q8_0") << yaml;
    }
    std::filesystem::remove_all(dir.path());
}

// A sweep into a directory that holds other policies' cells lists them in its summary and plot, and refuses the
// finished cells of other cache types, rotation or NLL windows instead of taking them as its own.
TEST(EvalSweep, SummaryListsEarlierCellsAndOtherSettingsAreRefused) {
    LlamaModel m(test::model_path("kvsieve-tiny-2k.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    test::TempFile dir("_nll_earlier");
    SweepOptions o;
    o.out_dir = dir.path();
    o.nll.sample_tokens = 64;
    o.nll.samples = 1;
    o.nll.progress = false;
    o.policies = {"full:sinks=4,window=16"};
    run_nll_sweep(m, *tok, kText, o);
    o.policies = {"full"};  // the reference only: every cell is finished
    run_nll_sweep(m, *tok, kText, o);
    const std::string md = read_whole_file(dir.path() + "/summary.md", "summary");
    EXPECT_NE(md.find("| `full` |"), std::string::npos) << md;
    EXPECT_NE(md.find("| `full:sinks=4,window=16` |"), std::string::npos) << md;
    const std::string dat = read_whole_file(dir.path() + "/nll_vs_density.dat", "plot data");
    EXPECT_NE(dat.find("# full:sinks=4,window=16\n"), std::string::npos) << dat;
    auto refused = [&](SweepOptions bad, const std::string& says) {
        try {
            run_nll_sweep(m, *tok, kText, bad);
            ADD_FAILURE() << "a finished cell of other settings was taken as this sweep's";
        } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what(); }
    };
    SweepOptions q8 = o;
    q8.nll.kv_type = "q8_0";
    refused(q8,
            "was made with KV cache types f16; this sweep has q8_0 (use another --out, or --kv-type f16 to continue "
            "this one)");
    SweepOptions on = o;
    on.nll.kv_rotate = "on";
    refused(on, "was made with --kv-rotate auto or off (unrotated); this sweep has --kv-rotate on");
    SweepOptions longer = o;
    longer.nll.sample_tokens = 128;
    refused(longer, "was made with window_tokens 64; this sweep has 128");
    std::filesystem::remove_all(dir.path());
}

TEST(EvalSweep, KvpressLayoutSummaryAndResume) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("kvsieve_sweep_" + std::to_string(::getpid()))).string();
    SweepOptions o;
    o.policies = {"knorm", "streaming_llm", "streaming_llm:sinks=2"};
    o.ratios = {0.5, 0.75};
    o.out_dir = dir;
    o.nll.sample_tokens = 160;
    o.nll.samples = 1;
    o.nll.progress = false;
    run_nll_sweep(m, *tok, kText + " " + kText, o);
    for (const char* cell :
         {"full", "knorm_ratio_0.5", "knorm_ratio_0.75", "streaming_llm_ratio_0.5", "streaming_llm_ratio_0.75"}) {
        SCOPED_TRACE(cell);
        const auto d = std::filesystem::path(dir) / cell;
        EXPECT_TRUE(std::filesystem::exists(d / "predictions.csv"));
        EXPECT_TRUE(std::filesystem::exists(d / "config.yaml"));
        std::ifstream f(d / "metrics.json");
        const auto j = nlohmann::json::parse(f);
        for (const char* k : {"score", "compression_ratio", "density", "nll"}) EXPECT_TRUE(j.contains(k)) << k;
    }
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / "summary.md"));
    {  // one curve per policy; two of one name are told apart by their specs
        std::ifstream g(std::filesystem::path(dir) / "nll_vs_density.gp");
        const std::string gp((std::istreambuf_iterator<char>(g)), {});
        for (const char* t : {"title 'knorm'", "title 'streaming_llm'", "title 'streaming_llm:sinks=2'"})
            EXPECT_NE(gp.find(t), std::string::npos) << t << " in " << gp;
    }
    const auto t0 = std::filesystem::last_write_time(std::filesystem::path(dir) / "knorm_ratio_0.5" / "metrics.json");
    run_nll_sweep(m, *tok, kText + " " + kText, o);  // finished cells are skipped
    EXPECT_EQ(std::filesystem::last_write_time(std::filesystem::path(dir) / "knorm_ratio_0.5" / "metrics.json"), t0);
    SweepOptions bad = o;
    bad.ratios = {1.5};
    EXPECT_THROW(run_nll_sweep(m, *tok, kText, bad), Error);
    bad = o;
    bad.policies = {"nosuch"};
    EXPECT_THROW(run_nll_sweep(m, *tok, kText, bad), Error);
    std::filesystem::remove_all(dir);
}

TEST(EvalSweep, WithoutRatiosOrThresholdsEachSpecIsOneCell) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("kvsieve_fixed_" + std::to_string(::getpid()))).string();
    SweepOptions o;
    o.policies = {"streaming_llm:window=16,sinks=2", "knorm:ratio=0.5,window=8+quest:read_budget=16"};
    o.out_dir = dir;
    o.nll.sample_tokens = 160;
    o.nll.samples = 1;
    o.nll.progress = false;
    run_nll_sweep(m, *tok, kText + " " + kText, o);
    for (const auto& spec : o.policies) {
        std::ifstream f(std::filesystem::path(dir) / cell_name(spec) / "metrics.json");
        ASSERT_TRUE(f.good()) << spec;
        EXPECT_LT(nlohmann::json::parse(f)["density"].get<double>(), 1.0) << spec;
    }
    std::ifstream dat(std::filesystem::path(dir) / "nll_vs_density.dat");
    const std::string d((std::istreambuf_iterator<char>(dat)), {});
    EXPECT_NE(d.find("# knorm:ratio=0.5,window=8+quest:read_budget=16"), std::string::npos) << d;
    std::filesystem::remove_all(dir);
}

/// A RULER sweep of knorm and h2o at ratio 0.5 over `tasks` at 300 tokens, 2 samples each, on stories260K.
SweepOptions knorm_h2o_ruler_sweep(std::vector<std::string> tasks) {
    SweepOptions o;
    o.policies = {"knorm", "h2o"};
    o.ratios = {0.5};
    o.model_path = "stories260K.gguf";
    o.corpus_path = "story";
    o.ruler.tasks = std::move(tasks);
    o.ruler.lengths = {300};
    o.ruler.samples = 2;
    o.ruler.progress = false;
    return o;
}

TEST(EvalRuler, CompressingDuringPrefillIsItsOwnProtocolAndChunksAloneChangeNothing) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    RulerOptions o;
    o.tasks = {"niah_single_1"};
    o.lengths = {300};
    o.samples = 2;
    o.progress = false;
    const std::string spec = "snapkv:ratio=0.5,window=8";
    const RulerResult one = run_ruler(m, *tok, kText, spec, o);
    o.prefill_chunk = 32;
    const RulerResult chunked = run_ruler(m, *tok, kText, spec, o);
    o.compress_during_prefill = true;
    const RulerResult during = run_ruler(m, *tok, kText, spec, o);
    ASSERT_EQ(one.samples.size(), 2u);
    ASSERT_EQ(during.samples.size(), 2u);
    for (size_t i = 0; i < one.samples.size(); ++i) {
        // The compression points are the context's end, whatever its chunks (session/prefill_plan.h).
        EXPECT_EQ(chunked.samples[i].prediction, one.samples[i].prediction);
        EXPECT_EQ(chunked.samples[i].density, one.samples[i].density);
        // After every chunk SnapKV keeps its ratio of what the cache holds, so the context ends at the same size
        // (which entries differ: the observation window is each chunk's last queries; docs/results/ruler-prefill).
        EXPECT_NEAR(during.samples[i].density, one.samples[i].density, 1e-9);
    }
    // Recorded in the cell's settings only when set, so that earlier cells keep their settings.
    EXPECT_EQ(ruler_cell_settings(spec, o, "m", "c").value("compress_during_prefill", false), true);
    test::TempDir dir;
    write_ruler_cell(dir.path(), during, o, "m", "c");
    const std::string yaml = read_whole_file(dir.path() + "/config.yaml", "cell");
    EXPECT_NE(yaml.find("\nprefill_chunk: 32\ncompress_during_prefill: true\n"), std::string::npos) << yaml;
    o.compress_during_prefill = false;
    EXPECT_FALSE(ruler_cell_settings(spec, o, "m", "c").contains("compress_during_prefill"));
}

TEST(EvalSweep, RulerCellsRunTogetherAndResumeFromTheirPartialFiles) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    const auto base = std::filesystem::temp_directory_path() / ("kvsieve_ruler_sweep_" + std::to_string(::getpid()));
    SweepOptions o = knorm_h2o_ruler_sweep({"niah_single_1"});
    // All at once, and one cell at a time: the same cells.
    o.out_dir = (base / "together").string();
    run_ruler_sweep(m, *tok, kText, o);
    o.out_dir = (base / "alone").string();
    o.cells_per_pass = 1;
    run_ruler_sweep(m, *tok, kText, o);
    for (const char* cell : {"full", "knorm_ratio_0.5", "h2o_ratio_0.5"}) {
        SCOPED_TRACE(cell);
        EXPECT_EQ(read_whole_file((base / "together" / cell / "predictions.csv").string(), "cell output"),
                  read_whole_file((base / "alone" / cell / "predictions.csv").string(), "cell output"));
        EXPECT_FALSE(std::filesystem::exists(base / "together" / cell / "partial.jsonl"));
        EXPECT_TRUE(std::filesystem::exists(base / "together" / cell / "metrics.json"));
    }
    // Finished cells of another number of samples are not taken for this sweep's.
    {
        SweepOptions more = o;
        more.out_dir = (base / "together").string();
        more.ruler.samples = 3;
        try {
            run_ruler_sweep(m, *tok, kText, more);
            ADD_FAILURE() << "cells of 2 samples were taken for a sweep of 3";
        } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("samples"), std::string::npos) << e.what(); }
    }
    // Interrupted after one sample of the h2o cell: the next run keeps that sample and makes only the other.
    o.out_dir = (base / "resumed").string();
    o.cells_per_pass = 0;
    const std::string spec = "h2o:ratio=0.5";
    RulerSample first;
    first.task = "niah_single_1";
    first.length = 300;
    first.index = 0;
    first.prediction = "kept from before";
    first.answers = {"0"};
    const nlohmann::json settings = ruler_cell_settings(spec, o.ruler, o.model_path, o.corpus_path);
    append_ruler_partial((base / "resumed" / "h2o_ratio_0.5").string(), settings, first);
    run_ruler_sweep(m, *tok, kText, o);
    const std::string got =
        read_whole_file((base / "resumed" / "h2o_ratio_0.5" / "predictions.csv").string(), "cell output");
    EXPECT_NE(got.find("kept from before"), std::string::npos) << got;
    EXPECT_FALSE(std::filesystem::exists(base / "resumed" / "h2o_ratio_0.5" / "partial.jsonl"));
    // A partial file of other settings stops the sweep with the key named.
    o.out_dir = (base / "other").string();
    RulerOptions seeded = o.ruler;
    seeded.seed = 5;
    append_ruler_partial((base / "other" / "h2o_ratio_0.5").string(),
                         ruler_cell_settings(spec, seeded, o.model_path, o.corpus_path), first);
    try {
        run_ruler_sweep(m, *tok, kText, o);
        ADD_FAILURE() << "a partial file of other settings was used";
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("seed"), std::string::npos) << e.what(); }
    std::filesystem::remove_all(base);
}

TEST(EvalSweep, CellsOfAnotherPromptFormatAreRefusedNamingBoth) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    const auto base = std::filesystem::temp_directory_path() / ("kvsieve_format_sweep_" + std::to_string(::getpid()));
    SweepOptions raw = knorm_h2o_ruler_sweep({"niah_single_1"});
    raw.policies = {"knorm"};
    raw.ruler.samples = 1;
    raw.out_dir = (base / "finished").string();
    run_ruler_sweep(m, *tok, kText, raw);
    SweepOptions chat = raw;
    chat.ruler.format = RulerFormat::kChat;
    chat.ruler.chat_template = chat_template_defaults(ChatTemplateKind::kChatML);
    auto refused = [&](const SweepOptions& o, const std::vector<std::string>& named) {
        try {
            run_ruler_sweep(m, *tok, kText, o);
            ADD_FAILURE() << "cells of the other format were resumed";
        } catch (const Error& e) {
            for (const auto& n : named) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
        }
    };
    // Finished cells (metrics.json) and partial files of the other format.
    refused(chat, {"--format raw", "--format chat"});
    const std::string spec = "knorm:ratio=0.5";
    RulerSample first;
    first.task = "niah_single_1";
    first.length = 300;
    first.index = 0;
    first.prediction = "kept from before";
    first.answers = {"0"};
    chat.out_dir = (base / "partial").string();
    append_ruler_partial((base / "partial" / "knorm_ratio_0.5").string(),
                         ruler_cell_settings(spec, raw.ruler, raw.model_path, raw.corpus_path), first);
    refused(chat, {"format = \"raw\"", "this run has \"chat\""});
    // A partial file from before the format was recorded was made raw: a raw sweep resumes it.
    raw.out_dir = (base / "old").string();
    nlohmann::json old = ruler_cell_settings(spec, raw.ruler, raw.model_path, raw.corpus_path);
    old.erase("format");
    append_ruler_partial((base / "old" / "knorm_ratio_0.5").string(), old, first);
    run_ruler_sweep(m, *tok, kText, raw);
    EXPECT_NE(read_whole_file((base / "old" / "knorm_ratio_0.5" / "predictions.csv").string(), "cell output")
                  .find("kept from before"),
              std::string::npos);
    std::filesystem::remove_all(base);
}

TEST(EvalSweep, ThresholdPoliciesTakeTheThresholdsAndThePoliciesTheRatios) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    const auto base = std::filesystem::temp_directory_path() / ("kvsieve_tau_sweep_" + std::to_string(::getpid()));
    SweepOptions o = knorm_h2o_ruler_sweep({"niah_single_1"});
    o.thresholds = {-3.0};
    o.threshold_policies = {"knorm:window=16"};
    o.out_dir = (base / "one").string();
    run_ruler_sweep(m, *tok, kText, o);
    // The grid: full, the policies at each ratio, the threshold policy at each τ; no knorm or h2o at τ, no ratio cell
    // of the threshold policy.
    std::vector<std::string> cells;
    for (const auto& d : std::filesystem::directory_iterator(o.out_dir))
        if (d.is_directory()) cells.push_back(d.path().filename().string());
    std::sort(cells.begin(), cells.end());
    EXPECT_EQ(cells, (std::vector<std::string>{"full", "h2o_ratio_0.5", "knorm_ratio_0.5",
                                               "knorm_window_16_rule_threshold_tau_-3"}));
    // The τ cell is the one a sweep of that policy over the thresholds alone makes.
    SweepOptions alone = o;
    alone.policies = {"knorm:window=16"};
    alone.threshold_policies.clear();
    alone.ratios.clear();
    alone.out_dir = (base / "alone").string();
    run_ruler_sweep(m, *tok, kText, alone);
    const char* tau_cell = "knorm_window_16_rule_threshold_tau_-3";
    EXPECT_EQ(read_whole_file((base / "one" / tau_cell / "predictions.csv").string(), "cell output"),
              read_whole_file((base / "alone" / tau_cell / "predictions.csv").string(), "cell output"));
    SweepOptions bad = o;
    bad.thresholds.clear();
    bad.out_dir = (base / "bad").string();
    try {
        run_ruler_sweep(m, *tok, kText, bad);
        ADD_FAILURE() << "threshold policies without thresholds were accepted";
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("no thresholds"), std::string::npos) << e.what(); }
    std::filesystem::remove_all(base);
}

TEST(EvalSweep, ShardsShareTheExamplesAndTheLastWritesTheCells) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    const auto base = std::filesystem::temp_directory_path() / ("kvsieve_ruler_shards_" + std::to_string(::getpid()));
    SweepOptions o = knorm_h2o_ruler_sweep({"niah_single_1", "niah_single_2"});  // 4 examples: shard 0 of 2 makes
                                                                                 // 0 and 2, shard 1 makes 1 and 3
    o.out_dir = (base / "whole").string();
    run_ruler_sweep(m, *tok, kText, o);
    o.out_dir = (base / "sharded").string();
    o.ruler.shards = 2;
    o.ruler.shard = 1;
    run_ruler_sweep(m, *tok, kText, o);
    // One shard done: its samples are in its own partial file, no cell is written and no summary.
    const auto h2o = base / "sharded" / "h2o_ratio_0.5";
    EXPECT_FALSE(std::filesystem::exists(h2o / "metrics.json"));
    EXPECT_FALSE(std::filesystem::exists(base / "sharded" / "summary.md"));
    ASSERT_TRUE(std::filesystem::exists(h2o / "partial.shard1of2.jsonl"));
    const auto half =
        read_ruler_partial(h2o.string(), ruler_cell_settings("h2o:ratio=0.5", o.ruler, o.model_path, o.corpus_path));
    ASSERT_EQ(half.size(), 2u);
    EXPECT_EQ(half[0].index, 1);
    EXPECT_EQ(half[1].index, 3);
    // The other shard makes the rest and, the last to finish, writes every cell as the whole run did.
    o.ruler.shard = 0;
    run_ruler_sweep(m, *tok, kText, o);
    for (const char* cell : {"full", "knorm_ratio_0.5", "h2o_ratio_0.5"}) {
        SCOPED_TRACE(cell);
        EXPECT_EQ(read_whole_file((base / "sharded" / cell / "predictions.csv").string(), "cell output"),
                  read_whole_file((base / "whole" / cell / "predictions.csv").string(), "cell output"));
        EXPECT_EQ(read_whole_file((base / "sharded" / cell / "metrics.json").string(), "cell output"),
                  read_whole_file((base / "whole" / cell / "metrics.json").string(), "cell output"));
        EXPECT_FALSE(std::filesystem::exists(base / "sharded" / cell / "partial.shard0of2.jsonl"));
        EXPECT_FALSE(std::filesystem::exists(base / "sharded" / cell / "partial.shard1of2.jsonl"));
    }
    EXPECT_TRUE(std::filesystem::exists(base / "sharded" / "summary.md"));
    EXPECT_THROW(ruler_partial_name(2, 2), Error);
    EXPECT_EQ(ruler_partial_name(0, 1), "partial.jsonl");
    std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace kvsieve
