#pragma once
// The gated-attention training core: causal attention with an additive per-key bias on the keys outside each
// query's local window, computed block by block (flash-style online softmax, Dao et al. 2022, Alg. 1) with its own
// backward (ibid., Alg. 2: recompute each block's probabilities from the saved log-sum-exp), so no [T, T] tensor
// per head is ever held. The bias is the log of a keep gate: log u (SP-KV soft gating, Szilvasy, Faysse et al.
// eqs. 3–6), log g (WG-KV §3.2), or log of a 0/1 sample (hard gates, a 0/−∞ mask); under GQA the G query heads of a KV group share it. Optional per-key eviction steps
// remove a key for the queries after its step (a fixed-budget cache, KVpop eq. 1). Only src/train and its
// tests include this header (it pulls in libtorch).
#include <torch/torch.h>

#include <cstdint>

namespace kvsieve::train {

/// Which keys a query sees unbiased. Query i and key j (token positions of one row, j ≤ i): the key is *local*
/// when i − j < max(window, 1) (the query itself always is) or j < sinks; every other visible key is *global*
/// and gets the bias. This is the engine's rule (kernels/attention.h attention_prefill_gated), so a model trained
/// here sees at inference the keys it saw in training.
struct GateWindow {
    int64_t window = 128;  ///< local window w (tokens)
    int64_t sinks = 0;     ///< leading tokens never biased (0 in the SP-KV paper)
};

/// Gated causal attention.
/// q [B, Hkv, G, T, d] (queries after RoPE, grouped by KV head), k, v [B, Hkv, T, d], gate [B, Hkv, T] ∈ [0, 1]: the
/// keep gate of each key (undefined: no gate, plain causal attention). Logits are q·k·scale, plus log gate on the
/// keys that are global for the query (log 0 = −∞ removes the key); the output is [B, Hkv, G, T, d].
///
/// Differentiable in q, k, v and gate. The gate's gradient is that of the multiplicative form: the key's
/// unnormalised weight is gate · exp(q·k·scale), so ∂L/∂gate_j = Σ over the group's queries i that see j as global
/// of exp(q_i·k_j·scale − lse_i)·(dP_ij − Δ_i), with dP_ij = dO_i·v_j and Δ_i = dO_i·O_i. It equals
/// (1/gate)·∂L/∂(log gate) for an open gate and stays finite at gate = 0, which the straight-through estimator of
/// hard gating needs (SP-KV eqs. 10–11: a closed sample still tells its utility how much the key would have
/// helped). The exponent is capped at 30 so a closed key that would dominate its row gives a large, finite
/// gradient (clipped with the others).
///
/// `until` (optional, int64 [B, Hkv, T], not differentiated): key j is seen only by the queries i with
/// j ≤ i ≤ max(until[j], j) — an eviction step, as a fixed-budget cache (KVpop eq. 1) removes the entry after the
/// attention of step until[j]; this is train/kvpop_mask.h's eviction_keep_mask, blocked. `lse` (optional) receives
/// each query's log-sum-exp of its biased, masked logits [B, Hkv, G, T] (no gradient flows through it).
///
/// Keys are processed in blocks of `block` tokens; blocks above the diagonal, and key blocks whose every key is
/// evicted before a query block (max of until over the batch and heads), are skipped. Memory: O(B·Hkv·G·block²)
/// per step beside the inputs and outputs. Throws Error on mismatched shapes or dtypes other than float32.
torch::Tensor gated_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& gate, const GateWindow& win, double scale, int64_t block = 128,
                              const torch::Tensor& until = {}, torch::Tensor* lse = nullptr);

/// Dense reference of gated_attention with plain autograd ops (materialises [B, Hkv, G, T, T]; bias log gate); for
/// tests. Its gate gradient is (1/gate)·∂L/∂(log gate): infinite or NaN at gate = 0.
torch::Tensor gated_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& gate, const GateWindow& win, double scale);

/// The [Tq, Tk] boolean "global" mask of gated_attention for query positions q0 … q0+Tq−1 and key positions
/// k0 … k0+Tk−1: true where the key is visible (j ≤ i) and neither in the query's window nor a sink.
torch::Tensor global_key_mask(int64_t q0, int64_t Tq, int64_t k0, int64_t Tk, const GateWindow& win);

}  // namespace kvsieve::train
