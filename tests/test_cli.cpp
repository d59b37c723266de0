// The command-line tool end to end: outputs on good input, one-line errors and non-zero exits on bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "test_labels.h"
#include "test_util.h"

namespace kvsieve {
namespace {

using test::CmdResult;
CmdResult run(const std::string& args, const std::string& input = "") { return test::run_cli(args, input); }

/// Bad input: non-zero exit (not a crash), and stderr holds the expected words.
void expect_clean_failure(const std::string& args, const std::string& needle) {
    const CmdResult r = run(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_LT(r.status, 128) << "crashed: " << args;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nstderr: " << r.err;
}

const std::string kModel = test::model_path("stories260K.gguf");

TEST(Cli, TokenizePrintsIdsOnOneLine) {
    // Ids from tests/data/golden/stories260K/once_upon_a_time.json (llama.cpp's tokenizer; tests/data/README.md).
    CmdResult r = run("tokenize -m " + kModel + " -p 'Once upon a time'");
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, "1 348 342 364 305 261 397\n");
    r = run("tokenize -m " + kModel + " -p 'Once upon a time' --no-bos");
    EXPECT_EQ(r.out, "348 342 364 305 261 397\n");
}

TEST(Cli, GenerateGreedyIdsMatchLlamaCpp) {
    // First 16 greedy ids of tests/data/golden/stories260K/once_upon_a_time.json.
    const CmdResult r = run("generate -m " + kModel + " -p 'Once upon a time' -n 16 --temp 0 --ids -q");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "439 261 399 294 316 427 285 391 405 431 313 381 266 268 363 345\n");
}

TEST(Cli, GenerateSampledIsSeedDeterministic) {
    const std::string a = "generate -m " + kModel + " -p 'Tom was sad' -n 24 --temp 1 --seed 7 --ids -q";
    const CmdResult r1 = run(a), r2 = run(a),
                    r3 = run("generate -m " + kModel + " -p 'Tom was sad' -n 24 --temp 1 --seed 8 --ids -q");
    EXPECT_EQ(r1.status, 0);
    EXPECT_EQ(r1.out, r2.out);
    EXPECT_NE(r1.out, r3.out);
}

KVSIEVE_SLOW_TEST(Cli, SavedSequenceContinuesAsIfNeverSaved) {
    // 8 sampled tokens, save, 8 more from the file == 16 in one run (same seed: the sampler's state is saved too);
    // then new text after the saved sequence; then errors.
    test::TempFile f(".kvseq");
    const std::string base = "generate -m " + kModel + " --temp 1 --seed 3 --ids -q --policy h2o:budget=24 ";
    const CmdResult whole = run(base + "-p 'Tom was sad' -n 16");
    const CmdResult first = run(base + "-p 'Tom was sad' -n 8 --save-cache " + f.path());
    const CmdResult rest = run(base + "-n 8 --load-cache " + f.path());
    ASSERT_EQ(first.status, 0) << first.err;
    ASSERT_EQ(rest.status, 0) << rest.err;
    std::string joined = first.out;
    joined.back() = ' ';
    EXPECT_EQ(joined + rest.out, whole.out);
    const CmdResult more = run("generate -m " + kModel + " --temp 0 -q --load-cache " + f.path() + " -p ' Then' -n 4");
    EXPECT_EQ(more.status, 0) << more.err;
    EXPECT_EQ(more.out.rfind(" Then", 0), 0u) << more.out;
    const CmdResult other =
        run("generate -m " + kModel + " -q --load-cache " + f.path() + " --policy snapkv:ratio=0.5 -n 2");
    EXPECT_EQ(other.status, 1);
    EXPECT_NE(other.err.find("was saved under policy 'h2o:budget=24'"), std::string::npos) << other.err;
    test::TempFile junk(".kvseq");
    {
        std::ofstream o(junk.path());
        o << "junk";
    }
    const CmdResult bad = run("generate -m " + kModel + " -q --load-cache " + junk.path() + " -n 2");
    EXPECT_EQ(bad.status, 1);
    EXPECT_NE(bad.err.find("not a kvsieve cache file"), std::string::npos) << bad.err;
}

KVSIEVE_SLOW_TEST(Cli, BadInputGivesOneLineErrors) {
    test::TempFile trunc(".gguf");
    {
        std::ifstream in(kModel, std::ios::binary);
        std::vector<char> b(std::istreambuf_iterator<char>(in), {});
        std::ofstream o(trunc.path(), std::ios::binary);
        o.write(b.data(), static_cast<std::streamsize>(b.size() / 2));
    }
    expect_clean_failure("generate -m " + trunc.path() + " -p hi", "truncated");
    expect_clean_failure("generate -m " + test::data_dir() + "/models/tok512.bin -p hi", "not a GGUF file");
    expect_clean_failure("generate -m /nonexistent.gguf -p hi", "nonexistent.gguf");
    expect_clean_failure("generate -m " + kModel + " -p 'Once upon a time there was a dog' -c 4",
                         "longer than the context");
    expect_clean_failure("generate -m " + kModel + " -p hi --temp -1", "--temp");
    expect_clean_failure("generate -m " + kModel + " -p hi --top-p 2", "--top-p");
    expect_clean_failure("generate -m " + kModel + " -p hi -n abc", "-n");
    expect_clean_failure("generate -m " + kModel + " -p hi --frobnicate", "frobnicate");
    expect_clean_failure("bench -m " + kModel + " -r 0", "-r");
    expect_clean_failure("synth no-such-shape -o /tmp/x.gguf", "unknown model shape");
    expect_clean_failure("synth tiny-qwen3 -o /tmp/x.gguf --type q6_k", "synth writes");
    expect_clean_failure("nosuchcommand", "subcommand");
    const CmdResult r = run("generate -m " + trunc.path() + " -p hi");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
}

TEST(Cli, PolicyStatsTableAndJson) {
    test::TempFile json(".json");
    const std::string prompt =
        "'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
        "friend Ben. One day, they saw a big red ball under a tree. Lily wanted the ball, but Ben said it was his.'";
    const CmdResult r = run("generate -m " + kModel + " -p " + prompt +
                            " -n 8 --temp 0 --policy snapkv:ratio=0.75 --stats-json " + json.path());
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("density"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("compression ratio"), std::string::npos) << r.err;
    std::ifstream f(json.path());
    const auto j = nlohmann::json::parse(f);
    for (const char* k : {"policy", "tokens", "compression_ratio", "density", "kv_bytes_peak", "kv_bytes_final",
                          "kv_bytes_full", "layers"})
        EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_EQ(j["policy"], "snapkv:ratio=0.75");
    EXPECT_EQ(j["layers"].size(), 5u);
    EXPECT_EQ(j["layers"][0]["entries"].size(), 4u);
    // The 8 decode tokens are kept on top of the compressed prompt, so the ratio is a little under 0.75.
    EXPECT_GT(j["compression_ratio"].get<double>(), 0.6);
    EXPECT_LT(j["kv_bytes_final"].get<double>(), j["kv_bytes_full"].get<double>() * 0.45);
    // The table's saving line is full − final, in MiB and percent.
    const double full = j["kv_bytes_full"].get<double>(), fin = j["kv_bytes_final"].get<double>();
    char want[160];
    std::snprintf(want, sizeof want, "memory saved against the full F16 cache: %.2f MiB (%.1f%%), %.1f× smaller",
                  (full - fin) / 1048576.0, 100.0 * (full - fin) / full, full / fin);
    EXPECT_NE(r.err.find(want), std::string::npos) << want << "\n" << r.err;
}

KVSIEVE_SLOW_TEST(Cli, GenerateFromAFileAndAQuestion) {
    test::TempFile doc(".txt");
    std::ofstream(doc.path()) << "Once upon a time, there was a little girl named Lily.\n\n";
    // -f then -p: the prompt is the document (trailing newlines dropped), a blank line, then the question; the
    // ids equal those of the same text given with -p alone.
    const CmdResult a = run("generate -m " + kModel + " -f " + doc.path() + " -p 'She liked' -n 8 --temp 0 --ids -q");
    const CmdResult b =
        run("generate -m " + kModel +
            " -p \"$(printf 'Once upon a time, there was a little girl named Lily.\\n\\nShe liked')\" -n 8 "
            "--temp 0 "
            "--ids -q");
    ASSERT_EQ(a.status, 0) << a.err;
    ASSERT_EQ(b.status, 0) << b.err;
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(std::count(a.out.begin(), a.out.end(), ' '), 7);
    // -f alone is the whole prompt.
    const CmdResult c = run("generate -m " + kModel + " -f " + doc.path() + " -n 4 --temp 0 -q");
    EXPECT_EQ(c.status, 0) << c.err;
    EXPECT_EQ(c.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << c.out;
    expect_clean_failure("generate -m " + kModel + " -n 4", "give a prompt with -p, a document with -f, or both");
    expect_clean_failure("generate -m " + kModel + " -f /nonexistent/doc.txt -p q", "/nonexistent/doc.txt");
    test::TempFile empty(".txt");
    std::ofstream(empty.path()) << "\n";
    expect_clean_failure("generate -m " + kModel + " -f " + empty.path(), "is empty and no -p was given");
}

TEST(Cli, QuantizeNamesTheTypesItWrites) {
    test::TempFile out(".gguf");
    expect_clean_failure("quantize --type iq4_nl " + kModel + " " + out.path(),
                         "--type 'iq4_nl' is not a type quantize writes (f32, f16, bf16, q8_0");
    expect_clean_failure("quantize --type q4_k " + kModel + " " + out.path(), "not Q4_K");
}

TEST(Cli, PullNamesTheModelsItKnows) { expect_clean_failure("pull nosuch-model", "smollm2-135m"); }

KVSIEVE_SLOW_TEST(Cli, BadPolicyOptionsAreReported) {
    expect_clean_failure("generate -m " + kModel + " -p hi --policy nosuch", "unknown policy 'nosuch'");
    expect_clean_failure("generate -m " + kModel + " -p hi --policy snapkv:frob=1", "unknown key 'frob'");
    expect_clean_failure("generate -m " + kModel + " -p hi --policy snapkv:ratio=1.5", "outside [0, 1)");
    expect_clean_failure("generate -m " + kModel + " -p hi --policy knorm:rule=threshold,tau=x", "not a number");
    expect_clean_failure("generate -m " + kModel + " -p hi -c 128 --policy h2o:budget=4096", "larger than the context");
    expect_clean_failure("generate -m " + kModel + " -p hi --kv-type f8", "unknown KV cache type 'f8'");
    expect_clean_failure("generate -m " + kModel + " -p hi --policy spkv", "has no SP-KV gates");
    expect_clean_failure("generate -m " + kModel + " -p 'Once upon a time there was' -n 400 --kv-budget-mb 0.01",
                         "KV pool exhausted");
}

TEST(Cli, QuantizationAtAdmissionRunsKeepsTheWindowInF16AndIsRecordedInTheCache) {
    // tiny-2k (head size 32), Q8_0 keys and values quantized at admission under a policy with 4 sinks and a window
    // of 16: the stats name the place and count the F16 and the Q8_0 pages apart; a record of it is refused by a
    // cache quantized at write, naming both.
    const std::string tiny2k = test::model_path("kvsieve-tiny-2k.gguf");
    test::TempFile json(".json"), seq(".kvseq");
    const std::string policy = " --policy tova:budget=1024,window=16,sinks=4";
    const CmdResult r = run("generate -m " + tiny2k +
                            " -p 'Once upon a time there was a little girl' -n 30 --temp 0"
                            " --kv-type q8_0 --kv-quant-at admission" +
                            policy + " --stats-json " + json.path() + " --save-cache " + seq.path());
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("quantized at admission: sinks and window f16"), std::string::npos) << r.err;
    std::ifstream f(json.path());
    const auto j = nlohmann::json::parse(f);
    EXPECT_EQ(j.at("kv_quant_at"), "admission");
    EXPECT_EQ(j.at("kv_type_local"), "f16");
    const uint64_t local = j.at("kv_bytes_local").get<uint64_t>(), global = j.at("kv_bytes_global").get<uint64_t>();
    EXPECT_EQ(local % (16 * (64 + 64)), 0u) << local;  // F16 pages: 16 entries × (64 + 64) bytes at d = 32
    EXPECT_EQ(global % (16 * (34 + 34)), 0u) << global;
    EXPECT_GT(global, 0u);
    EXPECT_EQ(local + global, j.at("kv_bytes_final").get<uint64_t>());
    expect_clean_failure("generate -m " + tiny2k + " -q -n 2 --kv-type q8_0" + policy + " --load-cache " + seq.path(),
                         "(sinks and window: keys f16, values f16); this cache stores keys as q8_0 and values as q8_0");
    expect_clean_failure("generate -m " + kModel + " -p hi --kv-quant-at later",
                         "--kv-quant-at: unknown place of KV quantization 'later' (supported: write, admission)");
}

TEST(Cli, KVTypeTakesTheSpecReportsRecord) {
    // --kv-type takes the spec a report's config.yaml records (q8_0/q4_0@admission): the run's stats show the same
    // types and place as --cache-type-k q8_0 --cache-type-v q4_0 --kv-quant-at admission; a place given twice that
    // disagrees, and a bad place or type inside the spec, are named.
    const std::string tiny2k = test::model_path("kvsieve-tiny-2k.gguf");
    const std::string base = "generate -m " + tiny2k +
                             " -p 'Once upon a time there was a little girl' -n 24 --temp 0"
                             " --policy tova:budget=1024,window=16,sinks=4";
    auto stats = [&](const std::string& flags) {
        test::TempFile json(".json");
        const CmdResult r = run(base + " " + flags + " --stats-json " + json.path());
        EXPECT_EQ(r.status, 0) << flags << ": " << r.err;
        std::ifstream f(json.path());
        return nlohmann::json::parse(f);
    };
    const auto spec = stats("--kv-type q8_0/q4_0@admission");
    const auto split = stats("--cache-type-k q8_0 --cache-type-v q4_0 --kv-quant-at admission");
    for (const char* key : {"kv_type", "kv_quant_at", "kv_type_local", "kv_bytes_local", "kv_bytes_global"})
        EXPECT_EQ(spec.at(key), split.at(key)) << key;
    EXPECT_EQ(spec.at("kv_type"), "q8_0/q4_0");
    EXPECT_EQ(spec.at("kv_quant_at"), "admission");
    // Agreeing places given twice run; --cache-type-v still overrides the spec's value half.
    const auto both = stats("--kv-type q8_0@admission --kv-quant-at admission --cache-type-v q4_0");
    EXPECT_EQ(both.at("kv_type"), "q8_0/q4_0");
    EXPECT_EQ(both.at("kv_quant_at"), "admission");
    expect_clean_failure(base + " --kv-type q8_0@admission --kv-quant-at write",
                         "--kv-type q8_0@admission says the entries are quantized at admission but --kv-quant-at says "
                         "write");
    expect_clean_failure(base + " --kv-type q8_0@later", "--kv-type: unknown place of KV quantization 'later'");
    expect_clean_failure(base + " --kv-type q8_0/iq4_xs", "--kv-type: unknown KV cache type 'iq4_xs'");
}

TEST(Cli, QuantizedKVTypesRunAndBadOnesAreReported) {
    // tiny-2k has head size 32: keys as q8_0, values as q4_0; the stats name both and count their real bytes.
    const std::string tiny2k = test::model_path("kvsieve-tiny-2k.gguf");
    test::TempFile json(".json"), seq(".kvseq");
    const CmdResult r = run("generate -m " + tiny2k +
                            " -p 'Once upon a time' -n 6 --temp 0 --cache-type-k q8_0 "
                            "--cache-type-v q4_0 --stats-json " +
                            json.path() + " --save-cache " + seq.path());
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("q8_0/q4_0 keys/values"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("full F16"), std::string::npos) << r.err;
    std::ifstream f(json.path());
    const auto j = nlohmann::json::parse(f);
    EXPECT_EQ(j.at("kv_type"), "q8_0/q4_0");
    // Pages of 16 entries: keys 34 and values 18 bytes per 32 elements (head size 32), far below F16's 2 per element.
    const uint64_t final_bytes = j.at("kv_bytes_final").get<uint64_t>(), full = j.at("kv_bytes_full").get<uint64_t>();
    EXPECT_EQ(final_bytes % (16 * (34 + 18)), 0u) << final_bytes;
    EXPECT_GT(final_bytes, 0u);
    EXPECT_LT(final_bytes, full);
    // Restoring it into a cache of other types names both pairs.
    expect_clean_failure(
        "generate -m " + tiny2k + " -q -n 2 --load-cache " + seq.path(),
        "holds keys of type q8_0 and values of type q4_0; this cache stores keys as f16 and values as f16");
    expect_clean_failure("generate -m " + kModel + " -p hi --cache-type-k iq4_xs",
                         "--cache-type-k: unknown KV cache type 'iq4_xs' (supported: f32, f16, bf16, q8_0, q4_0, q4_1, "
                         "q5_0, q5_1, iq4_nl)");
    // iq4_nl (a row of the KV type table): 18 bytes per block of 32 for keys and values.
    test::TempFile json_nl(".json");
    const CmdResult rnl = run("generate -m " + tiny2k +
                              " -p 'Once upon a time' -n 6 --temp 0 --cache-type-k iq4_nl --cache-type-v iq4_nl "
                              "--stats-json " +
                              json_nl.path());
    ASSERT_EQ(rnl.status, 0) << rnl.err;
    std::ifstream fnl(json_nl.path());
    const auto jnl = nlohmann::json::parse(fnl);
    EXPECT_EQ(jnl.at("kv_type"), "iq4_nl");
    EXPECT_EQ(jnl.at("kv_bytes_final").get<uint64_t>() % (16 * (18 + 18)), 0u);
    EXPECT_GT(jnl.at("kv_bytes_final").get<uint64_t>(), 0u);
    // q4_1 (a row of the KV type table): 20 bytes per block of 32 for keys and values.
    test::TempFile json41(".json");
    const CmdResult r41 = run("generate -m " + tiny2k +
                              " -p 'Once upon a time' -n 6 --temp 0 --kv-type q4_1 --stats-json " + json41.path());
    ASSERT_EQ(r41.status, 0) << r41.err;
    std::ifstream f41(json41.path());
    const auto j41 = nlohmann::json::parse(f41);
    EXPECT_EQ(j41.at("kv_type"), "q4_1");
    EXPECT_EQ(j41.at("kv_bytes_final").get<uint64_t>() % (16 * (20 + 20)), 0u);
    EXPECT_GT(j41.at("kv_bytes_final").get<uint64_t>(), 0u);
    expect_clean_failure("generate -m " + kModel + " -p hi --cache-type-v f8",
                         "--cache-type-v: unknown KV cache type 'f8'");
    // stories260K has head size 8: not whole blocks of 32.
    expect_clean_failure("generate -m " + kModel + " -p hi --kv-type q8_0",
                         "KV cache type q8_0 stores blocks of 32 elements; head dimension 8 is not a multiple of 32");
    expect_clean_failure("bench -m " + kModel + " --cache-type-v q4_0",
                         "KV cache type q4_0 stores blocks of 32 elements; head dimension 8");
    // --kv-rotate: a bad value, and "on" for a head dimension that is not a multiple of 64 name the problem; "auto"
    // (the default) runs tiny-2k's quantized pages unrotated (head size 32), as llama.cpp does.
    expect_clean_failure("generate -m " + tiny2k + " -p hi --kv-type q8_0 --kv-rotate yes",
                         "--kv-rotate: 'yes' is not one of auto, on, off");
    expect_clean_failure("generate -m " + tiny2k + " -p hi -n 2 --kv-type q8_0 --kv-rotate on",
                         "--kv-rotate on needs a head dimension that is a multiple of 64");
    expect_clean_failure("bench -m " + tiny2k + " --kv-type q4_0 --kv-rotate on", "this model's head dimension is 32");
    expect_clean_failure("serve -m " + tiny2k + " --kv-type q4_0 --kv-rotate on --port 0",
                         "this model's head dimension is 32");
    const CmdResult a =
        run("generate -m " + tiny2k + " -p 'Once upon a time' -n 2 --temp 0 --kv-type q8_0 --kv-rotate auto");
    EXPECT_EQ(a.status, 0) << a.err;
}

KVSIEVE_SLOW_TEST(Cli, EvalTasksPrintsAccuracyLast) {
    const CmdResult r = run("eval-tasks -m " + kModel + " --task niah_single --length 400 -n 2");
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string last = r.out.substr(r.out.rfind("accuracy="));
    EXPECT_EQ(last.back(), '\n');
    const double acc = std::stod(last.substr(9));
    EXPECT_GE(acc, 0.0);
    EXPECT_LE(acc, 1.0);
    // A model without a chat template is prompted raw by default; chat is refused for it.
    EXPECT_NE(r.out.find(" format=raw "), std::string::npos) << r.out;
    expect_clean_failure("eval-tasks -m " + kModel + " --task niah_single --length 400 -n 2 --format chat",
                         "has no chat template (tokenizer.chat_template); use --format raw");
    expect_clean_failure("eval ruler -m " + kModel + " --corpus " + kModel + " --format chat", "has no chat template");
    expect_clean_failure("eval ruler -m " + kModel + " --corpus " + kModel + " --format html", "html");
    expect_clean_failure(
        "eval sweep --task nll -m " + kModel + " --corpus " + kModel + " --policies knorm --ratios 0.5 --format raw",
        "--format applies to --task ruler");
    {
        test::TempFile bad(".jsonl");
        std::ofstream(bad.path()) << "{\"index\": 0}\n";
        expect_clean_failure(
            "eval kept -m " + kModel + " --examples " + bad.path() + " --policies knorm:ratio=0.5 --out /tmp/x.jsonl",
            "line 1 is not an exported example");
        // --query-aware prefills the question after the context: an example without question_ids is refused.
        std::ofstream(bad.path()) << "{\"index\": 0, \"context_ids\": [1, 2, 3]}\n";
        expect_clean_failure("eval kept -m " + kModel + " --examples " + bad.path() +
                                 " --policies knorm:ratio=0.5 --query-aware --out /tmp/x.jsonl",
                             "line 1 has no question_ids, which --query-aware prefills after the context");
    }
    expect_clean_failure("eval-tasks -m " + kModel + " --task niah_single --length 4096 -n 2",
                         "beyond the model's context");
    expect_clean_failure("eval-tasks -m " + kModel + " --task nosuch -n 2", "unknown task 'nosuch'");
    expect_clean_failure("eval nll -m " + kModel + " --corpus /nonexistent.txt", "cannot open corpus");
    {
        // Only the compressed form of a corpus is there: the error names it and the rule that unpacks it.
        test::TempFile xz(".txt.xz");
        { std::ofstream(xz.path()) << "x"; }
        const std::string plain = xz.path().substr(0, xz.path().size() - 3);
        expect_clean_failure("eval nll -m " + kModel + " --corpus " + plain,
                             "only '" + xz.path() + "' is there; configuring the build");
        expect_clean_failure("eval nll -m " + kModel + " --corpus " + plain, "data/corpora/README.md");
    }
    test::TempFile empty(".txt");
    { std::ofstream(empty.path()).flush(); }
    expect_clean_failure("eval nll -m " + kModel + " --corpus " + empty.path(), "is empty");
    expect_clean_failure("eval sweep -m " + kModel + " --corpus " + kModel + " --policies knorm --ratios 0.5,x",
                         "'x' is not a number");
    expect_clean_failure("eval sweep --task nll -m " + kModel + " --corpus " + kModel +
                             " --policies knorm --ratios 0.5 --cells-per-pass 2",
                         "--cells-per-pass applies to --task ruler");
    expect_clean_failure("eval sweep --task ruler -m " + kModel + " --corpus " + kModel +
                             " --policies knorm --ratios 0.5 --cells-per-pass -1",
                         "--cells-per-pass must be ≥ 0");
    for (const char* bad : {"2/2", "x", "1/", "-1/2", "0/0", "1/2/3"})
        expect_clean_failure("eval sweep --task ruler -m " + kModel + " --corpus " + kModel +
                                 " --policies knorm --ratios 0.5 --shard " + bad,
                             "is not K/N with 0 ≤ K < N");
    expect_clean_failure(
        "eval sweep --task nll -m " + kModel + " --corpus " + kModel + " --policies knorm --ratios 0.5 --shard 0/2",
        "--shard applies to --task ruler");
}

KVSIEVE_SLOW_TEST(Cli, EvalFidelityWritesItsReportAndRejectsBadInput) {
    test::TempFile corpus(".txt"), out(".fidelity");
    {
        std::ofstream f(corpus.path());
        for (int i = 0; i < 10; ++i)
            f << "Once upon a time, there was a little girl named Lily. She loved to play outside. ";
    }
    const CmdResult r =
        run("eval fidelity -q -m " + kModel + " --corpus " + corpus.path() +
            " --prompt 32 --gen 24 --samples 1 --every 8 --temp 0.8 --policies 'full;streaming_llm:window=8,sinks=2;"
            "full@" +
            kModel + "' --out " + out.path());
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("policy=full greedy_prefix=24 token_accuracy=1.0000"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("policy=streaming_llm:window=8,sinks=2 "), std::string::npos) << r.out;
    // SPEC@FILE: the policy on another model against the same teachers (the same model here: the teacher itself).
    EXPECT_NE(r.out.find("policy=full@" + kModel + " greedy_prefix=24 token_accuracy=1.0000 kl=0.00000"),
              std::string::npos)
        << r.out;
    const auto j = nlohmann::json::parse(std::ifstream(out.path() + "/fidelity.json"));
    EXPECT_EQ(j["temperature"], 0.8);
    EXPECT_EQ(j["results"].size(), 3u);
    // The same command with one more policy resumes: the three finished rows come from the file (no teacher run),
    // the new one is computed, and all four are in the report, the earlier ones unchanged.
    const std::string head = "eval fidelity -m " + kModel + " --corpus " + corpus.path() +
                             " --prompt 32 --samples 1 --every 8 --temp 0.8 --out " + out.path();
    const std::string base = head + " --gen 24 --policies ";
    const CmdResult again = run(base + "'full;streaming_llm:window=8,sinks=2;full@" + kModel + ";tova:budget=12'");
    ASSERT_EQ(again.status, 0) << again.err;
    EXPECT_NE(again.out.find("policy=streaming_llm:window=8,sinks=2 greedy_prefix"), std::string::npos) << again.out;
    const size_t tova = again.out.find("policy=tova:budget=12 ");
    ASSERT_NE(tova, std::string::npos) << again.out;
    EXPECT_EQ(again.out.substr(tova, again.out.find('\n', tova) - tova).find("(from"), std::string::npos) << again.out;
    size_t reused = 0;
    for (size_t at = again.out.find("(from the earlier run in --out)"); at != std::string::npos;
         at = again.out.find("(from the earlier run in --out)", at + 1))
        ++reused;
    EXPECT_EQ(reused, 3u) << again.out;
    EXPECT_NE(again.err.find("teacher (full cache)"), std::string::npos);  // the new policy needed the teachers
    const auto j2 = nlohmann::json::parse(std::ifstream(out.path() + "/fidelity.json"));
    ASSERT_EQ(j2["results"].size(), 4u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(j2["results"][i], j["results"][i]);
    EXPECT_EQ(j2["results"][3]["policy"], "tova:budget=12");
    // Asking only for finished policies runs nothing (no teacher) and keeps the rows it was not asked for.
    const CmdResult none = run(base + "'tova:budget=12'");
    ASSERT_EQ(none.status, 0) << none.err;
    EXPECT_EQ(none.err.find("teacher (full cache)"), std::string::npos) << none.err;
    EXPECT_EQ(nlohmann::json::parse(std::ifstream(out.path() + "/fidelity.json"))["results"].size(), 4u);
    // Other settings never mix into the table.
    expect_clean_failure(head + " --gen 20 --policies full", "was made with gen_tokens = 24, this run has 20");
    std::filesystem::remove_all(out.path());
    expect_clean_failure("eval fidelity -m " + kModel + " --corpus " + corpus.path() + " --policies 'full;nosuch'",
                         "unknown policy 'nosuch'");
    expect_clean_failure(
        "eval fidelity -m " + kModel + " --corpus " + corpus.path() + " --policies full --prompt 400 --gen 400",
        "exceed the model's context");
    expect_clean_failure("eval fidelity -m " + kModel + " --corpus " + corpus.path() + " --policies full --temp -1",
                         "--temp must be ≥ 0");
    expect_clean_failure(
        "eval fidelity -m " + kModel + " --corpus " + corpus.path() + " --policies 'full@/nonexistent.gguf'",
        "model file '/nonexistent.gguf' of 'full@/nonexistent.gguf' does not exist");
    const std::string other = test::model_path("kvsieve-tiny-2k.gguf");
    expect_clean_failure("eval fidelity -m " + kModel + " --corpus " + corpus.path() +
                             " --prompt 32 --gen 8 --samples 1 "
                             "--policies 'full;full@" +
                             other + "'",
                         "does not share the tokenizer of");
}

TEST(Cli, BenchHonoursPrefillChunkAndWritesStatsJson) {
    // Filling the depth in chunks with the rule after each (--compress-during-prefill) keeps the peak near the
    // budget; without, the whole depth is held before the first compression.
    test::TempFile chunked(".json"), whole(".json");
    const std::string base = "bench -m " + kModel + " -p 0 -n 4 -d 240 -r 1 --policy h2o:budget=64 --bandwidth-gbs 10";
    ASSERT_EQ(run(base + " --prefill-chunk 40 --compress-during-prefill --stats-json " + chunked.path()).status, 0);
    ASSERT_EQ(run(base + " --stats-json " + whole.path()).status, 0);
    const auto a = nlohmann::json::parse(std::ifstream(chunked.path())),
               b = nlohmann::json::parse(std::ifstream(whole.path()));
    EXPECT_EQ(a["tokens"], 244);
    EXPECT_EQ(a["kv_bytes_final"], b["kv_bytes_final"]);
    EXPECT_LT(a["kv_bytes_peak"].get<uint64_t>(), b["kv_bytes_peak"].get<uint64_t>());
}

KVSIEVE_SLOW_TEST(Cli, SynthWritesALoadableModelAndBenchRunsIt) {
    test::TempFile m(".gguf");
    CmdResult r = run("synth tiny-qwen3 -o " + m.path() + " --type q8_0");
    ASSERT_EQ(r.status, 0) << r.err;
    r = run("bench -m " + m.path() + " -p 16 -n 4 -r 2 -d 8");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("pp16 @ d8"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tg4 @ d8"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("streaming read measured in this run"), std::string::npos) << r.out;
}

KVSIEVE_SLOW_TEST(Cli, BenchTakesItsTokensFromATextAndReportsTheCacheAfterThePrefill) {
    test::TempFile text(".txt");
    std::ofstream(text.path()) << "Once upon a time there was a little girl named Lily. She liked to play in the park.";
    CmdResult r =
        run("bench -m " + kModel + " -p 48 -n 2 -r 1 --text " + text.path() + " --policy streaming_llm:window=8");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("pp48"), std::string::npos) << r.out;
    // 48 tokens through a window of 8 (and 4 sinks): 36 of the 40 beyond the window dropped.
    EXPECT_NE(r.err.find("after the prefill test: density 0.100"), std::string::npos) << r.err;
    expect_clean_failure("bench -m " + kModel + " --text /nonexistent.txt", "/nonexistent.txt");
}

}  // namespace
}  // namespace kvsieve
