#include "train/optim.h"

#include <cmath>

#include "util/error.h"

namespace kvsieve::train {

double Schedule::factor(int64_t step) const {
    if (warmup > 0 && step < warmup) return static_cast<double>(step + 1) / static_cast<double>(warmup);
    const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
    const double t = std::min(1.0, static_cast<double>(step - warmup) / span);
    if (kind == "cosine") return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(M_PI * t));
    if (kind == "constant") return 1.0;
    if (kind == "wsd") {
        const int64_t decay_start = total - static_cast<int64_t>(decay_fraction * static_cast<double>(total));
        if (step < decay_start) return 1.0;
        const double u =
            static_cast<double>(step - decay_start) / static_cast<double>(std::max<int64_t>(1, total - decay_start));
        return 1.0 - (1.0 - min_ratio) * std::min(1.0, u);
    }
    fail("unknown learning-rate schedule '", kind, "' (known: cosine, wsd, constant)");
}

std::unique_ptr<torch::optim::AdamW> make_adamw(const std::vector<ParamGroup>& groups, double beta1, double beta2,
                                                double eps) {
    std::vector<torch::optim::OptimizerParamGroup> pg;
    for (const auto& g : groups) {
        auto o = std::make_unique<torch::optim::AdamWOptions>(g.lr);
        o->betas({beta1, beta2}).eps(eps).weight_decay(g.weight_decay);
        pg.emplace_back(g.params, std::move(o));
    }
    torch::optim::AdamWOptions defaults(groups.empty() ? 1e-3 : groups[0].lr);
    defaults.betas({beta1, beta2}).eps(eps);
    return std::make_unique<torch::optim::AdamW>(pg, defaults);
}

void set_learning_rates(torch::optim::AdamW& opt, const std::vector<ParamGroup>& groups, double factor, int64_t step) {
    auto& pg = opt.param_groups();
    require(pg.size() == groups.size(), "optimizer has ", pg.size(), " parameter groups, expected ", groups.size());
    for (size_t i = 0; i < pg.size(); ++i) {
        const bool frozen = step >= 0 && groups[i].frozen_from >= 0 && step >= groups[i].frozen_from;
        const double f = step >= 0 && groups[i].schedule ? groups[i].schedule->factor(step) : factor;
        static_cast<torch::optim::AdamWOptions&>(pg[i].options()).lr(frozen ? 0.0 : groups[i].lr * f);
    }
}

double clip_gradients(const std::vector<ParamGroup>& groups, double max_norm) {
    std::vector<torch::Tensor> ps;
    for (const auto& g : groups)
        for (const auto& p : g.params)
            if (p.grad().defined()) ps.push_back(p);
    if (ps.empty()) return 0.0;
    if (max_norm > 0) return torch::nn::utils::clip_grad_norm_(ps, max_norm);
    double s = 0;
    for (const auto& p : ps) s += p.grad().pow(2).sum().item<double>();
    return std::sqrt(s);
}

}  // namespace kvsieve::train
