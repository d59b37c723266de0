#include "train/wgkv.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "io/model_digest.h"
#include "train/data.h"
#include "train/lm_eval.h"
#include "train/lm_run.h"
#include "train/loop.h"
#include "train/mirror.h"
#include "train/run_config.h"
#include "train/wgkv_predictor.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve::train {

using json = nlohmann::json;

namespace {

WgkvOptions read_wgkv(const json& j) {
    check_keys(j, "wgkv",
               {"window", "sinks", "tau", "g_expand", "lambda", "g_min", "bias_init", "attn_block", "save_f16"});
    WgkvOptions o;
    o.window = j.value("window", o.window);
    o.sinks = j.value("sinks", o.sinks);
    o.tau = j.value("tau", o.tau);
    o.g_expand = j.value("g_expand", o.g_expand);
    o.lambda = j.value("lambda", o.lambda);
    o.g_min = j.value("g_min", o.g_min);
    o.bias_init = j.value("bias_init", o.bias_init);
    o.attn_block = j.value("attn_block", o.attn_block);
    o.save_f16 = j.value("save_f16", o.save_f16);
    require(o.window >= 0 && o.sinks >= 0, "wgkv.window and wgkv.sinks must be ≥ 0");
    require(o.tau > 0 && o.tau < 1, "wgkv.tau must be in (0, 1), got ", o.tau);
    require(o.g_expand > 0, "wgkv.g_expand must be > 0, got ", o.g_expand);
    require(o.lambda >= 0, "wgkv.lambda must be ≥ 0, got ", o.lambda);
    require(o.g_min > 0 && o.g_min < 1, "wgkv.g_min must be in (0, 1), got ", o.g_min);
    require(o.attn_block >= 1, "wgkv.attn_block must be ≥ 1");
    return o;
}

/// Gate statistics of one student forward.
struct GateStats {
    std::vector<torch::Tensor> density;  // per layer [Hkv]: fraction of the gated keys with g ≥ τ
    std::vector<torch::Tensor> reg;      // per layer: differentiable mean(g + g(1 − g)) over the gated keys
};

}  // namespace

namespace {
/// One WG-KV run: the frozen model and its write gates, the student's and the teacher's hooks, a step, the
/// evaluation and the predictor folder.
class WgkvRun {
public:
    /// Reads the config and the model (open_frozen_run), makes the gates (seeded) and the run directory with its
    /// held-out texts. Throws Error naming the first problem.
    WgkvRun(const std::string& config_path, bool resume, bool progress);
    /// Trains and exports (TrainLoop::run_and_export); false when interrupted.
    bool run();

private:
    /// The student's hooks: every layer's gate from its keys; `hard`: the inference decision 1[g ≥ τ]; the gates'
    /// statistics into `st`.
    MirrorHooks student_hooks(bool hard, GateStats* st);
    /// The frozen model's hidden states for tokens [B, T] (no gradient): the distillation target.
    torch::Tensor teacher(const torch::Tensor& toks);
    MicroResult micro(int64_t step, int64_t m);
    /// Held-out distillation loss under the inference decision and under the soft gates, the density and the
    /// per-head density of the decision, and the held-out NLL of the gated model (the frozen model's beside it).
    json eval();
    void save_to(const std::string& dir, bool f16);

    WgkvOptions wo_;      // read by open_frozen_run's section reader, so declared before run_
    FrozenModelRun run_;  // its lm is frozen: only gate gradients are kept
    ModelConfig c_;
    WgkvPredictor gates_{nullptr};
    std::unique_ptr<TextStream> stream_;
    std::unique_ptr<LmEval> lm_eval_;
    MirrorHooks teacher_hooks_;
    json full_nll_;  // held-out NLL of the frozen model (without gates): computed at the first evaluation only
    // The frozen model's digest: what lets kvsieve find these gates for it (predict/bundled_predictors.h).
    std::string base_digest_;
};

WgkvRun::WgkvRun(const std::string& config_path, bool resume, bool progress)
    : run_(open_frozen_run(config_path, "wgkv", "gates", "gates", resume, progress,
                           [this](const json& j) { wo_ = read_wgkv(j); })),
      c_(run_.lm->config()) {
    torch::manual_seed(run_.rb.seed ^ 0x3C6B);
    gates_ = WgkvPredictor(c_, wo_.g_expand, wo_.bias_init);
    std::filesystem::create_directories(run_.rb.out);
    stream_ = std::make_unique<TextStream>(run_.data.texts, *run_.tok, run_.data.holdout);
    write_heldout_texts(run_.rb.out, run_.data, *stream_);
    lm_eval_ = std::make_unique<LmEval>(run_.eval, run_.data, *stream_, *run_.tok, run_.rb.seed);
    if (progress)
        std::fprintf(stderr,
                     "WG-KV: frozen model %s; gates: %d hidden units per KV head; window %lld, λ %g, τ %.2f; "
                     "%lld training text tokens\n",
                     c_.summary().c_str(), gates_->inner(), static_cast<long long>(wo_.window), wo_.lambda, wo_.tau,
                     static_cast<long long>(stream_->train_tokens()));
    teacher_hooks_.blocked = true;
    teacher_hooks_.attn_block = wo_.attn_block;
    base_digest_ = model_digest(GGUFFile(run_.rc.resolve(run_.rc.root["init"].get<std::string>())));
}

MirrorHooks WgkvRun::student_hooks(bool hard, GateStats* st) {
    MirrorHooks h;
    h.gate_window = {wo_.window, wo_.sinks};
    h.attn_block = wo_.attn_block;
    h.key_gate = [this, hard, st](int l, const AttnTensors& a) {
        auto g = gates_->gate(l, a.k_pre, a.k_post);  // [B, Hkv, T]
        const int64_t T = g.size(2), w = std::max<int64_t>(wo_.window, 1);
        const int64_t j0 = std::min(wo_.sinks, T), j1 = std::max<int64_t>(j0, T - w);  // gated keys: [j0, j1)
        if (st && j1 > j0) {
            auto ge = g.narrow(2, j0, j1 - j0);
            st->density.push_back((ge.detach() >= wo_.tau).to(torch::kFloat32).mean(std::vector<int64_t>{0, 2}));
            st->reg.push_back((ge + ge * (1 - ge)).mean());
        }
        if (hard) return (g >= wo_.tau).to(g.scalar_type());
        return g.clamp_min(wo_.g_min);
    };
    return h;
}

torch::Tensor WgkvRun::teacher(const torch::Tensor& toks) {
    torch::NoGradGuard ng;
    return run_.lm->hidden(toks, teacher_hooks_);
}

MicroResult WgkvRun::micro(int64_t step, int64_t m) {
    const auto t0 = std::chrono::steady_clock::now();
    const Batch b = make_batch(run_.data.mix, *stream_, *run_.tok, run_.data.haystack, run_.rb.seed,
                               step * run_.loop.grad_accum + m);
    const double data_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto toks = torch::from_blob(const_cast<int64_t*>(b.tokens.data()), {b.B, b.T}, torch::kInt64);
    const auto target = teacher(toks);
    GateStats st;
    auto distill = torch::mse_loss(run_.lm->hidden(toks, student_hooks(false, &st)), target);
    MicroResult r;
    r.loss = distill;
    r.metrics["distill"] = distill.item<double>();
    if (!st.reg.empty()) {
        auto reg = torch::stack(st.reg).mean();
        r.metrics["gate_reg"] = reg.item<double>();
        r.metrics["density"] = torch::stack(st.density).mean().item<double>();
        r.loss = r.loss + wo_.lambda * reg;
    }
    r.tokens = b.B * b.T;
    r.data_seconds = data_s;
    return r;
}

json WgkvRun::eval() {
    json e = json::object();
    double hard_mse = 0, soft_mse = 0;
    int64_t n = 0;
    GateStats st;
    torch::NoGradGuard ng;
    for (size_t f = 0; f < stream_->files(); ++f)
        for (const auto& seq : stream_->heldout_windows(f, run_.eval.window, run_.eval.text_windows)) {
            auto t = torch::tensor(std::vector<int64_t>(seq.tokens.begin(), seq.tokens.end())).unsqueeze(0);
            const auto target = teacher(t);
            hard_mse += torch::mse_loss(run_.lm->hidden(t, student_hooks(true, &st)), target).item<double>();
            soft_mse += torch::mse_loss(run_.lm->hidden(t, student_hooks(false, nullptr)), target).item<double>();
            ++n;
        }
    if (n) {
        e["distill"] = hard_mse / n;
        e["soft_distill"] = soft_mse / n;
    }
    if (!st.density.empty()) e.update(gate_density_json(st.density, c_.n_layer, c_.n_head_kv));
    e.update((*lm_eval_)(run_.lm, student_hooks(true, nullptr)));
    if (full_nll_.empty()) full_nll_ = lm_eval_->heldout(run_.lm, teacher_hooks_, "full_");
    e.update(full_nll_);
    return e;
}

void WgkvRun::save_to(const std::string& dir, bool f16) {
    std::filesystem::create_directories(dir);
    gates_->save_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), f16);
    const json card = {{"model_type", "wgkv"},
                       {"base_model", run_.rc.resolve(run_.rc.root["init"].get<std::string>())},
                       {"model_digest", base_digest_},
                       {"n_layer", c_.n_layer},
                       {"n_head_kv", c_.n_head_kv},
                       {"head_dim", c_.head_dim},
                       {"g_expand", wo_.g_expand},
                       {"inner", gates_->inner()},
                       {"window", wo_.window},
                       {"sinks", wo_.sinks},
                       {"tau", wo_.tau},
                       {"lambda", wo_.lambda},
                       {"dtype", f16 ? "F16" : "F32"}};
    write_text((std::filesystem::path(dir) / "config.json").string(), card.dump(2) + "\n");
}

bool WgkvRun::run() {
    const OptimConfig& oc = run_.rb.optim;
    TrainLoop loop(*gates_, {ParamGroup{"wgkv_gates", gates_->parameters(), oc.lr, oc.weight_decay}}, run_.loop);
    return loop.run_and_export([this](int64_t step, int64_t m) { return micro(step, m); },
                               [this](int64_t) { return eval(); },
                               [this](const std::string& dir, bool final) { save_to(dir, final && wo_.save_f16); },
                               run_.rb.out + "/gates", run_.output);
}
}  // namespace

bool run_wgkv(const std::string& config_path, bool resume, bool progress) {
    WgkvRun run(config_path, resume, progress);
    return run.run();
}

}  // namespace kvsieve::train
