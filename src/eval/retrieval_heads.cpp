#include "eval/retrieval_heads.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cache/kv_cache.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "session/prefill.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/progress.h"

namespace kvsieve {

HeadDensityMap long_range_attention_mass(const LlamaModel& model, const Tokenizer& tok, const std::string& text,
                                         int64_t length, int64_t samples, int window, int sinks, bool progress) {
    const ModelConfig& c = model.config();
    require(window >= 1 && window < length, "retrieval heads: the window (", window,
            ") must be in [1, length = ", length, ")");
    require(sinks >= 0, "retrieval heads: sinks must be ≥ 0");
    require(length <= c.n_ctx_train, "retrieval heads: length ", length, " is beyond the model's context of ",
            c.n_ctx_train);
    require(samples >= 1, "retrieval heads: samples must be ≥ 1");
    const std::vector<int32_t> ids = tok.encode(text, false, false);
    const int64_t per = length - 1;
    require(static_cast<int64_t>(ids.size()) >= per, "retrieval heads: the text has ", ids.size(),
            " tokens, fewer than one window of ", per);
    const int64_t n = std::min<int64_t>(samples, static_cast<int64_t>(ids.size()) / per);
    const int L = c.n_layer, Hkv = c.n_head_kv, G = c.gqa_group(), d = c.head_dim;
    std::vector<std::vector<double>> mass(L, std::vector<double>(Hkv, 0.0));
    int64_t queries = 0;
    auto pool = std::make_shared<KVPool>(d, KVType::kF32);
    Progress bar("long-range attention", n, progress);
    for (int64_t s = 0; s < n; ++s) {
        std::vector<int32_t> w{tok.vocab().bos >= 0 ? tok.vocab().bos : ids[0]};
        w.insert(w.end(), ids.begin() + s * per, ids.begin() + (s + 1) * per);
        const int64_t T = static_cast<int64_t>(w.size());
        KVCache cache(c, T, parse_policy("full"), pool);
        PrefillPlan plan;  // one batch: every layer sees the window's queries and keys at once
        std::vector<float> logit(static_cast<size_t>(T) * T);
        plan.on_layer = [&](const LayerInputs& in) {
            const int64_t ldq = static_cast<int64_t>(in.n_head) * d, ldk = static_cast<int64_t>(Hkv) * d;
            const float scale = 1.0f / std::sqrt(static_cast<float>(d));
            for (int h = 0; h < Hkv; ++h)
                for (int g = 0; g < G; ++g) {
                    // logit [T][T] = scale · Q_hg Kᵀ_h; row t's softmax over j ≤ t.
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(T), d,
                                scale, in.q + static_cast<int64_t>(h * G + g) * d, static_cast<int>(ldq),
                                in.k + static_cast<int64_t>(h) * d, static_cast<int>(ldk), 0.0f, logit.data(),
                                static_cast<int>(T));
                    for (int64_t t = window; t < T; ++t) {
                        const float* row = logit.data() + t * T;
                        float m = -INFINITY;
                        for (int64_t j = 0; j <= t; ++j) m = std::max(m, row[j]);
                        double z = 0, far = 0;
                        for (int64_t j = 0; j <= t; ++j) {
                            const double e = std::exp(static_cast<double>(row[j] - m));
                            z += e;
                            if (j <= t - window && j >= sinks) far += e;
                        }
                        mass[in.layer][h] += far / z;
                    }
                }
        };
        std::vector<float> logits;
        prefill(model, tok, cache, w, w, plan, logits);
        queries += (T - window) * G;
        bar.update(s + 1);
    }
    bar.finish();
    HeadDensityMap out;
    out.density = mass;
    for (auto& row : out.density)
        for (double& x : row) x /= static_cast<double>(queries);
    return out;
}

std::string retrieval_heads_report(const LlamaModel& model, const Tokenizer& tok, const std::string& text,
                                   int64_t length, int64_t samples, int window, int sinks, int n_global,
                                   const std::string& out_dir, bool progress) {
    const HeadDensityMap m = long_range_attention_mass(model, tok, text, length, samples, window, sinks, progress);
    const int total = m.n_layer() * m.n_head_kv();
    require(n_global >= 0 && n_global <= total, "retrieval heads: --global-heads ", n_global, " is outside [0, ", total,
            "]");
    std::filesystem::create_directories(out_dir);
    write_head_density(
        out_dir, "retrieval_heads", "long-range attention mass (outside a window of " + std::to_string(window) + ")", m,
        "Long-range attention mass per layer and KV head (softmax weight of each query outside its local "
        "window of " +
            std::to_string(window) + " tokens, sinks excluded, averaged over queries)");
    const std::string spec =
        hybrid_policy_spec(hybrid_global_heads(m, HybridStrategy::kDensest, n_global), window, sinks);
    write_text((std::filesystem::path(out_dir) / "policy.txt").string(), spec + "\n");
    std::ifstream md(std::filesystem::path(out_dir) / "retrieval_heads.md");
    std::stringstream ss;
    ss << md.rdbuf() << "\nretrieval heads (" << n_global << " of " << total << "): " << spec << "\n";
    return ss.str();
}

}  // namespace kvsieve
