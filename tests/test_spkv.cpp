// SP-KV inference (policy/spkv.cpp, predict/spkv_gates.h): gates read from the model's GGUF, utility at write,
// admission at window exit; a closed gate removes the key in prefill and decode. On stories260K with gates added.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "cache/kv_cache.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "kernels/attention.h"
#include "kernels/tensor_types.h"
#include "model/llama_model.h"
#include "model/quantize.h"
#include "eval/ruler.h"
#include "text/tokenizer.h"
#include "policy/policy.h"
#include "predict/predictor_tensors.h"
#include "predict/spkv_gates.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

/// A named F32 tensor, shape outermost first.
struct T {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
};

/// stories260K.gguf with `extra` tensors added, written to `path`.
void write_with(const std::string& path, const std::vector<T>& extra,
                const std::vector<std::pair<std::string, GGUFValue>>& meta = {}) {
    GGUFFile src(test::model_path("stories260K.gguf"));
    GGUFWriter w;
    for (const auto& [k, v] : src.metadata()) w.set(k, v);
    for (const auto& [k, v] : meta) w.set(k, v);
    for (const GGUFTensorInfo& t : src.tensors())
        w.add_tensor_ref(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.nbytes);
    for (const T& t : extra)
        w.add_tensor_ref(t.name, static_cast<uint32_t>(TensorType::F32),
                         std::vector<int64_t>(t.shape.rbegin(), t.shape.rend()), t.data.data(),
                         t.data.size() * sizeof(float));
    w.write(path);
}

const ModelConfig& config() { return test::stories260k().config(); }

/// Linear gates with zero weights: u = σ(bias[h]) for every token.
std::vector<T> constant_gates(const std::vector<float>& bias) {
    std::vector<T> g;
    const int D = config().n_embd, H = config().n_head_kv;
    for (int l = 0; l < config().n_layer; ++l) {
        g.push_back({predictor_tensor_name("spkv", l, "fc.weight"),
                     {H, D},
                     std::vector<float>(static_cast<size_t>(H) * D, 0.0f)});
        g.push_back({predictor_tensor_name("spkv", l, "fc.bias"), {H}, bias});
    }
    return g;
}

std::set<int32_t> kept(const KVCache& c, int l, int h) {
    std::set<int32_t> s;
    for (Region r : kRegionsInOrder)
        for (int32_t p : c.head(l, h).region(r)->positions()) s.insert(p);
    return s;
}

TEST(Spkv, AClosedGateRemovesTheKeyInPrefillAndDecode) {
    test::TempFile file(".gguf");
    write_with(file.path(), constant_gates({5, -5, 5, -5}));  // heads 1 and 3 closed (u ≈ 0.0067)
    LlamaModel m(file.path());
    KVCache c(m.config(), 128, parse_policy("spkv:tau=0.5,window=8"),
              std::make_shared<KVPool>(m.config().head_dim, KVType::kF32));
    const auto ids = test::story_prompt_ids();
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, std::vector<int32_t>(ids.begin(), ids.begin() + 30), c, logits);
    c.end_prefill();
    for (int s = 0; s < 5; ++s) m.forward(StepPhase::kDecode, {ids[30 + s]}, c, logits);
    for (int l = 0; l < m.config().n_layer; ++l)
        for (int h = 0; h < m.config().n_head_kv; ++h) {
            const auto k = kept(c, l, h);
            if (h % 2 == 0) {
                EXPECT_EQ(k.size(), 35u);
                for (float u : c.head(l, h).global().scores()) EXPECT_NEAR(u, 1 / (1 + std::exp(-5.0)), 1e-6);
            } else {
                EXPECT_EQ(k, (std::set<int32_t>{27, 28, 29, 30, 31, 32, 33, 34}));  // the window only
            }
        }
    EXPECT_NEAR(c.stats().density, 0.5, 1e-9);  // beyond the window: all of two heads, none of the others
}

TEST(Spkv, TheTrainedWindowAndSinksAreTheDefaults) {
    // Gates trained with window 8 and 2 sinks (the trainer's metadata): `spkv` runs with them, a spec that names
    // either keeps its own, and a file without the metadata gets the preset's defaults (128, 0).
    test::TempFile trained(".gguf"), bare(".gguf");
    write_with(trained.path(), constant_gates({5, -5, 5, -5}),
               {{predictor_metadata_key("spkv", "window"), GGUFValue::make_u32(8)},
                {predictor_metadata_key("spkv", "sinks"), GGUFValue::make_u32(2)}});
    write_with(bare.path(), constant_gates({5, -5, 5, -5}));
    LlamaModel m(trained.path()), mb(bare.path());
    auto pool = std::make_shared<KVPool>(m.config().head_dim, KVType::kF32);
    auto policy_of = [&](const LlamaModel& model, const char* spec) {
        KVCache c(model.config(), 128, parse_policy(spec), pool);
        return std::make_pair(c.policy().window, c.policy().sinks);
    };
    EXPECT_EQ(policy_of(m, "spkv"), std::make_pair(8, 2));
    EXPECT_EQ(policy_of(m, "spkv:window=16"), std::make_pair(16, 2));
    EXPECT_EQ(policy_of(m, "spkv:sinks=0"), std::make_pair(8, 0));
    EXPECT_EQ(policy_of(mb, "spkv"), std::make_pair(128, 0));
    // The closed heads keep exactly sinks + window under the trained defaults.
    KVCache c(m.config(), 128, parse_policy("spkv"), pool);
    const auto ids = test::story_prompt_ids();
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, std::vector<int32_t>(ids.begin(), ids.begin() + 30), c, logits);
    EXPECT_EQ(kept(c, 0, 1), (std::set<int32_t>{0, 1, 22, 23, 24, 25, 26, 27, 28, 29}));
    EXPECT_EQ(kept(c, 0, 0).size(), 30u);
}

TEST(Spkv, MlpGatesComputeSiluThenSigmoidAndDecideAtWrite) {
    const int D = config().n_embd, H = config().n_head_kv, hid = 6;
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 0.3f);
    std::vector<T> g;
    std::vector<std::vector<float>> w1(config().n_layer), b1(config().n_layer), w2(config().n_layer),
        b2(config().n_layer);
    for (int l = 0; l < config().n_layer; ++l) {
        for (int i = 0; i < hid * D; ++i) w1[l].push_back(nd(rng));
        for (int i = 0; i < hid; ++i) b1[l].push_back(nd(rng));
        for (int i = 0; i < H * hid; ++i) w2[l].push_back(3 * nd(rng));
        for (int i = 0; i < H; ++i) b2[l].push_back(nd(rng));
        g.push_back({predictor_tensor_name("spkv", l, "fc1.weight"), {hid, D}, w1[l]});
        g.push_back({predictor_tensor_name("spkv", l, "fc1.bias"), {hid}, b1[l]});
        g.push_back({predictor_tensor_name("spkv", l, "fc2.weight"), {H, hid}, w2[l]});
        g.push_back({predictor_tensor_name("spkv", l, "fc2.bias"), {H}, b2[l]});
    }
    test::TempFile file(".gguf");
    write_with(file.path(), g);
    GGUFFile f(file.path());
    const SpkvGates gates = SpkvGates::load(f, config().n_layer, D, H);
    EXPECT_EQ(gates.hidden(), hid);
    // Against the formula written out here: u = σ(W2 · SiLU(W1 x + b1) + b2).
    std::vector<float> x(2 * D), u(2 * H);
    for (auto& v : x) v = nd(rng) * 3;
    for (int l = 0; l < config().n_layer; ++l) {
        gates.predict(l, x.data(), 2, u.data());
        for (int t = 0; t < 2; ++t)
            for (int h = 0; h < H; ++h) {
                double s = b2[l][h];
                for (int j = 0; j < hid; ++j) {
                    double a = b1[l][j];
                    for (int c = 0; c < D; ++c) a += double(w1[l][j * D + c]) * x[t * D + c];
                    s += w2[l][h * hid + j] * (a / (1 + std::exp(-a)));
                }
                EXPECT_NEAR(u[t * H + h], 1 / (1 + std::exp(-s)), 1e-6);
            }
    }
    // window=0: each entry is kept iff its own u ≥ τ; the stored scores are the utilities.
    LlamaModel m(file.path());
    KVCache c(m.config(), 128, parse_policy("spkv:tau=0.5,window=0"),
              std::make_shared<KVPool>(m.config().head_dim, KVType::kF32));
    const auto ids = test::story_prompt_ids();
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, std::vector<int32_t>(ids.begin(), ids.begin() + 20), c, logits);
    for (int s = 0; s < 4; ++s) m.forward(StepPhase::kDecode, {ids[20 + s]}, c, logits);
    int64_t total = 0, dropped = 0;
    for (int l = 0; l < m.config().n_layer; ++l)
        for (int h = 0; h < m.config().n_head_kv; ++h) {
            for (float s : c.head(l, h).global().scores()) EXPECT_GE(s, 0.5f);
            total += 24;
            dropped += 24 - static_cast<int64_t>(kept(c, l, h).size());
        }
    EXPECT_GT(dropped, 0);
    EXPECT_LT(dropped, total);
}

TEST(Spkv, GatedPrefillAttentionIsExactAgainstADenseMaskedReference) {
    // Random keys, positions with gaps (cached entries of a compressed head), random gates, several windows.
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int G = 3, d = 16;
    // The queries sit in rows of ldq = 2·G·d floats (the engine passes the whole row of all query heads and points
    // at the group's first head), so the kernel must read and write only its G·d slice.
    // The last case has enough open keys (~12600) that the kernel splits the group's heads over two SGEMMs.
    std::vector<std::array<int64_t, 3>> cases;  // window, T, cached entries
    for (int64_t window : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{40}, std::numeric_limits<int64_t>::max()})
        for (int64_t T : {1, 7, 150, 300}) cases.push_back({window, T, 37});
    cases.push_back({40, 130, 14000});
    for (const auto& [window, T, n_prefix] : cases) {
        {
            const int64_t n = n_prefix + T, pos_q0 = 5 * n_prefix + 15, ld = 2 * G * d;
            std::vector<float> q(static_cast<size_t>(T) * ld), k(static_cast<size_t>(n) * d), v(k.size()),
                out(q.size(), 7.0f);
            for (auto& x : q) x = nd(rng);
            for (auto& x : k) x = nd(rng);
            for (auto& x : v) x = nd(rng);
            std::vector<int32_t> pos(n);
            std::vector<char> open(n);
            for (int64_t j = 0; j < n_prefix; ++j) pos[j] = static_cast<int32_t>(j * 5);  // all before pos_q0
            for (int64_t t = 0; t < T; ++t) pos[n_prefix + t] = static_cast<int32_t>(pos_q0 + t);
            for (auto& o : open) o = n_prefix > 1000 ? rng() % 10 != 0 : rng() % 3 == 0;
            attention_prefill_gated(q.data() + G * d, ld, G, d, T, k.data(), v.data(), n_prefix, pos.data(),
                                    open.data(), pos_q0, window, out.data() + G * d, ld);
            for (int64_t t = 0; t < T; ++t)  // the other half of each row untouched
                for (int64_t c = 0; c < G * d; ++c) ASSERT_EQ(out[t * ld + c], 7.0f);
            double worst = 0;
            for (int64_t t = 0; t < T; ++t)
                for (int g = 0; g < G; ++g) {
                    std::vector<double> p(n, 0.0);
                    double mx = -INFINITY;
                    for (int64_t j = 0; j < n; ++j) {
                        const bool causal = j < n_prefix || j - n_prefix <= t;
                        const bool vis = causal && (open[j] || pos_q0 + t - pos[j] < std::max<int64_t>(window, 1));
                        if (!vis) {
                            p[j] = -INFINITY;
                            continue;
                        }
                        double dot = 0;
                        for (int c = 0; c < d; ++c) dot += double(q[t * ld + (G + g) * d + c]) * k[j * d + c];
                        p[j] = dot / std::sqrt(double(d));
                        mx = std::max(mx, p[j]);
                    }
                    double sum = 0;
                    for (auto& x : p) sum += (x = x == -INFINITY ? 0.0 : std::exp(x - mx));
                    for (int c = 0; c < d; ++c) {
                        double o = 0;
                        for (int64_t j = 0; j < n; ++j) o += p[j] / sum * v[j * d + c];
                        worst = std::max(worst, std::fabs(o - out[t * ld + (G + g) * d + c]));
                    }
                }
            EXPECT_LT(worst, 2e-5) << "window " << window << " T " << T;
        }
    }
}

TEST(Spkv, GatedPrefillSeesWhatDecodeSteps) {
    // With the paper's gated prefill, prefilling N tokens gives the logits that feeding them one decode step at a time
    // gives (closed keys gone once they leave the window); a dense prefill does not.
    test::TempFile file(".gguf");
    write_with(file.path(), constant_gates({5, -5, 5, -5}));
    LlamaModel m(file.path());
    const auto ids = test::story_prompt_ids();
    const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 30);
    auto logits_of = [&](const std::string& spec, bool stepwise) {
        return test::logits_under(m, spec, prompt, stepwise);
    };
    const auto steps = logits_of("spkv:tau=0.5,window=8", true);
    const auto gated = logits_of("spkv:tau=0.5,window=8", false);
    const auto dense = logits_of("spkv:tau=0.5,window=8,sparse_prefill=0", false);
    const double d_gated = test::max_abs_diff(steps, gated), d_dense = test::max_abs_diff(steps, dense);
    EXPECT_LT(d_gated, 1e-3);
    EXPECT_GT(d_dense, 1e-2);
}

TEST(Spkv, QuantizingTheModelKeepsItsGatesAsTheyAre) {
    test::TempFile file(".gguf"), q8(".gguf");
    write_with(file.path(), constant_gates({5, -5, 0.25f, -0.25f}));
    quantize_model(file.path(), q8.path(), TensorType::Q8_0);
    GGUFFile f(q8.path());
    EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, static_cast<uint32_t>(TensorType::Q8_0));
    const GGUFTensorInfo* g = f.find_tensor(predictor_tensor_name("spkv", 2, "fc.weight"));
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->type, static_cast<uint32_t>(TensorType::F32));
    const SpkvGates gates = SpkvGates::load(f, config().n_layer, config().n_embd, config().n_head_kv);
    std::vector<float> x(config().n_embd, 1.0f), u(config().n_head_kv);
    gates.predict(2, x.data(), 1, u.data());
    EXPECT_NEAR(u[2], 1.0f / (1.0f + std::exp(-0.25f)), 1e-6);
    EXPECT_TRUE(is_predictor_tensor("blk.12.spkv.fc1.weight"));
    EXPECT_FALSE(is_predictor_tensor("blk.12.attn_q.weight"));
    EXPECT_FALSE(is_predictor_tensor("token_embd.weight"));
}

TEST(Spkv, TheTrainedTiny2kModelKeepsTheFarNeedleItNeeds) {
    // tests/data/models/kvsieve-tiny-2k-spkv.gguf (trained by `kvsieve train spkv`, card beside it): its gates were learned
    // from next-token loss on text and retrieval rows. Query-agnostic single-needle retrieval at 1024 tokens:
    // with its gates it keeps ~2% of the entries beyond the 128-token window and still finds the needle, while
    // the same window with every gate closed (a sliding window) cannot reach it.
    LlamaModel m(test::model_path("kvsieve-tiny-2k-spkv.gguf"));
    const auto tok = Tokenizer::from_gguf(m.file());
    const std::string haystack =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friend "
        "Ben. One day, they saw a big red ball under a tree. Lily wanted the ball, but Ben said it was his. They were "
        "sad and did not talk. Then Lily had an idea. She said, let us share the ball and play together. Ben smiled "
        "and they played all day. When the sun went down, they went home happy. The next morning, the ball was gone.\n";
    RulerOptions o;
    o.samples = 6;
    o.progress = false;
    const RulerResult gated = run_ruler(m, *tok, haystack, "spkv:tau=0.5,window=128", o);
    const RulerResult local = run_ruler(m, *tok, haystack, "hybrid_heads:global=,window=128", o);
    double density = 0;
    for (const auto& s : gated.samples) density += s.density / static_cast<double>(gated.samples.size());
    EXPECT_GE(gated.score(), 5.0 / 6 * 100) << "the gates keep the needle";
    EXPECT_LT(density, 0.1) << "and little else";
    EXPECT_LE(local.score(), 50.0) << "a sliding window of the same width loses it";
}

TEST(Spkv, AModelWithoutGatesIsAClearError) {
    const auto pol = parse_policy("spkv");
    EXPECT_EQ(pol.window, 128);
    EXPECT_EQ(pol.admission.tau, 0.5);
    try {
        KVCache c(config(), 64, pol, std::make_shared<KVPool>(config().head_dim, KVType::kF32));
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("has no SP-KV gates"), std::string::npos) << e.what();
    }
    // A missing tensor in a later layer is named.
    auto g = constant_gates({1, 1, 1, 1});
    g.pop_back();
    test::TempFile file(".gguf");
    write_with(file.path(), g);
    GGUFFile f(file.path());
    try {
        (void)SpkvGates::load(f, config().n_layer, config().n_embd, config().n_head_kv);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("blk.4.spkv.fc.bias is missing"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parse_policy("spkv:tau=2"), Error);
}

}  // namespace
}  // namespace kvsieve
