#include "train/gated_attention.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "util/error.h"

namespace kvsieve::train {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_shapes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& g) {
    require(q.dim() == 5, "gated attention: q must be [B, Hkv, G, T, d], got ", q.dim(), " dimensions");
    require(k.dim() == 4 && v.dim() == 4, "gated attention: k and v must be [B, Hkv, T, d]");
    require(
        q.scalar_type() == torch::kFloat32 && k.scalar_type() == torch::kFloat32 && v.scalar_type() == torch::kFloat32,
        "gated attention: q, k, v must be float32");
    const int64_t B = q.size(0), H = q.size(1), T = q.size(3), d = q.size(4);
    require(k.size(0) == B && k.size(1) == H && k.size(2) == T && k.size(3) == d && k.sizes() == v.sizes(),
            "gated attention: k ", k.sizes(), " and v ", v.sizes(), " do not match q ", q.sizes());
    if (g.defined())
        require(
            g.dim() == 3 && g.size(0) == B && g.size(1) == H && g.size(2) == T && g.scalar_type() == torch::kFloat32,
            "gated attention: gate must be float32 [B, Hkv, T] = [", B, ", ", H, ", ", T, "], got ", g.sizes());
}

/// One (query block, key block) tile: queries [q0, q0+bq), keys [k0, k0+bk).
struct Tile {
    torch::Tensor raw;     ///< q·k·scale, causal (−∞ above the diagonal and for evicted keys) [B, H, G, bq, bk]
    torch::Tensor logits;  ///< raw + log gate on global keys (= raw when no key of the tile is global)
    torch::Tensor global;  ///< [bq, bk] global-key mask; undefined when no key of the tile is global
};

Tile tile(const torch::Tensor& qb, const torch::Tensor& kb, const torch::Tensor& gb, const torch::Tensor& ub,
          int64_t q0, int64_t k0, const GateWindow& win, double scale) {
    const int64_t bq = qb.size(3), bk = kb.size(2);
    Tile t;
    t.raw = torch::matmul(qb, kb.unsqueeze(2).transpose(-1, -2)) * scale;
    if (k0 + bk - 1 > q0) {  // the diagonal tile: causal mask
        auto above = torch::arange(k0, k0 + bk).unsqueeze(0) > torch::arange(q0, q0 + bq).unsqueeze(1);
        t.raw = t.raw.masked_fill(above, kNegInf);
    }
    // Evicted keys: key j is gone for the queries after until[j] (ub [B, H, bk], already ≥ j).
    if (ub.defined() && ub.min().item<int64_t>() < q0 + bq - 1) {
        auto gone = torch::arange(q0, q0 + bq, torch::kInt64).view({1, 1, 1, bq, 1}) > ub.unsqueeze(2).unsqueeze(3);
        t.raw = t.raw.masked_fill(gone, kNegInf);
    }
    t.logits = t.raw;
    // Some key of the tile is global for some query iff the farthest pair, query q0 + bq − 1 and key k0, is
    // outside the window and the tile has a key past the sinks.
    const int64_t w = std::max<int64_t>(win.window, 1);
    if (gb.defined() && (q0 + bq - 1) - k0 >= w && k0 + bk > win.sinks) {
        t.global = global_key_mask(q0, bq, k0, bk, win);
        t.logits =
            t.raw + torch::where(t.global, torch::log(gb).unsqueeze(2).unsqueeze(3), torch::zeros({}, t.raw.options()));
    }
    return t;
}

/// Per key block of `block` tokens, the last query that sees any of its keys (max of until over the block, the
/// batch and the heads); empty without eviction steps. A query block starting after it skips the key block.
std::vector<int64_t> last_query_per_block(const torch::Tensor& until, int64_t T, int64_t block) {
    std::vector<int64_t> last;
    if (!until.defined()) return last;
    for (int64_t k0 = 0; k0 < T; k0 += block)
        last.push_back(until.narrow(2, k0, std::min(block, T - k0)).max().item<int64_t>());
    return last;
}

/// Outputs {out, lse}; lse is not differentiable (a capture for the callers' targets).
class GatedAttentionFn : public torch::autograd::Function<GatedAttentionFn> {
public:
    static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, torch::Tensor q,
                                                  torch::Tensor k, torch::Tensor v, torch::Tensor g,
                                                  torch::Tensor until, int64_t window, int64_t sinks, double scale,
                                                  int64_t block) {
        if (g.numel() == 0) g = torch::Tensor();  // no gate (an empty placeholder: autograd inputs must be defined)
        if (until.numel() == 0) until = torch::Tensor();
        const GateWindow win{window, sinks};
        const int64_t T = q.size(3);
        torch::NoGradGuard ng;
        auto out = torch::empty_like(q);
        auto lse = torch::empty(q.sizes().slice(0, 4), q.options());
        const auto last = last_query_per_block(until, T, block);
        for (int64_t q0 = 0; q0 < T; q0 += block) {
            const int64_t bq = std::min(block, T - q0);
            auto qb = q.narrow(3, q0, bq);
            torch::Tensor m, l, acc;
            // The diagonal block first: it holds each query itself, so the running max is finite from the start
            // and a block whose keys are all removed (−∞) for a row adds exp(−∞) = 0 without NaN.
            const int64_t n_blocks = q0 / block + 1;
            for (int64_t i = 0; i < n_blocks; ++i) {
                const int64_t kbi = (i == 0) ? q0 / block : i - 1;
                if (i > 0 && !last.empty() && last[kbi] < q0) continue;  // every key of the block evicted already
                const int64_t k0 = kbi * block, bk = std::min(block, T - k0);
                auto s = tile(qb, k.narrow(2, k0, bk), g.defined() ? g.narrow(2, k0, bk) : g,
                              until.defined() ? until.narrow(2, k0, bk) : until, q0, k0, win, scale)
                             .logits;
                auto bmax = std::get<0>(s.max(-1));
                if (i == 0) {
                    m = bmax;
                    auto p = torch::exp(s - m.unsqueeze(-1));
                    l = p.sum(-1);
                    acc = torch::matmul(p, v.narrow(2, k0, bk).unsqueeze(2));
                } else {
                    auto m_new = torch::maximum(m, bmax);
                    auto alpha = torch::exp(m - m_new);
                    auto p = torch::exp(s - m_new.unsqueeze(-1));
                    l = l * alpha + p.sum(-1);
                    acc = acc * alpha.unsqueeze(-1) + torch::matmul(p, v.narrow(2, k0, bk).unsqueeze(2));
                    m = m_new;
                }
            }
            out.narrow(3, q0, bq).copy_(acc / l.unsqueeze(-1));
            lse.narrow(3, q0, bq).copy_(m + torch::log(l));
        }
        ctx->save_for_backward({q, k, v, g.defined() ? g : torch::empty({0}), out, lse,
                                until.defined() ? until : torch::empty({0}, torch::kInt64)});
        ctx->saved_data["window"] = window;
        ctx->saved_data["sinks"] = sinks;
        ctx->saved_data["scale"] = scale;
        ctx->saved_data["block"] = block;
        ctx->saved_data["has_gate"] = g.defined();
        ctx->saved_data["has_until"] = until.defined();
        ctx->mark_non_differentiable({lse});
        return {out, lse};
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list grads) {
        auto saved = ctx->get_saved_variables();
        auto q = saved[0], k = saved[1], v = saved[2], g = saved[3], out = saved[4], lse = saved[5], until = saved[6];
        const GateWindow win{ctx->saved_data["window"].toInt(), ctx->saved_data["sinks"].toInt()};
        const double scale = ctx->saved_data["scale"].toDouble();
        const int64_t block = ctx->saved_data["block"].toInt();
        const bool has_gate = ctx->saved_data["has_gate"].toBool();
        if (!has_gate) g = torch::Tensor();
        if (!ctx->saved_data["has_until"].toBool()) until = torch::Tensor();
        auto dout = grads[0].contiguous();
        const int64_t T = q.size(3);
        auto dq = torch::zeros_like(q), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
        auto dg = has_gate ? torch::zeros_like(g) : torch::Tensor();
        auto delta = (dout * out).sum(-1);  // Σ_d dO·O per query [B, H, G, T]
        const auto last = last_query_per_block(until, T, block);
        for (int64_t q0 = 0; q0 < T; q0 += block) {
            const int64_t bq = std::min(block, T - q0);
            auto qb = q.narrow(3, q0, bq), dob = dout.narrow(3, q0, bq);
            auto lb = lse.narrow(3, q0, bq).unsqueeze(-1), db = delta.narrow(3, q0, bq).unsqueeze(-1);
            auto dqb = dq.narrow(3, q0, bq);
            for (int64_t k0 = 0; k0 <= q0; k0 += block) {
                if (k0 < q0 && !last.empty() && last[k0 / block] < q0) continue;  // evicted before the block
                const int64_t bk = std::min(block, T - k0);
                auto kb = k.narrow(2, k0, bk), vb = v.narrow(2, k0, bk);
                const Tile t = tile(qb, kb, has_gate ? g.narrow(2, k0, bk) : g,
                                    until.defined() ? until.narrow(2, k0, bk) : until, q0, k0, win, scale);
                auto p = torch::exp(t.logits - lb);  // [B, H, G, bq, bk]
                dv.narrow(2, k0, bk).add_(torch::matmul(p.transpose(-1, -2), dob).sum(2));
                auto dp = torch::matmul(dob, vb.unsqueeze(2).transpose(-1, -2));
                auto ds = p * (dp - db);  // ∂L/∂logit
                dqb.add_(torch::matmul(ds, kb.unsqueeze(2)) * scale);
                dk.narrow(2, k0, bk).add_(torch::matmul(ds.transpose(-1, -2), qb).sum(2) * scale);
                if (t.global.defined()) {  // ∂L/∂gate: the multiplicative form, finite at gate = 0
                    auto p_open = torch::exp((t.raw - lb).clamp_max(30.0));
                    dg.narrow(2, k0, bk).add_((p_open * (dp - db) * t.global).sum({2, 3}));
                }
            }
        }
        return {dq, dk, dv, dg, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
};

}  // namespace

torch::Tensor global_key_mask(int64_t q0, int64_t Tq, int64_t k0, int64_t Tk, const GateWindow& win) {
    auto i = torch::arange(q0, q0 + Tq).unsqueeze(1), j = torch::arange(k0, k0 + Tk).unsqueeze(0);
    const int64_t w = std::max<int64_t>(win.window, 1);
    return (j <= i) & (i - j >= w) & (j >= win.sinks);
}

torch::Tensor gated_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& gate, const GateWindow& win, double scale, int64_t block,
                              const torch::Tensor& until, torch::Tensor* lse) {
    check_shapes(q, k, v, gate);
    require(block >= 1, "gated attention: block must be ≥ 1, got ", block);
    require(win.window >= 0 && win.sinks >= 0, "gated attention: window and sinks must be ≥ 0");
    torch::Tensor u = torch::empty({0}, torch::kInt64);
    if (until.defined()) {
        require(until.dim() == 3 && until.size(0) == q.size(0) && until.size(1) == q.size(1) &&
                    until.size(2) == q.size(3) && until.scalar_type() == torch::kInt64,
                "gated attention: until must be int64 [B, Hkv, T] = [", q.size(0), ", ", q.size(1), ", ", q.size(3),
                "], got ", until.sizes(), " ", until.scalar_type());
        // A query always sees itself: until[j] ≥ j.
        u = torch::maximum(until.detach(), torch::arange(q.size(3), torch::kInt64).view({1, 1, -1})).contiguous();
    }
    auto r = GatedAttentionFn::apply(q.contiguous(), k.contiguous(), v.contiguous(),
                                     gate.defined() ? gate.contiguous() : torch::empty({0}), u, win.window, win.sinks,
                                     scale, block);
    if (lse) *lse = r[1];
    return r[0];
}

torch::Tensor gated_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& gate, const GateWindow& win, double scale) {
    check_shapes(q, k, v, gate);
    const int64_t T = q.size(3);
    auto s = torch::matmul(q, k.unsqueeze(2).transpose(-1, -2)) * scale;  // [B, H, G, T, T]
    if (gate.defined()) {
        auto global = global_key_mask(0, T, 0, T, win);
        s = s + torch::where(global, torch::log(gate).unsqueeze(2).unsqueeze(3), torch::zeros({}, s.options()));
    }
    auto causal = torch::ones({T, T}, torch::kBool).tril();
    s = s.masked_fill(causal.logical_not(), kNegInf);
    return torch::matmul(torch::softmax(s, -1), v.unsqueeze(2));
}

}  // namespace kvsieve::train
