// KVpop training (train/kvpop_target.h): the transposed pass's future attention equals the dense attention's,
// computed here with plain loops from the model's own attention.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"
#include "train/kvpop_target.h"
#include "train/mirror.h"

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

}  // namespace
}  // namespace kvsieve
