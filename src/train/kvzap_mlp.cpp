#include "train/kvzap_mlp.h"

#include <torch/torch.h>

#include <map>

#include "io/safetensors.h"
#include "train/optim.h"
#include "util/error.h"
#include "util/progress.h"

namespace kvsieve::train {

namespace {
SafeTensor to_safetensor(const torch::Tensor& t) {
    auto c = t.detach().to(torch::kFloat32).contiguous();
    SafeTensor s;
    s.dtype = "F32";
    s.shape.assign(c.sizes().begin(), c.sizes().end());
    s.data.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    return s;
}
}  // namespace

KVzapFitReport fit_kvzap_mlp(const KVzapPairs& p, const std::string& out_dir, const KVzapMlpOptions& o) {
    require(p.n_train > 0, "train kvzap --mlp: no training pairs");
    const int L = p.n_layer, D = p.dim, H = p.n_head_kv, Dh = std::max(1, D / 8);
    torch::manual_seed(o.seed);
    std::map<std::string, SafeTensor> tensors;
    std::vector<std::vector<float>> pred(L);
    const int64_t per_epoch = (p.n_train + o.batch - 1) / o.batch;
    Progress bar("kvzap mlp", static_cast<int64_t>(L) * o.epochs * per_epoch, o.progress);
    int64_t done = 0;
    for (int l = 0; l < L; ++l) {
        auto X = torch::from_blob(const_cast<float*>(p.x_train[l].data()), {p.n_train, D}, torch::kFloat32);
        auto Y = torch::from_blob(const_cast<float*>(p.y_train[l].data()), {p.n_train, H}, torch::kFloat32);
        torch::nn::Sequential mlp(torch::nn::Linear(D, Dh), torch::nn::GELU(), torch::nn::Linear(Dh, H));
        ParamGroup g{"mlp", mlp->parameters(), o.lr, o.weight_decay};
        auto opt = make_adamw({g}, 0.9, 0.999);
        Schedule sched;
        sched.kind = "cosine";
        sched.total = o.epochs * per_epoch;
        sched.min_ratio = 0.0;
        int64_t step = 0;
        double last = 0;
        for (int e = 0; e < o.epochs; ++e) {
            auto perm = torch::randperm(p.n_train, torch::kInt64);
            for (int64_t b = 0; b < per_epoch; ++b, ++step) {
                auto idx = perm.narrow(0, b * o.batch, std::min(o.batch, p.n_train - b * o.batch));
                set_learning_rates(*opt, {g}, sched.factor(step));
                opt->zero_grad();
                auto loss = torch::mse_loss(mlp->forward(X.index_select(0, idx)), Y.index_select(0, idx));
                loss.backward();
                clip_gradients({g}, o.clip);
                opt->step();
                last = loss.item<double>();
                bar.update(++done, "layer " + std::to_string(l) + " mse " + std::to_string(last));
            }
        }
        torch::NoGradGuard ng;
        if (p.n_val > 0) {
            auto Xv = torch::from_blob(const_cast<float*>(p.x_val[l].data()), {p.n_val, D}, torch::kFloat32);
            auto pv = mlp->forward(Xv).contiguous();
            pred[l].assign(pv.data_ptr<float>(), pv.data_ptr<float>() + pv.numel());
        }
        const std::string pre = "layers." + std::to_string(l) + ".";
        auto l0 = mlp[0]->as<torch::nn::Linear>(), l2 = mlp[2]->as<torch::nn::Linear>();
        tensors[pre + "0.weight"] = to_safetensor(l0->weight);
        tensors[pre + "0.bias"] = to_safetensor(l0->bias);
        tensors[pre + "2.weight"] = to_safetensor(l2->weight);
        tensors[pre + "2.bias"] = to_safetensor(l2->bias);
    }
    bar.finish();
    return finish_kvzap_fit(p, pred, Dh, tensors, out_dir, o.trained);
}

}  // namespace kvsieve::train
