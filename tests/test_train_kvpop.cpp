// KVpop training (train/kvpop*.h): the transposed pass's future attention equals the dense attention's, computed
// here with plain loops from the model's own attention; the teacher's decisions equal a brute-force top-k; the
// trainer's parallel mLSTM and its MLP score what the engine's recurrence scores from the saved file; `kvsieve train
// kvpop` trains, resumes and writes a scorer that `--policy kvpop` runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "cli_runner.h"
#include "io/safetensors.h"
#include "predict/kvpop_scorer.h"
#include "test_util.h"
#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "train/distill.h"
#include "train/kvpop_mask.h"
#include "train/kvpop_pairs.h"
#include "train/kvpop_predictor.h"
#include "train/kvpop_target.h"
#include "train/mirror.h"
#include "train/optim.h"
#include "trainer_cli_fixture.h"

namespace kvsieve {
namespace {

/// m_t of eq. 2 by loops over explicit softmax rows: q [Hq][T][d], k [Hkv][T][d] (one batch row).
std::vector<std::vector<double>> loop_future_attention(const torch::Tensor& q, const torch::Tensor& k, int64_t w,
                                                       double scale) {
    const int64_t Hq = q.size(0), T = q.size(1), d = q.size(2), Hkv = k.size(0), G = Hq / Hkv;
    auto qa = q.accessor<float, 3>();
    auto ka = k.accessor<float, 3>();
    std::vector<std::vector<double>> m(Hkv, std::vector<double>(T, 0.0));
    for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kv = h / G;
        std::vector<double> mass(T, 0.0);
        for (int64_t i = 0; i < T; ++i) {
            std::vector<double> logit(i + 1);
            double mx = -1e300, z = 0;
            for (int64_t j = 0; j <= i; ++j) {
                double s = 0;
                for (int64_t c = 0; c < d; ++c) s += double(qa[h][i][c]) * ka[kv][j][c];
                logit[j] = s * scale;
                mx = std::max(mx, logit[j]);
            }
            for (int64_t j = 0; j <= i; ++j) z += std::exp(logit[j] - mx);
            for (int64_t j = 0; j + w <= i; ++j) mass[j] += std::exp(logit[j] - mx) / z;
        }
        for (int64_t t = 0; t < T; ++t) {
            const int64_t n = std::max<int64_t>(T - t - w, 0);
            const double mt = n > 0 ? mass[t] / n : 0.0;
            m[kv][t] = std::max(m[kv][t], mt);
        }
    }
    return m;
}

TEST(KvpopTarget, TransposedPassEqualsDenseAttentionOfTheModel) {
    // The model's own queries, keys and log-sum-exp (a capture of the mirror's forward on stories260K).
    auto lm = train::load_mirror(test::model_path("stories260K.gguf"));
    const ModelConfig& c = lm->config();
    torch::manual_seed(1);
    const int64_t T = 45;
    auto toks = torch::randint(1, c.n_vocab, {2, T}, torch::kInt64);
    std::vector<train::AttnTensors> cap;
    train::MirrorHooks hooks;
    hooks.capture = &cap;
    {
        torch::NoGradGuard ng;
        lm->forward(toks, hooks);
    }
    ASSERT_EQ(static_cast<int>(cap.size()), c.n_layer);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    for (int l : {0, c.n_layer - 1})
        for (int64_t w : {0, 4, 16}) {
            const auto& a = cap[l];
            const auto fa = train::future_attention(a.q_post, a.k_post, a.lse, w, scale, /*block=*/7);
            const auto ref = train::future_attention_reference(a.q_post, a.k_post, a.lse, w, scale);
            EXPECT_TRUE(torch::allclose(fa.mass, ref.mass, 1e-5, 1e-7)) << "layer " << l << " w " << w;
            const auto loops = loop_future_attention(a.q_post[1], a.k_post[1], w, scale);
            for (int64_t h = 0; h < c.n_head_kv; ++h)
                for (int64_t t = 0; t < T; ++t)
                    ASSERT_NEAR(fa.mass[1][h][t].item<float>(), loops[h][t], 2e-5 + 1e-4 * loops[h][t])
                        << "layer " << l << " w " << w << " head " << h << " key " << t;
            EXPECT_EQ(fa.count[0].item<int64_t>(), T - w);
            EXPECT_EQ(fa.count[T - 1].item<int64_t>(), w == 0 ? 1 : 0);
            // The last w keys are seen by no query beyond the window: no mass.
            if (w > 0) EXPECT_EQ(fa.mass.narrow(2, T - w, w).abs().max().item<float>(), 0.0f);
            const auto y = train::future_attention_target(fa);
            EXPECT_TRUE(torch::allclose(y, torch::log(fa.mass + train::kKvpopTargetEps)));
        }
}

TEST(KvpopTarget, BadShapesAreOneClearError) {
    auto q = torch::randn({1, 4, 8, 5}), k = torch::randn({1, 3, 8, 5}), lse = torch::randn({1, 4, 8});
    EXPECT_THROW(train::future_attention(q, k, lse, 2, 1.0), Error);  // 4 query heads over 3 KV heads
    auto k2 = torch::randn({1, 2, 8, 5});
    EXPECT_THROW(train::future_attention(q, k2, lse, -1, 1.0), Error);
    EXPECT_THROW(train::future_attention(q, k2, torch::randn({1, 4, 7}), 2, 1.0), Error);
}

/// A random running top-k case: T tokens (t_min … t_min + t_span − 1), s sinks (0 … 3), window w (0 … 8), budget k
/// (1 … k_max) and the priorities of the T positions; every third trial draws them from 0 … levels − 1, so ties abound.
struct TopkCase {
    int64_t T, s, w, k;
    std::vector<float> p;
};
TopkCase random_topk_case(std::mt19937& rng, int trial, int64_t t_min, int64_t t_span, int64_t k_max, int levels) {
    TopkCase c;
    c.T = t_min + rng() % t_span, c.s = rng() % 4, c.w = rng() % 9, c.k = 1 + rng() % k_max;
    c.p.resize(c.T);
    for (auto& x : c.p)
        x = trial % 3 == 0 ? static_cast<float>(rng() % levels) : std::normal_distribution<float>()(rng);
    return c;
}

/// Positions from … to − 1 by priority p, highest first, ties to the older: the brute-force ranking of a top-k.
std::vector<int64_t> by_priority(const std::vector<float>& p, int64_t from, int64_t to) {
    std::vector<int64_t> e(std::max<int64_t>(to - from, 0));
    std::iota(e.begin(), e.end(), from);
    std::stable_sort(e.begin(), e.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    return e;
}

TEST(KvpopPairs, TheTeachersDecisionsAreThoseOfABruteForceTopK) {
    std::mt19937 rng(5);
    for (int trial = 0; trial < 30; ++trial) {
        const auto [T, s, w, k, p] = random_topk_case(rng, trial, 20, 120, 12, 5);
        const auto pairs = train::boundary_pairs(p, s, w, k);
        // Brute force: at step q the eligible entries are s … q − w; sort them (priority desc, older first).
        size_t next = 0;
        for (int64_t q = s + w; q < T; ++q) {
            if (q - w - s + 1 <= k) continue;
            const std::vector<int64_t> e = by_priority(p, s, q - w + 1);
            const int64_t t_new = q - w;
            const bool keep = std::find(e.begin(), e.begin() + k, t_new) != e.begin() + k;
            ASSERT_LT(next, pairs.size());
            const auto& got = pairs[next++];
            EXPECT_EQ(got.q, q);
            EXPECT_EQ(got.t_new, t_new);
            EXPECT_EQ(got.keep, keep) << "q " << q;
            EXPECT_EQ(got.t_bnd, keep ? e[k] : e[k - 1]) << "q " << q;
            EXPECT_FLOAT_EQ(got.margin, std::abs(p[t_new] - p[got.t_bnd]));
        }
        EXPECT_EQ(next, pairs.size());
    }
    EXPECT_THROW(train::boundary_pairs({1, 2, 3}, 0, 0, 0), Error);
}

TEST(KvpopScorerTraining, TheParallelFormScoresWhatTheEnginesRecurrenceScoresFromTheSavedFile) {
    ModelConfig c;
    c.n_layer = 2, c.n_head_kv = 3, c.head_dim = 8;
    torch::manual_seed(3);
    const int64_t T = 37, w = 6;
    for (const std::string kind : {"mlstm", "mlp"}) {
        train::KvpopScorerShape shape;
        shape.kind = kind;
        shape.softcap = 5;
        shape.forget_bias = 1;  // a short memory, so the forget gates matter
        train::KvpopPredictor p(c, shape);
        {
            torch::NoGradGuard ng;  // move everything off its initialisation (decay logits, biases)
            for (auto& t : p->parameters()) t.add_(0.3 * torch::randn_like(t));
        }
        test::TempFile file(".safetensors");
        p->save_safetensors(file.path());
        KvpopConfig cfg;
        cfg.softcap = 5;
        const KvpopScorerNet net = KvpopScorerNet::from_tensors(read_safetensors(file.path()), file.path(), c.n_layer,
                                                                c.n_head_kv, c.head_dim, cfg);
        auto k = 2 * torch::randn({2, c.n_head_kv, T, c.head_dim}), v = torch::randn({2, c.n_head_kv, T, c.head_dim});
        for (int l = 0; l < c.n_layer; ++l) {
            const auto lg = p->log_gamma(l);
            for (int h = 0; h < c.n_head_kv; ++h) EXPECT_NEAR(net.log_gamma(l, h), lg[h].item<float>(), 1e-9);
            for (int64_t delay : {int64_t{0}, w}) {
                if (kind == "mlp" && delay > 0) continue;
                const auto r = p->scores(l, k, v, delay).detach();
                const auto kr = k[1].permute({1, 0, 2}).contiguous(),
                           vr = v[1].permute({1, 0, 2}).contiguous();  // [T, H, d]
                if (kind == "mlp") {
                    std::vector<float> er(T * c.n_head_kv);
                    net.score_mlp(l, kr.data_ptr<float>(), vr.data_ptr<float>(), T, er.data());
                    for (int64_t t = 0; t < T; ++t)
                        for (int h = 0; h < c.n_head_kv; ++h)
                            ASSERT_NEAR(er[t * c.n_head_kv + h], r[1][h][t].item<float>(), 1e-4);
                    continue;
                }
                for (int h = 0; h < c.n_head_kv; ++h) {
                    MlstmState st = net.new_state();
                    std::vector<std::vector<float>> fq;
                    MlstmInputs in;
                    for (int64_t q = 0; q < T; ++q) {
                        net.inputs(l, h, kr.data_ptr<float>() + (q * c.n_head_kv + h) * c.head_dim,
                                   vr.data_ptr<float>() + (q * c.n_head_kv + h) * c.head_dim, in);
                        net.step(in, st);
                        fq.push_back(in.q);
                        const int64_t u = q - delay;
                        if (u < 0) continue;
                        ASSERT_NEAR(net.readout(l, h, fq[u].data(), st), r[1][h][u].item<float>(), 1e-4)
                            << "layer " << l << " head " << h << " entry " << u << " delay " << delay;
                    }
                    for (int64_t u = T - delay; u < T; ++u) EXPECT_EQ(r[1][h][u].item<float>(), 0.0f);  // never read
                }
            }
        }
    }
}

TEST(KvpopMask, TheMaskIsTheDecodeTimeCacheOfTheRunningTopK) {
    // Brute force, one step at a time: query d reads the sinks, the window d − w + 1 … d, the entry d − w that has
    // just left it, and the k best of the entries eligible before (s … d − w − 1, ties to the older); the lowest of
    // the long-range ones goes after the step. The mask from eviction steps says the same.
    std::mt19937 rng(11);
    for (int trial = 0; trial < 25; ++trial) {
        const auto [T, s, w, k, p] = random_topk_case(rng, trial, 16, 90, 10, 4);
        const auto evict = train::eviction_steps(train::boundary_pairs(p, s, w, k), T);
        const auto mask = train::eviction_keep_mask(torch::tensor(evict, torch::kInt64).view({1, 1, T}));
        ASSERT_EQ(mask.sizes(), (std::vector<int64_t>{1, 1, T, T}));
        const auto acc = mask.accessor<bool, 4>();
        for (int64_t d = 0; d < T; ++d) {
            std::vector<char> want(T, 0);
            for (int64_t t = 0; t <= d; ++t) want[t] = t < s || t > d - w;
            if (d - w >= s) want[d - w] = 1;
            const std::vector<int64_t> e = by_priority(p, s, d - w);
            for (size_t i = 0; i < e.size() && static_cast<int64_t>(i) < k; ++i) want[e[i]] = 1;
            int64_t held = 0;
            for (int64_t t = 0; t < T; ++t) {
                ASSERT_EQ(acc[0][0][d][t], want[t] != 0) << "trial " << trial << " step " << d << " key " << t;
                held += want[t];
            }
            EXPECT_LE(held, s + w + k + 1);  // B = s + w + k between steps, and the newcomer
        }
    }
    // StreamingLLM at the same budget: the sinks and the w + k most recent.
    const auto st = train::streaming_eviction_steps(40, 3, 5, 7);
    const auto m = train::eviction_keep_mask(torch::tensor(st, torch::kInt64).view({1, 1, 40}));
    for (int64_t d = 0; d < 40; ++d)
        for (int64_t t = 0; t < 40; ++t)
            ASSERT_EQ(m[0][0][d][t].item<bool>(), t <= d && (t < 3 || d - t < 12)) << d << " " << t;
    EXPECT_THROW(train::eviction_keep_mask(torch::zeros({2, 3}, torch::kInt64)), Error);
    train::BoundaryPair bad;
    bad.q = 3, bad.t_new = 9;
    EXPECT_THROW(train::eviction_steps({bad}, 5), Error);
}

TEST(KvpopMask, TheMirrorUnderTheMaskComputesWhatTheEngineDecodesUnderThePolicy) {
    // The masks the fine-tuning modes train under are the engine's caches: the model fed one token per decode step
    // with streaming_llm (window w + k, s sinks) or kvpop_mlp (budget s + w + k) gives, at every step, the logits of
    // the training mirror under the corresponding eviction mask.
    const LlamaModel& m = test::stories260k();
    const ModelConfig& c = m.config();
    auto mirror = train::load_mirror(test::model_path("stories260K.gguf"));
    const auto ids = test::story_prompt_ids();
    const int64_t T = static_cast<int64_t>(ids.size()), s = 2, w = 6, k = 9;
    ASSERT_GT(T, s + w + k + 10);
    auto toks = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
    torch::manual_seed(4);
    train::KvpopScorerShape shape;
    shape.kind = "mlp";
    train::KvpopPredictor scorer(c, shape);
    {
        torch::NoGradGuard ng;
        for (auto& t : scorer->parameters()) t.add_(0.5 * torch::randn_like(t));
    }
    const test::TempFile tf(".kvpop");
    const std::string dir = tf.path();
    std::filesystem::create_directories(dir);
    scorer->save_safetensors(dir + "/model.safetensors");
    std::ofstream(dir + "/config.json") << nlohmann::json{{"window", w}, {"sinks", s}}.dump();
    for (const std::string kind : {"streaming", "kvpop"}) {
        // The eviction steps of a layer [1, Hkv or 1, T]: as a dense keep-mask (the reference) and as the blocked
        // path's `until` (what the trainer runs).
        auto evictions = [&](int l, const train::AttnTensors& a) {
            std::vector<int64_t> e;
            if (kind == "streaming") {
                e = train::streaming_eviction_steps(T, s, w, k);
            } else {
                const auto r = scorer->scores(l, a.k_post, a.v, 0).detach();
                std::vector<int64_t> all;
                for (int64_t hh = 0; hh < c.n_head_kv; ++hh) {
                    std::vector<float> p(T);
                    const float g = scorer->log_gamma(l)[hh].item<float>();
                    for (int64_t t = 0; t < T; ++t) p[t] = r[0][hh][t].item<float>() - static_cast<float>(t) * g;
                    const auto eh = train::eviction_steps(train::boundary_pairs(p, s, w, k), T);
                    all.insert(all.end(), eh.begin(), eh.end());
                }
                return torch::tensor(all, torch::kInt64).view({1, c.n_head_kv, T});
            }
            return torch::tensor(e, torch::kInt64).view({1, 1, T}).expand({1, c.n_head_kv, T}).contiguous();
        };
        train::MirrorHooks h, hb;
        h.keep_mask = [&](int l, const train::AttnTensors& a) { return train::eviction_keep_mask(evictions(l, a)); };
        hb.key_until = evictions;
        hb.attn_block = 8;
        torch::Tensor want, blocked;
        {
            torch::NoGradGuard ng;
            want = mirror->forward(toks, h)[0];
            blocked = mirror->forward(toks, hb)[0];
        }
        EXPECT_LT((want - blocked).abs().max().item<float>(), 1e-4) << kind;
        const std::string spec = kind == "streaming"
                                     ? "streaming_llm:window=" + std::to_string(w + k) + ",sinks=" + std::to_string(s)
                                     : "kvpop_mlp:model=" + dir + ",budget=" + std::to_string(s + w + k);
        KVCache cache(c, T + 1, parse_policy(spec), std::make_shared<KVPool>(c.head_dim, KVType::kF32));
        std::vector<float> logits;
        for (int64_t d = 0; d < T; ++d) {
            m.forward(StepPhase::kDecode, {ids[d]}, cache, logits);
            double err = 0;
            for (int64_t i = 0; i < c.n_vocab; ++i)
                err = std::max(err, std::abs(double(logits[i]) - want[d][i].item<double>()));
            ASSERT_LT(err, 2e-3) << kind << " step " << d;
        }
        EXPECT_EQ(cache.head(0, 0).size(), s + w + k) << kind;
    }
    std::filesystem::remove_all(dir);
}

TEST(Distill, TopKKlIsTheBucketedKlAndTheFullKlWhenTheTopIsTheVocabulary) {
    torch::manual_seed(8);
    const int64_t V = 23, N = 5;
    const auto zt = 2 * torch::randn({N, V}, torch::kFloat64), zs = 2 * torch::randn({N, V}, torch::kFloat64);
    for (int64_t K : {int64_t{1}, int64_t{6}, V}) {
        const auto teacher = train::topk_teacher(zt.to(torch::kFloat32), K);
        const double got = train::topk_kl(zs.to(torch::kFloat32), teacher).item<double>();
        // By hand in doubles: the teacher's K best tokens, then one bucket for the rest.
        double want = 0;
        for (int64_t n = 0; n < N; ++n) {
            const auto p = torch::softmax(zt[n], 0), q = torch::softmax(zs[n], 0);
            std::vector<int64_t> order(V);
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(),
                             [&](int64_t a, int64_t b) { return p[a].item<double>() > p[b].item<double>(); });
            double pr = 1, qr = 1;
            for (int64_t i = 0; i < K; ++i) {
                const double pi = p[order[i]].item<double>(), qi = q[order[i]].item<double>();
                want += pi * std::log(pi / qi);
                pr -= pi, qr -= qi;
            }
            if (K < V) want += pr * std::log(pr / qr);
        }
        want /= N;
        EXPECT_NEAR(got, want, 1e-5) << "K " << K;
    }
    // Equal distributions: 0; a student that is sure of one token keeps finite gradients.
    const auto t = train::topk_teacher(zt.to(torch::kFloat32), 4);
    EXPECT_NEAR(train::topk_kl(zt.to(torch::kFloat32), t).item<double>(), 0.0, 1e-6);
    auto peaked = torch::full({N, V}, -200.0f);
    peaked.select(1, 0).fill_(200.0f);
    peaked.set_requires_grad(true);
    train::topk_kl(peaked, t).backward();
    EXPECT_TRUE(torch::isfinite(peaked.grad()).all().item<bool>());
    EXPECT_THROW(train::topk_teacher(zt, 0), Error);
    EXPECT_THROW(train::topk_kl(torch::zeros({N + 1, V}), t), Error);
    EXPECT_THROW(train::topk_kl(torch::zeros({N, 3}), t), Error);  // a student vocabulary smaller than K
    // A teacher with no mass outside its top 4 (p_rest = 0): the rest bucket adds nothing and gradients stay finite.
    auto z0 = torch::full({N, V}, -std::numeric_limits<float>::infinity());
    z0.narrow(1, 0, 4).copy_(torch::randn({N, 4}));
    const auto t0 = train::topk_teacher(z0, 4);
    auto zs0 = torch::randn({N, V}, torch::requires_grad());
    const auto kl0 = train::topk_kl(zs0, t0);
    double want0 = 0;
    for (int64_t n = 0; n < N; ++n) {
        const auto p = torch::softmax(z0[n].to(torch::kFloat64), 0),
                   q = torch::softmax(zs0[n].detach().to(torch::kFloat64), 0);
        for (int64_t i = 0; i < 4; ++i)
            want0 += p[i].item<double>() * std::log(p[i].item<double>() / q[i].item<double>());
    }
    EXPECT_NEAR(kl0.item<double>(), want0 / N, 1e-5);
    kl0.backward();
    EXPECT_TRUE(torch::isfinite(zs0.grad()).all().item<bool>());
}

TEST(Distill, AGroupWithItsOwnScheduleFollowsIt) {
    // KVpop's full distillation: the model's rate constant, the scorer's on the loop's warmup + cosine.
    auto a = torch::zeros({2}, torch::requires_grad()), b = torch::zeros({3}, torch::requires_grad());
    std::vector<train::ParamGroup> groups{{"scorer", {a}, 1e-3, 0.0}, {"model", {b}, 8e-5, 0.0}};
    groups[1].schedule = train::Schedule{"constant", 0, 100};
    train::Schedule loop;
    loop.warmup = 10, loop.total = 100;
    auto opt = train::make_adamw(groups, 0.9, 0.95);
    auto lr = [&](size_t i) { return static_cast<torch::optim::AdamWOptions&>(opt->param_groups()[i].options()).lr(); };
    for (int64_t step : {0, 5, 50, 99}) {
        train::set_learning_rates(*opt, groups, loop.factor(step), step);
        EXPECT_DOUBLE_EQ(lr(0), 1e-3 * loop.factor(step)) << step;
        EXPECT_DOUBLE_EQ(lr(1), 8e-5) << step;
    }
}

/// Every (layer, KV head) of the statistics `generate --stats-json` wrote holds exactly `entries` entries (the
/// per-head budget B = s + w + k once the sequence is longer than B).
void expect_every_head_holds(const std::filesystem::path& stats_json, int64_t entries) {
    std::ifstream f(stats_json);
    ASSERT_TRUE(f) << stats_json;
    const auto j = nlohmann::json::parse(f);
    ASSERT_FALSE(j["layers"].empty());
    for (const auto& layer : j["layers"])
        for (const auto& e : layer["entries"]) EXPECT_EQ(e.get<int64_t>(), entries) << j.dump();
}

class KvpopCli : public test::TrainerCliTest {
protected:
    KvpopCli() : TrainerCliTest("kvsieve_kvpop_cli_") {
        cfg_ = continued_training_config(test::model_path("stories260K.gguf"));
        cfg_["output"] = (dir_ / "scorer").string();
        cfg_["kvpop"] = {{"window", 16}, {"sinks", 2}, {"budget", 24}, {"queries", 64}};
    }
};

TEST_F(KvpopCli, TrainsResumesAndWritesAScorerThatKvpopRuns) {
    for (const std::string kind : {"mlstm", "mlp"}) {
        auto cfg = cfg_;
        cfg["out"] = (dir_ / ("run_" + kind)).string();
        cfg["output"] = (dir_ / ("scorer_" + kind)).string();
        cfg["kvpop"]["kind"] = kind;
        cfg["optim"]["steps"] = 2;
        ASSERT_EQ(test::run_cli("train kvpop -q --config " + write(cfg)).status, 0);
        EXPECT_TRUE(std::filesystem::exists(dir_ / ("run_" + kind) / "scorer" / "model.safetensors"));
        cfg["optim"]["steps"] = 4;
        const auto r = test::run_cli("train kvpop -q --resume --config " + write(cfg));
        ASSERT_EQ(r.status, 0) << r.err;
        const auto out = dir_ / ("scorer_" + kind);
        const auto card = nlohmann::json::parse(std::ifstream(out / "config.json"));
        EXPECT_EQ(card["model_type"], "kvpop");
        EXPECT_EQ(card["kind"], kind);
        EXPECT_EQ(card["window"], 16);
        EXPECT_EQ(card["sinks"], 2);
        const ModelConfig& c = test::stories260k().config();
        const KvpopScorerNet net = KvpopScorerNet::load(out.string(), c.n_layer, c.n_head_kv, c.head_dim);
        EXPECT_EQ(net.stateful(), kind == "mlstm");
        EXPECT_EQ(net.config().window, 16);
        const auto log = test::read_run_log(dir_ / ("run_" + kind));
        for (const auto& j : log.steps) {
            EXPECT_GT(j["loss"].get<double>(), 0.0) << j.dump();
            EXPECT_TRUE(j["pair_acc"].get<double>() >= 0.0 && j["pair_acc"].get<double>() <= 1.0) << j.dump();
        }
        for (const auto& e : log.evals) {
            for (const char* key : {"pair_loss", "pair_acc", "recall", "recall_recent", "recall_heads"})
                EXPECT_TRUE(e.contains(key)) << key << ": " << e.dump();
            EXPECT_EQ(e["recall_heads"].size(), static_cast<size_t>(c.n_layer));
        }
        EXPECT_EQ(log.steps.size(), 4u);
        EXPECT_GE(log.evals.size(), 1u);
        // The scorer's window and sinks are the preset's defaults; B = 2 + 16 + 8.
        const std::string preset = kind == "mlp" ? "kvpop_mlp" : "kvpop";
        const auto stats = dir_ / ("stats_" + kind + ".json");
        const auto gen = test::run_cli("generate -m " + test::model_path("stories260K.gguf") + " --policy " + preset +
                                       ":model=" + out.string() + ",budget=26 -n 40 --temp 0 -p 'Once upon a time'" +
                                       " --stats-json " + stats.string());
        EXPECT_EQ(gen.status, 0) << gen.err;
        expect_every_head_holds(stats, 26);
    }
}

TEST_F(KvpopCli, DistillAndStreamingPlusFineTuneTheModelUnderTheirMasks) {
    const std::string init = test::model_path("stories260K.gguf");
    for (const std::string mode : {"distill", "streaming_plus"}) {
        auto cfg = cfg_;
        cfg["out"] = (dir_ / ("run_" + mode)).string();
        cfg["output"] = (dir_ / ("out_" + mode)).string();
        cfg["kvpop"]["mode"] = mode;
        cfg["kvpop"]["kind"] = "mlp";
        cfg["kvpop"]["kl_top"] = 64;
        cfg["kvpop"]["base_lr"] = 1e-3;
        cfg["optim"]["steps"] = 2;
        auto r = test::run_cli("train kvpop -q --config " + write(cfg));
        ASSERT_EQ(r.status, 0) << r.err;
        cfg["optim"]["steps"] = 3;
        r = test::run_cli("train kvpop -q --resume --config " + write(cfg));
        ASSERT_EQ(r.status, 0) << r.err;
        const auto out = dir_ / ("out_" + mode);
        const auto card = nlohmann::json::parse(std::ifstream(out / "config.json"));
        EXPECT_EQ(card["mode"], mode);
        EXPECT_EQ(card["model_type"], mode == "distill" ? "kvpop" : "streaming_plus");
        EXPECT_EQ(std::filesystem::exists(out / "model.safetensors"), mode == "distill");
        ASSERT_TRUE(std::filesystem::exists(out / "model.gguf"));
        // The fine-tuned model moved away from the one it started from.
        auto a = train::load_mirror(init), b = train::load_mirror((out / "model.gguf").string());
        double moved = 0;
        const auto ta = a->gguf_tensors(), tb = b->gguf_tensors();
        ASSERT_EQ(ta.size(), tb.size());
        for (size_t i = 0; i < ta.size(); ++i)
            moved = std::max(moved, (ta[i].second - tb[i].second).abs().max().item<double>());
        EXPECT_GT(moved, 1e-5) << mode;
        const auto log = test::read_run_log(dir_ / ("run_" + mode));
        for (const auto& j : log.steps) {
            // The budget's mask changes what the model computes: the KL to the dense teacher is positive.
            EXPECT_GT(j["kl"].get<double>(), 0.0) << j.dump();
            EXPECT_EQ(j.contains("pair_acc"), mode == "distill") << j.dump();
        }
        for (const auto& e : log.evals) {
            for (const char* key : {"dense_nll_text", "base_masked_nll_text", "masked_nll_text"})
                EXPECT_TRUE(e.contains(key)) << key << ": " << e.dump();
            // Under the mask the frozen model is worse than with the full cache.
            EXPECT_GT(e["base_masked_nll_text"].get<double>(), e["dense_nll_text"].get<double>()) << e.dump();
            EXPECT_EQ(e.contains("recall"), mode == "distill") << e.dump();
        }
        EXPECT_EQ(log.steps.size(), 3u);
        EXPECT_GE(log.evals.size(), 1u);
        // The fine-tuned model runs in the engine under its policy, every head at the budget B = 2 + 16 + 24.
        const std::string policy =
            mode == "distill" ? "kvpop_mlp:model=" + out.string() + ",budget=42" : "streaming_llm:window=40,sinks=2";
        const auto stats = dir_ / ("stats_" + mode + ".json");
        const auto gen = test::run_cli("generate -m " + (out / "model.gguf").string() + " --policy " + policy +
                                       " -n 40 --temp 0 -p 'Once upon a time' --stats-json " + stats.string());
        EXPECT_EQ(gen.status, 0) << gen.err;
        expect_every_head_holds(stats, 42);
    }
    // The sparse target (the log-sum-exp under the mask) in scorer mode.
    auto cfg = cfg_;
    cfg["out"] = (dir_ / "run_sparse").string();
    cfg["output"] = (dir_ / "out_sparse").string();
    cfg["kvpop"]["target"] = "sparse";
    cfg["optim"]["steps"] = 2;
    const auto r = test::run_cli("train kvpop -q --config " + write(cfg));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir_ / "out_sparse" / "config.json"))["target"], "sparse");
}

TEST_F(KvpopCli, BadOptionsAreClearErrorsBeforeTraining) {
    for (auto [key, value, message] :
         {std::tuple<const char*, nlohmann::json, const char*>{"kind", "lstm", "kvpop.kind must be mlstm or mlp"},
          {"budget", 0, "kvpop.budget (k, long-range entries per head) must be ≥ 1"},
          {"teacher_gamma", 1.5, "kvpop.teacher_gamma must be in (0, 1]"},
          {"budget", 200, "no eviction happens within s + w + k"},
          {"mode", "full", "kvpop.mode must be scorer, distill or streaming_plus"},
          {"target", "exact", "kvpop.target must be dense or sparse"},

          {"windw", 1, "unknown config key 'kvpop.windw'"}}) {
        auto bad = cfg_;
        bad["out"] = (dir_ / "bad").string();
        bad["kvpop"][key] = value;
        const auto b = test::run_cli("train kvpop -q --config " + write(bad));
        EXPECT_EQ(b.status, 1) << key;
        EXPECT_NE(b.err.find(message), std::string::npos) << b.err;
        EXPECT_FALSE(std::filesystem::exists(dir_ / "bad" / "checkpoint.pt"));
    }
    // kl_top is checked where it is used: the fine-tuning modes.
    auto bad = cfg_;
    bad["out"] = (dir_ / "bad").string();
    bad["kvpop"]["kl_top"] = 100000;
    bad["optim"]["steps"] = 1;
    bad["kvpop"]["mode"] = "distill";
    const auto b = test::run_cli("train kvpop -q --config " + write(bad));
    EXPECT_EQ(b.status, 1);
    EXPECT_NE(b.err.find("kvpop.kl_top = 100000 exceeds the vocabulary"), std::string::npos) << b.err;
    bad["kvpop"]["mode"] = "scorer";
    bad["out"] = (dir_ / "scorer_ok").string();
    const auto ok = test::run_cli("train kvpop -q --config " + write(bad));
    EXPECT_EQ(ok.status, 0) << ok.err;
}

}  // namespace
}  // namespace kvsieve
