#include "train/lm_eval.h"

#include "util/error.h"

namespace kvsieve::train {

torch::Tensor weighted_ce(const torch::Tensor& logits, const torch::Tensor& tokens, const torch::Tensor& w) {
    const int64_t V = logits.size(2);
    auto lp = torch::log_softmax(logits.narrow(1, 0, logits.size(1) - 1).reshape({-1, V}), -1);
    auto tgt = tokens.narrow(1, 1, tokens.size(1) - 1).reshape({-1});
    auto ww = w.narrow(1, 1, w.size(1) - 1).reshape({-1});
    auto nll = -lp.gather(1, tgt.unsqueeze(1)).squeeze(1);
    return (nll * ww).sum() / ww.sum().clamp_min(1e-6);
}

std::pair<int64_t, int64_t> answer_hits(LlamaMirror& model, const Sequence& s, int64_t answer_begin,
                                        const MirrorHooks& hooks) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    auto t = torch::tensor(std::vector<int64_t>(s.tokens.begin(), s.tokens.end()));
    auto pred = model->forward(t.unsqueeze(0), hooks).argmax(-1).squeeze(0);  // pred[i] predicts token i+1
    auto ok = pred.slice(0, answer_begin - 1, n - 2).eq(t.slice(0, answer_begin, n - 1));
    return {ok.sum().item<int64_t>(), n - 1 - answer_begin};
}

std::vector<uint8_t> next_token_hits(LlamaMirror& model, const Sequence& s, const MirrorHooks& hooks) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    auto t = torch::tensor(std::vector<int64_t>(s.tokens.begin(), s.tokens.end()));
    auto pred = model->forward(t.unsqueeze(0), hooks).argmax(-1).squeeze(0);  // pred[i] predicts token i+1
    auto ok = pred.slice(0, 0, n - 1).eq(t.slice(0, 1, n)).to(torch::kUInt8).contiguous();
    return std::vector<uint8_t>(ok.data_ptr<uint8_t>(), ok.data_ptr<uint8_t>() + (n - 1));
}

std::pair<int64_t, int64_t> weighted_hits(const Sequence& s, const std::vector<uint8_t>& hits) {
    require(hits.size() + 1 == s.tokens.size() && s.weight.size() == s.tokens.size(), "weighted_hits: ", hits.size(),
            " predictions for a row of ", s.tokens.size(), " tokens and ", s.weight.size(), " weights");
    int64_t h = 0, n = 0;
    for (size_t i = 0; i < hits.size(); ++i)
        if (s.weight[i + 1] > 0) {
            h += hits[i] != 0;
            ++n;
        }
    return {h, n};
}

nlohmann::json heldout_nll(LlamaMirror& model, const TextStream& stream, const std::vector<std::string>& names,
                           int64_t window, int64_t count, const MirrorHooks& hooks) {
    nlohmann::json e = nlohmann::json::object();
    for (size_t f = 0; f < names.size(); ++f) {
        double s = 0;
        int64_t n = 0;
        for (const auto& seq : stream.heldout_windows(f, window, count)) {
            auto t = torch::tensor(std::vector<int64_t>(seq.tokens.begin(), seq.tokens.end())).unsqueeze(0);
            auto w = torch::ones_like(t, torch::kFloat32);
            s += weighted_ce(model->forward(t, hooks), t, w).item<double>();
            ++n;
        }
        if (n) e["nll_" + names[f]] = s / n;
    }
    return e;
}

nlohmann::json gate_density_json(const std::vector<torch::Tensor>& per_layer, int64_t n_layer, int64_t n_head_kv) {
    auto dens = torch::stack(per_layer).reshape({-1, n_layer, n_head_kv}).mean(0);  // [L, Hkv]
    nlohmann::json hd = nlohmann::json::array();
    for (int64_t l = 0; l < n_layer; ++l) {
        nlohmann::json row = nlohmann::json::array();
        for (int64_t h = 0; h < n_head_kv; ++h) row.push_back(dens[l][h].item<double>());
        hd.push_back(row);
    }
    return {{"density", dens.mean().item<double>()}, {"head_density", hd}};
}

}  // namespace kvsieve::train
