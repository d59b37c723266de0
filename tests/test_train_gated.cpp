// The blocked gated attention (train/gated_attention.h) against the dense autograd reference: outputs and the
// gradients of q, k, v and the log-gate, with GQA, ragged last blocks, a window, sinks and removed (−∞) keys.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "train/gated_attention.h"
#include "train/kvpop_mask.h"
#include "train/mirror.h"
#include "util/error.h"

namespace kvsieve {
namespace {

struct Case {
    int64_t B, H, G, T, d, window, sinks, block;
    bool gate, closed;  // closed: some gates are exactly 0 (log −∞)
};

class GatedAttention : public ::testing::TestWithParam<Case> {};

TEST_P(GatedAttention, BlockedEqualsDenseReferenceInValueAndGradient) {
    const Case c = GetParam();
    torch::manual_seed(7);
    auto q = torch::randn({c.B, c.H, c.G, c.T, c.d}).requires_grad_(true);
    auto k = torch::randn({c.B, c.H, c.T, c.d}).requires_grad_(true);
    auto v = torch::randn({c.B, c.H, c.T, c.d}).requires_grad_(true);
    torch::Tensor g, closed;
    if (c.gate) {
        auto raw = torch::rand({c.B, c.H, c.T}) * 0.98 + 0.01;
        closed = c.closed ? torch::rand({c.B, c.H, c.T}) < 0.3 : torch::zeros({c.B, c.H, c.T}, torch::kBool);
        g = raw.masked_fill(closed, 0.0f).requires_grad_(true);
    }
    const train::GateWindow win{c.window, c.sinks};
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
    auto w = torch::randn({c.B, c.H, c.G, c.T, c.d});  // a random linear loss, so every output element matters

    auto out = train::gated_attention(q, k, v, g, win, scale, c.block);
    (out * w).sum().backward();
    auto dq = q.grad().clone(), dk = k.grad().clone(), dv = v.grad().clone();
    torch::Tensor dg = c.gate ? g.grad().clone() : torch::Tensor();
    q.grad().zero_(), k.grad().zero_(), v.grad().zero_();
    if (c.gate) g.grad().zero_();

    // The reference's gate gradient is (1/gate)·∂L/∂log gate, NaN at 0: give it 1e-30 for closed gates (whose
    // weight exp(logit − 69) is nil in float32) and compare its gradient there with ours at exactly 0.
    torch::Tensor g_ref;
    if (c.gate) g_ref = torch::where(closed, torch::full_like(g, 1e-30f), g.detach()).requires_grad_(true);
    auto ref = train::gated_attention_reference(q, k, v, g_ref, win, scale);
    (ref * w).sum().backward();
    EXPECT_TRUE(torch::allclose(out, ref, 1e-5, 1e-5)) << (out - ref).abs().max().item<float>();
    EXPECT_TRUE(torch::allclose(dq, q.grad(), 1e-4, 1e-5)) << (dq - q.grad()).abs().max().item<float>();
    EXPECT_TRUE(torch::allclose(dk, k.grad(), 1e-4, 1e-5)) << (dk - k.grad()).abs().max().item<float>();
    EXPECT_TRUE(torch::allclose(dv, v.grad(), 1e-4, 1e-5)) << (dv - v.grad()).abs().max().item<float>();
    if (c.gate) {
        EXPECT_TRUE(torch::isfinite(dg).all().item<bool>());
        EXPECT_TRUE(torch::allclose(dg, g_ref.grad(), 1e-3, 1e-4)) << (dg - g_ref.grad()).abs().max().item<float>();
        if (c.closed)
            EXPECT_GT(torch::where(closed, dg, torch::zeros_like(dg)).abs().max().item<float>(), 0.0f)
                << "a closed gate still gets the gradient of opening it";
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GatedAttention,
    ::testing::Values(Case{2, 2, 3, 37, 8, 5, 0, 8, true, false},     // GQA 3, ragged last block
                      Case{1, 3, 1, 64, 16, 16, 0, 16, true, false},  // window = block
                      Case{1, 2, 2, 50, 8, 7, 3, 16, true, true},     // sinks and removed keys
                      Case{2, 1, 4, 33, 8, 0, 0, 32, true, true},     // window 0: a query still sees itself
                      Case{1, 2, 2, 40, 8, 4, 0, 8, false, false},    // no gate: plain causal attention
                      Case{1, 1, 1, 9, 4, 100, 0, 4, true, false}));  // window beyond T: the gate is never used

TEST(GatedAttention, TheGateGradientIsZeroForKeysNoQuerySeesAsGlobal) {
    torch::manual_seed(3);
    const int64_t T = 20, w = 6;
    auto q = torch::randn({1, 1, 1, T, 4}), k = torch::randn({1, 1, T, 4}), v = torch::randn({1, 1, T, 4});
    auto g = torch::full({1, 1, T}, 0.6f).requires_grad_(true);
    train::gated_attention(q, k, v, g, {w, 2}, 0.5, 8).sum().backward();
    auto dg = g.grad().squeeze();
    for (int64_t j = 0; j < T; ++j) {
        // Key j is global for some query iff j ≥ sinks and (T − 1) − j ≥ w.
        const bool global = j >= 2 && (T - 1) - j >= w;
        if (!global)
            EXPECT_EQ(dg[j].item<float>(), 0.0f) << j;
        else
            EXPECT_NE(dg[j].item<float>(), 0.0f) << j;
    }
}

TEST(GatedAttention, EvictionStepsEqualTheDenseKeepMaskInValueGradientAndLogSumExp) {
    // `until` (KVpop's eviction steps, blocked) against the dense path under eviction_keep_mask — keys seen by the
    // queries t ≤ i ≤ until[t] — in output, the q/k/v gradients and the captured log-sum-exp; with a gate beside it.
    for (const bool with_gate : {false, true}) {
        torch::manual_seed(5);
        const int64_t B = 2, H = 2, G = 2, T = 45, d = 8;
        auto q = torch::randn({B, H, G, T, d}).requires_grad_(true);
        auto k = torch::randn({B, H, T, d}).requires_grad_(true);
        auto v = torch::randn({B, H, T, d}).requires_grad_(true);
        // Random eviction steps ≥ t (some never evicted: T), a few below t (clamped: a query sees itself).
        auto t = torch::arange(T, torch::kInt64).view({1, 1, T});
        auto until =
            torch::minimum(t + torch::randint(0, 20, {B, H, T}, torch::kInt64), torch::full({}, T, torch::kInt64));
        until.index_put_({0, 0, 10}, 3);
        auto g = with_gate ? (torch::rand({B, H, T}) * 0.9 + 0.05).requires_grad_(true) : torch::Tensor();
        const train::GateWindow win{4, 1};
        const double scale = 0.35;
        auto w = torch::randn({B, H, G, T, d});
        torch::Tensor lse;
        auto out = train::gated_attention(q, k, v, g, win, scale, 8, until, &lse);
        (out * w).sum().backward();
        auto dq = q.grad().clone(), dk = k.grad().clone(), dv = v.grad().clone();
        q.grad().zero_(), k.grad().zero_(), v.grad().zero_();
        torch::Tensor dg;
        if (with_gate) {
            dg = g.grad().clone();
            g.grad().zero_();
        }

        auto s = torch::matmul(q, k.unsqueeze(2).transpose(-1, -2)) * scale;  // [B, H, G, T, T]
        if (with_gate)
            s = s + torch::where(train::global_key_mask(0, T, 0, T, win), torch::log(g).unsqueeze(2).unsqueeze(3),
                                 torch::zeros({}));
        auto keep = train::eviction_keep_mask(until).unsqueeze(2) | torch::eye(T, torch::kBool);
        s = s.masked_fill(keep.logical_not(), -std::numeric_limits<float>::infinity());
        auto ref = torch::matmul(torch::softmax(s, -1), v.unsqueeze(2));
        (ref * w).sum().backward();
        EXPECT_TRUE(torch::allclose(out, ref, 1e-5, 1e-5)) << (out - ref).abs().max().item<float>();
        EXPECT_TRUE(torch::allclose(lse, torch::logsumexp(s, -1).detach(), 1e-5, 1e-5));
        EXPECT_TRUE(torch::allclose(dq, q.grad(), 1e-4, 1e-5)) << (dq - q.grad()).abs().max().item<float>();
        EXPECT_TRUE(torch::allclose(dk, k.grad(), 1e-4, 1e-5)) << (dk - k.grad()).abs().max().item<float>();
        EXPECT_TRUE(torch::allclose(dv, v.grad(), 1e-4, 1e-5)) << (dv - v.grad()).abs().max().item<float>();
        if (with_gate)  // open gates in (0.05, 0.95): the multiplicative-form gradient is autograd's
            EXPECT_TRUE(torch::allclose(dg, g.grad(), 1e-3, 1e-4)) << (dg - g.grad()).abs().max().item<float>();
        // The mask mattered: without it the output differs.
        auto plain = train::gated_attention(q, k, v, g, win, scale, 8);
        EXPECT_GT((plain - out).abs().max().item<float>(), 1e-2);
    }
    auto q = torch::randn({1, 2, 1, 8, 4}), k = torch::randn({1, 2, 8, 4});
    EXPECT_THROW(train::gated_attention(q, k, k, {}, {4, 0}, 0.5, 8, torch::zeros({1, 2, 7}, torch::kInt64)), Error);
    EXPECT_THROW(train::gated_attention(q, k, k, {}, {4, 0}, 0.5, 8, torch::zeros({1, 2, 8})), Error);
}

/// The two-layer GQA model (4 query heads, 2 KV heads, d = 8) the mirror tests below run.
ModelConfig mirror_config() {
    ModelConfig c;
    c.arch_name = "llama";
    c.n_layer = 2, c.n_embd = 32, c.n_head = 4, c.n_head_kv = 2, c.head_dim = 8, c.n_ff = 48, c.n_vocab = 50;
    c.n_ctx_train = 64, c.n_rot = 8, c.rope_base = 10000, c.rms_eps = 1e-5f;
    return c;
}

TEST(GatedAttention, TheMirrorsBlockedCaptureEqualsTheDenseCapture) {
    // A capture on the blocked path (eviction steps) gives the dense path's (keep-mask) tensors: lse [B, Hq, T] of
    // the masked logits, q_post, k_post, v.
    const ModelConfig c = mirror_config();
    torch::manual_seed(9);
    train::LlamaMirror m(c);
    const int64_t B = 2, T = 30;
    auto toks = torch::randint(0, 50, {B, T}, torch::kInt64);
    auto until = [&](int, const train::AttnTensors&) {
        auto t = torch::arange(T, torch::kInt64).view({1, 1, T});
        return (t + 3 + (t % 5) * 2).expand({B, c.n_head_kv, T}).contiguous();
    };
    std::vector<train::AttnTensors> cb, cd;
    train::MirrorHooks blocked, dense;
    blocked.key_until = until;
    blocked.attn_block = 8;
    blocked.capture = &cb;
    dense.keep_mask = [&](int l, const train::AttnTensors& a) { return train::eviction_keep_mask(until(l, a)); };
    dense.capture = &cd;
    torch::NoGradGuard ng;
    auto a = m->forward(toks, blocked), b = m->forward(toks, dense);
    EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-4));
    ASSERT_EQ(cb.size(), 2u);
    ASSERT_EQ(cd.size(), 2u);
    for (size_t l = 0; l < 2; ++l) {
        EXPECT_EQ(cb[l].lse.sizes(), cd[l].lse.sizes());
        EXPECT_TRUE(torch::allclose(cb[l].lse, cd[l].lse, 1e-5, 1e-5)) << l;
        EXPECT_TRUE(torch::allclose(cb[l].q_post, cd[l].q_post, 1e-5, 1e-5)) << l;
        EXPECT_TRUE(torch::allclose(cb[l].k_post, cd[l].k_post, 1e-5, 1e-5)) << l;
        EXPECT_TRUE(torch::allclose(cb[l].v, cd[l].v, 1e-5, 1e-5)) << l;
    }
}

TEST(GatedAttention, MismatchedShapesAreOneClearError) {
    auto q = torch::randn({1, 2, 1, 8, 4}), k = torch::randn({1, 2, 8, 4}), v = torch::randn({1, 2, 8, 4});
    EXPECT_THROW(train::gated_attention(q, k, v, torch::ones({1, 2, 7}), {4, 0}, 0.5), Error);
    EXPECT_THROW(train::gated_attention(q, torch::randn({1, 2, 9, 4}), v, {}, {4, 0}, 0.5), Error);
    EXPECT_THROW(train::gated_attention(q.to(torch::kFloat64), k, v, {}, {4, 0}, 0.5), Error);
}

TEST(GatedAttention, MirrorBlockedPathEqualsTheDensePathWithTheSameBias) {
    const ModelConfig c = mirror_config();
    torch::manual_seed(11);
    train::LlamaMirror m(c);
    auto toks = torch::randint(0, 50, {2, 30}, torch::kInt64);
    const int64_t w = 5;
    auto gate = [](int l, const train::AttnTensors& a) {  // a gate that depends on the hidden state
        return torch::sigmoid(a.h.sum(-1).unsqueeze(1).expand({a.h.size(0), 2, a.h.size(1)}) * (0.3 + l));
    };
    train::MirrorHooks blocked;
    blocked.key_gate = gate;
    blocked.gate_window = {w, 0};
    blocked.attn_block = 8;
    train::MirrorHooks dense;
    dense.attn_bias = [&](int l, const train::AttnTensors& a) {
        auto g = gate(l, a);  // [B, Hkv, T] → [B, Hkv, T, T] on global keys
        auto global = train::global_key_mask(0, a.h.size(1), 0, a.h.size(1), {w, 0});
        return torch::where(global, torch::log(g).unsqueeze(2), torch::zeros({}));
    };
    auto a = m->forward(toks, blocked), b = m->forward(toks, dense);
    EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-4)) << (a - b).abs().max().item<float>();
    train::MirrorHooks bad = blocked;
    bad.keep_mask = [](int, const train::AttnTensors&) { return torch::Tensor(); };
    EXPECT_THROW(m->forward(toks, bad), Error);
}

}  // namespace
}  // namespace kvsieve
