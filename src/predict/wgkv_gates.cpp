#include "predict/wgkv_gates.h"

#include <cblas.h>

#include <cmath>

#include "io/safetensors.h"
#include "kernels/dot.h"
#include "util/error.h"

namespace kvsieve {

std::string wgkv_tensor_name(int layer, const std::string& name) {
    return "model.layers." + std::to_string(layer) + ".self_attn.g_predictors." + name;
}

namespace {
const std::vector<float>& need(const std::map<std::string, SafeTensor>& t, int layer, const std::string& name,
                               const std::vector<int64_t>& shape, const std::string& source) {
    return shaped_tensor(t, wgkv_tensor_name(layer, name), shape, "WG-KV gates '" + source + "'");
}

// RMSNorm(z) ⊙ w into out [d].
void rms_norm(const float* z, const float* w, int d, float* out) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += double(z[i]) * z[i];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / d + kWgkvNormEps));
    for (int i = 0; i < d; ++i) out[i] = z[i] * r * w[i];
}
}  // namespace

WgkvGates WgkvGates::from_tensors(const std::map<std::string, SafeTensor>& t, const std::string& source, int n_layer,
                                  int n_head_kv, int head_dim) {
    require(n_layer > 0 && n_head_kv > 0 && head_dim > 0, "WG-KV gates: the model shape is empty");
    const auto c2 = t.find(wgkv_tensor_name(0, "conv2.weight"));
    require(c2 != t.end(), "'", source, "' holds no WG-KV gates (tensors model.layers.<i>.self_attn.g_predictors.*; ",
            "`kvsieve train wgkv` and tools/convert_wgkv.py write them)");
    const auto& s2 = c2->second.shape;
    require(s2.size() == 3 && s2[1] > 0 && s2[2] == 1, "WG-KV gates '", source,
            "': conv2.weight must be [Hkv, inner, 1]");
    require(s2[0] == n_head_kv, "WG-KV gates '", source, "' are for ", s2[0], " KV heads, the model has ", n_head_kv);
    WgkvGates g;
    g.hkv_ = n_head_kv;
    g.d_ = head_dim;
    g.inner_ = static_cast<int>(s2[1]);
    const int64_t hi = static_cast<int64_t>(n_head_kv) * g.inner_;
    for (int l = 0; l < n_layer; ++l) {
        Layer L;
        L.w_pre = need(t, l, "pre_key_norm.weight", {head_dim}, source);
        L.w_post = need(t, l, "post_key_norm.weight", {head_dim}, source);
        L.w1 = need(t, l, "conv1.weight", {hi, 2 * head_dim, 1}, source);
        L.b1 = need(t, l, "conv1.bias", {hi}, source);
        L.w2 = need(t, l, "conv2.weight", {n_head_kv, g.inner_, 1}, source);
        L.b2 = need(t, l, "conv2.bias", {n_head_kv}, source);
        g.layers_.push_back(std::move(L));
    }
    require(t.count(wgkv_tensor_name(n_layer, "conv1.weight")) == 0, "WG-KV gates '", source,
            "' have more layers than the model's ", n_layer);
    return g;
}

WgkvGates WgkvGates::load(const std::string& path, int n_layer, int n_head_kv, int head_dim) {
    const std::string file = safetensors_file(path);
    WgkvGates g = from_tensors(read_safetensors(file), file, n_layer, n_head_kv, head_dim);
    g.trained_ = read_trained_defaults(path, "wgkv");
    return g;
}

void WgkvGates::predict(int layer, const float* k_pre, const float* k_post, int64_t T, float* g) const {
    const Layer& L = layers_.at(layer);
    const DotKernels& k = dot_kernels();
    const int d = d_, in = 2 * d_;
    // One KV head per iteration on kvsieve's threads: the SGEMM inside runs on one thread, so the gates do not depend
    // on the thread count (a multi-threaded SGEMM's last bits may; docs/benchmarks.md). Static schedule: each thread
    // takes the same heads at every call, so its working space below is warm after the first decode step (under a
    // dynamic schedule a thread could take its first head at a later step and allocate there; the heads' work is equal).
#pragma omp parallel for schedule(static)
    for (int h = 0; h < hkv_; ++h) {
        // Working space of this thread, reused by its later calls (grows to the longest chunk).
        thread_local std::vector<float> x, a;
        x.resize(static_cast<size_t>(T) * in);
        a.resize(static_cast<size_t>(T) * inner_);
        for (int64_t t = 0; t < T; ++t) {
            const size_t off = (static_cast<size_t>(t) * hkv_ + h) * d;
            rms_norm(k_pre + off, L.w_pre.data(), d, x.data() + t * in);
            rms_norm(k_post + off, L.w_post.data(), d, x.data() + t * in + d);
        }
        // a [T, inner] = x [T, 2d] · W1_hᵀ (W1_h: rows h·inner … of conv1.weight, [inner, 2d]).
        const float* w1 = L.w1.data() + static_cast<size_t>(h) * inner_ * in;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), inner_, in, 1.0f, x.data(), in, w1,
                    in, 0.0f, a.data(), inner_);
        const float* b1 = L.b1.data() + static_cast<size_t>(h) * inner_;
        const float* w2 = L.w2.data() + static_cast<size_t>(h) * inner_;
        for (int64_t t = 0; t < T; ++t) {
            const float* at = a.data() + t * inner_;
            // Exact (erf) GELU in float32, the precision of the reference's own float32 forward.
            const float s = L.b2[h] + k.gelu_dot(at, b1, w2, inner_);
            g[t * hkv_ + h] = static_cast<float>(1.0 / (1.0 + std::exp(-s)));
        }
    }
}

}  // namespace kvsieve
