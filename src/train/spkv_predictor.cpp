#include "train/spkv_predictor.h"

#include <cmath>

#include "predict/predictor_tensors.h"
#include "util/error.h"

namespace kvsieve::train {

SpkvPredictorImpl::SpkvPredictorImpl(const ModelConfig& c, int hidden, double bias_init) : hidden_(hidden) {
    require(hidden >= 0, "SP-KV predictor: hidden width must be ≥ 0 (0: linear), got ", hidden);
    require(c.n_layer > 0 && c.n_embd > 0 && c.n_head_kv > 0, "SP-KV predictor: invalid model shape ", c.summary());
    const int64_t D = c.n_embd, H = c.n_head_kv;
    for (int l = 0; l < c.n_layer; ++l) {
        const std::string p = "l" + std::to_string(l) + "_";
        Layer L;
        const int64_t in2 = hidden > 0 ? hidden : D;
        if (hidden > 0) {
            L.w1 = register_parameter(p + "w1", torch::randn({hidden, D}) / std::sqrt(double(D)));
            L.b1 = register_parameter(p + "b1", torch::zeros({hidden}));
        }
        L.w2 = register_parameter(p + "w2", torch::randn({H, in2}) / std::sqrt(double(in2)));
        L.b2 = register_parameter(p + "b2", torch::full({H}, static_cast<float>(bias_init)));
        layers_.push_back(L);
    }
}

torch::Tensor SpkvPredictorImpl::logits(int layer, const torch::Tensor& h) const {
    require(layer >= 0 && layer < static_cast<int>(layers_.size()), "SP-KV predictor: no layer ", layer);
    const Layer& L = layers_[layer];
    auto x = hidden_ > 0 ? torch::silu(torch::linear(h, L.w1, L.b1)) : h;
    return torch::linear(x, L.w2, L.b2).transpose(1, 2);  // [B, T, Hkv] → [B, Hkv, T]
}

std::map<std::string, torch::Tensor> SpkvPredictorImpl::gguf_tensors() const {
    std::map<std::string, torch::Tensor> out;
    for (int l = 0; l < static_cast<int>(layers_.size()); ++l) {
        const Layer& L = layers_[l];
        if (hidden_ > 0) {
            out[predictor_tensor_name("spkv", l, "fc1.weight")] = L.w1;
            out[predictor_tensor_name("spkv", l, "fc1.bias")] = L.b1;
            out[predictor_tensor_name("spkv", l, "fc2.weight")] = L.w2;
            out[predictor_tensor_name("spkv", l, "fc2.bias")] = L.b2;
        } else {
            out[predictor_tensor_name("spkv", l, "fc.weight")] = L.w2;
            out[predictor_tensor_name("spkv", l, "fc.bias")] = L.b2;
        }
    }
    return out;
}

}  // namespace kvsieve::train

#include "train/spkv.h"

namespace kvsieve::train {

torch::Tensor spkv_training_gate(const SpkvOptions& o, const torch::Tensor& u, double alpha, bool training) {
    if (o.mode == "dense") return torch::Tensor();
    auto hard = (u >= o.tau).to(u.scalar_type());
    if (!training) return hard.detach();
    if (o.mode == "hard") {
        auto z = torch::bernoulli(u.detach().clamp(o.p_min, 1.0));
        return z + u - u.detach();
    }
    require(o.mode == "soft", "spkv.mode '", o.mode, "' has no learned gate (soft or hard)");
    if (alpha <= 0) return u;
    auto ud = u.detach();
    return (1.0 - alpha) * ud + alpha * hard.detach();
}

}  // namespace kvsieve::train
