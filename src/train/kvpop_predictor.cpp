#include "train/kvpop_predictor.h"

#include <cmath>

#include "io/safetensors.h"
#include "predict/kvpop_scorer.h"
#include "util/error.h"

namespace kvsieve::train {

namespace {
torch::Tensor rms(const torch::Tensor& z) { return z * torch::rsqrt(z.pow(2).mean(-1, true) + kKvpopNormEps); }

/// [softmax(z); softmax(−z)] over the last dimension.
torch::Tensor hedgehog(const torch::Tensor& z) {
    return torch::cat({torch::softmax(z, -1), torch::softmax(-z, -1)}, -1);
}
}  // namespace

KvpopPredictorImpl::KvpopPredictorImpl(const ModelConfig& c, KvpopScorerShape shape)
    : shape_(std::move(shape)), hkv_(c.n_head_kv), d_(c.head_dim) {
    require(c.n_head_kv > 0 && c.head_dim > 0 && c.n_layer > 0, "KVpop scorer: the model has no KV heads");
    require(shape_.kind == "mlp" || shape_.kind == "mlstm", "KVpop scorer: kind '", shape_.kind,
            "' is not mlp or mlstm");
    require(shape_.softcap > 0, "KVpop scorer: softcap must be > 0");
    const int64_t H = hkv_, x = 2 * d_;
    if (shape_.hidden <= 0) shape_.hidden = 2 * d_;
    if (shape_.feature <= 0) shape_.feature = std::max(4, d_ / 2);
    if (shape_.value <= 0) shape_.value = std::max(4, d_ / 2);
    auto normal = [](std::vector<int64_t> s, double fan_in) { return torch::randn(s) / std::sqrt(fan_in); };
    for (int l = 0; l < c.n_layer; ++l) {
        Layer L;
        const std::string p = "l" + std::to_string(l) + "_";
        if (shape_.kind == "mlp") {
            L.fc1 = register_parameter(p + "fc1", normal({H, shape_.hidden, x}, x));
            L.b1 = register_parameter(p + "b1", torch::zeros({H, shape_.hidden}));
            L.fc2 = register_parameter(p + "fc2", normal({H, shape_.hidden}, shape_.hidden));
            L.b2 = register_parameter(p + "b2", torch::zeros({H}));
        } else {
            L.wq = register_parameter(p + "wq", normal({H, shape_.feature, x}, x));
            L.wk = register_parameter(p + "wk", normal({H, shape_.feature, x}, x));
            L.wv = register_parameter(p + "wv", normal({H, shape_.value, x}, x));
            L.wi = register_parameter(p + "wi", normal({H, x}, x));
            L.bi = register_parameter(p + "bi", torch::zeros({H}));
            L.wf = register_parameter(p + "wf", normal({H, x}, x));
            L.bf = register_parameter(p + "bf", torch::full({H}, shape_.forget_bias));
            L.wo = register_parameter(p + "wo", normal({H, shape_.value}, shape_.value));
            L.bo = register_parameter(p + "bo", torch::zeros({H}));
        }
        L.a = register_parameter(p + "decay", torch::zeros({H}));
        layers_.push_back(L);
    }
}

torch::Tensor KvpopPredictorImpl::log_gamma(int layer) const {
    const double lo = std::log(kKvpopGammaMin), hi = std::log(kKvpopGammaMax);
    return lo + torch::sigmoid(layers_.at(layer).a) * (hi - lo);
}

std::vector<torch::Tensor> KvpopPredictorImpl::layer_parameters(int layer) const {
    const Layer& L = layers_.at(layer);
    std::vector<torch::Tensor> out;
    for (const auto& t : {L.fc1, L.b1, L.fc2, L.b2, L.wq, L.wk, L.wv, L.wi, L.bi, L.wf, L.bf, L.wo, L.bo, L.a})
        if (t.defined()) out.push_back(t);
    return out;
}

torch::Tensor KvpopPredictorImpl::scores(int layer, const torch::Tensor& k, const torch::Tensor& v,
                                         int64_t delay) const {
    require(k.dim() == 4 && k.sizes() == v.sizes() && k.size(1) == hkv_ && k.size(3) == d_,
            "KVpop scorer: k and v must ", "be [B, ", hkv_, ", T, ", d_, "], got ", k.sizes(), " and ", v.sizes());
    require(delay >= 0, "KVpop scorer: delay must be ≥ 0");
    const Layer& L = layers_.at(layer);
    const auto x = torch::cat({rms(k), rms(v)}, -1);  // [B, H, T, 2d]
    if (shape_.kind == "mlp") {
        const auto a = torch::einsum("bhtx,hjx->bhtj", {x, L.fc1}) + L.b1.unsqueeze(1);
        return torch::einsum("bhtj,hj->bht", {torch::silu(a), L.fc2}) + L.b2.view({1, -1, 1});
    }
    const int64_t B = k.size(0), H = hkv_, T = k.size(2);
    const auto fq = hedgehog(torch::einsum("bhtx,hfx->bhtf", {x, L.wq}));  // [B, H, T, 2f]
    const auto fk = hedgehog(torch::einsum("bhtx,hfx->bhtf", {x, L.wk}));
    const auto vv = torch::einsum("bhtx,hfx->bhtf", {x, L.wv});  // [B, H, T, dv]
    const auto li = torch::einsum("bhtx,hx->bht", {x, L.wi}) + L.bi.view({1, -1, 1});
    const auto lf = torch::log_sigmoid(torch::einsum("bhtx,hx->bht", {x, L.wf}) + L.bf.view({1, -1, 1}));
    auto r = torch::zeros({B, H, T}, k.options());
    const int64_t n = T - delay;  // entries read within the sequence: u ∈ [0, n)
    if (n <= 0) return r;
    const auto F = torch::cumsum(lf, -1);                 // [B, H, T]
    const auto Fq = F.narrow(2, delay, n).unsqueeze(-1);  // rows q = u + delay
    auto logD = Fq - F.unsqueeze(2) + li.unsqueeze(2);    // [B, H, n, T]
    const auto j = torch::arange(T, k.options().dtype(torch::kInt64));
    const auto qpos = torch::arange(delay, T, k.options().dtype(torch::kInt64));
    logD = logD.masked_fill(j.unsqueeze(0) > qpos.unsqueeze(1), -INFINITY);
    const auto m = std::get<0>(logD.max(-1, true)).detach();                 // the stabiliser (no gradient through max)
    const auto S = torch::matmul(fq.narrow(2, 0, n), fk.transpose(-1, -2));  // [B, H, n, T]
    const auto W = torch::exp(logD - m) * S;
    const auto num = torch::matmul(W, vv);  // [B, H, n, dv]
    const auto den = torch::maximum(W.sum(-1, true).abs(), torch::exp(-m));
    const auto o = torch::einsum("bhnv,hv->bhn", {num / den, L.wo}) + L.bo.view({1, -1, 1});
    const double c = shape_.softcap;
    r.narrow(2, 0, n).copy_(c * torch::tanh(o / c));
    return r;
}

std::map<std::string, torch::Tensor> KvpopPredictorImpl::named_tensors() const {
    std::map<std::string, torch::Tensor> t;
    for (int l = 0; l < static_cast<int>(layers_.size()); ++l) {
        const Layer& L = layers_[l];
        auto put = [&](const std::string& n, const torch::Tensor& x) { t[kvpop_tensor_name(l, n)] = x; };
        if (shape_.kind == "mlp") {
            put("mlp.fc1.weight", L.fc1), put("mlp.fc1.bias", L.b1), put("mlp.fc2.weight", L.fc2),
                put("mlp.fc2.bias", L.b2);
        } else {
            put("mlstm.wq", L.wq), put("mlstm.wk", L.wk), put("mlstm.wv", L.wv), put("mlstm.wi", L.wi);
            put("mlstm.bi", L.bi), put("mlstm.wf", L.wf), put("mlstm.bf", L.bf), put("mlstm.wo", L.wo);
            put("mlstm.bo", L.bo);
        }
        put("log_gamma", log_gamma(l));
    }
    return t;
}

void KvpopPredictorImpl::save_safetensors(const std::string& path) const {
    std::map<std::string, SafeTensor> st;
    for (const auto& [name, t] : named_tensors()) {
        auto c = t.detach().to(torch::kFloat32).contiguous();
        SafeTensor s;
        s.dtype = "F32";
        s.shape = c.sizes().vec();
        s.data.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
        st[name] = std::move(s);
    }
    write_safetensors(path, st);
}

}  // namespace kvsieve::train
