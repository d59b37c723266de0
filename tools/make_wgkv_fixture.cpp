// Writes tests/data/wgkv/: a WG-KV gate state dict for stories260K's shape (5 layers, 4 KV heads, d = 8,
// g_expand 4 → inner 32) saved by PyTorch's pickler (torch::pickle_save, the zip format torch.save writes and
// torch.load reads), as a reference checkpoint `{model}-{λ}.pt` would hold it, plus keys and the gates PyTorch computes
// for them with the reference's own operations: RMSNorm written out, a grouped Conv1d (groups = Hkv) over the
// concatenated [RMSNorm(k_pre); RMSNorm(k_post)] of each head, exact GELU, a second grouped Conv1d, sigmoid.
// The state dict also holds a tensor that is not a gate (the converter must drop it), prefixes the names with
// "module." as a DataParallel checkpoint does, and stores layer 1's conv1.weight as BF16 (the gates use the
// BF16-rounded values).
//   build/tools/kvsieve_make_wgkv_fixture tests/data/wgkv
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    const std::string out = argv[1];
    namespace F = torch::nn::functional;
    torch::manual_seed(20261124);
    const int64_t L = 5, H = 4, d = 8, I = 32, T = 6;
    const double eps = 1e-6;
    c10::Dict<std::string, torch::Tensor> sd;
    nlohmann::json fx = {{"n_layer", L}, {"n_head_kv", H}, {"head_dim", d},
                         {"inner", I},   {"T", T},         {"layers", nlohmann::json::array()}};
    auto rms = [&](const torch::Tensor& z, const torch::Tensor& w) {
        return z * torch::rsqrt(z.pow(2).mean(-1, true) + eps) * w;
    };
    auto list = [](const torch::Tensor& t) {
        auto c = t.contiguous().to(torch::kFloat32);
        return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    };
    sd.insert("module.model.layers.0.self_attn.q_proj.weight", torch::randn({32, 64}));
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "module.model.layers." + std::to_string(l) + ".self_attn.g_predictors.";
        auto w_pre = 1 + 0.2 * torch::randn({d}), w_post = 1 + 0.2 * torch::randn({d});
        auto w1 = torch::randn({H * I, 2 * d, 1}) / std::sqrt(2.0 * d), b1 = 0.1 * torch::randn({H * I});
        auto w2 = torch::randn({H, I, 1}) * (3 / std::sqrt(double(I))), b2 = 0.5 * torch::randn({H});
        if (l == 1) w1 = w1.to(torch::kBFloat16);
        sd.insert(p + "pre_key_norm.weight", w_pre);
        sd.insert(p + "post_key_norm.weight", w_post);
        sd.insert(p + "conv1.weight", w1);
        sd.insert(p + "conv1.bias", b1);
        sd.insert(p + "conv2.weight", w2);
        sd.insert(p + "conv2.bias", b2);
        // Keys [T, H, d] before and after RoPE (any values: the gate is a function of both).
        auto k_pre = 2 * torch::randn({T, H, d}), k_post = 2 * torch::randn({T, H, d});
        auto x = torch::cat({rms(k_pre, w_pre), rms(k_post, w_post)}, -1);  // [T, H, 2d]
        auto xc = x.reshape({1, T, H * 2 * d}).transpose(1, 2);             // [1, H·2d, T]
        auto a = F::gelu(F::conv1d(xc, w1.to(torch::kFloat32), F::Conv1dFuncOptions().bias(b1).groups(H)));
        auto g = torch::sigmoid(F::conv1d(a, w2, F::Conv1dFuncOptions().bias(b2).groups(H)));  // [1, H, T]
        fx["layers"].push_back({{"k_pre", list(k_pre)}, {"k_post", list(k_post)}, {"gate", list(g[0].t())}});
    }
    const std::vector<char> bytes = torch::pickle_save(sd);
    std::ofstream(out + "/gates.pt", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::ofstream(out + "/gates.json") << fx.dump() << "\n";
    std::fprintf(stderr, "wrote %s/gates.pt (%zu bytes) and %s/gates.json\n", out.c_str(), bytes.size(), out.c_str());
    return 0;
}
