#pragma once
// KVpop's training target: the future attention an entry will receive once it has left the protected window
// (Hauzenberger et al., KVpop §3, eqs. 2–3 and App. D; docs/design.md §5.5). For key t of a KV head and
// window w, over the queries d of the sequence that see it beyond the window (d ≥ t + w):
//   m_t = (1 / N_t) Σ_{d ≥ t+w} p_{d→t},   N_t = |{d : t + w ≤ d < T}|                              (eq. 2)
// per query head, then the max over the G query heads of the GQA group, and the regression target
//   y_t = log(ε + m_t)                                                                                   (eq. 3)
// p_{d→t} = exp(q_d·k_t·scale − lse_d) is the teacher's own softmax weight. It is computed by a *transposed* pass
// (App. D): key blocks outermost, each block's logits against the queries that see it, normalised by the per-query
// log-sum-exp the forward already has, so no [T, T] tensor per head is held. Keys with N_t = 0 (the last w of the
// sequence) have no target. Only src/train and its tests include this header (it pulls in libtorch).
#include <torch/torch.h>

#include <cstdint>

namespace kvsieve::train {

/// ε of eq. 3 (log-space floor of the target).
inline constexpr double kKvpopTargetEps = 1e-6;

/// Future attention mass m [B, Hkv, T] (eq. 2, max over the group) and its query count N [T] (int64).
struct FutureAttention {
    torch::Tensor mass;   ///< m_t ∈ [0, 1] (0 where N_t = 0)
    torch::Tensor count;  ///< N_t = max(T − t − w, 0)
};

/// The transposed pass. q [B, Hq, T, d] (queries after RoPE), k [B, Hkv, T, d] (keys after RoPE), lse [B, Hq, T] the
/// log-sum-exp of each query's scaled logits over the keys it attended to (dense causal attention: exact, eqs. 2–3;
/// a sparse attention's LSE gives the sparse approximation, eqs. 8–9); Hq = G·Hkv, query head h reads KV head h / G.
/// window w ≥ 0. Keys in blocks of `block`. Throws Error on mismatched shapes or w < 0. No gradient.
FutureAttention future_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& lse,
                                 int64_t window, double scale, int64_t block = 128);

/// Dense reference of future_attention (materialises [B, Hq, T, T]); for tests.
FutureAttention future_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& lse,
                                           int64_t window, double scale);

/// y = log(ε + m) (eq. 3).
torch::Tensor future_attention_target(const FutureAttention& fa, double eps = kKvpopTargetEps);

}  // namespace kvsieve::train
