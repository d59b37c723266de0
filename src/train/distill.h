#pragma once
// Logit distillation against a teacher kept as its top-K tokens (KVpop's full-distillation mode, §3 / App. B: KL to
// the dense teacher's top-256 logits; the same form as eval/fidelity.h's KL, so training and evaluation measure one
// thing). Per position, the teacher's distribution is kept as its K most likely tokens and one bucket for the rest:
//   KL(p ‖ q) = Σ_{i ∈ top} p_i (log p_i − log q_i) + p_rest (log p_rest − log q_rest)
// with p_rest = 1 − Σ_top p_i, q_rest = 1 − Σ_top q_i (0 · log 0 = 0). It is a lower bound of the full KL (data
// processing) and equals it when K is the vocabulary. Only src/train and its tests include this header (libtorch).
#include <torch/torch.h>

#include <cstdint>

namespace kvsieve::train {

/// A teacher's next-token distributions, top-K form, for N positions.
struct TopkTeacher {
    torch::Tensor index;     ///< [.., K] int64, token ids of the K most likely tokens
    torch::Tensor logp;      ///< [.., K] log p_i of those tokens (full softmax)
    torch::Tensor log_rest;  ///< [..] log p_rest (−inf when the top holds all the mass)
};

/// The teacher's top-K from its logits [.., V] (no gradient). 1 ≤ K ≤ V, else Error.
TopkTeacher topk_teacher(const torch::Tensor& logits, int64_t k);

/// Mean over positions of KL(teacher ‖ student) in nats (differentiable in `student_logits` [.., V], whose leading
/// shape must be the teacher's; Error otherwise).
torch::Tensor topk_kl(const torch::Tensor& student_logits, const TopkTeacher& teacher);

}  // namespace kvsieve::train
