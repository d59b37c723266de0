#include "predict/spkv_gates.h"

#include <cmath>
#include <filesystem>

#include "io/gguf.h"
#include "io/safetensors.h"
#include "predict/predictor_tensors.h"
#include "util/error.h"

namespace kvsieve {

namespace {
const PredictorTensor& need(const std::map<std::string, PredictorTensor>& t, const std::string& name, int layer,
                            const std::vector<int64_t>& shape, const std::string& path) {
    auto it = t.find(name);
    require(it != t.end(), "SP-KV gates in '", path, "': tensor blk.", layer, ".spkv.", name, " is missing");
    require(it->second.shape == shape, "SP-KV gates in '", path, "': tensor blk.", layer, ".spkv.", name,
            " has the wrong shape");
    return it->second;
}
}  // namespace

bool has_spkv_gates(const GGUFFile& f) { return !read_predictor_tensors(f, "spkv", 0).empty(); }

template <class LayerTensors>
SpkvGates SpkvGates::from_layers(LayerTensors layer_tensors, const std::string& source, int n_layer, int n_embd,
                                 int n_head_kv) {
    SpkvGates g;
    g.d_ = n_embd;
    g.hkv_ = n_head_kv;
    const std::map<std::string, PredictorTensor> first = layer_tensors(0);
    require(!first.empty(), "'", source,
            "' has no SP-KV gates (tensors blk.<layer>.spkv.*): the model was not trained ",
            "with SP-KV (kvsieve train spkv writes them)");
    const bool mlp = first.count("fc1.weight") > 0;
    if (mlp) {
        const auto& shape = first.at("fc1.weight").shape;
        require(shape.size() == 2, "SP-KV gates in '", source, "': tensor blk.0.spkv.fc1.weight has the wrong shape");
        g.hidden_ = static_cast<int>(shape[0]);
    }
    for (int l = 0; l < n_layer; ++l) {
        const auto t = l == 0 ? first : layer_tensors(l);
        Layer L;
        if (mlp) {
            L.w1 = need(t, "fc1.weight", l, {g.hidden_, n_embd}, source).data;
            L.b1 = need(t, "fc1.bias", l, {g.hidden_}, source).data;
            L.w2 = need(t, "fc2.weight", l, {n_head_kv, g.hidden_}, source).data;
            L.b2 = need(t, "fc2.bias", l, {n_head_kv}, source).data;
        } else {
            L.w2 = need(t, "fc.weight", l, {n_head_kv, n_embd}, source).data;
            L.b2 = need(t, "fc.bias", l, {n_head_kv}, source).data;
        }
        g.layers_.push_back(std::move(L));
    }
    return g;
}

SpkvGates SpkvGates::load(const GGUFFile& f, int n_layer, int n_embd, int n_head_kv) {
    SpkvGates g =
        from_layers([&f](int l) { return read_predictor_tensors(f, "spkv", l); }, f.path(), n_layer, n_embd, n_head_kv);
    g.trained_ = read_trained_defaults(f, "spkv");
    return g;
}

SpkvGates SpkvGates::load(const std::string& path, int n_layer, int n_embd, int n_head_kv) {
    if (std::filesystem::path(path).extension() == ".gguf") return load(GGUFFile(path), n_layer, n_embd, n_head_kv);
    const std::string file = safetensors_file(path);
    std::map<std::string, SafeTensor> all = read_safetensors(file);
    auto layer_tensors = [&all](int l) {
        const std::string prefix = predictor_tensor_name("spkv", l, "x");
        const std::string stem = prefix.substr(0, prefix.size() - 1);  // "blk.<l>.spkv."
        std::map<std::string, PredictorTensor> out;
        for (auto& [name, t] : all)
            if (name.compare(0, stem.size(), stem) == 0) out[name.substr(stem.size())] = {t.shape, t.data};
        return out;
    };
    SpkvGates g = from_layers(layer_tensors, file, n_layer, n_embd, n_head_kv);
    g.trained_ = read_trained_defaults(path, "spkv");
    return g;
}

void SpkvGates::predict(int layer, const float* x, int64_t T, float* u) const {
    const Layer& L = layers_.at(layer);
    std::vector<float> a(hidden_);
    for (int64_t t = 0; t < T; ++t) {
        const float* xt = x + t * d_;
        const float* in = xt;
        int n_in = d_;
        if (hidden_ > 0) {
            for (int j = 0; j < hidden_; ++j) {
                double s = L.b1[j];
                for (int c = 0; c < d_; ++c) s += double(L.w1[static_cast<size_t>(j) * d_ + c]) * xt[c];
                a[j] = static_cast<float>(s / (1.0 + std::exp(-s)));  // SiLU
            }
            in = a.data();
            n_in = hidden_;
        }
        for (int h = 0; h < hkv_; ++h) {
            double s = L.b2[h];
            for (int c = 0; c < n_in; ++c) s += double(L.w2[static_cast<size_t>(h) * n_in + c]) * in[c];
            u[t * hkv_ + h] = static_cast<float>(1.0 / (1.0 + std::exp(-s)));
        }
    }
}

}  // namespace kvsieve
