#include "predict/kvpop_scorer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "util/error.h"

namespace kvsieve {

std::string kvpop_tensor_name(int layer, const std::string& name) {
    return "kvpop." + std::to_string(layer) + "." + name;
}

namespace {
std::string shape_text(const std::vector<int64_t>& s) {
    std::string o;
    for (int64_t x : s) o += (o.empty() ? "" : ", ") + std::to_string(x);
    return "[" + o + "]";
}

const SafeTensor& find(const std::map<std::string, SafeTensor>& t, int layer, const std::string& name,
                       const std::string& source) {
    const std::string full = kvpop_tensor_name(layer, name);
    auto it = t.find(full);
    require(it != t.end(), "KVpop scorer '", source, "': tensor ", full, " is missing");
    return it->second;
}

const std::vector<float>& need(const std::map<std::string, SafeTensor>& t, int layer, const std::string& name,
                               const std::vector<int64_t>& shape, const std::string& source) {
    return shaped_tensor(t, kvpop_tensor_name(layer, name), shape, "KVpop scorer '" + source + "'");
}

/// x = [RMSNorm(k); RMSNorm(v)] (2d).
void scorer_input(const float* k, const float* v, int d, float* x) {
    for (int part = 0; part < 2; ++part) {
        const float* z = part == 0 ? k : v;
        double ss = 0;
        for (int i = 0; i < d; ++i) ss += double(z[i]) * z[i];
        const float r = static_cast<float>(1.0 / std::sqrt(ss / d + kKvpopNormEps));
        for (int i = 0; i < d; ++i) x[part * d + i] = z[i] * r;
    }
}

float dot(const float* a, const float* b, int n) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

/// φ(z) = [softmax(z); softmax(−z)] into out [2f].
void hedgehog(const float* z, int f, float* out) {
    float mx = -INFINITY, mn = INFINITY;
    for (int i = 0; i < f; ++i) mx = std::max(mx, z[i]), mn = std::min(mn, z[i]);
    double sp = 0, sn = 0;
    for (int i = 0; i < f; ++i) {
        out[i] = std::exp(z[i] - mx);
        out[f + i] = std::exp(mn - z[i]);
        sp += out[i];
        sn += out[f + i];
    }
    for (int i = 0; i < f; ++i)
        out[i] = static_cast<float>(out[i] / sp), out[f + i] = static_cast<float>(out[f + i] / sn);
}

float log_sigmoid(float x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }
}  // namespace

KvpopScorerNet KvpopScorerNet::from_tensors(const std::map<std::string, SafeTensor>& t, const std::string& source,
                                            int n_layer, int n_head_kv, int head_dim, KvpopConfig cfg) {
    require(n_layer > 0 && n_head_kv > 0 && head_dim > 0, "KVpop scorer: the model shape is empty");
    const bool mlp = t.count(kvpop_tensor_name(0, "mlp.fc1.weight")) > 0;
    const bool mlstm = t.count(kvpop_tensor_name(0, "mlstm.wq")) > 0;
    require(mlp || mlstm, "'", source,
            "' holds no KVpop scorer (tensors kvpop.<layer>.mlp.* or kvpop.<layer>.mlstm.*; ",
            "`kvsieve train kvpop` writes them)");
    require(!(mlp && mlstm), "KVpop scorer '", source, "' holds both an MLP and an mLSTM scorer");
    const std::string kind = mlp ? "mlp" : "mlstm";
    require(cfg.kind.empty() || cfg.kind == kind, "KVpop scorer '", source, "': config says kind ", cfg.kind,
            " but the tensors are an ", kind);
    cfg.kind = kind;
    KvpopScorerNet s;
    s.hkv_ = n_head_kv;
    s.d_ = head_dim;
    const int64_t H = n_head_kv, x = 2 * head_dim;
    if (mlp) {
        const SafeTensor& f1 = find(t, 0, "mlp.fc1.weight", source);
        require(f1.shape.size() == 3 && f1.shape[0] == H && f1.shape[1] > 0, "KVpop scorer '", source,
                "': mlp.fc1.weight must be [", H, ", hidden, ", x, "] for this model, got ", shape_text(f1.shape));
        s.hidden_ = static_cast<int>(f1.shape[1]);
    } else {
        const SafeTensor& wq = find(t, 0, "mlstm.wq", source);
        const SafeTensor& wv = find(t, 0, "mlstm.wv", source);
        require(wq.shape.size() == 3 && wq.shape[0] == H && wq.shape[1] > 0 && wv.shape.size() == 3 &&
                    wv.shape[0] == H && wv.shape[1] > 0,
                "KVpop scorer '", source, "': mlstm.wq must be [", H, ", f, ", x, "] and mlstm.wv [", H, ", dv, ", x,
                "] for this model, got ", shape_text(wq.shape), " and ", shape_text(wv.shape));
        s.f_ = static_cast<int>(wq.shape[1]);
        s.dv_ = static_cast<int>(wv.shape[1]);
    }
    for (int l = 0; l < n_layer; ++l) {
        Layer L;
        if (mlp) {
            L.fc1 = need(t, l, "mlp.fc1.weight", {H, s.hidden_, x}, source);
            L.b1 = need(t, l, "mlp.fc1.bias", {H, s.hidden_}, source);
            L.fc2 = need(t, l, "mlp.fc2.weight", {H, s.hidden_}, source);
            L.b2 = need(t, l, "mlp.fc2.bias", {H}, source);
        } else {
            L.wq = need(t, l, "mlstm.wq", {H, s.f_, x}, source);
            L.wk = need(t, l, "mlstm.wk", {H, s.f_, x}, source);
            L.wv = need(t, l, "mlstm.wv", {H, s.dv_, x}, source);
            L.wi = need(t, l, "mlstm.wi", {H, x}, source);
            L.bi = need(t, l, "mlstm.bi", {H}, source);
            L.wf = need(t, l, "mlstm.wf", {H, x}, source);
            L.bf = need(t, l, "mlstm.bf", {H}, source);
            L.wo = need(t, l, "mlstm.wo", {H, s.dv_}, source);
            L.bo = need(t, l, "mlstm.bo", {H}, source);
        }
        L.log_gamma = need(t, l, "log_gamma", {H}, source);
        for (float g : L.log_gamma)
            require(g >= std::log(kKvpopGammaMin) - 1e-6 && g <= std::log(kKvpopGammaMax) + 1e-9, "KVpop scorer '",
                    source, "': layer ", l, " has log γ = ", g, ", outside [log ", kKvpopGammaMin, ", log ",
                    kKvpopGammaMax, "]");
        s.layers_.push_back(std::move(L));
    }
    require(t.count(kvpop_tensor_name(n_layer, "log_gamma")) == 0, "KVpop scorer '", source,
            "' has more layers than the model's ", n_layer);
    require(cfg.window >= 0 && cfg.sinks >= 0 && cfg.decay_every >= 1 && cfg.softcap > 0, "KVpop scorer '", source,
            "': config needs window ≥ 0, sinks ≥ 0, decay_every ≥ 1 and softcap > 0");
    s.cfg_ = cfg;
    return s;
}

KvpopConfig read_kvpop_config(const std::string& path) {
    KvpopConfig cfg;
    const auto cj = std::filesystem::path(path) / "config.json";
    if (!std::filesystem::is_directory(path) || !std::filesystem::exists(cj)) return cfg;
    cfg.trained =
        read_trained_defaults(path, "kvpop");  // window, sinks, delayed, budget_k (one block for every method)
    cfg.window = cfg.trained.window.value_or(cfg.window);
    cfg.sinks = cfg.trained.sinks.value_or(cfg.sinks);
    cfg.delayed = cfg.trained.delayed.value_or(cfg.delayed);
    try {
        const nlohmann::json j = nlohmann::json::parse(std::ifstream(cj));
        cfg.kind = j.value("kind", std::string());
        cfg.decay_every = j.value("decay_every", cfg.decay_every);
        cfg.softcap = j.value("softcap", cfg.softcap);
    } catch (const nlohmann::json::exception& e) {
        fail("KVpop scorer: '", cj.string(), "' is not a valid config: ", e.what());
    }
    return cfg;
}

KvpopScorerNet KvpopScorerNet::load(const std::string& path, int n_layer, int n_head_kv, int head_dim) {
    const std::string file = safetensors_file(path);
    return from_tensors(read_safetensors(file), file, n_layer, n_head_kv, head_dim, read_kvpop_config(path));
}

void KvpopScorerNet::score_mlp(int layer, const float* k, const float* v, int64_t T, float* r) const {
    require(!stateful(), "KVpop scorer: score_mlp on an mLSTM scorer");
    const Layer& L = layers_.at(layer);
    const int d = d_, xd = 2 * d_, kvd = hkv_ * d_;
    thread_local std::vector<float> x;  // working space, reused by this thread's calls
    x.resize(xd);
    for (int64_t t = 0; t < T; ++t)
        for (int h = 0; h < hkv_; ++h) {
            scorer_input(k + t * kvd + h * d, v + t * kvd + h * d, d, x.data());
            double out = L.b2[h];
            for (int j = 0; j < hidden_; ++j) {
                const float a =
                    dot(&L.fc1[(static_cast<size_t>(h) * hidden_ + j) * xd], x.data(), xd) + L.b1[h * hidden_ + j];
                out += static_cast<double>(L.fc2[h * hidden_ + j]) * (a / (1.0f + std::exp(-a)));
            }
            r[t * hkv_ + h] = static_cast<float>(out);
        }
}

void KvpopScorerNet::features(const float* z, float* out) const { hedgehog(z, f_, out); }

MlstmState KvpopScorerNet::new_state() const {
    MlstmState s;
    s.C.assign(static_cast<size_t>(2 * f_) * dv_, 0.0f);
    s.n.assign(2 * f_, 0.0f);
    return s;
}

void KvpopScorerNet::inputs(int layer, int head, const float* k, const float* v, MlstmInputs& out) const {
    require(stateful(), "KVpop scorer: mLSTM inputs on an MLP scorer");
    const Layer& L = layers_.at(layer);
    const int xd = 2 * d_;
    std::vector<float>& x = out.x;
    x.resize(xd);
    out.q_raw.resize(f_);
    out.k_raw.resize(f_);
    scorer_input(k, v, d_, x.data());
    for (int j = 0; j < f_; ++j) {
        out.q_raw[j] = dot(&L.wq[(static_cast<size_t>(head) * f_ + j) * xd], x.data(), xd);
        out.k_raw[j] = dot(&L.wk[(static_cast<size_t>(head) * f_ + j) * xd], x.data(), xd);
    }
    out.q.resize(2 * f_);
    out.k.resize(2 * f_);
    out.v.resize(dv_);
    hedgehog(out.q_raw.data(), f_, out.q.data());
    hedgehog(out.k_raw.data(), f_, out.k.data());
    for (int j = 0; j < dv_; ++j) out.v[j] = dot(&L.wv[(static_cast<size_t>(head) * dv_ + j) * xd], x.data(), xd);
    out.log_i = dot(&L.wi[static_cast<size_t>(head) * xd], x.data(), xd) + L.bi[head];
    out.log_f = log_sigmoid(dot(&L.wf[static_cast<size_t>(head) * xd], x.data(), xd) + L.bf[head]);
}

void KvpopScorerNet::step(const MlstmInputs& in, MlstmState& s) const {
    const int F = 2 * f_;
    const float m_new = std::isfinite(s.m) ? std::max(in.log_f + s.m, in.log_i) : in.log_i;
    const float decay = std::isfinite(s.m) ? std::exp(in.log_f + s.m - m_new) : 0.0f;
    const float gain = std::exp(in.log_i - m_new);
    for (int a = 0; a < F; ++a) {
        s.n[a] = decay * s.n[a] + gain * in.k[a];
        float* row = &s.C[static_cast<size_t>(a) * dv_];
        const float ka = gain * in.k[a];
        for (int b = 0; b < dv_; ++b) row[b] = decay * row[b] + ka * in.v[b];
    }
    s.m = m_new;
}

float KvpopScorerNet::readout(int layer, int head, const float* phi_q, const MlstmState& s) const {
    if (!std::isfinite(s.m)) return 0.0f;
    const Layer& L = layers_.at(layer);
    const int F = 2 * f_;
    thread_local std::vector<double> num;  // working space, reused by this thread's calls
    num.assign(dv_, 0.0);
    double den = 0;
    for (int a = 0; a < F; ++a) {
        den += static_cast<double>(s.n[a]) * phi_q[a];
        const float* row = &s.C[static_cast<size_t>(a) * dv_];
        for (int b = 0; b < dv_; ++b) num[b] += static_cast<double>(row[b]) * phi_q[a];
    }
    den = std::max(std::abs(den), std::exp(-static_cast<double>(s.m)));
    double o = L.bo[head];
    for (int b = 0; b < dv_; ++b) o += L.wo[static_cast<size_t>(head) * dv_ + b] * (num[b] / den);
    const double c = cfg_.softcap;
    return static_cast<float>(c * std::tanh(o / c));
}

}  // namespace kvsieve
