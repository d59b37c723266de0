// KVpop inference (policy/kvpop.cpp, predict/kvpop_scorer.h) and its running top-k (policy/running_topk.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "attend/paged_attention.h"
#include "cache/kv_cache.h"
#include "io/safetensors.h"
#include "policy/policy.h"
#include "policy/running_topk.h"
#include "predict/kvpop_scorer.h"
#include "test_util.h"
#include "util/error.h"

namespace kvsieve {
namespace {

/// Random scorer tensors for a model of L layers, Hkv heads of size d: "mlp" (hidden 2d) or "mlstm" (f = dv = d/2,
/// or 4 at least). Forget-gate biases near +2 (long memory), input-gate biases in [−1, 1].
std::map<std::string, SafeTensor> random_scorer(int L, int H, int d, const std::string& kind, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n01;
    std::uniform_real_distribution<float> u01;
    std::map<std::string, SafeTensor> t;
    auto put = [&](int l, const std::string& name, std::vector<int64_t> shape, float sd, float mean = 0) {
        SafeTensor x;
        x.dtype = "F32";
        x.shape = shape;
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        for (int64_t i = 0; i < n; ++i) x.data.push_back(mean + sd * n01(rng));
        t[kvpop_tensor_name(l, name)] = x;
    };
    const int64_t x = 2 * d, hid = 2 * d, f = std::max(4, d / 2), dv = std::max(4, d / 2);
    const float sx = 1.0f / std::sqrt(static_cast<float>(x));
    for (int l = 0; l < L; ++l) {
        if (kind == "mlp") {
            put(l, "mlp.fc1.weight", {H, hid, x}, sx);
            put(l, "mlp.fc1.bias", {H, hid}, 0.1f);
            put(l, "mlp.fc2.weight", {H, hid}, 1.0f / std::sqrt(static_cast<float>(hid)));
            put(l, "mlp.fc2.bias", {H}, 0.1f);
        } else {
            put(l, "mlstm.wq", {H, f, x}, 2 * sx);
            put(l, "mlstm.wk", {H, f, x}, 2 * sx);
            put(l, "mlstm.wv", {H, dv, x}, sx);
            put(l, "mlstm.wi", {H, x}, sx);
            put(l, "mlstm.bi", {H}, 0.5f);
            put(l, "mlstm.wf", {H, x}, sx);
            put(l, "mlstm.bf", {H}, 0.3f, 2.0f);
            put(l, "mlstm.wo", {H, dv}, 3.0f);
            put(l, "mlstm.bo", {H}, 0.1f);
        }
        SafeTensor g;
        g.dtype = "F32";
        g.shape = {H};
        for (int h = 0; h < H; ++h)
            g.data.push_back(static_cast<float>(std::log(kKvpopGammaMin) +
                                                u01(rng) * (std::log(kKvpopGammaMax) - std::log(kKvpopGammaMin))));
        t[kvpop_tensor_name(l, "log_gamma")] = g;
    }
    return t;
}

/// A scorer directory (model.safetensors + config.json), removed with the object.
struct ScorerDir {
    ScorerDir(const ModelConfig& c, const std::string& kind, int64_t window, int64_t sinks, uint32_t seed = 5) {
        test::TempFile tf(".kvpop");
        path = tf.path();
        std::filesystem::create_directories(path);
        write_safetensors(path + "/model.safetensors", random_scorer(c.n_layer, c.n_head_kv, c.head_dim, kind, seed));
        nlohmann::json j = {{"kind", kind}, {"window", window}, {"sinks", sinks}};
        std::ofstream(path + "/config.json") << j.dump();
    }
    ~ScorerDir() { std::filesystem::remove_all(path); }
    std::string path;
};

/// Brute force: after entries 0 … i are eligible, sort them (priority descending, index ascending) and take the k-th.
std::vector<int64_t> brute_cutoff(const std::vector<float>& p, int64_t k) {
    std::vector<int64_t> out;
    for (size_t i = 0; i < p.size(); ++i) {
        std::vector<int64_t> idx(i + 1);
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
        out.push_back(static_cast<int64_t>(idx.size()) >= k ? idx[k - 1] : -1);
    }
    return out;
}

TEST(RunningTopK, FenwickCutoffEqualsBruteForce) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 40; ++trial) {
        const int n = 1 + static_cast<int>(rng() % 300);
        const int64_t k = 1 + static_cast<int64_t>(rng() % 40);
        std::vector<float> p(n);
        // Few distinct values so that ties are common and their order matters.
        for (auto& x : p) x = trial % 2 ? static_cast<float>(rng() % 7) : std::normal_distribution<float>()(rng);
        EXPECT_EQ(running_topk_cutoff(p, k), brute_cutoff(p, k)) << "n=" << n << " k=" << k;
    }
}

TEST(RunningTopK, GreedyEvictionWithStaticPrioritiesKeepsTheRunningTopK) {
    // Simulate the cache: each step one entry becomes eligible, and while more than k are held the lowest (ties:
    // the later index) is evicted. The held set must be the cutoff's set at every step.
    std::mt19937 rng(3);
    const int n = 200;
    const int64_t k = 17;
    std::vector<float> p(n);
    for (auto& x : p) x = static_cast<float>(rng() % 11);
    const auto cut = running_topk_cutoff(p, k);
    const auto rank = priority_ranks(p);
    std::vector<int64_t> held;
    for (int i = 0; i < n; ++i) {
        held.push_back(i);
        while (static_cast<int64_t>(held.size()) > k) {
            auto worst =
                std::max_element(held.begin(), held.end(), [&](int64_t a, int64_t b) { return rank[a] < rank[b]; });
            held.erase(worst);
        }
        std::vector<int64_t> want;
        for (int j = 0; j <= i; ++j)
            if (cut[i] < 0 || rank[j] <= rank[cut[i]]) want.push_back(j);
        std::sort(held.begin(), held.end());
        EXPECT_EQ(held, want) << "step " << i;
    }
}

TEST(RunningTopK, FenwickCountsAndErrors) {
    RankFenwick fw(10);
    for (int r : {3, 7, 1, 7}) fw.insert(r);
    EXPECT_EQ(fw.count_upto(0), 0);
    EXPECT_EQ(fw.count_upto(1), 1);
    EXPECT_EQ(fw.count_upto(6), 2);
    EXPECT_EQ(fw.count_upto(9), 4);
    EXPECT_EQ(fw.kth(1), 1);
    EXPECT_EQ(fw.kth(3), 7);
    EXPECT_EQ(fw.kth(4), 7);
    EXPECT_EQ(fw.kth(5), -1);
    EXPECT_THROW(fw.insert(10), Error);
    EXPECT_THROW(running_topk_cutoff({1.0f, NAN}, 1), Error);
    EXPECT_THROW(running_topk_cutoff({1.0f}, 0), Error);
}

// ---- the scorers against plain formulas ----

std::vector<double> rms(const float* z, int d) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += double(z[i]) * z[i];
    std::vector<double> o(d);
    for (int i = 0; i < d; ++i) o[i] = z[i] / std::sqrt(ss / d + 1e-6);
    return o;
}

/// W [rows][n] · x.
std::vector<double> matvec(const std::vector<float>& W, size_t off, int rows, const std::vector<double>& x) {
    std::vector<double> o(rows, 0.0);
    for (int r = 0; r < rows; ++r)
        for (size_t c = 0; c < x.size(); ++c) o[r] += W[off + r * x.size() + c] * x[c];
    return o;
}

std::vector<double> phi(const std::vector<double>& z) {  // [softmax(z); softmax(−z)], written out
    std::vector<double> o;
    double sp = 0, sn = 0;
    for (double v : z) sp += std::exp(v), sn += std::exp(-v);
    for (double v : z) o.push_back(std::exp(v) / sp);
    for (double v : z) o.push_back(std::exp(-v) / sn);
    return o;
}

TEST(KvpopScorer, MlstmRecurrenceEqualsTheUnstabilisedSumOverTheSequence) {
    const int L = 2, H = 3, d = 8, T = 40;
    const auto tens = random_scorer(L, H, d, "mlstm", 11);
    KvpopConfig cfg;
    cfg.softcap = 4;
    const KvpopScorerNet net = KvpopScorerNet::from_tensors(tens, "test", L, H, d, cfg);
    ASSERT_TRUE(net.stateful());
    std::mt19937 rng(2);
    std::normal_distribution<float> n01;
    std::vector<float> k(T * d), v(T * d);
    for (auto& z : k) z = 2 * n01(rng);
    for (auto& z : v) z = n01(rng);
    auto W = [&](const std::string& n) { return tens.at(kvpop_tensor_name(1, n)).data; };
    const int head = 2, f = net.feature_dim(), dv = net.value_dim(), x = 2 * d;
    // Plain formulas per token: φ(q̃), φ(k̃), ṽ, i = exp(ĩ), f = σ(f̃).
    std::vector<std::vector<double>> pq, pk, pv;
    std::vector<double> ig, fg;
    for (int t = 0; t < T; ++t) {
        std::vector<double> xin = rms(&k[t * d], d), vn = rms(&v[t * d], d);
        xin.insert(xin.end(), vn.begin(), vn.end());
        pq.push_back(phi(matvec(W("mlstm.wq"), static_cast<size_t>(head) * f * x, f, xin)));
        pk.push_back(phi(matvec(W("mlstm.wk"), static_cast<size_t>(head) * f * x, f, xin)));
        pv.push_back(matvec(W("mlstm.wv"), static_cast<size_t>(head) * dv * x, dv, xin));
        ig.push_back(std::exp(matvec(W("mlstm.wi"), static_cast<size_t>(head) * x, 1, xin)[0] + W("mlstm.bi")[head]));
        fg.push_back(1 / (1 + std::exp(-(matvec(W("mlstm.wf"), static_cast<size_t>(head) * x, 1, xin)[0] +
                                         W("mlstm.bf")[head]))));
    }
    // r(u, q): query of token u against C_q = Σ_{j ≤ q} (Π_{j<l≤q} f_l) i_j φ(k̃_j) ṽ_jᵀ, normaliser max(|n_qᵀφ|, 1).
    auto plain = [&](int u, int q) {
        std::vector<double> num(dv, 0.0);
        double den = 0;
        for (int j = 0; j <= q; ++j) {
            double g = ig[j];
            for (int l = j + 1; l <= q; ++l) g *= fg[l];
            double s = 0;
            for (size_t a = 0; a < pk[j].size(); ++a) s += pk[j][a] * pq[u][a];
            den += g * s;
            for (int b = 0; b < dv; ++b) num[b] += g * s * pv[j][b];
        }
        den = std::max(std::abs(den), 1.0);
        double o = W("mlstm.bo")[head];
        for (int b = 0; b < dv; ++b) o += W("mlstm.wo")[head * dv + b] * num[b] / den;
        return 4 * std::tanh(o / 4);
    };
    MlstmState st = net.new_state();
    const std::vector<float> q0(pq[0].begin(), pq[0].end());
    EXPECT_EQ(net.readout(1, head, q0.data(), st), 0.0f);  // an empty memory scores 0
    std::vector<std::vector<float>> fq;
    MlstmInputs in;
    for (int q = 0; q < T; ++q) {
        net.inputs(1, head, &k[q * d], &v[q * d], in);
        for (size_t a = 0; a < in.q.size(); ++a) ASSERT_NEAR(in.q[a], pq[q][a], 1e-5);
        net.step(in, st);
        fq.push_back(in.q);
        for (int u : {q, std::max(0, q - 7)})  // immediate and delayed (w = 7) readouts
            ASSERT_NEAR(net.readout(1, head, fq[u].data(), st), plain(u, q), 2e-4) << "u " << u << " q " << q;
    }
}

TEST(KvpopScorer, MlpIsTheTwoLayerSiluNetwork) {
    const int L = 1, H = 2, d = 6, T = 5;
    const auto tens = random_scorer(L, H, d, "mlp", 4);
    const KvpopScorerNet net = KvpopScorerNet::from_tensors(tens, "test", L, H, d);
    ASSERT_FALSE(net.stateful());
    std::mt19937 rng(9);
    std::normal_distribution<float> n01;
    std::vector<float> k(T * H * d), v(T * H * d), r(T * H);
    for (auto& z : k) z = n01(rng);
    for (auto& z : v) z = 3 * n01(rng);
    net.score_mlp(0, k.data(), v.data(), T, r.data());
    auto W = [&](const std::string& n) { return tens.at(kvpop_tensor_name(0, n)).data; };
    const int hid = net.hidden();
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < H; ++h) {
            std::vector<double> xin = rms(&k[(t * H + h) * d], d), vn = rms(&v[(t * H + h) * d], d);
            xin.insert(xin.end(), vn.begin(), vn.end());
            const auto a = matvec(W("mlp.fc1.weight"), static_cast<size_t>(h) * hid * 2 * d, hid, xin);
            double o = W("mlp.fc2.bias")[h];
            for (int j = 0; j < hid; ++j) {
                const double z = a[j] + W("mlp.fc1.bias")[h * hid + j];
                o += W("mlp.fc2.weight")[h * hid + j] * z / (1 + std::exp(-z));
            }
            EXPECT_NEAR(r[t * H + h], o, 1e-4);
        }
    EXPECT_THROW(net.inputs(0, 0, k.data(), v.data(), *std::make_unique<MlstmInputs>()), Error);
}

TEST(KvpopScorer, WrongShapesAndKindsAreOneClearError) {
    const ModelConfig& c = test::stories260k().config();
    ScorerDir mlp(c, "mlp", 8, 2), mlstm(c, "mlstm", 8, 2);
    auto msg = [](const std::function<void()>& f) {
        try {
            f();
        } catch (const Error& e) { return std::string(e.what()); }
        return std::string("no error");
    };
    EXPECT_NE(msg([&] { KvpopScorerNet::load(mlstm.path, c.n_layer, c.n_head_kv + 1, c.head_dim); }).find("mlstm.wq"),
              std::string::npos);
    EXPECT_NE(msg([&] { KvpopScorerNet::load(mlstm.path, c.n_layer + 1, c.n_head_kv, c.head_dim); }).find("missing"),
              std::string::npos);
    EXPECT_NE(
        msg([&] { KvpopScorerNet::load(mlstm.path, c.n_layer - 1, c.n_head_kv, c.head_dim); }).find("more layers"),
        std::string::npos);
    // The preset must match the scorer's kind; the budget must leave long-range entries.
    auto cache = [&](const std::string& spec) {
        KVCache kc(c, 64, parse_policy(spec), std::make_shared<KVPool>(c.head_dim, KVType::kF32));
    };
    EXPECT_NE(msg([&] { cache("kvpop:model=" + mlp.path + ",capacity=20"); }).find("kvpop_mlp"), std::string::npos);
    EXPECT_NE(msg([&] { cache("kvpop_mlp:model=" + mlstm.path + ",capacity=20"); }).find("use policy kvpop"),
              std::string::npos);
    EXPECT_NE(msg([&] { parse_policy("kvpop:model=" + mlstm.path + ",capacity=10"); }).find("no long-range"),
              std::string::npos);
    EXPECT_NE(msg([&] { parse_policy("kvpop:model=" + mlstm.path); }).find("capacity=B"), std::string::npos);
    EXPECT_NE(msg([&] { parse_policy("kvpop:capacity=40"); }).find("model="), std::string::npos);
    EXPECT_NE(msg([&] { cache("kvpop:model=/nonexistent/kvpop,capacity=400"); }).find("cannot open"),
              std::string::npos);
}

// ---- the policy in the cache ----

/// Every entry (position → k, v) a cache holds, read back from its regions (F32 pool).
struct Held {
    std::map<int32_t, std::pair<std::vector<float>, std::vector<float>>> kv;
    std::map<int32_t, float> global_score;
};
Held held(const KVCache& kc, int l, int h, int d) {
    Held o;
    const HeadCache& hc = kc.head(l, h);
    for (const PageStore* ps : {&hc.sinks(), &hc.window(), &hc.global()})
        for (int64_t i = 0; i < ps->size(); ++i) {
            std::vector<float> k(d), v(d);
            ps->read(i, k.data(), v.data());
            o.kv[ps->positions()[i]] = {k, v};
            if (ps == &hc.global()) o.global_score[ps->positions()[i]] = ps->scores()[i];
        }
    return o;
}

TEST(KvpopPolicy, EachLeavingEntryIsScoredAgainstTheStateAtTheStepThatPushesItOut) {
    const LlamaModel& m = test::stories260k();
    const ModelConfig& c = m.config();
    const int64_t s = 2, w = 8;
    ScorerDir dir(c, "mlstm", w, s);
    const auto ids = test::story_prompt_ids();
    const std::string spec = "kvpop:model=" + dir.path + ",capacity=1000";  // no eviction: every score stays
    auto pool = std::make_shared<KVPool>(c.head_dim, KVType::kF32);
    KVCache one(c, 128, parse_policy(spec), pool), steps(c, 128, parse_policy(spec), pool);
    std::vector<float> logits;
    m.forward(StepPhase::kPrefill, ids, one, logits);
    one.end_prefill();
    for (size_t t = 0; t < ids.size(); ++t) m.forward(StepPhase::kDecode, {ids[t]}, steps, logits);
    const int64_t n = static_cast<int64_t>(ids.size());
    const KvpopScorerNet net = KvpopScorerNet::load(dir.path, c.n_layer, c.n_head_kv, c.head_dim);
    for (int l = 0; l < c.n_layer; ++l)
        for (int h = 0; h < c.n_head_kv; ++h) {
            const Held a = held(one, l, h, c.head_dim), b = held(steps, l, h, c.head_dim);
            ASSERT_EQ(static_cast<int64_t>(a.kv.size()), n);
            ASSERT_EQ(static_cast<int64_t>(a.global_score.size()), n - s - w);  // every entry that left the window
            // Replay the recurrence over the held keys and values; the entry u is read at q = u + w.
            MlstmState st = net.new_state();
            std::vector<std::vector<float>> fq;
            MlstmInputs in;
            for (int32_t q = 0; q < n; ++q) {
                net.inputs(l, h, a.kv.at(q).first.data(), a.kv.at(q).second.data(), in);
                net.step(in, st);
                fq.push_back(in.q);
                const int32_t u = q - static_cast<int32_t>(w);
                if (u < s) continue;
                const float want = net.readout(l, h, fq[u].data(), st);
                EXPECT_NEAR(a.global_score.at(u), want, 1e-4) << "layer " << l << " head " << h << " entry " << u;
                EXPECT_NEAR(b.global_score.at(u), want, 2e-3) << "decode steps, layer " << l << " head " << h;
            }
        }
}

/// Synthetic layer inputs for a model shape (random q, k, v): drives the cache without a model.
struct Synthetic {
    ModelConfig c;
    std::mt19937 rng{1};
    std::normal_distribution<float> n01;
    std::vector<float> q, k, v, out;
    Synthetic() {
        c.n_layer = 2, c.n_embd = 64, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 16, c.n_ff = 64, c.n_vocab = 16;
        c.n_ctx_train = 8192;
    }
    void step(KVCache& kc, int64_t pos0, int64_t T) {
        for (int l = 0; l < c.n_layer; ++l) {
            q.resize(T * c.n_head * c.head_dim);
            k.resize(T * c.n_head_kv * c.head_dim);
            v.resize(k.size());
            out.resize(q.size());
            for (auto* x : {&q, &k, &v})
                for (auto& z : *x) z = n01(rng);
            LayerInputs in;
            in.layer = l, in.pos0 = pos0, in.T = T;
            in.n_head = c.n_head, in.n_head_kv = c.n_head_kv, in.head_dim = c.head_dim, in.n_embd = c.n_embd;
            in.q = in.q_pre = q.data();
            in.k = in.k_pre = k.data();
            in.v = v.data();
            in.phase = T == 1 ? StepPhase::kDecode : StepPhase::kPrefill;
            PagedAttention(kc).attend(in, out.data());
        }
        kc.finish_step(pos0, T, T == 1 ? StepPhase::kDecode : StepPhase::kPrefill);
    }
};

TEST(KvpopPolicy, EvictionKeepsTheTopKOfTheDecayedScoresAndTheBudgetHolds) {
    // Two caches fed the same keys and values (synthetic layer inputs, so what one evicts cannot change the other's
    // inputs): one evicts nothing and keeps every score, the other holds B = s + w + k per head. Prefill in three
    // chunks with the rule after each (as a chunked prefill does), then decode steps.
    const int64_t s = 2, w = 8, k = 6, B = s + w + k;
    for (const std::string kind : {"mlstm", "mlp"}) {
        Synthetic sa, sb;
        ScorerDir dir(sa.c, kind, w, s, 21);
        const std::string preset = kind == "mlp" ? "kvpop_mlp" : "kvpop";
        KVCache all(sa.c, 512, parse_policy(preset + ":model=" + dir.path + ",capacity=1000"),
                    std::make_shared<KVPool>(sa.c.head_dim, KVType::kF32));
        KVCache kept(sa.c, 512, parse_policy(preset + ":model=" + dir.path + ",capacity=" + std::to_string(B)),
                     std::make_shared<KVPool>(sa.c.head_dim, KVType::kF32));
        int64_t now = 0;
        for (int64_t T : {30, 17, 25}) {
            sa.step(all, now, T);
            sb.step(kept, now, T);
            all.end_prefill();
            kept.end_prefill();
            now += T;
        }
        for (int i = 0; i < 40; ++i, ++now) {
            sa.step(all, now, 1);
            sb.step(kept, now, 1);
        }
        const KvpopScorerNet net = KvpopScorerNet::load(dir.path, sa.c.n_layer, sa.c.n_head_kv, sa.c.head_dim);
        for (int l = 0; l < sa.c.n_layer; ++l)
            for (int h = 0; h < sa.c.n_head_kv; ++h) {
                EXPECT_EQ(kept.head(l, h).size(), B) << kind;
                // The eligible entries s … now − w − 1 with their scores, ranked by r + (q − t)·log γ_h, q = now − 1.
                const Held a = held(all, l, h, sa.c.head_dim);
                ASSERT_EQ(static_cast<int64_t>(a.global_score.size()), now - s - w);
                std::vector<float> prio;
                std::vector<int32_t> pos;
                for (const auto& [p, r] : a.global_score) {
                    pos.push_back(p);
                    prio.push_back(r + static_cast<float>(now - 1 - p) * net.log_gamma(l, h));
                }
                const auto cut = running_topk_cutoff(prio, k);
                const auto rank = priority_ranks(prio);
                std::vector<int32_t> want;
                for (size_t i = 0; i < pos.size(); ++i)
                    if (rank[i] <= rank[cut.back()]) want.push_back(pos[i]);
                std::vector<int32_t> got = kept.head(l, h).global().positions();
                std::sort(got.begin(), got.end());
                EXPECT_EQ(got, want) << kind << " layer " << l << " head " << h;
            }
    }
}

TEST(KvpopPolicy, DecodeMemoryIsFlatAtTheBudgetOver4kGeneratedTokens) {
    Synthetic syn;
    const int64_t s = 4, w = 32, B = 96;
    ScorerDir dir(syn.c, "mlstm", w, s);
    auto pool = std::make_shared<KVPool>(syn.c.head_dim, KVType::kF16);
    KVCache kc(syn.c, 8192, parse_policy("kvpop:model=" + dir.path + ",capacity=" + std::to_string(B)), pool);
    KVCache full(syn.c, 8192, parse_policy("full"), std::make_shared<KVPool>(syn.c.head_dim, KVType::kF16));
    syn.step(kc, 0, 300);
    kc.end_prefill();
    const uint64_t after_prompt = kc.stats().kv_bytes_final;
    const int64_t pages_after_prompt = pool->pages_in_use();
    uint64_t most = 0;
    for (int64_t t = 300; t < 4396; ++t) {
        syn.step(kc, t, 1);
        most = std::max(most, kc.stats().kv_bytes_final);
        for (int l = 0; l < syn.c.n_layer; ++l)
            for (int h = 0; h < syn.c.n_head_kv; ++h) ASSERT_EQ(kc.head(l, h).size(), B) << "step " << t;
    }
    EXPECT_EQ(most, after_prompt);
    // The mLSTM's state: C [2f][dv], n [2f] and m per head, the w queries q̃ [f] awaiting their readout; flat too.
    const uint64_t state = kc.stats().scorer_state_bytes;
    const int f = std::max(4, syn.c.head_dim / 2);
    const uint64_t per_head = (2 * f * f + 2 * f + 1 + w * f) * 4;
    EXPECT_GE(state, static_cast<uint64_t>(syn.c.n_layer * syn.c.n_head_kv) * per_head);
    EXPECT_LT(state, 2 * static_cast<uint64_t>(syn.c.n_layer * syn.c.n_head_kv) * per_head);
    EXPECT_NE(kc.stats().table().find("scorer state"), std::string::npos);
    EXPECT_EQ(kc.stats().kv_bytes_final, after_prompt);
    EXPECT_EQ(pool->pages_in_use(), pages_after_prompt);
    EXPECT_EQ(kc.stats().tokens, 4396);
    // A full cache of the same length holds 4396 entries per head.
    syn.step(full, 0, 4396);
    EXPECT_GT(full.stats().kv_bytes_final, 30 * after_prompt);
}

}  // namespace
}  // namespace kvsieve

namespace kvsieve {
namespace {

TEST(KvpopPolicy, AnAdmissionInFrontOfTheBudgetThinsTheCandidates) {
    // kvzap (a learned write-time admission) in front of kvpop: only entries whose KVzap score passes τ enter the
    // global region, and among them the budget keeps the top-k of KVpop's decayed scores.
    const LlamaModel& m = test::stories260k();
    const ModelConfig& c = m.config();
    const int64_t s = 2, w = 8, k = 5;
    ScorerDir dir(c, "mlstm", w, s);
    const std::string kvzap = "kvzap:model=" + test::model_path("kvzap/stories260K-linear");
    const auto ids = test::story_prompt_ids();
    auto run = [&](const std::string& spec) {
        auto kc =
            std::make_unique<KVCache>(c, 128, parse_policy(spec), std::make_shared<KVPool>(c.head_dim, KVType::kF32));
        std::vector<float> logits;
        m.forward(StepPhase::kPrefill, ids, *kc, logits);
        kc->end_prefill();
        for (int i = 0; i < 12; ++i) m.forward(StepPhase::kDecode, {static_cast<int32_t>(100 + i)}, *kc, logits);
        return kc;
    };
    // τ: the median KVzap score of layer 0's entries beyond the window.
    const auto all = run(kvzap + ",tau=-1e30,window=8,sinks=2");
    std::vector<float> zs = all->head(0, 0).global().scores();
    ASSERT_GT(zs.size(), 20u);
    std::nth_element(zs.begin(), zs.begin() + zs.size() / 2, zs.end());
    const std::string tau = std::to_string(zs[zs.size() / 2]);
    const auto alone = run(kvzap + ",tau=" + tau + ",window=8,sinks=2");
    const auto wide = run(kvzap + ",tau=" + tau + ">kvpop:model=" + dir.path + ",capacity=1000");
    const auto tight =
        run(kvzap + ",tau=" + tau + ">kvpop:model=" + dir.path + ",capacity=" + std::to_string(s + w + k));
    EXPECT_EQ(wide->policy().name, "kvzap>kvpop");
    EXPECT_EQ(wide->policy().window, w);
    const int64_t now = static_cast<int64_t>(ids.size()) + 12;
    const KvpopScorerNet net = KvpopScorerNet::load(dir.path, c.n_layer, c.n_head_kv, c.head_dim);
    for (int l = 0; l < c.n_layer; ++l)
        for (int h = 0; h < c.n_head_kv; ++h) {
            // Without eviction the stack keeps what KVzap alone keeps (so every layer's inputs agree).
            std::vector<int32_t> a = alone->head(l, h).global().positions(), b = wide->head(l, h).global().positions();
            std::sort(a.begin(), a.end());
            std::sort(b.begin(), b.end());
            EXPECT_EQ(a, b) << "layer " << l << " head " << h;
            for (float r : wide->head(l, h).global().scores()) EXPECT_TRUE(std::isfinite(r));
        }
    for (int h = 0; h < c.n_head_kv; ++h) {  // layer 0: the same inputs whatever the cache holds
        const auto& g = wide->head(0, h).global();
        std::vector<float> prio;
        for (int64_t i = 0; i < g.size(); ++i)
            prio.push_back(g.scores()[i] + static_cast<float>(now - 1 - g.positions()[i]) * net.log_gamma(0, h));
        const auto rank = priority_ranks(prio);
        std::vector<int32_t> want;
        for (int64_t i = 0; i < g.size(); ++i)
            if (rank[i] < k) want.push_back(g.positions()[i]);
        std::sort(want.begin(), want.end());
        std::vector<int32_t> got = tight->head(0, h).global().positions();
        std::sort(got.begin(), got.end());
        EXPECT_EQ(got, want) << "head " << h;
    }
    // The parts must be an admission and an eviction.
    EXPECT_THROW(parse_policy("kvpop:model=" + dir.path + ",capacity=40>" + kvzap), Error);
    EXPECT_THROW(parse_policy("h2o:budget=64>kvpop:model=" + dir.path + ",capacity=40"), Error);
    EXPECT_THROW(parse_policy(kvzap + ">kvpop:model=" + dir.path + ",capacity=40>" + kvzap), Error);
}

}  // namespace
}  // namespace kvsieve
