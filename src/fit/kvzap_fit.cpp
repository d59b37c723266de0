#include "fit/kvzap_fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "io/safetensors.h"
#include "model/llama_model.h"
#include "session/prefill.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/progress.h"

namespace kvsieve {

namespace {
/// Mean over every layer and head of a [L][Hkv] grid (0 when empty).
double grid_mean(const std::vector<std::vector<double>>& g) {
    double s = 0;
    int64_t n = 0;
    for (const auto& l : g)
        for (double x : l) s += x, ++n;
    return n ? s / n : 0;
}
}  // namespace

double KVzapFitReport::mean_r2() const { return grid_mean(r2); }

double KVzapFitReport::mean_pearson() const { return grid_mean(pearson); }

std::string KVzapFitReport::table() const {
    std::string s = "layer | R² = 1 − SS_res/SS_tot per KV head | r² (squared Pearson) per KV head\n";
    char buf[96];
    for (size_t l = 0; l < r2.size(); ++l) {
        std::snprintf(buf, sizeof buf, "%5zu |", l);
        s += buf;
        for (double x : r2[l]) {
            std::snprintf(buf, sizeof buf, " %.3f", x);
            s += buf;
        }
        s += " |";
        for (double x : l < pearson.size() ? pearson[l] : std::vector<double>{}) {
            std::snprintf(buf, sizeof buf, " %.3f", x);
            s += buf;
        }
        s += "\n";
    }
    std::snprintf(buf, sizeof buf, "mean R² %.3f, mean r² (Pearson) %.3f (%ld train / %ld held-out pairs)\n", mean_r2(),
                  mean_pearson(), static_cast<long>(train_pairs), static_cast<long>(val_pairs));
    s += buf;
    if (!tau_for_ratio.empty()) {
        s += "held-out predictions below τ (compression ratio → τ):";
        for (const auto& [ratio, tau] : tau_for_ratio) {
            std::snprintf(buf, sizeof buf, " %.2f → %.2f", ratio, tau);
            s += buf;
        }
        s += "\n";
    }
    return s;
}

namespace {
/// Solves (A + λI')w = b for a symmetric positive-definite A (n×n, row-major, double) by Cholesky; I' leaves the
/// last (bias) coordinate unpenalised. b has m right-hand sides (n×m), overwritten by the solution.
void ridge_solve(std::vector<double> A, int n, double lambda, std::vector<double>& b, int m) {
    for (int i = 0; i + 1 < n; ++i) A[static_cast<size_t>(i) * n + i] += lambda;
    for (int j = 0; j < n; ++j) {
        double d = A[static_cast<size_t>(j) * n + j];
        for (int k = 0; k < j; ++k) d -= A[static_cast<size_t>(j) * n + k] * A[static_cast<size_t>(j) * n + k];
        require(d > 0, "ridge regression: the system is not positive definite (too few pairs?)");
        const double ljj = std::sqrt(d);
        A[static_cast<size_t>(j) * n + j] = ljj;
        for (int i = j + 1; i < n; ++i) {
            double s = A[static_cast<size_t>(i) * n + j];
            for (int k = 0; k < j; ++k) s -= A[static_cast<size_t>(i) * n + k] * A[static_cast<size_t>(j) * n + k];
            A[static_cast<size_t>(i) * n + j] = s / ljj;
        }
    }
    for (int c = 0; c < m; ++c) {
        for (int i = 0; i < n; ++i) {  // L y = b
            double s = b[static_cast<size_t>(i) * m + c];
            for (int k = 0; k < i; ++k) s -= A[static_cast<size_t>(i) * n + k] * b[static_cast<size_t>(k) * m + c];
            b[static_cast<size_t>(i) * m + c] = s / A[static_cast<size_t>(i) * n + i];
        }
        for (int i = n - 1; i >= 0; --i) {  // Lᵀ x = y
            double s = b[static_cast<size_t>(i) * m + c];
            for (int k = i + 1; k < n; ++k) s -= A[static_cast<size_t>(k) * n + i] * b[static_cast<size_t>(k) * m + c];
            b[static_cast<size_t>(i) * m + c] = s / A[static_cast<size_t>(i) * n + i];
        }
    }
}
}  // namespace

KVzapPairs collect_kvzap_pairs(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus,
                               const KVzapFitOptions& o) {
    const ModelConfig& c = model.config();
    require(!corpus.empty(), "train kvzap: the corpus is empty");
    require(o.prompts >= 2, "train kvzap: need at least 2 prompts");
    const auto ids = tok.encode(corpus, false, false);
    // Room for the prompt and its reconstruction inside the trained context.
    const int64_t cap = std::max<int64_t>(16, (c.n_ctx_train - 48) / 2);
    const int64_t hi = std::min(o.max_tokens, cap), lo = std::min(o.min_tokens, hi);
    require(static_cast<int64_t>(ids.size()) > hi + 1, "train kvzap: the corpus has ", ids.size(),
            " tokens, fewer than one prompt of ", hi);
    const int L = c.n_layer, D = c.n_embd, H = c.n_head_kv;
    KVzapPairs out;
    out.n_layer = L;
    out.dim = D;
    out.n_head_kv = H;
    out.x_train.resize(L);
    out.y_train.resize(L);
    out.x_val.resize(L);
    out.y_val.resize(L);
    std::mt19937_64 rng(o.seed);
    const int64_t n_val = std::max<int64_t>(1, static_cast<int64_t>(std::llround(o.prompts * o.validation)));
    auto pool = std::make_shared<KVPool>(c.head_dim, KVType::kF32);
    Progress bar("kvzap pairs", o.prompts, o.progress);
    for (int64_t p = 0; p < o.prompts; ++p) {
        const int64_t len = std::uniform_int_distribution<int64_t>(lo, hi)(rng);
        const int64_t off = std::uniform_int_distribution<int64_t>(0, static_cast<int64_t>(ids.size()) - len - 1)(rng);
        std::vector<int32_t> prompt{tok.vocab().bos >= 0 ? tok.vocab().bos : ids[0]};
        prompt.insert(prompt.end(), ids.begin() + off, ids.begin() + off + len - 1);
        KVCache cache(c, 2 * static_cast<int64_t>(prompt.size()) + 64, parse_policy("kvzip_plus:ratio=0,rows=repeat"),
                      pool);
        std::vector<std::vector<float>> hidden(L);  // [L][T][D] attention inputs
        PrefillPlan plan;
        plan.on_layer = [&](const LayerInputs& in) {
            hidden[in.layer].assign(in.hidden, in.hidden + in.T * in.n_embd);
        };
        std::vector<float> logits;
        prefill(model, tok, cache, prompt, prompt, plan, logits);  // KVzip+ scores every entry; ratio 0 keeps all
        // Sampled positions (sinks excluded: their scores are not predictions).
        std::vector<int32_t> positions;
        for (int32_t t = 4; t < static_cast<int32_t>(prompt.size()); ++t) positions.push_back(t);
        std::shuffle(positions.begin(), positions.end(), rng);
        positions.resize(std::min<size_t>(positions.size(), static_cast<size_t>(o.tokens_per_prompt)));
        const bool is_val = p >= o.prompts - n_val;
        for (int l = 0; l < L; ++l) {
            std::vector<std::map<int32_t, float>> sc(H);
            for (int h = 0; h < H; ++h) {
                const HeadCache& hc = cache.head(l, h);
                for (Region r : kRegionsInOrder)
                    for (int64_t i = 0; i < hc.region(r)->size(); ++i)
                        sc[h][hc.region(r)->positions()[i]] = hc.region(r)->scores()[i];
            }
            const std::vector<float>& hid = hidden[l];
            auto& X = is_val ? out.x_val[l] : out.x_train[l];
            auto& Y = is_val ? out.y_val[l] : out.y_train[l];
            for (int32_t t : positions) {
                const float* x = hid.data() + static_cast<size_t>(t) * D;
                X.insert(X.end(), x, x + D);
                for (int h = 0; h < H; ++h) Y.push_back(static_cast<float>(std::log(o.log_eps + sc[h][t])));
            }
        }
        bar.update(p + 1);
    }
    bar.finish();
    out.n_train = static_cast<int64_t>(out.y_train[0].size()) / H;
    out.n_val = static_cast<int64_t>(out.y_val[0].size()) / H;
    return out;
}

std::vector<std::vector<double>> kvzap_r2(const KVzapPairs& p, const std::vector<std::vector<float>>& pred) {
    const int H = p.n_head_kv;
    std::vector<std::vector<double>> r2(p.n_layer, std::vector<double>(H, 0.0));
    for (int l = 0; l < p.n_layer; ++l)
        for (int h = 0; h < H; ++h) {
            double ss = 0, s = 0, s2 = 0;
            for (int64_t i = 0; i < p.n_val; ++i) {
                const double y = p.y_val[l][static_cast<size_t>(i * H + h)];
                const double e = y - pred[l][static_cast<size_t>(i * H + h)];
                ss += e * e;
                s += y;
                s2 += y * y;
            }
            const double tot = s2 - s * s / std::max<int64_t>(1, p.n_val);
            r2[l][h] = tot > 0 ? 1.0 - ss / tot : 0.0;
        }
    return r2;
}

std::vector<std::vector<double>> kvzap_pearson_r2(const KVzapPairs& p, const std::vector<std::vector<float>>& pred) {
    const int H = p.n_head_kv;
    std::vector<std::vector<double>> r2(p.n_layer, std::vector<double>(H, 0.0));
    for (int l = 0; l < p.n_layer; ++l)
        for (int h = 0; h < H; ++h) {
            double sy = 0, sp = 0;
            for (int64_t i = 0; i < p.n_val; ++i) {
                sy += p.y_val[l][static_cast<size_t>(i * H + h)];
                sp += pred[l][static_cast<size_t>(i * H + h)];
            }
            const double my = sy / std::max<int64_t>(1, p.n_val), mp = sp / std::max<int64_t>(1, p.n_val);
            double cov = 0, vy = 0, vp = 0;
            for (int64_t i = 0; i < p.n_val; ++i) {
                const double dy = p.y_val[l][static_cast<size_t>(i * H + h)] - my;
                const double dp = pred[l][static_cast<size_t>(i * H + h)] - mp;
                cov += dy * dp;
                vy += dy * dy;
                vp += dp * dp;
            }
            r2[l][h] = vy > 0 && vp > 0 ? cov * cov / (vy * vp) : 0.0;
        }
    return r2;
}

KVzapFitReport finish_kvzap_fit(const KVzapPairs& p, const std::vector<std::vector<float>>& pred, int hidden_dim,
                                const std::map<std::string, SafeTensor>& tensors, const std::string& out_dir,
                                const TrainedDefaults& trained) {
    KVzapFitReport rep;
    rep.r2 = kvzap_r2(p, pred);
    rep.pearson = kvzap_pearson_r2(p, pred);
    rep.train_pairs = p.n_train;
    rep.val_pairs = p.n_val;
    std::vector<float> all;
    for (const auto& l : pred) all.insert(all.end(), l.begin(), l.end());
    if (!all.empty()) {
        std::sort(all.begin(), all.end());
        for (double ratio : {0.25, 0.5, 0.75, 0.9, 0.95}) {
            const auto i = std::min(all.size() - 1, static_cast<size_t>(ratio * static_cast<double>(all.size())));
            rep.tau_for_ratio.push_back({ratio, all[i]});
        }
    }
    std::filesystem::create_directories(out_dir);
    nlohmann::json cfg = {{"model_type", "kvzap"},
                          {"input_dim", p.dim},
                          {"output_dim", p.n_head_kv},
                          {"n_modules", p.n_layer},
                          {"hidden_dim", nullptr}};
    if (hidden_dim > 0) cfg["hidden_dim"] = hidden_dim;
    write_trained_defaults(trained, cfg);
    std::ofstream f(std::filesystem::path(out_dir) / "config.json");
    f << cfg.dump(2) << "\n";
    require(f.good(), "cannot write ", out_dir, "/config.json");
    write_safetensors((std::filesystem::path(out_dir) / "model.safetensors").string(), tensors);
    return rep;
}

KVzapFitReport fit_kvzap_linear(const KVzapPairs& p, const std::string& out_dir, const KVzapFitOptions& o) {
    const int L = p.n_layer, D = p.dim, H = p.n_head_kv, n = D + 1;
    require(p.n_train > D, "train kvzap: ", p.n_train, " training pairs are too few for ", D, " inputs");
    std::map<std::string, SafeTensor> tensors;
    std::vector<std::vector<float>> pred(L);
    for (int l = 0; l < L; ++l) {
        std::vector<double> a(static_cast<size_t>(n) * n, 0.0), b(static_cast<size_t>(n) * H, 0.0);
        for (int64_t r = 0; r < p.n_train; ++r) {
            const float* x = p.x_train[l].data() + r * D;
            const float* y = p.y_train[l].data() + r * H;
            for (int i = 0; i < n; ++i) {
                const double xi = i < D ? x[i] : 1.0;
                for (int j = 0; j <= i; ++j) a[static_cast<size_t>(i) * n + j] += xi * (j < D ? x[j] : 1.0);
                for (int h = 0; h < H; ++h) b[static_cast<size_t>(i) * H + h] += xi * y[h];
            }
        }
        for (int i = 0; i < n; ++i)
            for (int j = i + 1; j < n; ++j) a[static_cast<size_t>(i) * n + j] = a[static_cast<size_t>(j) * n + i];
        double diag = 0;
        for (int i = 0; i < D; ++i) diag += a[static_cast<size_t>(i) * n + i];
        ridge_solve(a, n, o.ridge * diag / D, b, H);
        SafeTensor w, bias;
        w.dtype = bias.dtype = "F32";
        w.shape = {H, D};
        bias.shape = {H};
        for (int h = 0; h < H; ++h) {
            for (int i = 0; i < D; ++i) w.data.push_back(static_cast<float>(b[static_cast<size_t>(i) * H + h]));
            bias.data.push_back(static_cast<float>(b[static_cast<size_t>(D) * H + h]));
        }
        for (int64_t r = 0; r < p.n_val; ++r)
            for (int h = 0; h < H; ++h) {
                double s = bias.data[h];
                for (int i = 0; i < D; ++i)
                    s += w.data[static_cast<size_t>(h) * D + i] * p.x_val[l][static_cast<size_t>(r * D + i)];
                pred[l].push_back(static_cast<float>(s));
            }
        tensors["layers." + std::to_string(l) + ".weight"] = std::move(w);
        tensors["layers." + std::to_string(l) + ".bias"] = std::move(bias);
    }
    return finish_kvzap_fit(p, pred, 0, tensors, out_dir, o.trained);
}

}  // namespace kvsieve
