#include "train/wgkv_predictor.h"

#include <cmath>

#include "io/safetensors.h"
#include "predict/wgkv_gates.h"
#include "util/error.h"

namespace kvsieve::train {

WgkvPredictorImpl::WgkvPredictorImpl(const ModelConfig& c, double g_expand, double bias_init) {
    require(g_expand > 0, "WG-KV gate: g_expand must be > 0, got ", g_expand);
    require(c.n_layer > 0 && c.n_head_kv > 0 && c.head_dim > 0, "WG-KV gate: invalid model shape ", c.summary());
    hkv_ = c.n_head_kv;
    d_ = c.head_dim;
    inner_ = std::max(1, static_cast<int>(std::lround(g_expand * d_)));
    const int64_t H = hkv_, d = d_, I = inner_;
    auto uniform = [](std::vector<int64_t> shape, double fan_in) {
        const double b = 1.0 / std::sqrt(fan_in);
        return torch::rand(shape) * (2 * b) - b;
    };
    for (int l = 0; l < c.n_layer; ++l) {
        const std::string p = "l" + std::to_string(l) + "_";
        Layer L;
        L.w_pre = register_parameter(p + "pre_key_norm", torch::ones({d}));
        L.w_post = register_parameter(p + "post_key_norm", torch::ones({d}));
        L.w1 = register_parameter(p + "conv1_w", uniform({H * I, 2 * d, 1}, 2.0 * d));
        L.b1 = register_parameter(p + "conv1_b", uniform({H * I}, 2.0 * d));
        L.w2 = register_parameter(p + "conv2_w", uniform({H, I, 1}, double(I)));
        L.b2 = register_parameter(p + "conv2_b", torch::full({H}, static_cast<float>(bias_init)));
        layers_.push_back(L);
    }
}

torch::Tensor WgkvPredictorImpl::gate(int layer, const torch::Tensor& k_pre, const torch::Tensor& k_post) const {
    require(layer >= 0 && layer < static_cast<int>(layers_.size()), "WG-KV gate: no layer ", layer);
    require(k_pre.dim() == 4 && k_pre.size(1) == hkv_ && k_pre.size(3) == d_ && k_post.sizes() == k_pre.sizes(),
            "WG-KV gate: keys must be [B, Hkv, T, d] with Hkv = ", hkv_, ", d = ", d_);
    const Layer& L = layers_[layer];
    auto norm = [](const torch::Tensor& z, const torch::Tensor& w) {
        return z * torch::rsqrt(z.pow(2).mean(-1, true) + kWgkvNormEps) * w;
    };
    auto x = torch::cat({norm(k_pre, L.w_pre), norm(k_post, L.w_post)}, -1);  // [B, Hkv, T, 2d]
    auto w1 = L.w1.view({hkv_, inner_, 2 * d_});                              // head h: rows h·inner …
    auto a = torch::einsum("bhtc,hjc->bhtj", {x, w1}) + L.b1.view({1, hkv_, 1, inner_});
    a = torch::gelu(a);  // exact (erf)
    auto s = torch::einsum("bhtj,hj->bht", {a, L.w2.view({hkv_, inner_})}) + L.b2.view({1, hkv_, 1});
    return torch::sigmoid(s);
}

std::map<std::string, torch::Tensor> WgkvPredictorImpl::named_tensors() const {
    std::map<std::string, torch::Tensor> out;
    for (int l = 0; l < static_cast<int>(layers_.size()); ++l) {
        const Layer& L = layers_[l];
        out[wgkv_tensor_name(l, "pre_key_norm.weight")] = L.w_pre;
        out[wgkv_tensor_name(l, "post_key_norm.weight")] = L.w_post;
        out[wgkv_tensor_name(l, "conv1.weight")] = L.w1;
        out[wgkv_tensor_name(l, "conv1.bias")] = L.b1;
        out[wgkv_tensor_name(l, "conv2.weight")] = L.w2;
        out[wgkv_tensor_name(l, "conv2.bias")] = L.b2;
    }
    return out;
}

void WgkvPredictorImpl::save_safetensors(const std::string& path, bool f16) const {
    std::map<std::string, SafeTensor> st;
    for (const auto& [name, t] : named_tensors()) {
        auto c = t.detach().to(torch::kFloat32).contiguous();
        SafeTensor s;
        s.dtype = f16 ? "F16" : "F32";
        s.shape = c.sizes().vec();
        s.data.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
        st[name] = std::move(s);
    }
    write_safetensors(path, st);
}

}  // namespace kvsieve::train
