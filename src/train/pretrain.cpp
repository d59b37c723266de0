#include "train/pretrain.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "eval/tasks.h"
#include "io/gguf.h"
#include "kernels/parallel.h"
#include "text/bpe_trainer.h"
#include "text/spm_tokenizer.h"
#include "text/tokenizer.h"
#include "train/attn_supervision.h"
#include "train/data.h"
#include "train/loop.h"
#include "train/lm_eval.h"
#include "train/lm_run.h"
#include "train/mirror.h"
#include "train/run_config.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve::train {

using json = nlohmann::json;

namespace {
/// The "attention_supervision" section: supervision of the chain-following circuit (train/attn_supervision.h),
/// weight × the mean −log p of the carry and lookup edges added to the LM loss, at (layer, query head) pairs.
struct AttnSupervision {
    double weight = 0;
    std::array<int, 2> carry{1, 0}, lookup{2, 0};
};

/// Reads the section; throws Error for an unknown key, a negative weight, or a weight without both heads.
AttnSupervision read_attention_supervision(const json& as) {
    check_keys(as, "attention_supervision", {"weight", "carry", "lookup"});
    AttnSupervision a;
    a.weight = as.value("weight", 0.0);
    require(a.weight >= 0, "attention_supervision.weight must be ≥ 0");
    if (a.weight > 0) {
        require(as.contains("carry") && as.contains("lookup"),
                "attention_supervision needs \"carry\" and \"lookup\" as [layer, query head]");
        a.carry = as["carry"].get<std::array<int, 2>>();
        a.lookup = as["lookup"].get<std::array<int, 2>>();
    }
    return a;
}

/// Throws Error when a supervised head lies outside the model's layers and query heads.
void check_supervised_heads(const AttnSupervision& a, const ModelConfig& c) {
    if (a.weight <= 0) return;
    for (const auto& [what, lh] : {std::pair{"carry", a.carry}, std::pair{"lookup", a.lookup}})
        require(lh[0] >= 0 && lh[0] < c.n_layer && lh[1] >= 0 && lh[1] < c.n_head, "attention_supervision.", what, " [",
                lh[0], ", ", lh[1], "] is outside the model's ", c.n_layer, " layers and ", c.n_head, " query heads");
}
/// The weighted LM loss of batch b and, with supervision, the attention loss of its chain edges added to it (the
/// parts as metrics).
MicroResult pretrain_loss(LlamaMirror& model, const Batch& b, const AttnSupervision& sup, const ChainTokenIds& ids) {
    auto toks = torch::from_blob(const_cast<int64_t*>(b.tokens.data()), {b.B, b.T}, torch::kInt64);
    auto w = torch::from_blob(const_cast<float*>(b.weight.data()), {b.B, b.T}, torch::kFloat32);
    MicroResult r;
    if (sup.weight <= 0) {
        r.loss = weighted_ce(model->forward(toks), toks, w);
        return r;
    }
    std::vector<AttnTensors> cap;
    MirrorHooks hooks;
    hooks.capture = &cap;
    r.loss = weighted_ce(model->forward(toks, hooks), toks, w);
    const ChainTargets tg = chain_targets(b.tokens, b.B, b.T, ids);
    const AttnTargetLoss c = attention_target_loss(cap, sup.carry[0], sup.carry[1], tg.carry);
    const AttnTargetLoss k = attention_target_loss(cap, sup.lookup[0], sup.lookup[1], tg.lookup);
    r.metrics["lm_loss"] = r.loss.item<double>();
    r.loss = r.loss + sup.weight * (c.loss + k.loss);
    if (c.edges) r.metrics["carry_nll"] = c.loss.item<double>(), r.metrics["carry_hit"] = c.hit_rate;
    if (k.edges) r.metrics["lookup_nll"] = k.loss.item<double>(), r.metrics["lookup_hit"] = k.hit_rate;
    return r;
}
}  // namespace

bool run_pretrain(const std::string& config_path, bool resume, bool progress) {
    const RunConfig rc = RunConfig::read(config_path);
    const json& cfg = rc.root;
    const RunBasics rb =
        read_run_basics(rc, {"model", "init", "tokenizer", "data", "eval", "attention_supervision"}, resume, progress);
    const std::string &out = rb.out, &output = rb.output;
    const uint64_t seed = rb.seed;

    // --- data (validated before anything is built) ---
    require(cfg.contains("data"), "config needs \"data\"");
    const LmData data = read_lm_data(rc, cfg["data"]);
    const MixSpec& mix = data.mix;

    // --- optimiser and loop options ---
    LoopOptions lo = rb.loop;
    const double lr = rb.optim.lr, wd = rb.optim.weight_decay;
    const AttnSupervision sup = read_attention_supervision(cfg.value("attention_supervision", json::object()));
    const LmEvalSpec ev = read_lm_eval(cfg.value("eval", json::object()));
    lo.eval_every = ev.every;

    // --- tokenizer ---
    TokenizerConfig tc = read_tokenizer(rc, cfg.value("tokenizer", json::object()), data.texts, data.task_names(),
                                        data.haystack, seed, progress);
    const GGUFMetadata tok_meta = tc.meta;
    std::unique_ptr<Tokenizer> tok = std::move(tc.tok);

    // --- model ---
    LlamaMirror model = read_model(rc, *tok, seed);
    check_supervised_heads(sup, model->config());
    const ChainTokenIds chain_ids = sup.weight > 0 ? chain_token_ids(*tok) : ChainTokenIds{};
    for (int64_t L : mix.lengths)
        require(L <= model->config().n_ctx_train, "data.lengths holds ", L, ", beyond the model's context of ",
                model->config().n_ctx_train);

    GGUFMetadata meta = tok_meta;
    meta.insert(meta.begin(),
                {"general.name", GGUFValue::make_string(cfg.value("name", std::string("kvsieve-model")))});

    std::filesystem::create_directories(out);
    const TextStream stream(data.texts, *tok, data.holdout);
    write_heldout_texts(out, data, stream);
    if (progress)
        std::fprintf(stderr, "model %s, %.2fM parameters; %lld training text tokens; %zu synthetic tasks\n",
                     model->config().summary().c_str(), model->n_params() / 1e6,
                     static_cast<long long>(stream.train_tokens()), mix.tasks.size());

    // Parameter groups: matrices decay, norm weights and biases do not.
    ParamGroup decay{"matrices", {}, lr, wd}, no_decay{"norms_biases", {}, lr, 0.0};
    for (const auto& [name, t] : model->gguf_tensors()) (t.dim() >= 2 ? decay : no_decay).params.push_back(t);
    TrainLoop loop(*model, {decay, no_decay}, lo);

    auto micro = [&](int64_t step, int64_t m) {
        const auto t0 = std::chrono::steady_clock::now();
        const Batch b = make_batch(mix, stream, *tok, data.haystack, seed, step * lo.grad_accum + m);
        const double data_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        MicroResult r = pretrain_loss(model, b, sup, chain_ids);
        r.tokens = b.B * b.T;
        r.data_seconds = data_s;
        return r;
    };
    const LmEval lm_eval(ev, data, stream, *tok, seed);
    auto eval = [&](int64_t) { return lm_eval(model); };
    return loop.run_and_export(
        micro, eval, [&](const std::string& path, bool) { save_mirror(model, path, meta); }, out + "/model.gguf",
        output);
}

}  // namespace kvsieve::train
