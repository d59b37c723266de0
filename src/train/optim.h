#pragma once
// Optimiser pieces shared by every trainer: AdamW over parameter groups with their own learning rate and weight
// decay (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization", Alg. 2), and learning-rate schedules.
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvsieve::train {

/// Learning-rate schedule, as a factor of each group's base rate.
/// - "cosine": linear warmup over `warmup` steps, then ½(1 + cos(π·t)) from 1 down to min_ratio at `total`.
/// - "wsd" (warmup–stable–decay, Hu et al. 2024 "MiniCPM" §4.1): warmup, constant 1, then a linear decay to
///   min_ratio over the last `decay_fraction` of the steps.
/// - "constant": warmup then 1.
struct Schedule {
    std::string kind = "cosine";
    int64_t warmup = 0;
    int64_t total = 1;
    double min_ratio = 0.1;
    double decay_fraction = 0.2;
    /// Factor for `step` (0-based). Throws Error for an unknown kind.
    double factor(int64_t step) const;
};

/// A parameter group: its tensors, base learning rate and decoupled weight decay.
struct ParamGroup {
    std::string name;
    std::vector<torch::Tensor> params;
    double lr = 1e-3;
    double weight_decay = 0.0;
    /// From this optimizer step on the group is frozen (learning rate 0, so neither Adam's update nor the
    /// decoupled decay lr·wd·θ moves it); −1: never. E.g. SP-KV's predictor in threshold-aware hard gating.
    int64_t frozen_from = -1;
    /// The group's own schedule (e.g. KVpop's full distillation: the model's rate constant, the scorer's with warmup
    /// and cosine decay); unset: the loop's.
    std::optional<Schedule> schedule;
};

/// AdamW over the groups (β₁, β₂, ε shared). Groups with no parameters are skipped.
std::unique_ptr<torch::optim::AdamW> make_adamw(const std::vector<ParamGroup>& groups, double beta1, double beta2,
                                                double eps = 1e-8);
/// Sets every group's learning rate to its base rate × factor (groups in the order given to make_adamw), × its own
/// schedule's factor at `step` instead for a group that has one, and to 0 for a group frozen at `step` (step < 0: no
/// group is frozen and own schedules are not used).
void set_learning_rates(torch::optim::AdamW& opt, const std::vector<ParamGroup>& groups, double factor,
                        int64_t step = -1);
/// Clips the global L2 norm of the gradients of all groups to max_norm (if > 0); returns the norm before clipping.
double clip_gradients(const std::vector<ParamGroup>& groups, double max_norm);

}  // namespace kvsieve::train
