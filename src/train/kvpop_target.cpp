#include "train/kvpop_target.h"

#include <algorithm>

#include "util/error.h"

namespace kvsieve::train {

namespace {
void check(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& lse, int64_t window) {
    require(q.dim() == 4 && k.dim() == 4 && lse.dim() == 3, "future attention: q [B, Hq, T, d], k [B, Hkv, T, d], ",
            "lse [B, Hq, T] expected, got ", q.sizes(), ", ", k.sizes(), ", ", lse.sizes());
    require(q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3), "future attention: q ",
            q.sizes(), " and k ", k.sizes(), " do not match");
    require(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "future attention: ", q.size(1), " query heads are not a ",
            "multiple of ", k.size(1), " KV heads");
    require(lse.size(0) == q.size(0) && lse.size(1) == q.size(1) && lse.size(2) == q.size(2), "future attention: lse ",
            lse.sizes(), " does not match q ", q.sizes());
    require(window >= 0, "future attention: window must be ≥ 0, got ", window);
}

torch::Tensor counts(int64_t T, int64_t w, const torch::TensorOptions& o) {
    return (T - w - torch::arange(T, o.dtype(torch::kInt64))).clamp_min(0);
}
}  // namespace

FutureAttention future_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& lse,
                                 int64_t window, double scale, int64_t block) {
    check(q, k, lse, window);
    require(block >= 1, "future attention: block must be ≥ 1");
    torch::NoGradGuard ng;
    const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), d = q.size(3), Hkv = k.size(1), G = Hq / Hkv;
    const auto qg = q.reshape({B, Hkv, G, T, d});
    const auto lg = lse.reshape({B, Hkv, G, T, 1});
    FutureAttention fa;
    fa.count = counts(T, window, q.options());
    fa.mass = torch::zeros({B, Hkv, T}, q.options());
    for (int64_t k0 = 0; k0 < T; k0 += block) {
        const int64_t bk = std::min(block, T - k0);
        const int64_t d0 = k0 + window;  // the first query that sees some key of the block beyond the window
        if (d0 >= T) break;
        const auto qb = qg.narrow(3, d0, T - d0);          // [B, Hkv, G, Tq, d]
        const auto kb = k.narrow(2, k0, bk).unsqueeze(2);  // [B, Hkv, 1, bk, d]
        auto p = torch::exp(torch::matmul(qb, kb.transpose(-1, -2)) * scale - lg.narrow(3, d0, T - d0));
        // Query d sees key t beyond the window iff d ≥ t + w.
        const auto sees = torch::arange(d0, T, q.options().dtype(torch::kInt64)).unsqueeze(1) >=
                          (torch::arange(k0, k0 + bk, q.options().dtype(torch::kInt64)) + window).unsqueeze(0);
        p = p.masked_fill(sees.logical_not(), 0.0);
        const auto sum = p.sum(3);  // [B, Hkv, G, bk]
        const auto n = fa.count.narrow(0, k0, bk).clamp_min(1).to(q.scalar_type());
        fa.mass.narrow(2, k0, bk).copy_(std::get<0>((sum / n).max(2)));
    }
    return fa;
}

FutureAttention future_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& lse,
                                           int64_t window, double scale) {
    check(q, k, lse, window);
    torch::NoGradGuard ng;
    const int64_t Hq = q.size(1), T = q.size(2), Hkv = k.size(1), G = Hq / Hkv;
    const auto kq = k.repeat_interleave(G, 1);                                                // [B, Hq, T, d]
    auto p = torch::exp(torch::matmul(q, kq.transpose(-1, -2)) * scale - lse.unsqueeze(-1));  // [B, Hq, Td, Tt]
    const auto idx = torch::arange(T, q.options().dtype(torch::kInt64));
    const auto sees = idx.unsqueeze(1) >= (idx + window).unsqueeze(0);  // [d, t]
    p = p.masked_fill(sees.logical_not(), 0.0);
    FutureAttention fa;
    fa.count = counts(T, window, q.options());
    const auto m = p.sum(2) / fa.count.clamp_min(1).to(q.scalar_type());  // [B, Hq, T]
    fa.mass = std::get<0>(m.reshape({q.size(0), Hkv, G, T}).max(2));
    return fa;
}

torch::Tensor future_attention_target(const FutureAttention& fa, double eps) {
    require(eps > 0, "future attention target: ε must be > 0");
    return torch::log(fa.mass + eps);
}

}  // namespace kvsieve::train
