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
/// One SP-KV run, for run_spkv() and evaluate_spkv(): the model and its gates, the data, the loop's parameter groups,
/// the gate hooks of a forward, a step, the evaluation and the export.
class SpkvTraining {
public:
    /// Reads the config (an eval-only run needs the run directory's checkpoint), the tokenizer and the model, makes
    /// the gates (seeded) and, for a training run, the run directory with its held-out texts. Throws Error naming the
    /// first problem.
    SpkvTraining(const std::string& config_path, bool resume, bool progress, bool eval_only);
    /// Trains and exports the GGUF (and the gates as a predictor folder); with eval_only, evaluates the checkpoint
    /// once and prints it as JSON on stdout. False when interrupted.
    bool run();

private:
    void read_model();
    GGUFMetadata metadata() const;
    void announce() const;
    std::vector<ParamGroup> param_groups();
    /// The gate hook of one forward: the gate of every layer from its hidden state, and its statistics into `st`.
    MirrorHooks gate_hooks(double alpha, bool training, GateStats* st);
    MicroResult micro(int64_t step, int64_t m);
    json eval(int64_t step);
    /// The gates alone as a predictor folder (predict/spkv_export.h) beside the trained GGUF.
    void export_gates() const;

    std::string config_path_;
    RunConfig rc_;
    RunBasics rb_;
    SpkvOptions so_;
    LmData data_;
    LoopOptions lo_;
    LmEvalSpec ev_;
    bool progress_ = false, eval_only_ = false;
    std::unique_ptr<Tokenizer> tok_;
    GGUFMetadata tok_meta_;
    LlamaMirror lm_{nullptr};
    ModelConfig c_;
    int hidden_ = 0;
    SpkvPredictor gates_{nullptr};
    std::unique_ptr<SpkvRun> module_;
    std::unique_ptr<TextStream> stream_;
    std::unique_ptr<LmEval> lm_eval_;
};

SpkvTraining::SpkvTraining(const std::string& config_path, bool resume, bool progress, bool eval_only)
    : config_path_(config_path), rc_(RunConfig::read(config_path)),
      rb_(read_run_basics(rc_, {"model", "init", "tokenizer", "data", "eval", "spkv", "predictor"}, resume, progress)),
      so_(read_spkv(rc_.root.value("spkv", json::object()))), progress_(progress), eval_only_(eval_only) {
    require(rc_.root.contains("data"), "config needs \"data\"");
    data_ = read_lm_data(rc_, rc_.root["data"]);
    lo_ = rb_.loop;
    if (eval_only) {
        require(std::filesystem::exists(rb_.out + "/checkpoint.pt"), "nothing to evaluate: ", rb_.out,
                "/checkpoint.pt does not exist (train the run first)");
        lo_.resume = true;
        lo_.keep_log = true;
        lo_.progress = false;
    }
    ev_ = read_lm_eval(rc_.root.value("eval", json::object()));
    lo_.eval_every = ev_.every;
    read_model();
    if (!eval_only) std::filesystem::create_directories(rb_.out);
    stream_ = std::make_unique<TextStream>(data_.texts, *tok_, data_.holdout);
    if (!eval_only) write_heldout_texts(rb_.out, data_, *stream_);
    lm_eval_ = std::make_unique<LmEval>(ev_, data_, *stream_, *tok_, rb_.seed);
    if (!eval_only) announce();
}

void SpkvTraining::read_model() {
    const json& cfg = rc_.root;
    // The tokenizer of the model continued from, unless the config names one.
    json tk = cfg.value("tokenizer", json::object());
    if (tk.empty() && cfg.contains("init")) tk["from_gguf"] = cfg["init"];
    TokenizerConfig tc = read_tokenizer(rc_, tk, data_.texts, data_.task_names(), data_.haystack, rb_.seed, progress_);
    tok_ = std::move(tc.tok);
    tok_meta_ = std::move(tc.meta);
    lm_ = train::read_model(rc_, *tok_, rb_.seed);
    c_ = lm_->config();
    for (int64_t L : data_.mix.lengths)
        require(L <= c_.n_ctx_train, "data.lengths holds ", L, ", beyond the model's context of ", c_.n_ctx_train);
    hidden_ = so_.hidden >= 0 ? so_.hidden : std::max(8, c_.n_embd / 8);
    torch::manual_seed(rb_.seed ^ 0x5B4B);
    if (so_.mode == "soft" || so_.mode == "hard") gates_ = SpkvPredictor(c_, hidden_, so_.bias_init);
    module_ = std::make_unique<SpkvRun>(lm_, gates_);
}

GGUFMetadata SpkvTraining::metadata() const {
    GGUFMetadata meta = tok_meta_;
    meta.insert(meta.begin(),
                {"general.name", GGUFValue::make_string(rc_.root.value("name", std::string("kvsieve-spkv")))});
    if (!gates_) return meta;
    meta.emplace_back(predictor_metadata_key("spkv", "mode"), GGUFValue::make_string(so_.mode));
    meta.emplace_back(predictor_metadata_key("spkv", "window"), GGUFValue::make_u32(static_cast<uint32_t>(so_.window)));
    meta.emplace_back(predictor_metadata_key("spkv", "sinks"), GGUFValue::make_u32(static_cast<uint32_t>(so_.sinks)));
    meta.emplace_back(predictor_metadata_key("spkv", "tau"), GGUFValue::make_f32(static_cast<float>(so_.tau)));
    meta.emplace_back(predictor_metadata_key("spkv", "hidden"), GGUFValue::make_u32(static_cast<uint32_t>(hidden_)));
    return meta;
}

void SpkvTraining::announce() const {
    if (!progress_) return;
    const std::string what = gates_ ? (hidden_ ? "MLP hidden " + std::to_string(hidden_) : "linear") : "none";
    std::fprintf(stderr,
                 "SP-KV %s: model %s, %.2fM parameters; gates: %s; window %lld, τ %.2f; %lld training text tokens\n",
                 so_.mode.c_str(), c_.summary().c_str(), lm_->n_params() / 1e6, what.c_str(),
                 static_cast<long long>(so_.window), so_.tau, static_cast<long long>(stream_->train_tokens()));
}

std::vector<ParamGroup> SpkvTraining::param_groups() {
    // The LM's matrices decay, its norms and biases do not; the predictor has its own rate and decay (Table 4
    // caption: LR × 5, weight decay 0.1) and is frozen in the TAHG phase.
    const OptimConfig& oc = rb_.optim;
    std::vector<ParamGroup> groups;
    if (!so_.freeze_lm) {
        ParamGroup decay{"matrices", {}, oc.lr, oc.weight_decay}, no_decay{"norms_biases", {}, oc.lr, 0.0};
        for (const auto& [name, t] : lm_->gguf_tensors()) (t.dim() >= 2 ? decay : no_decay).params.push_back(t);
        groups = {decay, no_decay};
    } else {
        for (auto& p : lm_->parameters()) p.set_requires_grad(false);
    }
    if (gates_) {
        ParamGroup g{"spkv_predictor", gates_->parameters(), oc.lr * so_.lr_mult, so_.weight_decay};
        const int64_t tahg0 = tahg_start(so_, lo_.steps);
        g.frozen_from = tahg0 < lo_.steps ? tahg0 : -1;
        groups.push_back(g);
    }
    return groups;
}

MirrorHooks SpkvTraining::gate_hooks(double alpha, bool training, GateStats* st) {
    MirrorHooks h;
    h.blocked = true;
    h.gate_window = {so_.window, so_.sinks};
    h.attn_block = so_.attn_block;
    const int64_t n_head_kv = c_.n_head_kv;
    if (so_.mode == "local")  // every gate closed: a sliding window
        h.key_gate = [n_head_kv](int, const AttnTensors& a) {
            return torch::zeros({a.h.size(0), n_head_kv, a.h.size(1)}, a.h.options());
        };
    if (!gates_) return h;
    h.key_gate = [this, alpha, training, st](int l, const AttnTensors& a) {
        auto u = torch::sigmoid(gates_->logits(l, a.h));  // [B, Hkv, T]
        const int64_t T = u.size(2), w = std::max<int64_t>(so_.window, 1);
        // Keys global for some query: sinks ≤ j ≤ T − 1 − w.
        const int64_t j0 = std::min(so_.sinks, T), j1 = std::max<int64_t>(j0, T - w);
        if (st && j1 > j0) {
            auto ue = u.narrow(2, j0, j1 - j0);
            st->density.push_back((ue.detach() >= so_.tau).to(torch::kFloat32).mean(std::vector<int64_t>{0, 2}));
            st->mean_u.push_back(ue.detach().mean(std::vector<int64_t>{0, 2}));
            st->reg.push_back(ue.mean());
        }
        return spkv_training_gate(so_, u, alpha, training);
    };
    return h;
}

MicroResult SpkvTraining::micro(int64_t step, int64_t m) {
    const auto t0 = std::chrono::steady_clock::now();
    const Batch b = make_batch(data_.mix, *stream_, *tok_, data_.haystack, rb_.seed, step * lo_.grad_accum + m);
    const double data_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto toks = torch::from_blob(const_cast<int64_t*>(b.tokens.data()), {b.B, b.T}, torch::kInt64);
    auto w = torch::from_blob(const_cast<float*>(b.weight.data()), {b.B, b.T}, torch::kFloat32);
    GateStats st;
    const double alpha = tahg_alpha(so_, step, lo_.steps);
    MicroResult r;
    r.loss = weighted_ce(lm_->forward(toks, gate_hooks(alpha, true, &st)), toks, w);
    if (!st.density.empty()) {
        r.metrics["lm_loss"] = r.loss.item<double>();
        auto dens = torch::stack(st.density);  // [L, Hkv]
        r.metrics["density"] = dens.mean().item<double>();
        r.metrics["mean_u"] = torch::stack(st.mean_u).mean().item<double>();
        r.metrics["tahg_alpha"] = alpha;
        if (so_.density_weight > 0) {
            auto rho = torch::stack(st.reg).mean();
            auto reg = so_.density_weight * torch::relu(rho - so_.density_target);
            r.metrics["density_reg"] = reg.item<double>();
            r.loss = r.loss + reg;
        }
    }
    r.tokens = b.B * b.T;
    r.data_seconds = data_s;
    return r;
}

json SpkvTraining::eval(int64_t step) {
    // The inference setting: keys beyond the window kept iff u ≥ τ (what `--policy spkv` does), and the per-head
    // density over the held-out windows (Figure 5's trajectories).
    GateStats st;
    json e = (*lm_eval_)(lm_, gate_hooks(0.0, false, &st));
    if (!st.density.empty()) {
        e.update(gate_density_json(st.density, c_.n_layer, c_.n_head_kv));
        if (so_.mode == "soft" && tahg_alpha(so_, step - 1, lo_.steps) < 1.0)
            e.update(lm_eval_->heldout(lm_, gate_hooks(0.0, true, nullptr), "soft_"));
    }
    return e;
}

void SpkvTraining::export_gates() const {
    // With the model frozen the gates serve the model trained from (its digest recorded), so they ship without its
    // weights; otherwise only the output itself.
    SpkvExportOptions eo;
    const std::string init = rc_.root.value("init", std::string());
    if (so_.freeze_lm && init.ends_with(".gguf")) eo.base_model = rc_.resolve(init);
    eo.provenance = "kvsieve train spkv --config " + config_path_;
    // "predictor": where the folder goes (default <out>/predictor; `kvsieve train spkv -m` sets the user's).
    const std::string predictor =
        rc_.root.contains("predictor") ? rc_.resolve(rc_.root["predictor"].get<std::string>()) : rb_.out + "/predictor";
    export_spkv_gates(rb_.output, predictor, eo);
    if (progress_) std::fprintf(stderr, "wrote %s (the gates as a predictor folder)\n", predictor.c_str());
}

bool SpkvTraining::run() {
    TrainLoop loop(*module_, param_groups(), lo_);
    auto eval_fn = [this](int64_t step) { return eval(step); };
    if (eval_only_) {
        torch::NoGradGuard ng;
        module_->eval();
        std::printf("%s\n", json{{"step", loop.start_step()}, {"eval", eval(loop.start_step())}}.dump().c_str());
        std::fflush(stdout);
        return true;
    }
    const GGUFMetadata meta = metadata();
    auto save_to = [this, &meta](const std::string& path, bool) {
        std::map<std::string, torch::Tensor> pt;
        if (gates_) pt = gates_->gguf_tensors();
        save_mirror(lm_, path, meta, pt);
    };
    if (!loop.run_and_export([this](int64_t step, int64_t m) { return micro(step, m); }, eval_fn, save_to,
                             rb_.out + "/model.gguf", rb_.output))
        return false;
    if (gates_) export_gates();
    return true;
}

bool spkv_main(const std::string& config_path, bool resume, bool progress, bool eval_only) {
    SpkvTraining t(config_path, resume, progress, eval_only);
    return t.run();
}
}  // namespace

bool run_spkv(const std::string& config_path, bool resume, bool progress) {
    return spkv_main(config_path, resume, progress, false);
}

void evaluate_spkv(const std::string& config_path, bool progress) { spkv_main(config_path, true, progress, true); }

}  // namespace kvsieve::train
