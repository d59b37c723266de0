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

bool run_wgkv(const std::string& config_path, bool resume, bool progress) {
    WgkvOptions wo;
    FrozenModelRun run = open_frozen_run(config_path, "wgkv", "gates", "gates", resume, progress,
                                         [&](const json& j) { wo = read_wgkv(j); });
    auto& [rc, rb, output, data, lo, ev, tok, lm] = run;  // lm is frozen: only gate gradients are kept
    const json& cfg = rc.root;
    const std::string& out = rb.out;
    const ModelConfig& c = lm->config();
    torch::manual_seed(rb.seed ^ 0x3C6B);
    WgkvPredictor gates(c, wo.g_expand, wo.bias_init);

    std::filesystem::create_directories(out);
    const TextStream stream(data.texts, *tok, data.holdout);
    write_heldout_texts(out, data, stream);
    const LmEval lm_eval(ev, data, stream, *tok, rb.seed);
    if (progress)
        std::fprintf(stderr,
                     "WG-KV: frozen model %s; gates: %d hidden units per KV head; window %lld, λ %g, τ %.2f; "
                     "%lld training text tokens\n",
                     c.summary().c_str(), gates->inner(), static_cast<long long>(wo.window), wo.lambda, wo.tau,
                     static_cast<long long>(stream.train_tokens()));

    const OptimConfig& oc = rb.optim;
    TrainLoop loop(*gates, {ParamGroup{"wgkv_gates", gates->parameters(), oc.lr, oc.weight_decay}}, lo);

    // The student's hooks: every layer's gate from its keys; `hard`: the inference decision 1[g ≥ τ].
    auto student_hooks = [&](bool hard, GateStats* st) {
        MirrorHooks h;
        h.gate_window = {wo.window, wo.sinks};
        h.attn_block = wo.attn_block;
        h.key_gate = [&, hard, st](int l, const AttnTensors& a) {
            auto g = gates->gate(l, a.k_pre, a.k_post);  // [B, Hkv, T]
            const int64_t T = g.size(2), w = std::max<int64_t>(wo.window, 1);
            const int64_t j0 = std::min(wo.sinks, T), j1 = std::max<int64_t>(j0, T - w);  // gated keys: [j0, j1)
            if (st && j1 > j0) {
                auto ge = g.narrow(2, j0, j1 - j0);
                st->density.push_back((ge.detach() >= wo.tau).to(torch::kFloat32).mean(std::vector<int64_t>{0, 2}));
                st->reg.push_back((ge + ge * (1 - ge)).mean());
            }
            if (hard) return (g >= wo.tau).to(g.scalar_type());
            return g.clamp_min(wo.g_min);
        };
        return h;
    };
    MirrorHooks teacher_hooks;
    teacher_hooks.blocked = true;
    teacher_hooks.attn_block = wo.attn_block;
    auto teacher = [&](const torch::Tensor& toks) {
        torch::NoGradGuard ng;
        return lm->hidden(toks, teacher_hooks);
    };

    auto micro = [&](int64_t step, int64_t m) {
        const auto t0 = std::chrono::steady_clock::now();
        const Batch b = make_batch(data.mix, stream, *tok, data.haystack, rb.seed, step * lo.grad_accum + m);
        const double data_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        auto toks = torch::from_blob(const_cast<int64_t*>(b.tokens.data()), {b.B, b.T}, torch::kInt64);
        const auto target = teacher(toks);
        GateStats st;
        auto distill = torch::mse_loss(lm->hidden(toks, student_hooks(false, &st)), target);
        MicroResult r;
        r.loss = distill;
        r.metrics["distill"] = distill.item<double>();
        if (!st.reg.empty()) {
            auto reg = torch::stack(st.reg).mean();
            r.metrics["gate_reg"] = reg.item<double>();
            r.metrics["density"] = torch::stack(st.density).mean().item<double>();
            r.loss = r.loss + wo.lambda * reg;
        }
        r.tokens = b.B * b.T;
        r.data_seconds = data_s;
        return r;
    };
    json full_nll;  // held-out NLL of the frozen model (without gates)
    auto eval = [&](int64_t) {
        // Held-out distillation loss under the inference decision and under the soft gates, the density and the
        // per-head density of the decision, and the held-out NLL of the gated model (the frozen model's beside it).
        json e = json::object();
        double hard_mse = 0, soft_mse = 0;
        int64_t n = 0;
        GateStats st;
        torch::NoGradGuard ng;
        for (size_t f = 0; f < stream.files(); ++f)
            for (const auto& seq : stream.heldout_windows(f, ev.window, ev.text_windows)) {
                auto t = torch::tensor(std::vector<int64_t>(seq.tokens.begin(), seq.tokens.end())).unsqueeze(0);
                const auto target = teacher(t);
                hard_mse += torch::mse_loss(lm->hidden(t, student_hooks(true, &st)), target).item<double>();
                soft_mse += torch::mse_loss(lm->hidden(t, student_hooks(false, nullptr)), target).item<double>();
                ++n;
            }
        if (n) {
            e["distill"] = hard_mse / n;
            e["soft_distill"] = soft_mse / n;
        }
        if (!st.density.empty()) e.update(gate_density_json(st.density, c.n_layer, c.n_head_kv));
        e.update(lm_eval(lm, student_hooks(true, nullptr)));
        // The frozen model's own held-out NLL never changes: computed at the first evaluation only.
        if (full_nll.empty()) full_nll = lm_eval.heldout(lm, teacher_hooks, "full_");
        e.update(full_nll);
        return e;
    };
    // The frozen model's digest: what lets kvsieve find these gates for it (predict/bundled_predictors.h).
    const std::string base_digest = model_digest(GGUFFile(rc.resolve(cfg["init"].get<std::string>())));
    auto save_to = [&](const std::string& dir, bool f16) {
        std::filesystem::create_directories(dir);
        gates->save_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), f16);
        const json card = {{"model_type", "wgkv"},
                           {"base_model", rc.resolve(cfg["init"].get<std::string>())},
                           {"model_digest", base_digest},
                           {"n_layer", c.n_layer},
                           {"n_head_kv", c.n_head_kv},
                           {"head_dim", c.head_dim},
                           {"g_expand", wo.g_expand},
                           {"inner", gates->inner()},
                           {"window", wo.window},
                           {"sinks", wo.sinks},
                           {"tau", wo.tau},
                           {"lambda", wo.lambda},
                           {"dtype", f16 ? "F16" : "F32"}};
        write_text((std::filesystem::path(dir) / "config.json").string(), card.dump(2) + "\n");
    };
    return loop.run_and_export(
        micro, eval, [&](const std::string& dir, bool final) { save_to(dir, final && wo.save_f16); }, out + "/gates",
        output);
}

}  // namespace kvsieve::train
