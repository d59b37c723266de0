#include "train/spkv.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kernels/parallel.h"
#include "predict/predictor_tensors.h"
#include "predict/spkv_export.h"
#include "train/data.h"
#include "train/lm_eval.h"
#include "train/lm_run.h"
#include "train/loop.h"
#include "train/mirror.h"
#include "train/run_config.h"
#include "train/spkv_predictor.h"
#include "util/error.h"

namespace kvsieve::train {

using json = nlohmann::json;

int64_t tahg_start(const SpkvOptions& o, int64_t total) {
    if (o.mode != "soft" || o.tahg_fraction <= 0) return total;
    return static_cast<int64_t>(std::llround(static_cast<double>(total) * (1.0 - o.tahg_fraction)));
}

double tahg_alpha(const SpkvOptions& o, int64_t step, int64_t total) {
    const int64_t s0 = tahg_start(o, total);
    if (step < s0) return 0.0;
    if (o.tahg_anneal_steps <= 0) return 1.0;
    return std::min(1.0, static_cast<double>(step - s0 + 1) / static_cast<double>(o.tahg_anneal_steps));
}

namespace {

SpkvOptions read_spkv(const json& j) {
    check_keys(j, "spkv",
               {"mode", "window", "sinks", "tau", "hidden", "bias_init", "lr_mult", "weight_decay", "tahg_fraction",
                "tahg_anneal_steps", "p_min", "density_weight", "density_target", "freeze_lm", "attn_block"});
    SpkvOptions o;
    o.mode = j.value("mode", o.mode);
    require(o.mode == "soft" || o.mode == "hard" || o.mode == "dense" || o.mode == "local", "spkv.mode '", o.mode,
            "' is not soft, hard, dense or local");
    o.window = j.value("window", o.window);
    o.sinks = j.value("sinks", o.sinks);
    o.tau = j.value("tau", o.tau);
    o.hidden = j.value("hidden", o.hidden);
    o.bias_init = j.value("bias_init", o.bias_init);
    o.lr_mult = j.value("lr_mult", o.lr_mult);
    o.weight_decay = j.value("weight_decay", o.weight_decay);
    o.tahg_fraction = j.value("tahg_fraction", o.tahg_fraction);
    o.tahg_anneal_steps = j.value("tahg_anneal_steps", o.tahg_anneal_steps);
    o.p_min = j.value("p_min", o.p_min);
    o.density_weight = j.value("density_weight", o.density_weight);
    o.density_target = j.value("density_target", o.density_target);
    o.freeze_lm = j.value("freeze_lm", o.freeze_lm);
    o.attn_block = j.value("attn_block", o.attn_block);
    require(o.window >= 0 && o.sinks >= 0, "spkv.window and spkv.sinks must be ≥ 0");
    require(o.tau > 0 && o.tau < 1, "spkv.tau must be in (0, 1), got ", o.tau);
    require(o.hidden >= -1, "spkv.hidden must be ≥ 0 (0: linear) or −1 (D / 8)");
    require(o.tahg_fraction >= 0 && o.tahg_fraction < 1, "spkv.tahg_fraction must be in [0, 1)");
    require(o.tahg_anneal_steps >= 0, "spkv.tahg_anneal_steps must be ≥ 0");
    require(o.p_min > 0 && o.p_min <= 1, "spkv.p_min must be in (0, 1]");
    require(o.density_weight >= 0, "spkv.density_weight must be ≥ 0");
    require(o.lr_mult > 0, "spkv.lr_mult must be > 0");
    require(o.attn_block >= 1, "spkv.attn_block must be ≥ 1");
    require(!(o.freeze_lm && (o.mode == "dense" || o.mode == "local")), "spkv.freeze_lm with mode ", o.mode,
            " trains nothing");
    return o;
}

/// The model and its gates as one module, so the loop's checkpoint holds both.
struct SpkvRun : torch::nn::Module {
    SpkvRun(LlamaMirror lm_, SpkvPredictor gates_) : lm(std::move(lm_)), gates(std::move(gates_)) {
        register_module("lm", lm);
        if (gates) register_module("spkv", gates);
    }
    LlamaMirror lm;
    SpkvPredictor gates{nullptr};
};

/// Per-layer statistics of the gates in one forward: density (fraction of global-eligible keys with u ≥ τ) and
/// mean utility of those keys, per KV head.
struct GateStats {
    std::vector<torch::Tensor> density, mean_u;  // per layer [Hkv]
    std::vector<torch::Tensor> reg;              // per layer: differentiable mean utility (regulariser)
};

}  // namespace

namespace {
/// run_spkv() and evaluate_spkv(): eval_only loads the checkpoint, evaluates it once and prints the result.
bool spkv_main(const std::string& config_path, bool resume, bool progress, bool eval_only) {
    const RunConfig rc = RunConfig::read(config_path);
    const json& cfg = rc.root;
    const RunBasics rb =
        read_run_basics(rc, {"model", "init", "tokenizer", "data", "eval", "spkv", "predictor"}, resume, progress);
    const std::string &out = rb.out, &output = rb.output;
    const uint64_t seed = rb.seed;
    const SpkvOptions so = read_spkv(cfg.value("spkv", json::object()));

    require(cfg.contains("data"), "config needs \"data\"");
    const LmData data = read_lm_data(rc, cfg["data"]);
    const OptimConfig& oc = rb.optim;
    LoopOptions lo = rb.loop;
    if (eval_only) {
        require(std::filesystem::exists(out + "/checkpoint.pt"), "nothing to evaluate: ", out,
                "/checkpoint.pt does not exist (train the run first)");
        lo.resume = true;
        lo.keep_log = true;
        lo.progress = false;
    }
    const LmEvalSpec ev = read_lm_eval(cfg.value("eval", json::object()));
    lo.eval_every = ev.every;

    // The tokenizer of the model continued from, unless the config names one.
    json tk = cfg.value("tokenizer", json::object());
    if (tk.empty() && cfg.contains("init")) tk["from_gguf"] = cfg["init"];
    TokenizerConfig tc = read_tokenizer(rc, tk, data.texts, data.task_names(), data.haystack, seed, progress);
    std::unique_ptr<Tokenizer> tok = std::move(tc.tok);
    LlamaMirror lm = read_model(rc, *tok, seed);
    const ModelConfig& c = lm->config();
    for (int64_t L : data.mix.lengths)
        require(L <= c.n_ctx_train, "data.lengths holds ", L, ", beyond the model's context of ", c.n_ctx_train);
    const int hidden = so.hidden >= 0 ? so.hidden : std::max(8, c.n_embd / 8);
    torch::manual_seed(seed ^ 0x5B4B);
    const bool learned = so.mode == "soft" || so.mode == "hard";
    SpkvPredictor gates = learned ? SpkvPredictor(c, hidden, so.bias_init) : SpkvPredictor(nullptr);
    SpkvRun run(lm, gates);

    GGUFMetadata meta = tc.meta;
    meta.insert(meta.begin(), {"general.name", GGUFValue::make_string(cfg.value("name", std::string("kvsieve-spkv")))});
    if (gates) {
        meta.emplace_back(predictor_metadata_key("spkv", "mode"), GGUFValue::make_string(so.mode));
        meta.emplace_back(predictor_metadata_key("spkv", "window"),
                          GGUFValue::make_u32(static_cast<uint32_t>(so.window)));
        meta.emplace_back(predictor_metadata_key("spkv", "sinks"),
                          GGUFValue::make_u32(static_cast<uint32_t>(so.sinks)));
        meta.emplace_back(predictor_metadata_key("spkv", "tau"), GGUFValue::make_f32(static_cast<float>(so.tau)));
        meta.emplace_back(predictor_metadata_key("spkv", "hidden"), GGUFValue::make_u32(static_cast<uint32_t>(hidden)));
    }

    if (!eval_only) std::filesystem::create_directories(out);
    const TextStream stream(data.texts, *tok, data.holdout);
    if (!eval_only) write_heldout_texts(out, data, stream);
    const LmEval lm_eval(ev, data, stream, *tok, seed);
    if (progress && !eval_only)
        std::fprintf(
            stderr, "SP-KV %s: model %s, %.2fM parameters; gates: %s; window %lld, τ %.2f; %lld training text tokens\n",
            so.mode.c_str(), c.summary().c_str(), lm->n_params() / 1e6,
            gates ? (hidden ? ("MLP hidden " + std::to_string(hidden)).c_str() : "linear") : "none",
            static_cast<long long>(so.window), so.tau, static_cast<long long>(stream.train_tokens()));

    // Parameter groups: the LM's matrices decay, its norms and biases do not; the predictor has its own rate and
    // decay (Table 4 caption: LR × 5, weight decay 0.1) and is frozen in the TAHG phase.
    std::vector<ParamGroup> groups;
    if (!so.freeze_lm) {
        ParamGroup decay{"matrices", {}, oc.lr, oc.weight_decay}, no_decay{"norms_biases", {}, oc.lr, 0.0};
        for (const auto& [name, t] : lm->gguf_tensors()) (t.dim() >= 2 ? decay : no_decay).params.push_back(t);
        groups = {decay, no_decay};
    } else {
        for (auto& p : lm->parameters()) p.set_requires_grad(false);
    }
    if (gates) {
        ParamGroup g{"spkv_predictor", gates->parameters(), oc.lr * so.lr_mult, so.weight_decay};
        const int64_t tahg0 = tahg_start(so, lo.steps);
        g.frozen_from = tahg0 < lo.steps ? tahg0 : -1;
        groups.push_back(g);
    }
    TrainLoop loop(run, groups, lo);

    // The gate hook of one forward: the gate of every layer from its hidden state, and the statistics of it.
    auto gate_hooks = [&](double alpha, bool training, GateStats* st) {
        MirrorHooks h;
        h.blocked = true;
        h.gate_window = {so.window, so.sinks};
        h.attn_block = so.attn_block;
        if (so.mode == "local")  // every gate closed: a sliding window
            h.key_gate = [&](int, const AttnTensors& a) {
                return torch::zeros({a.h.size(0), c.n_head_kv, a.h.size(1)}, a.h.options());
            };
        if (!gates) return h;
        h.key_gate = [&, alpha, training, st](int l, const AttnTensors& a) {
            auto u = torch::sigmoid(gates->logits(l, a.h));  // [B, Hkv, T]
            const int64_t T = u.size(2), w = std::max<int64_t>(so.window, 1);
            // Keys global for some query: sinks ≤ j ≤ T − 1 − w.
            const int64_t j0 = std::min(so.sinks, T), j1 = std::max<int64_t>(j0, T - w);
            if (st && j1 > j0) {
                auto ue = u.narrow(2, j0, j1 - j0);
                st->density.push_back((ue.detach() >= so.tau).to(torch::kFloat32).mean(std::vector<int64_t>{0, 2}));
                st->mean_u.push_back(ue.detach().mean(std::vector<int64_t>{0, 2}));
                st->reg.push_back(ue.mean());
            }
            return spkv_training_gate(so, u, alpha, training);
        };
        return h;
    };

    auto micro = [&](int64_t step, int64_t m) {
        const auto t0 = std::chrono::steady_clock::now();
        const Batch b = make_batch(data.mix, stream, *tok, data.haystack, seed, step * lo.grad_accum + m);
        const double data_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        auto toks = torch::from_blob(const_cast<int64_t*>(b.tokens.data()), {b.B, b.T}, torch::kInt64);
        auto w = torch::from_blob(const_cast<float*>(b.weight.data()), {b.B, b.T}, torch::kFloat32);
        GateStats st;
        const double alpha = tahg_alpha(so, step, lo.steps);
        MicroResult r;
        r.loss = weighted_ce(lm->forward(toks, gate_hooks(alpha, true, &st)), toks, w);
        if (!st.density.empty()) {
            r.metrics["lm_loss"] = r.loss.item<double>();
            auto dens = torch::stack(st.density);  // [L, Hkv]
            r.metrics["density"] = dens.mean().item<double>();
            r.metrics["mean_u"] = torch::stack(st.mean_u).mean().item<double>();
            r.metrics["tahg_alpha"] = alpha;
            if (so.density_weight > 0) {
                auto rho = torch::stack(st.reg).mean();
                auto reg = so.density_weight * torch::relu(rho - so.density_target);
                r.metrics["density_reg"] = reg.item<double>();
                r.loss = r.loss + reg;
            }
        }
        r.tokens = b.B * b.T;
        r.data_seconds = data_s;
        return r;
    };
    auto eval = [&](int64_t step) {
        // The inference setting: keys beyond the window kept iff u ≥ τ (what `--policy spkv` does), and the
        // per-head density over the held-out windows (Figure 5's trajectories).
        GateStats st;
        json e = lm_eval(lm, gate_hooks(0.0, false, &st));
        if (!st.density.empty()) {
            e.update(gate_density_json(st.density, c.n_layer, c.n_head_kv));
            if (so.mode == "soft" && tahg_alpha(so, step - 1, lo.steps) < 1.0) {
                e.update(lm_eval.heldout(lm, gate_hooks(0.0, true, nullptr), "soft_"));
            }
        }
        return e;
    };
    auto save_to = [&](const std::string& path, bool) {
        std::map<std::string, torch::Tensor> pt;
        if (gates) pt = gates->gguf_tensors();
        save_mirror(lm, path, meta, pt);
    };
    if (eval_only) {
        torch::NoGradGuard ng;
        run.eval();
        std::printf("%s\n", json{{"step", loop.start_step()}, {"eval", eval(loop.start_step())}}.dump().c_str());
        std::fflush(stdout);
        return true;
    }
    if (!loop.run_and_export(micro, eval, save_to, out + "/model.gguf", output)) return false;
    if (gates) {
        // The gates alone as a predictor folder (predict/spkv_export.h). With the model frozen they serve the model
        // trained from (its digest recorded), so they ship without its weights; otherwise only the output itself.
        SpkvExportOptions eo;
        const std::string init = cfg.value("init", std::string());
        if (so.freeze_lm && init.ends_with(".gguf")) eo.base_model = rc.resolve(init);
        eo.provenance = "kvsieve train spkv --config " + config_path;
        // "predictor": where the folder goes (default <out>/predictor; `kvsieve train spkv -m` sets the user's).
        const std::string predictor =
            cfg.contains("predictor") ? rc.resolve(cfg["predictor"].get<std::string>()) : out + "/predictor";
        export_spkv_gates(output, predictor, eo);
        if (progress) std::fprintf(stderr, "wrote %s (the gates as a predictor folder)\n", predictor.c_str());
    }
    return true;
}
}  // namespace

bool run_spkv(const std::string& config_path, bool resume, bool progress) {
    return spkv_main(config_path, resume, progress, false);
}

void evaluate_spkv(const std::string& config_path, bool progress) { spkv_main(config_path, true, progress, true); }

}  // namespace kvsieve::train
