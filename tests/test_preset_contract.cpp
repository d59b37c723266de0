// One contract over every registered preset and read-time selection: on the tiny long-context model, with keys and
// values cached as F16, Q8_0 and Q4_0 (mode a: every entry quantized when written), each runs a prefill and greedy
// decode steps, keeps its cache statistics consistent with its per-(layer, KV head) entry tables,
// really frees memory when it drops entries, continues bit for bit after its sequence is saved and restored, and
// refuses every integer or real key outside its declared range, naming the key. The list of cases is read from the
// registry when the tests start, so a preset registered without a valid spec in kSpecs below fails by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "io/safetensors.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "predict/learned_methods.h"
#include "session/cache_file.h"
#include "session/prefill_plan.h"
#include "session/session.h"
#include "gguf_edit.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

const std::string kKvzap = test::model_path("kvzap/");
const std::string kTiny2k = "kvsieve-tiny-2k.gguf";
const std::string kTiny2kSpkv = "kvsieve-tiny-2k-spkv.gguf";

/// A valid spec of each preset and selection: sizes that make it drop entries of a ~400-token prompt, the model it
/// runs on (in tests/data/models), and whether it drops entries at all (full and a read-time selection alone keep
/// all).
struct CaseSpec {
    std::map<std::string, std::string> params;
    std::string model = kTiny2k;
    bool drops = true;
};

/// The tiny-2k predictor each learned preset (predict/learned_methods.h) runs with: its model= (empty: the gates of
/// the model's own GGUF), the model and the sizes. spec_table's rows of the learned presets are made from the
/// registry and these, and LearnedPresetsHaveAFixture fails by name for a learned preset without one.
struct LearnedFixture {
    std::string predictor;
    std::string model;
    std::map<std::string, std::string> params;
};

const std::map<std::string, LearnedFixture>& learned_fixtures() {
    static const std::map<std::string, LearnedFixture> f = {
        {"kvzap", {kKvzap + "kvsieve-tiny-2k-linear", kTiny2k, {{"tau", "-3"}, {"window", "32"}}}},
        {"spkv", {"", kTiny2kSpkv, {{"tau", "0.5"}, {"window", "64"}}}},
        {"wgkv", {test::model_path("wgkv/tiny2k-lambda0.08"), kTiny2k, {{"window", "64"}}}},
        {"kvpop",
         {test::model_path("kvpop/tiny2k-mlstm"), kTiny2k, {{"capacity", "128"}, {"window", "32"}, {"sinks", "4"}}}},
        {"kvpop_mlp",
         {test::model_path("kvpop/tiny2k-mlp"), kTiny2k, {{"capacity", "128"}, {"window", "32"}, {"sinks", "4"}}}},
    };
    return f;
}

const std::map<std::string, CaseSpec>& spec_table() {
    static const std::map<std::string, CaseSpec> t = [] {
        std::map<std::string, CaseSpec> t = {
            {"full", {{}, kTiny2k, false}},
            {"streaming_llm", {{{"window", "64"}, {"sinks", "4"}}}},
            {"random", {{{"ratio", "0.5"}, {"seed", "7"}}}},
            {"knorm", {{{"ratio", "0.5"}}}},
            {"h2o", {{{"capacity", "128"}}}},
            {"tova", {{{"ratio", "0.5"}}}},
            {"snapkv", {{{"ratio", "0.5"}}}},
            {"pyramidkv", {{{"ratio", "0.5"}}}},
            {"expected_attention", {{{"ratio", "0.5"}}}},
            {"adakv_expected_attention_e2", {{{"ratio", "0.5"}}}},
            {"kvzip", {{{"ratio", "0.5"}}}},
            {"kvzip_plus", {{{"ratio", "0.5"}}}},
            {"hybrid_heads", {{{"global", "0.1/2.0"}, {"window", "64"}}}},
            {"quest", {{{"read_budget", "64"}}, kTiny2k, false}},
        };
        for (const std::string& preset : learned_presets()) {
            const auto it = learned_fixtures().find(preset);
            if (it == learned_fixtures().end()) continue;  // LearnedPresetsHaveAFixture names it
            CaseSpec cs{it->second.params, it->second.model};
            if (!it->second.predictor.empty()) cs.params["model"] = it->second.predictor;
            t[preset] = cs;
        }
        return t;
    }();
    return t;
}

TEST(PresetContract, LearnedPresetsHaveAFixture) {
    for (const std::string& preset : learned_presets())
        EXPECT_TRUE(learned_fixtures().count(preset)) << "learned preset " << preset << " has no tiny-2k predictor";
}

/// One registered preset or selection.
struct Registered {
    std::string name;
    bool selection = false;
};

void PrintTo(const Registered& r, std::ostream* os) { *os << (r.selection ? "selection " : "preset ") << r.name; }

std::vector<Registered> registered() {
    std::vector<Registered> v;
    for (const auto& [name, info] : presets()) v.push_back({name, false});
    for (const auto& [name, info] : selections()) v.push_back({name, true});
    return v;
}

const std::vector<ParamDecl>& decls_of(const Registered& r) {
    return r.selection ? selections().at(r.name).params : presets().at(r.name).params;
}

std::string spec_of(const std::string& name, const std::map<std::string, std::string>& params) {
    std::string s = name;
    char sep = ':';
    for (const auto& [k, v] : params) {
        s += sep + k + "=" + v;
        sep = ',';
    }
    return s;
}

const LlamaModel& model(const std::string& file) {
    static std::map<std::string, std::unique_ptr<LlamaModel>> loaded;
    auto& m = loaded[file];
    if (!m) m = std::make_unique<LlamaModel>(test::model_path(file));
    return *m;
}

/// A prompt of about 400 tokens of story text.
std::vector<int32_t> prompt_for(const LlamaModel& m) {
    const auto tok = Tokenizer::from_gguf(m.file());
    std::string text;
    const char* lines[] = {"Once upon a time, there was a little girl named Lily who liked to play in the park. ",
                           "Her friend Ben had a big red ball, and they threw it high over the old oak tree. ",
                           "One day a small dog ran after the ball and hid it under a bench near the pond. ",
                           "Lily and Ben looked everywhere until the dog came back wagging its tail. "};
    for (int i = 0; i < 20; ++i) text += lines[i % 4];
    return tok->encode(text, true, false);
}

constexpr int64_t kCtx = 1024;
constexpr int kDecodeSteps = 8;

/// The cache types every preset runs on (keys and values of the same type): quantized at write, and Q8_0 quantized
/// at admission (sinks and window in F16, the global region in Q8_0).
const KVTypes kCacheTypes[] = {{KVType::kF16, KVType::kF16},
                               {KVType::kQ8_0, KVType::kQ8_0},
                               {KVType::kQ4_0, KVType::kQ4_0},
                               {KVType::kQ8_0, KVType::kQ8_0, KVQuantAt::kAdmission}};

std::unique_ptr<KVCache> make_cache(const LlamaModel& m, const std::string& spec, KVTypes types,
                                    KVRotateMode rot = KVRotateMode::kOff) {
    return std::make_unique<KVCache>(m.config(), kCtx, parse_policy(spec),
                                     make_kv_pool(m.config().head_dim, types, rot));
}

/// kvsieve-tiny-2k (or its SP-KV variant: `file`) read as 4 query heads and 1 KV head of dimension 64 (the same
/// tensors: Wq 256 × 4·64, Wk and Wv 256 × 1·64), written once to a temporary file: a model whose head dimension
/// the Hadamard rotation takes (64, a multiple of 64; tiny-2k's own is 32). SP-KV's gate output layer keeps KV
/// head 0's row. Its outputs are not a trained model's, which the contract does not need.
const LlamaModel& d64_model(const std::string& file) {
    static std::map<std::string, std::pair<std::unique_ptr<test::TempFile>, std::unique_ptr<LlamaModel>>> made;
    auto& [tmp, m] = made[file];
    if (!m) {
        tmp = std::make_unique<test::TempFile>(".gguf");
        test::GGUFEdit e;
        e.edit_kv = [](const std::string& k, GGUFValue& v) {
            auto set = [&v](int64_t x) {  // keeps the entry's integer type
                v.u = static_cast<uint64_t>(x);
                v.i = x;
            };
            if (k == "llama.attention.head_count") set(4);
            if (k == "llama.attention.head_count_kv") set(1);
            if (k == "llama.attention.key_length" || k == "llama.attention.value_length" ||
                k == "llama.rope.dimension_count")
                set(64);
            return true;
        };
        e.shrink = [](const std::string& name, std::vector<int64_t>& ne) {
            if (name.find(".spkv.fc2.") == std::string::npos) return false;
            ne.back() = 1;  // ne [inner, Hkv] → [inner, 1], or the bias [Hkv] → [1]
            return true;
        };
        test::rewrite_gguf(test::model_path(file), tmp->path(), e);
        m = std::make_unique<LlamaModel>(tmp->path());
    }
    return *m;
}

/// The shape a tensor of a tiny-2k predictor (KVzap, WG-KV or KVpop, named as their loaders in predict/ read them)
/// takes for d64_model: KV heads 2 → 1, head dimension 32 → 64, inputs of 2 · head dimension 64 → 128.
std::vector<int64_t> d64_shape(const std::string& name, std::vector<int64_t> shape) {
    auto ends = [&name](const std::string& suffix) {
        return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends("key_norm.weight")) return {64};        // WG-KV: [head dim]
    if (ends("conv1.weight")) return {128, 128, 1};  // WG-KV: [Hkv · inner, 2 · head dim, 1]
    if (ends("conv1.bias")) return {128};            // WG-KV: [Hkv · inner]
    shape.at(0) = 1;                                 // every other tensor of the three is per KV head, head first
    for (const char* x : {"mlstm.wq", "mlstm.wk", "mlstm.wv", "mlstm.wi", "mlstm.wf", "mlp.fc1.weight"})
        if (ends(x)) shape.back() = 128;  // KVpop: [Hkv, ..., 2 · head dim] (key and value)
    return shape;
}

/// A copy of the tiny-2k predictor folder `dir` for d64_model, written once to a temporary folder: each tensor in
/// d64_shape, its values the original's in order, repeated to fill it (KV head 0's first where it shrinks), and
/// config.json with that shape. Its scores are not a trained predictor's, which the contract does not need.
std::string d64_predictor(const std::string& dir) {
    static std::map<std::string, std::unique_ptr<test::TempDir>> made;
    auto& out = made[dir];
    if (!out) {
        out = std::make_unique<test::TempDir>();
        std::map<std::string, SafeTensor> tensors = read_safetensors(dir + "/model.safetensors");
        for (auto& [name, t] : tensors) {
            t.shape = d64_shape(name, t.shape);
            int64_t n = 1;
            for (int64_t x : t.shape) n *= x;
            std::vector<float> data(static_cast<size_t>(n));
            for (size_t i = 0; i < data.size(); ++i) data[i] = t.data[i % t.data.size()];
            t.data = std::move(data);
            t.dtype = "F32";
        }
        write_safetensors(out->path() + "/model.safetensors", tensors);
        nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
        for (const char* k : {"output_dim", "n_head_kv"})
            if (cfg.contains(k)) cfg[k] = 1;
        if (cfg.contains("head_dim")) cfg["head_dim"] = 64;
        std::ofstream(out->path() + "/config.json") << cfg.dump(2);
    }
    return out->path();
}

/// The case of `preset` rewritten for d64_model: its predictor converted (d64_predictor), hybrid_heads' global heads
/// named among the model's one KV head per layer, and WG-KV at τ 0.9 (its reshaped gates all pass the trained 0.1,
/// so that it would drop nothing).
CaseSpec d64_case(const std::string& preset, CaseSpec cs) {
    if (cs.params.count("model")) cs.params["model"] = d64_predictor(cs.params["model"]);
    if (preset == "wgkv") cs.params["tau"] = "0.9";
    if (cs.params.count("global")) cs.params["global"] = "0.0/2.0";
    return cs;
}

int32_t greedy(const LlamaModel& m, const std::vector<float>& logits) {
    return argmax(logits.data(), m.config().n_vocab);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The case's table entry; fails (naming the preset) when there is none.
const CaseSpec* table_entry_of(const Registered& r) {
    const auto it = spec_table().find(r.name);
    if (it == spec_table().end()) {
        ADD_FAILURE() << (r.selection ? "selection '" : "preset '") << r.name
                      << "' is registered but has no valid spec in tests/test_preset_contract.cpp's table";
        return nullptr;
    }
    return &it->second;
}

class PresetContract : public ::testing::TestWithParam<Registered> {
protected:
    const CaseSpec* table_entry() const { return table_entry_of(GetParam()); }
};

/// A preset on one cache type (for PresetContractRotated: stored rotated).
class PresetContractOnType : public ::testing::TestWithParam<std::tuple<Registered, KVTypes>> {
protected:
    const CaseSpec* table_entry() const { return table_entry_of(std::get<0>(GetParam())); }
    const Registered& reg() const { return std::get<0>(GetParam()); }
    KVTypes type() const { return std::get<1>(GetParam()); }
};
class PresetContractRotated : public PresetContractOnType {};

/// The statistics against the per-(layer, KV head) entry tables they summarise, after `tokens` positions, for a
/// cache whose keys and values are of `types` (under quantization at admission: F16 in the sinks and the window).
void check_stats(const KVStats& st, const LlamaModel& m, int64_t tokens, int64_t prompt_len, KVTypes types) {
    const auto& c = m.config();
    ASSERT_EQ(st.tokens, tokens);
    ASSERT_EQ(st.entries.size(), static_cast<size_t>(c.n_layer));
    ASSERT_EQ(st.beyond.size(), static_cast<size_t>(c.n_layer));
    int64_t kept = 0, kept_beyond = 0, heads = 0;
    for (int l = 0; l < c.n_layer; ++l) {
        ASSERT_EQ(st.entries[l].size(), static_cast<size_t>(c.n_head_kv));
        ASSERT_EQ(st.beyond[l].size(), static_cast<size_t>(c.n_head_kv));
        for (int h = 0; h < c.n_head_kv; ++h) {
            const int64_t e = st.entries[l][h], b = st.beyond[l][h];
            SCOPED_TRACE("layer " + std::to_string(l) + " head " + std::to_string(h));
            EXPECT_GE(b, 0);
            EXPECT_LE(b, e);
            // At most the positions given so far; at most the prompt's after the prefill (no decode step yet).
            EXPECT_LE(e, tokens);
            if (tokens == prompt_len) EXPECT_LE(e, prompt_len);
            // The entries inside the local window are at most the window's positions, those beyond it at most the
            // positions that have left it.
            EXPECT_LE(e - b, std::min<int64_t>(st.window, tokens));
            EXPECT_LE(b, std::max<int64_t>(0, tokens - st.window));
            kept += e;
            kept_beyond += b;
            ++heads;
        }
    }
    const double want_ratio = 1.0 - static_cast<double>(kept) / static_cast<double>(tokens * heads);
    EXPECT_NEAR(st.compression_ratio, want_ratio, 1e-12);
    const int64_t outside = std::max<int64_t>(0, tokens - st.window) * heads;
    const double want_density = outside > 0 ? static_cast<double>(kept_beyond) / static_cast<double>(outside) : 1.0;
    EXPECT_NEAR(st.density, want_density, 1e-12);
    EXPECT_GE(st.density, 0.0);
    EXPECT_LE(st.density, 1.0);
    // Bytes: every kept entry's key and value (2 bytes per element for F16, 34 / 32 for Q8_0, 18 / 32 for Q4_0) lie
    // in pages in use, and at most a page per head and region more; the final use is at most the peak. Under
    // quantization at admission the sinks and the window hold F16 rows and the global region quantized ones.
    const KVType type = types.key;
    const uint64_t row = type == KVType::kQ8_0   ? 34 * c.head_dim / 32
                         : type == KVType::kQ4_0 ? 18 * c.head_dim / 32
                                                 : 2 * c.head_dim;
    const bool local_f16 = types.quant_at == KVQuantAt::kAdmission;
    const uint64_t local_row = local_f16 ? 2 * c.head_dim : row;
    EXPECT_EQ(st.kv_bytes_local + st.kv_bytes_global, st.kv_bytes_final);
    EXPECT_EQ(st.kv_quant_at, kv_quant_at_name(types.quant_at));
    EXPECT_GE(st.kv_bytes_final, static_cast<uint64_t>(kept) * 2 * std::min(row, local_row));
    EXPECT_LE(st.kv_bytes_final, static_cast<uint64_t>(kept + 3 * 16 * heads) * 2 * std::max(row, local_row));
    const int64_t sinks = std::min<int64_t>(st.sinks, tokens), global = kept_beyond - sinks * heads;
    EXPECT_GE(st.kv_bytes_global, static_cast<uint64_t>(global) * 2 * row);
    EXPECT_LE(st.kv_bytes_global, static_cast<uint64_t>(global + 16 * heads) * 2 * row);
    EXPECT_GE(st.kv_bytes_local, static_cast<uint64_t>(kept - global) * 2 * local_row);
    EXPECT_LE(st.kv_bytes_local, static_cast<uint64_t>(kept - global + 2 * 16 * heads) * 2 * local_row);
    EXPECT_LE(st.kv_bytes_final, st.kv_bytes_peak);
    EXPECT_EQ(st.kv_bytes_full, static_cast<uint64_t>(tokens * heads) * 2 * c.head_dim * 2);
    EXPECT_GE(st.read_fraction, 0.0);
    EXPECT_LE(st.read_fraction, 1.0);
}

/// Bytes in use of a full cache holding exactly `tokens`.
uint64_t full_cache_bytes(const LlamaModel& m, const std::vector<int32_t>& tokens, KVTypes type) {
    const auto tok = Tokenizer::from_gguf(m.file());
    auto cache = make_cache(m, "full", type);
    Session s(m, *tok, *cache);
    std::vector<float> logits;
    s.prefill(tokens, PrefillPlan{}, logits);
    return cache->stats().kv_bytes_final;
}

/// The contract of one preset on one cache type (and rotation) and model: see the file comment.
void run_contract(const Registered& reg, const CaseSpec* cs, KVTypes type, const LlamaModel& m, KVRotateMode rot) {
    const std::string spec = spec_of(reg.name, cs->params);
    SCOPED_TRACE(spec + " on " + kv_types_spec(type) + ", --kv-rotate " + kv_rotate_mode_name(rot));
    const auto tok = Tokenizer::from_gguf(m.file());
    const std::vector<int32_t> prompt = prompt_for(m);
    ASSERT_GE(prompt.size(), 300u);
    ASSERT_LE(prompt.size(), 600u);

    // 1. Prefill (in chunks unless the policy rescores the whole prompt at once) and greedy decode steps.
    auto cache = make_cache(m, spec, type, rot);
    const Policy& policy = cache->policy();
    const bool drops = cs->drops;
    EXPECT_EQ(policy.is_full(), !drops);
    Session s(m, *tok, *cache);
    std::vector<float> logits;
    PrefillPlan plan;
    plan.chunk = planned_chunk(policy, 128);
    ASSERT_NO_THROW(s.prefill(prompt, plan, logits));
    ASSERT_EQ(logits.size(), static_cast<size_t>(m.config().n_vocab));
    const int64_t n = static_cast<int64_t>(prompt.size());

    // 2. Statistics after the prefill, and memory against a full cache of the same prompt.
    {
        SCOPED_TRACE("after the prefill");
        const KVStats st = cache->stats();
        check_stats(st, m, n, n, type);
        if (drops) {
            EXPECT_GT(st.compression_ratio, 0.0);
            EXPECT_LT(st.kv_bytes_final, full_cache_bytes(m, prompt, type));
        } else {
            for (const auto& layer : st.entries)
                for (int64_t e : layer) EXPECT_EQ(e, n);
        }
    }
    for (int i = 0; i < kDecodeSteps; ++i) ASSERT_NO_THROW(s.decode(greedy(m, logits), logits));
    {
        SCOPED_TRACE("after the decode steps");
        const KVStats st = cache->stats();
        check_stats(st, m, n + kDecodeSteps, n, type);
        if (drops) {
            EXPECT_GT(st.compression_ratio, 0.0);
            EXPECT_LT(st.kv_bytes_final, full_cache_bytes(m, s.tokens(), type));
        } else {
            for (const auto& layer : st.entries)
                for (int64_t e : layer) EXPECT_EQ(e, n + kDecodeSteps);
        }
    }

    // 3. Save, restore into a fresh cache, and continue both: the next tokens' logits are bit-identical.
    test::TempFile file(".kvseq");
    GenerationState g;
    g.logits = logits;
    save_sequence(file.path(), m, s, encode_generation_state(g));
    const KVStats saved_stats = cache->stats();
    const SavedSequence saved = read_sequence(file.path(), m);
    EXPECT_EQ(saved.policy_spec, spec);
    auto restored_cache = make_cache(m, spec, type, rot);
    Session r(m, *tok, *restored_cache);
    ASSERT_NO_THROW(restore_sequence(r, saved));
    EXPECT_EQ(r.tokens(), s.tokens());
    EXPECT_EQ(restored_cache->stats().entries, saved_stats.entries);
    EXPECT_EQ(restored_cache->stats().beyond, saved_stats.beyond);
    std::vector<float> restored_logits = decode_generation_state(saved.extra, m.config().n_vocab).logits;
    EXPECT_TRUE(same_bits(restored_logits, logits));
    for (int step = 1; step <= 2; ++step) {
        const int32_t next = greedy(m, logits);
        s.decode(next, logits);
        r.decode(next, restored_logits);
        EXPECT_TRUE(same_bits(restored_logits, logits)) << "decode step " << step << " after the restore";
        EXPECT_EQ(restored_cache->stats().entries, cache->stats().entries) << "decode step " << step;
    }
}

TEST_P(PresetContractOnType, RunsKeepsItsStatisticsAndRestoresBitForBit) {
    const CaseSpec* cs = table_entry();
    if (!cs) return;
    run_contract(reg(), cs, type(), model(cs->model), KVRotateMode::kAuto);
}

/// The same contract with the entries stored Hadamard-rotated (--kv-rotate on) on a model of head dimension 64
/// (d64_model), every preset included: the learned ones with their predictors reshaped for it (d64_case).
TEST_P(PresetContractRotated, RunsKeepsItsStatisticsAndRestoresBitForBit) {
    const CaseSpec* cs = table_entry();
    if (!cs) return;
    const CaseSpec d64 = d64_case(reg().name, *cs);
    const LlamaModel& m = d64_model(cs->model);
    ASSERT_EQ(m.config().head_dim, 64);
    ASSERT_EQ(m.config().n_head_kv, 1);
    ASSERT_TRUE(make_kv_pool(64, type(), KVRotateMode::kOn)->rotation().any());
    run_contract(reg(), &d64, type(), m, KVRotateMode::kOn);
}

/// What a prefill of `prompt` in pieces of `chunk` tokens (as the planner feeds them; 0: one batch) leaves: the
/// positions every (layer, KV head) keeps, sorted, then the greedy tokens of kDecodeSteps decode steps.
struct ChunkedRun {
    std::vector<std::vector<int32_t>> kept;
    std::vector<int32_t> tokens;
};
ChunkedRun run_in_chunks(const LlamaModel& m, const std::string& spec, KVTypes type, const std::vector<int32_t>& prompt,
                         int64_t chunk) {
    const auto tok = Tokenizer::from_gguf(m.file());
    auto cache = make_cache(m, spec, type, KVRotateMode::kAuto);
    Session s(m, *tok, *cache);
    std::vector<float> logits;
    PrefillPlan plan;
    plan.chunk = planned_chunk(cache->policy(), chunk);
    s.prefill(prompt, plan, logits);
    EXPECT_EQ(cache->n_held(), 0);
    ChunkedRun r;
    for (int l = 0; l < m.config().n_layer; ++l)
        for (int h = 0; h < m.config().n_head_kv; ++h) {
            std::vector<int32_t> got;
            for (Region reg : kRegionsInOrder)
                for (int32_t p : cache->head(l, h).region(reg)->positions()) got.push_back(p);
            std::sort(got.begin(), got.end());
            r.kept.push_back(std::move(got));
        }
    for (int i = 0; i < kDecodeSteps; ++i) {
        r.tokens.push_back(greedy(m, logits));
        s.decode(r.tokens.back(), logits);
    }
    return r;
}

/// The cache types of the chunking contract: quantization at write (the sinks and the window hold what the global
/// region holds, so an entry pushed out of the window by an earlier chunk is read as one batch reads it).
const KVTypes kChunkTypes[] = {{KVType::kF16, KVType::kF16}, {KVType::kQ8_0, KVType::kQ4_0}};

class PresetChunking : public PresetContractOnType {};

TEST_P(PresetChunking, KeepsWhatOneBatchKeepsWhateverThePieces) {
    // docs/architecture.md, "Where compression happens": a prompt of 200 tokens fed in pieces of 7 or 128
    // tokens keeps the positions one batch keeps, in every (layer, KV head), and the greedy answer is the same.
    const CaseSpec* cs = table_entry();
    if (!cs) return;
    const LlamaModel& m = model(cs->model);
    const std::string spec = spec_of(reg().name, cs->params);
    SCOPED_TRACE(spec + " on " + kv_types_spec(type()));
    std::vector<int32_t> prompt = prompt_for(m);
    prompt.resize(200);                                     // beyond every window of the table's specs
    if (planned_chunk(parse_policy(spec), 7) == 0) return;  // fed in one piece whatever is asked (prefill_plan.h)
    const ChunkedRun one = run_in_chunks(m, spec, type(), prompt, 0);
    if (cs->drops) {
        size_t kept = 0;
        for (const auto& k : one.kept) kept += k.size();
        EXPECT_LT(kept, one.kept.size() * prompt.size());  // the policy really dropped entries
    }
    for (int64_t chunk : {7, 128}) {
        SCOPED_TRACE("chunks of " + std::to_string(chunk));
        const ChunkedRun c = run_in_chunks(m, spec, type(), prompt, chunk);
        ASSERT_EQ(c.kept.size(), one.kept.size());
        for (size_t i = 0; i < c.kept.size(); ++i) EXPECT_EQ(c.kept[i], one.kept[i]) << "layer·head " << i;
        EXPECT_EQ(c.tokens, one.tokens);
    }
}

/// Texts outside a declaration's range: below its minimum, above its maximum (or past int64), NaN for reals.
std::vector<std::string> out_of_range(const ParamDecl& d) {
    std::vector<std::string> v;
    auto real_text = [](double x) {
        std::ostringstream o;
        o.precision(17);
        o << x;
        return o.str();
    };
    switch (d.type) {
        case ParamType::kInt:
            if (d.imin > std::numeric_limits<int64_t>::min()) v.push_back(std::to_string(d.imin - 1));
            if (d.imax < std::numeric_limits<int64_t>::max())
                v.push_back(std::to_string(d.imax + 1));
            else
                v.push_back("9223372036854775808");
            break;
        case ParamType::kReal:
            if (std::isfinite(d.rmin)) v.push_back(real_text(d.rmin - std::max(1.0, std::fabs(d.rmin))));
            if (std::isfinite(d.rmax)) v.push_back(real_text(d.rmax + std::max(1.0, std::fabs(d.rmax))));
            v.push_back("nan");
            break;
        case ParamType::kRatio: v = {"-0.25", "1", "1.5", "nan"}; break;
        default: break;
    }
    return v;
}

TEST_P(PresetContract, RefusesEveryNumberOutsideItsDeclaredRangeNamingTheKey) {
    const CaseSpec* cs = table_entry();
    if (!cs) return;
    ASSERT_NO_THROW(parse_policy(spec_of(GetParam().name, cs->params)));
    int checked = 0;
    for (const ParamDecl& d : decls_of(GetParam())) {
        for (const std::string& bad : out_of_range(d)) {
            auto params = cs->params;
            if (!d.deprecated_alias.empty()) params.erase(d.deprecated_alias);
            params[d.key] = bad;
            const std::string spec = spec_of(GetParam().name, params);
            try {
                parse_policy(spec);
                ADD_FAILURE() << spec << " was accepted (" << d.key << " is declared " << d.range_text() << ")";
            } catch (const Error& e) {
                EXPECT_NE(std::string(e.what()).find(d.key + "="), std::string::npos) << spec << ": " << e.what();
            }
            ++checked;
        }
    }
    RecordProperty("out_of_range_values", checked);
}

std::string case_name(const ::testing::TestParamInfo<Registered>& info) {
    return (info.param.selection ? "selection_" : "") + info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Registered, PresetContract, ::testing::ValuesIn(registered()), case_name);

std::string case_type_name(const ::testing::TestParamInfo<std::tuple<Registered, KVTypes>>& info) {
    const Registered& r = std::get<0>(info.param);
    std::string t = kv_types_spec(std::get<1>(info.param));
    const size_t at = t.find('@');
    if (at != std::string::npos) t.replace(at, 1, "_at_");
    const size_t slash = t.find('/');  // keys/values
    if (slash != std::string::npos) t.replace(slash, 1, "_");
    return (r.selection ? "selection_" : "") + r.name + "_" + t;
}

INSTANTIATE_TEST_SUITE_P(Registered, PresetContractOnType,
                         ::testing::Combine(::testing::ValuesIn(registered()), ::testing::ValuesIn(kCacheTypes)),
                         case_type_name);

INSTANTIATE_TEST_SUITE_P(Registered, PresetChunking,
                         ::testing::Combine(::testing::ValuesIn(registered()), ::testing::ValuesIn(kChunkTypes)),
                         case_type_name);

/// The quantized types with the rotation on (the last also quantized at admission: its F16 sinks and window are
/// stored in the same rotated space).
const KVTypes kRotatedTypes[] = {{KVType::kQ8_0, KVType::kQ8_0},
                                 {KVType::kQ4_0, KVType::kQ4_0},
                                 {KVType::kQ8_0, KVType::kQ8_0, KVQuantAt::kAdmission}};

INSTANTIATE_TEST_SUITE_P(Registered, PresetContractRotated,
                         ::testing::Combine(::testing::ValuesIn(registered()), ::testing::ValuesIn(kRotatedTypes)),
                         case_type_name);

TEST(PresetContractTable, EveryEntryIsRegistered) {
    // A stale entry (a renamed or removed preset) would silently test nothing.
    for (const auto& [name, cs] : spec_table())
        EXPECT_TRUE(presets().count(name) > 0 || selections().count(name) > 0) << name << " is not registered";
}

}  // namespace
}  // namespace kvsieve
