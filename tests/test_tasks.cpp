// RULER-style task generators and metrics, and running them under policies.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "cache/kv_cache.h"
#include "eval/ruler.h"
#include "eval/tasks.h"
#include "io/gguf.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "session/prefill.h"
#include "session/session.h"
#include "test_util.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve {
namespace {

const std::string kCorpus =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friend "
    "Ben. One day, they saw a big red ball under a tree. Lily wanted the ball, but Ben said it was his. They were "
    "sad and did not talk. Then Lily had an idea. She said, let us share the ball and play together. Ben smiled "
    "and they played all day. When the sun went down, they went home happy. The next morning, the ball was gone.";

const Tokenizer& qwen_tok() {
    // A real byte-level BPE vocabulary: lengths in its tokens are ~4 characters each.
    static GGUFFile f(test::golden_dir() + "/tokenizers/ggml-vocab-qwen2.gguf");
    static auto t = Tokenizer::from_gguf(f);
    return *t;
}

TEST(Tasks, EveryTaskFitsItsLengthAndHidesItsAnswers) {
    const Tokenizer& tok = qwen_tok();
    for (const auto& task : task_names()) {
        SCOPED_TRACE(task);
        for (int64_t len : {1024, 2048}) {
            const TaskExample ex = make_task_example(task, len, tok, kCorpus, 3);
            EXPECT_EQ(ex.input_tokens, static_cast<int64_t>(tok.encode(ex.input, false, false).size()));
            EXPECT_LE(ex.input_tokens, len);
            EXPECT_GE(ex.input_tokens, len * 0.9) << "haystack should fill the length";
            ASSERT_FALSE(ex.answers.empty());
            if (task != "cwe" && task != "fwe")
                for (const auto& a : ex.answers) EXPECT_NE(ex.input.find(a), std::string::npos) << a;
            EXPECT_GT(ex.max_new_tokens, 0);
        }
    }
}

TEST(Tasks, EveryTaskSplitsIntoContextAndQuestion) {
    // Query-agnostic evaluation compresses context() before it feeds question (kvpress, KVzap Figs. 1-2).
    const Tokenizer& tok = qwen_tok();
    for (const auto& task : task_names()) {
        SCOPED_TRACE(task);
        const TaskExample ex = make_task_example(task, 1024, tok, kCorpus, 5);
        ASSERT_FALSE(ex.question.empty());
        EXPECT_EQ(ex.context() + ex.question, ex.input);
        EXPECT_EQ(ex.question[0], '\n');  // the question starts after the document
        EXPECT_TRUE(ex.question.find("Question") != std::string::npos || ex.question.find("What") != std::string::npos);
        EXPECT_GT(ex.context().size(), 4 * ex.question.size());
        if (task.rfind("niah", 0) == 0)  // the key asked for is in the question, and only the needle holds the value
            for (const auto& a : ex.answers) EXPECT_EQ(ex.question.find(a), std::string::npos);
    }
}

TEST(Tasks, DeterministicBySeed) {
    const Tokenizer& tok = qwen_tok();
    for (const char* task : {"niah_single_2", "niah_multiquery", "vt", "fwe", "qa"}) {
        SCOPED_TRACE(task);
        const auto a = make_task_example(task, 1024, tok, kCorpus, 11),
                   b = make_task_example(task, 1024, tok, kCorpus, 11),
                   c = make_task_example(task, 1024, tok, kCorpus, 12);
        EXPECT_EQ(a.input, b.input);
        EXPECT_EQ(a.answers, b.answers);
        EXPECT_NE(a.input, c.input);
    }
}

TEST(Tasks, MultiQueryAndMultiValueHaveFourAnswers) {
    const Tokenizer& tok = qwen_tok();
    EXPECT_EQ(make_task_example("niah_multiquery", 1024, tok, kCorpus, 1).answers.size(), 4u);
    EXPECT_EQ(make_task_example("niah_multivalue", 1024, tok, kCorpus, 1).answers.size(), 4u);
    EXPECT_EQ(make_task_example("vt", 1024, tok, kCorpus, 1).answers.size(), 5u);
    EXPECT_EQ(make_task_example("cwe", 1024, tok, kCorpus, 1).answers.size(), 10u);
    EXPECT_EQ(make_task_example("fwe", 1024, tok, kCorpus, 1).answers.size(), 3u);
}

TEST(Tasks, VariableTrackingFollowsOneOfTwoChains) {
    const Tokenizer& tok = qwen_tok();
    for (uint64_t seed : {1u, 2u, 3u}) {
        const auto one = make_task_example("vt", 1024, tok, kCorpus, seed);
        const auto two = make_task_example("vt_2", 1024, tok, kCorpus, seed);
        auto count = [](const std::string& s, const std::string& what) {
            size_t n = 0;
            for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
            return n;
        };
        // Statements: "VAR X = value." opens a chain, "VAR Y = VAR X." continues it (plus the question's mention).
        EXPECT_EQ(count(one.input, " = VAR "), 4u);
        EXPECT_EQ(count(two.input, " = VAR "), 8u);
        ASSERT_EQ(two.answers.size(), 5u);
        // The asked value is assigned to the first answer, and each answer is assigned the previous one, in order.
        const size_t q = two.input.find("assigned the value ");
        ASSERT_NE(q, std::string::npos);
        const std::string value = two.input.substr(q + 19, 7);
        size_t at = two.input.find("VAR " + two.answers[0] + " = " + value + ".");
        ASSERT_NE(at, std::string::npos);
        for (size_t i = 1; i < two.answers.size(); ++i) {
            const size_t next = two.input.find("VAR " + two.answers[i] + " = VAR " + two.answers[i - 1] + ".");
            ASSERT_NE(next, std::string::npos) << i;
            EXPECT_GT(next, at);
            at = next;
        }
        // Ten statements before the question (two heads with one "VAR ", eight links with two): the other chain's
        // five variables are there too, so listing every variable in order is wrong.
        EXPECT_EQ(count(two.input.substr(0, q), "VAR "), 18u);
    }
}

TEST(Tasks, MetricsFollowRuler) {
    EXPECT_DOUBLE_EQ(string_match_all("the numbers are 123 and 456", {"123", "456"}), 1.0);
    EXPECT_DOUBLE_EQ(string_match_all("only 123", {"123", "456"}), 0.5);
    EXPECT_DOUBLE_EQ(string_match_all("ABC", {"abc"}), 1.0);  // case-insensitive
    EXPECT_DOUBLE_EQ(string_match_part("only 456", {"123", "456"}), 1.0);
    EXPECT_DOUBLE_EQ(string_match_part("none", {"123", "456"}), 0.0);
    EXPECT_DOUBLE_EQ(task_score("qa", "456", {"123", "456"}), 1.0);
    EXPECT_DOUBLE_EQ(task_score("niah_multivalue", "456", {"123", "456"}), 0.5);
}

TEST(Tasks, BadInputIsReported) {
    const Tokenizer& tok = qwen_tok();
    EXPECT_THROW(make_task_example("niah_triple", 1024, tok, kCorpus, 1), Error);
    EXPECT_THROW(make_task_example("niah_single_1", 40, tok, kCorpus, 1), Error);  // template does not fit
    EXPECT_THROW(make_task_example("niah_single_2", 1024, tok, "", 1), Error);     // prose haystack needs a corpus
    EXPECT_NO_THROW(make_task_example("niah_single_1", 1024, tok, "", 1));         // noise haystack does not
}

/// Two samples of each task at one length, no progress bar: the Ruler tests' runs on stories260K.
RulerOptions two_samples(std::vector<std::string> tasks, int64_t length) {
    RulerOptions o;
    o.tasks = std::move(tasks);
    o.lengths = {length};
    o.samples = 2;
    o.progress = false;
    return o;
}

TEST(Ruler, RunsUnderPoliciesAndRejectsLengthsBeyondTheContext) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    RulerOptions o = two_samples({"niah_single", "variable_tracking"}, 400);
    const RulerResult full = run_ruler(m, *tok, kCorpus, "full", o);
    ASSERT_EQ(full.samples.size(), 4u);
    EXPECT_EQ(full.samples[0].task, "niah_single_1");
    EXPECT_EQ(full.samples[2].task, "vt");
    o.query_aware = true;  // the whole prompt compressed (query-agnostic keeps the question: see below)
    const RulerResult half = run_ruler(m, *tok, kCorpus, "snapkv:ratio=0.5", o);
    for (const auto& s : half.samples) EXPECT_NEAR(s.compression_ratio, 0.45, 0.08);
    o.query_aware = false;
    const auto j = half.metrics();
    for (const char* k : {"score", "density", "compression_ratio", "tasks"}) EXPECT_TRUE(j.contains(k)) << k;
    o.lengths = {2048};
    EXPECT_THROW(run_ruler(m, *tok, kCorpus, "full", o), Error);  // stories260K has 512 positions
    o.lengths = {400};
    o.tasks = {"nosuch"};
    EXPECT_THROW(run_ruler(m, *tok, kCorpus, "full", o), Error);
}

// Each sample records the KV bytes of its pages per position and against a full F16 cache of the same positions. For
// the full cache (no sinks, no window) every head holds all T positions in ⌈T/16⌉ pages of 16 entries, so against the
// unpaged full F16 cache (4·L·H_kv·d bytes per position) it is ⌈T/16⌉·16/T ∈ [1, 1 + 15/T] times as large in F16 and
// that times 34/64 in Q8_0 (34 bytes per 32 elements instead of 64); bytes per position over the fraction is always
// 4·L·H_kv·d. A compressing policy stores fewer bytes.
TEST(Ruler, RecordsKVBytesPerPositionAtTheStoredRowSizes) {
    LlamaModel m(test::model_path("kvsieve-tiny-2k.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    const ModelConfig& c = m.config();
    const double full_f16_per_token = 4.0 * c.n_layer * c.n_head_kv * c.head_dim;
    RulerOptions o = two_samples({"niah_single_1"}, 400);
    for (const char* type : {"f16", "q8_0"}) {
        SCOPED_TRACE(type);
        o.kv_type = type;
        const double row = std::string(type) == "f16" ? 1.0 : 34.0 / 64.0;
        const RulerResult full = run_ruler(m, *tok, kCorpus, "full", o);
        for (const auto& s : full.samples) {
            ASSERT_TRUE(s.kv_bytes_per_token && s.kv_bytes_vs_full_f16);
            EXPECT_GE(*s.kv_bytes_vs_full_f16, row - 1e-12);
            EXPECT_LE(*s.kv_bytes_vs_full_f16, row * (1 + 15.0 / 400));
            EXPECT_NEAR(*s.kv_bytes_per_token / *s.kv_bytes_vs_full_f16, full_f16_per_token, 1e-6);
        }
        const RulerResult half = run_ruler(m, *tok, kCorpus, "snapkv:ratio=0.5", o);
        const auto jf = full.metrics(), jh = half.metrics();
        ASSERT_TRUE(jf.contains("kv_bytes_per_token") && jh.contains("kv_bytes_vs_full_f16"));
        EXPECT_LT(jh["kv_bytes_per_token"].get<double>(), 0.7 * jf["kv_bytes_per_token"].get<double>());
        // The fields survive a partial file; samples written before they were recorded read back without them, and
        // a cell with such a sample reports no bytes.
        RulerSample back = RulerSample::from_json(half.samples[0].to_json());
        EXPECT_EQ(back.kv_bytes_per_token, half.samples[0].kv_bytes_per_token);
        nlohmann::json old = half.samples[0].to_json();
        old.erase("kv_bytes_per_token");
        old.erase("kv_bytes_vs_full_f16");
        RulerResult mixed = half;
        mixed.samples[0] = RulerSample::from_json(old);
        EXPECT_FALSE(mixed.samples[0].kv_bytes_per_token.has_value());
        EXPECT_FALSE(mixed.metrics().contains("kv_bytes_per_token"));
    }
}

TEST(Ruler, QueryAgnosticByDefaultAndRecordedInTheCell) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    RulerOptions o = two_samples({"niah_single_1"}, 400);
    const RulerResult agnostic = run_ruler(m, *tok, kCorpus, "snapkv:ratio=0.75", o);
    o.query_aware = true;
    const RulerResult aware = run_ruler(m, *tok, kCorpus, "snapkv:ratio=0.75", o);
    EXPECT_FALSE(agnostic.metrics()["query_aware"].get<bool>());
    EXPECT_TRUE(aware.metrics()["query_aware"].get<bool>());
    // Query-agnostic keeps the whole question besides a quarter of the context: more entries than query-aware,
    // which compresses the question with the context.
    for (size_t i = 0; i < agnostic.samples.size(); ++i)
        EXPECT_GT(agnostic.samples[i].density, aware.samples[i].density + 0.02);
    test::TempFile dir("_cell");
    write_ruler_cell(dir.path(), aware, o, "m.gguf", "c.txt");
    std::ifstream y(dir.path() + "/config.yaml");
    const std::string yaml((std::istreambuf_iterator<char>(y)), std::istreambuf_iterator<char>());
    EXPECT_NE(yaml.find("query_aware: true"), std::string::npos);
    EXPECT_EQ(yaml.find("kv_rotate:"), std::string::npos) << "an F16 cell keeps the settings it had";
    // A quantized cell records its rotation beside its types (scripts/kv_quant_table.py tells stacks apart by it).
    o.kv_type = "q8_0/q4_0";
    o.kv_rotate = "off";
    write_ruler_cell(dir.path(), aware, o, "m.gguf", "c.txt");
    const std::string quant = read_whole_file(dir.path() + "/config.yaml", "cell config");
    EXPECT_NE(quant.find("kv_type: q8_0/q4_0\n"), std::string::npos) << quant;
    EXPECT_NE(quant.find("kv_rotate: off\n"), std::string::npos) << quant;
    // --kv-rotate on rotates F16 pages too, so such an F16 cell records it.
    o.kv_type = "f16";
    o.kv_rotate = "on";
    write_ruler_cell(dir.path(), aware, o, "m.gguf", "c.txt");
    const std::string f16_on = read_whole_file(dir.path() + "/config.yaml", "cell config");
    EXPECT_NE(f16_on.find("kv_rotate: on\n"), std::string::npos) << f16_on;
    std::filesystem::remove_all(dir.path());
}

TEST(Ruler, DecodePreambleRunsDecodeStepsBetweenContextAndQuestion) {
    LlamaModel m(test::model_path("stories260K.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    RulerOptions o = two_samples({"niah_single_1"}, 300);
    const std::string window = "streaming_llm:window=60,sinks=4";
    const RulerResult plain = run_ruler(m, *tok, kCorpus, window, o);
    o.decode_preamble = 100;
    const RulerResult pre = run_ruler(m, *tok, kCorpus, window, o);
    EXPECT_EQ(pre.metrics()["decode_preamble"], 100);
    EXPECT_EQ(plain.metrics()["decode_preamble"], 0);
    // A sinks + window cache holds the same entries either way, out of 100 more positions: a higher ratio.
    for (size_t i = 0; i < pre.samples.size(); ++i) {
        EXPECT_GT(pre.samples[i].compression_ratio, plain.samples[i].compression_ratio + 0.05);
        EXPECT_LT(pre.samples[i].compression_ratio, 1.0);
    }
    test::TempFile dir("_cell");
    write_ruler_cell(dir.path(), pre, o, "m.gguf", "c.txt");
    std::ifstream y(dir.path() + "/config.yaml");
    const std::string yaml((std::istreambuf_iterator<char>(y)), std::istreambuf_iterator<char>());
    EXPECT_NE(yaml.find("decode_preamble: 100"), std::string::npos);
    std::filesystem::remove_all(dir.path());
    // Refused before any work: with the query-aware protocol, below 0, or past the context (512 positions).
    o.query_aware = true;
    EXPECT_THROW(run_ruler(m, *tok, kCorpus, "full", o), Error);
    o.query_aware = false;
    o.decode_preamble = -1;
    EXPECT_THROW(run_ruler(m, *tok, kCorpus, "full", o), Error);
    o.decode_preamble = 250;
    try {
        run_ruler(m, *tok, kCorpus, "full", o);
        ADD_FAILURE() << "a preamble past the context was run";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("decode preamble"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace kvsieve

namespace kvsieve {
namespace {

/// The protocol written out by hand for one example under one policy, one sequence at a time: the context prefilled
/// (compressed), the question fed without compression, the answer decoded greedily. The reference for
/// run_ruler_cells, which shares the prefill and batches the rest.
RulerSample ruler_by_hand(const LlamaModel& m, const Tokenizer& tok, const std::string& spec, const TaskExample& ex) {
    const auto ids = tok.encode(ex.context(), true, false), q = tok.encode(ex.question, false, false);
    KVCache cache(m.config(), 2 * static_cast<int64_t>(ids.size() + q.size()) + ex.max_new_tokens + 64,
                  parse_policy(spec), std::make_shared<KVPool>(m.config().head_dim, KVType::kF16));
    Session s(m, tok, cache);
    std::vector<float> lg;
    s.prefill(ids, PrefillPlan{}, lg);
    PrefillPlan extend;
    extend.compress = false;
    s.prefill(q, extend, lg);
    std::vector<int32_t> out;
    for (int64_t t = 0; t < ex.max_new_tokens; ++t) {
        const auto next = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
        if (tok.is_eog(next)) break;
        out.push_back(next);
        if (t + 1 < ex.max_new_tokens) s.decode(next, lg);
    }
    RulerSample r;
    r.prediction = tok.decode(out);
    r.density = cache.stats().density;
    return r;
}

TEST(RulerCells, TogetherEachPolicyGetsWhatItGetsAlone) {
    // A quantized model: its batched steps are row-exact against single ones (LlamaModel::forward_batch).
    LlamaModel m(test::model_path("tiny-qwen3-q8_0.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    RulerOptions o = two_samples({"niah_single_1", "vt"}, 400);
    const std::vector<std::string> specs = {"full",
                                            "h2o:ratio=0.5",
                                            "snapkv:ratio=0.75",
                                            "tova:ratio=0.5",
                                            "streaming_llm:window=32,sinks=4",
                                            "knorm:ratio=0.5,sinks=4,window=16"};
    const auto rs = run_ruler_cells(m, *tok, kCorpus, specs, o);
    ASSERT_EQ(rs.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
        SCOPED_TRACE(specs[i]);
        EXPECT_EQ(rs[i].policy, specs[i]);
        ASSERT_EQ(rs[i].samples.size(), 4u);
        for (size_t e = 0; e < 4; ++e) {
            const TaskExample ex = make_task_example(e < 2 ? "niah_single_1" : "vt", 400, *tok, kCorpus, e % 2);
            const RulerSample want = ruler_by_hand(m, *tok, specs[i], ex);
            EXPECT_EQ(rs[i].samples[e].prediction, want.prediction) << "example " << e;
            EXPECT_DOUBLE_EQ(rs[i].samples[e].density, want.density) << "example " << e;
            EXPECT_EQ(rs[i].samples[e].index, static_cast<int64_t>(e));
            if (i > 0) EXPECT_LT(rs[i].samples[e].density, 0.8);
        }
    }
    // A cell that has its first sample already runs only the rest, and keeps the one it had.
    std::vector<RulerResult> done(2);
    done[1].samples = {rs[1].samples[0]};
    done[1].samples[0].prediction = "made before";
    std::vector<std::pair<size_t, int64_t>> seen;
    const auto again = run_ruler_cells(m, *tok, kCorpus, {specs[0], specs[1]}, o, done,
                                       [&](size_t c, const RulerSample& s) { seen.emplace_back(c, s.index); });
    EXPECT_EQ(again[1].samples[0].prediction, "made before");
    EXPECT_EQ(again[1].samples[1].prediction, rs[1].samples[1].prediction);
    EXPECT_EQ(seen.size(), 4u + 3u);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), std::make_pair(size_t{1}, int64_t{0})), 0);
    // Samples of any examples, not only the first ones: a cell that has example 2 makes 0, 1 and 3.
    std::vector<RulerResult> scattered(2);
    scattered[1].samples = {rs[1].samples[2]};
    scattered[1].samples[0].prediction = "made by another shard";
    seen.clear();
    const auto filled = run_ruler_cells(m, *tok, kCorpus, {specs[0], specs[1]}, o, scattered,
                                        [&](size_t c, const RulerSample& s) { seen.emplace_back(c, s.index); });
    ASSERT_EQ(filled[1].samples.size(), 4u);
    for (size_t e = 0; e < 4; ++e) EXPECT_EQ(filled[1].samples[e].index, static_cast<int64_t>(e));
    EXPECT_EQ(filled[1].samples[2].prediction, "made by another shard");
    EXPECT_EQ(filled[1].samples[3].prediction, rs[1].samples[3].prediction);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), std::make_pair(size_t{1}, int64_t{2})), 0);
    EXPECT_EQ(seen.size(), 4u + 3u);
    // A shard makes its own examples only (e mod shards = shard), each as the whole run makes it.
    RulerOptions shard = o;
    shard.shards = 2;
    shard.shard = 1;
    const auto odd = run_ruler_cells(m, *tok, kCorpus, {specs[0], specs[1]}, shard);
    ASSERT_EQ(odd[1].samples.size(), 2u);
    EXPECT_EQ(odd[1].samples[0].index, 1);
    EXPECT_EQ(odd[1].samples[1].index, 3);
    EXPECT_EQ(odd[1].samples[1].prediction, rs[1].samples[3].prediction);
    shard.shard = 2;
    EXPECT_THROW(run_ruler_cells(m, *tok, kCorpus, {specs[0], specs[1]}, shard), Error);
    // Samples that are not this run's examples are refused: another task, or an example beyond the run's.
    done[1].samples[0].index = 4;
    EXPECT_THROW(run_ruler_cells(m, *tok, kCorpus, {specs[0], specs[1]}, o, done), Error);
    done[1].samples[0].index = 0;
    done[1].samples[0].task = "vt";
    EXPECT_THROW(run_ruler_cells(m, *tok, kCorpus, {specs[0], specs[1]}, o, done), Error);
    EXPECT_THROW(run_ruler_cells(m, *tok, kCorpus, {specs[0], specs[1]}, o, std::vector<RulerResult>(3)), Error);
}

TEST(RulerCells, PartialFilesKeepSamplesAcrossAnInterruption) {
    test::TempFile dir("_partial");
    RulerOptions o = two_samples({"niah_single_1"}, 300);
    const nlohmann::json settings = ruler_cell_settings("h2o:ratio=0.5", o, "m.gguf", "c.txt");
    EXPECT_TRUE(read_ruler_partial(dir.path(), settings).empty());
    RulerSample a;
    a.task = "niah_single_1";
    a.length = 300;
    a.index = 0;
    a.score = 1;
    a.density = 0.5;
    a.compression_ratio = 0.5;
    a.prediction = "the \"number\" is 42\n";
    a.answers = {"42"};
    append_ruler_partial(dir.path(), settings, a);
    RulerSample b = a;
    b.index = 1;
    append_ruler_partial(dir.path(), settings, b);
    auto got = read_ruler_partial(dir.path(), settings);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[1].to_json(), b.to_json());
    EXPECT_EQ(got[0].prediction, a.prediction);
    // A line cut short by an interruption is dropped, from the file too: the next sample follows whole lines. So is
    // a whole sample that lost its newline.
    const std::string file = dir.path() + "/partial.jsonl";
    { std::ofstream(file, std::ios::app) << "{\"task\": \"niah_si"; }
    EXPECT_EQ(read_ruler_partial(dir.path(), settings).size(), 2u);
    b.index = 2;
    append_ruler_partial(dir.path(), settings, b);
    got = read_ruler_partial(dir.path(), settings);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[2].index, 2);
    { std::ofstream(file, std::ios::app) << b.to_json().dump(); }
    EXPECT_EQ(read_ruler_partial(dir.path(), settings).size(), 3u);
    // A prediction cut off inside a multi-byte character is stored, not an exception that stops the sweep.
    RulerSample cut = b;
    cut.index = 3;
    cut.prediction = "\xe8\xa9";  // the first two bytes of a three-byte character
    append_ruler_partial(dir.path(), settings, cut);
    got = read_ruler_partial(dir.path(), settings);
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got[3].index, 3);
    // Only a settings line, cut short: nothing was made, and the file starts over cleanly.
    test::TempFile dir2("_partial");
    std::filesystem::create_directories(dir2.path());
    { std::ofstream(dir2.path() + "/partial.jsonl") << "{\"policy\": \"h2"; }
    EXPECT_TRUE(read_ruler_partial(dir2.path(), settings).empty());
    append_ruler_partial(dir2.path(), settings, a);
    EXPECT_EQ(read_ruler_partial(dir2.path(), settings).size(), 1u);
    std::filesystem::remove_all(dir2.path());
    // Other settings: one clear error naming the key.
    RulerOptions other = o;
    other.seed = 7;
    try {
        read_ruler_partial(dir.path(), ruler_cell_settings("h2o:ratio=0.5", other, "m.gguf", "c.txt"));
        ADD_FAILURE() << "a partial file of other settings was read";
    } catch (const Error& e) { EXPECT_NE(std::string(e.what()).find("seed"), std::string::npos) << e.what(); }
    // A damaged line before the last is an error, not a silent loss.
    {
        std::ofstream f(file);
        f << settings.dump() << "\nnot json\n" << a.to_json().dump() << "\n";
    }
    EXPECT_THROW(read_ruler_partial(dir.path(), settings), Error);
    EXPECT_THROW(RulerSample::from_json(nlohmann::json{{"task", "x"}}), Error);
    // The shards' files are read with the run's: by example, an example in two files once (the first file's).
    test::TempFile dir3("_partial");
    RulerSample c = a;
    c.index = 2;
    append_ruler_partial(dir3.path(), settings, c, 0, 2);  // partial.shard0of2.jsonl
    c.index = 1;
    c.prediction = "from shard 1";
    append_ruler_partial(dir3.path(), settings, c, 1, 2);
    c.index = 0;
    append_ruler_partial(dir3.path(), settings, c, 0, 2);
    c.index = 1;
    c.prediction = "from the whole run";
    append_ruler_partial(dir3.path(), settings, c);  // partial.jsonl
    got = read_ruler_partial(dir3.path(), settings);
    ASSERT_EQ(got.size(), 3u);
    for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(got[e].index, e);
    EXPECT_EQ(got[1].prediction, "from the whole run");
    EXPECT_TRUE(std::filesystem::exists(dir3.path() + "/partial.shard1of2.jsonl"));
    EXPECT_THROW(append_ruler_partial(dir3.path(), settings, c, 2, 2), Error);
    remove_ruler_partials(dir3.path());
    EXPECT_TRUE(read_ruler_partial(dir3.path(), settings).empty());
    EXPECT_FALSE(std::filesystem::exists(dir3.path() + "/partial.jsonl"));
    std::filesystem::remove_all(dir3.path());
    std::filesystem::remove_all(dir.path());
}

}  // namespace
}  // namespace kvsieve
