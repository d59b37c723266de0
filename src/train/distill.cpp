#include "train/distill.h"

#include <limits>

#include "util/error.h"

namespace kvsieve::train {

namespace {
/// log Σ_{i ∉ index} exp(logp_i) over the last dimension: the log-mass of the tokens outside the top, summed
/// directly (not as log(1 − Σ_top), which loses everything in float32 when the top holds nearly all the mass).
/// The complement must not be empty.
torch::Tensor log_rest_of(const torch::Tensor& logp, const torch::Tensor& index) {
    return torch::logsumexp(logp.scatter(-1, index, -std::numeric_limits<float>::infinity()), -1);
}
}  // namespace

TopkTeacher topk_teacher(const torch::Tensor& logits, int64_t k) {
    require(logits.dim() >= 1, "top-K teacher: logits [.., V] expected");
    const int64_t V = logits.size(-1);
    require(k >= 1 && k <= V, "top-K teacher: K must be in [1, ", V, "], got ", k);
    torch::NoGradGuard ng;
    const auto logp = torch::log_softmax(logits.to(torch::kFloat32), -1);
    auto [top, idx] = logp.topk(k, -1);
    TopkTeacher t;
    t.index = idx;
    t.logp = top;
    t.log_rest = k < V ? log_rest_of(logp, idx)
                       : torch::full(top.sizes().slice(0, top.dim() - 1), -std::numeric_limits<float>::infinity());
    return t;
}

torch::Tensor topk_kl(const torch::Tensor& student_logits, const TopkTeacher& teacher) {
    require(student_logits.dim() == teacher.index.dim() && student_logits.sizes().slice(0, student_logits.dim() - 1) ==
                                                               teacher.index.sizes().slice(0, teacher.index.dim() - 1),
            "top-K KL: student logits ", student_logits.sizes(), " do not match the teacher's positions ",
            teacher.index.sizes());
    require(student_logits.size(-1) >= teacher.index.size(-1), "top-K KL: the student's vocabulary (",
            student_logits.size(-1), ") is smaller than the teacher's top-K (", teacher.index.size(-1), ")");
    const auto logq_all = torch::log_softmax(student_logits, -1);
    const auto logq = logq_all.gather(-1, teacher.index);
    auto kl = (torch::exp(teacher.logp) * (teacher.logp - logq)).sum(-1);
    if (teacher.index.size(-1) < student_logits.size(-1)) {
        // The rest bucket; 0 · log 0 = 0 where the teacher puts no mass outside its top.
        const auto p_rest = torch::exp(teacher.log_rest);
        const auto q_rest = log_rest_of(logq_all, teacher.index);
        const auto safe = torch::where(p_rest > 0, teacher.log_rest, q_rest.detach());
        kl = kl + p_rest * (safe - q_rest);
    }
    return kl.mean();
}

}  // namespace kvsieve::train
