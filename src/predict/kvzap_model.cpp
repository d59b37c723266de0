#include "predict/kvzap_model.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "util/error.h"

namespace kvsieve {

KVzapModel KVzapModel::load(const std::string& dir) {
    namespace fs = std::filesystem;
    const fs::path cfg_path = fs::path(dir) / "config.json", st_path = fs::path(dir) / "model.safetensors";
    std::ifstream cf(cfg_path);
    if (!cf) fail("kvzap checkpoint '", dir, "': cannot open config.json");
    nlohmann::json cfg;
    try {
        cfg = nlohmann::json::parse(cf);
    } catch (const std::exception& e) {
        fail("kvzap checkpoint '", dir, "': config.json is not valid JSON (", e.what(), ")");
    }
    KVzapModel m;
    try {
        if (cfg.contains("model_type"))
            require(cfg["model_type"] == "kvzap", "kvzap checkpoint '", dir, "': model_type is ",
                    cfg["model_type"].dump());
        m.input_dim_ = cfg.at("input_dim").get<int>();
        m.output_dim_ = cfg.at("output_dim").get<int>();
        m.n_modules_ = cfg.at("n_modules").get<int>();
        m.hidden_dim_ = cfg.contains("hidden_dim") && !cfg["hidden_dim"].is_null() ? cfg["hidden_dim"].get<int>() : 0;
    } catch (const nlohmann::json::exception& e) {
        fail("kvzap checkpoint '", dir, "': config.json lacks a field (", e.what(), ")");
    }
    m.trained_ = trained_defaults_from_json(cfg, cfg_path.string());
    require(m.input_dim_ > 0 && m.output_dim_ > 0 && m.n_modules_ > 0 && m.hidden_dim_ >= 0, "kvzap checkpoint '", dir,
            "': non-positive sizes in config.json");
    auto tensors = read_safetensors(st_path.string());
    auto take = [&](const std::string& name, std::vector<int64_t> shape) {
        auto it = tensors.find(name);
        if (it == tensors.end()) fail("kvzap checkpoint '", dir, "': missing tensor '", name, "'");
        if (it->second.shape != shape) {
            std::string got, want;
            for (auto d : it->second.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
            for (auto d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
            fail("kvzap checkpoint '", dir, "': tensor '", name, "' has shape [", got, "], expected [", want, "]");
        }
        return std::move(it->second.data);
    };
    for (int i = 0; i < m.n_modules_; ++i) {
        Layer L;
        const std::string p = "layers." + std::to_string(i) + ".";
        if (m.hidden_dim_ == 0) {
            L.w1 = take(p + "weight", {m.output_dim_, m.input_dim_});
            L.b1 = take(p + "bias", {m.output_dim_});
        } else {
            L.w1 = take(p + "0.weight", {m.hidden_dim_, m.input_dim_});
            L.b1 = take(p + "0.bias", {m.hidden_dim_});
            L.w2 = take(p + "2.weight", {m.output_dim_, m.hidden_dim_});
            L.b2 = take(p + "2.bias", {m.output_dim_});
        }
        m.layers_.push_back(std::move(L));
    }
    return m;
}

void KVzapModel::predict(int layer, const float* x, int64_t T, float* out) const {
    const Layer& L = layers_.at(static_cast<size_t>(layer));
    const int D = input_dim_, H = output_dim_, Hd = hidden_dim_;
    thread_local std::vector<float> hid;  // working space, reused by this thread's calls (grows to the widest model)
    hid.resize(Hd);
    for (int64_t t = 0; t < T; ++t) {
        const float* xt = x + t * D;
        float* yt = out + t * H;
        if (Hd == 0) {
            for (int j = 0; j < H; ++j) {
                double s = L.b1[j];
                for (int c = 0; c < D; ++c) s += double(L.w1[static_cast<size_t>(j) * D + c]) * xt[c];
                yt[j] = static_cast<float>(s);
            }
            continue;
        }
        for (int j = 0; j < Hd; ++j) {
            double s = L.b1[j];
            for (int c = 0; c < D; ++c) s += double(L.w1[static_cast<size_t>(j) * D + c]) * xt[c];
            hid[j] = static_cast<float>(0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0))));  // exact GELU
        }
        for (int j = 0; j < H; ++j) {
            double s = L.b2[j];
            for (int c = 0; c < Hd; ++c) s += double(L.w2[static_cast<size_t>(j) * Hd + c]) * hid[c];
            yt[j] = static_cast<float>(s);
        }
    }
}

}  // namespace kvsieve
