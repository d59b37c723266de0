// kvsieve train kvzap: fit a KVzap surrogate (KVzap paper) from KVzip+ scores of corpus prompts; linear by ridge
// regression, or --mlp with AdamW (libtorch training stack). A config trainer like the others (--config FILE,
// fit/kvzap_train_config.h), each of whose keys is also a flag; the checkpoint's config.json records the trained
// defaults (τ, window, sinks) and the config that made it.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "io/model_digest.h"
#include "cli/trainers.h"
#include "fit/kvzap_fit.h"
#include "fit/kvzap_train_config.h"
#include "kernels/parallel.h"
#include "model/llama_model.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#ifdef KVSIEVE_HAVE_TRAIN
#include "train/kvzap_mlp.h"
#endif

namespace kvsieve::cli {

namespace {
void run_kvzap(const nlohmann::json& config, const std::string& base, bool progress) {
    KVzapTrainConfig c = read_kvzap_train_config(config, base);
#ifndef KVSIEVE_HAVE_TRAIN
    require(!c.mlp, "train kvzap --mlp needs the libtorch training stack, which this build does not include");
#endif
    c.fit.progress = progress;
    c.fit.trained.provenance = "kvsieve train kvzap " + config.dump();
    set_num_threads(c.threads);
    std::string text;
    for (const auto& path : c.corpus) text += read_whole_file(path, "corpus") + "\n";
    LlamaModel m(c.model);
    // What lets kvsieve find this surrogate for this model (predict/bundled_predictors.h).
    c.fit.trained.base_model = c.model;
    c.fit.trained.model_digest = model_digest(m.file());
    const auto tok = Tokenizer::from_gguf(m.file());
    const KVzapPairs pairs = collect_kvzap_pairs(m, *tok, text, c.fit);
#ifdef KVSIEVE_HAVE_TRAIN
    train::KVzapMlpOptions mo;
    mo.epochs = c.epochs;
    mo.seed = c.fit.seed;
    mo.progress = progress;
    mo.trained = c.fit.trained;
    const KVzapFitReport r = c.mlp ? train::fit_kvzap_mlp(pairs, c.out, mo) : fit_kvzap_linear(pairs, c.out, c.fit);
#else
    const KVzapFitReport r = fit_kvzap_linear(pairs, c.out, c.fit);
#endif
    std::fputs(r.table().c_str(), stdout);
    std::printf("wrote %s\n", c.out.c_str());
}
}  // namespace

TrainerSpec kvzap_trainer() {
    using K = ConfigFlag::Kind;
    const KVzapFitOptions d;
    return config_trainer(
        "kvzap", "fit KVzap (linear by ridge regression, or --mlp) on KVzip+ scores of corpus prompts",
        {{"-m,--model", "model", K::kPath,
          "GGUF model (without --config and --out, the fit goes where --policy kvzap finds it for this model)"},
         {"--corpus", "corpus", K::kPaths, "text files to cut prompts from"},
         {"--out", "out", K::kPath, "checkpoint directory (config.json + model.safetensors)"},
         {"--mlp", "mlp", K::kSwitch,
          "fit the MLP surrogate D→D/8→H_kv with AdamW (needs the libtorch training stack)"},
         {"--epochs", "epochs", K::kInt, "MLP epochs (15)"},
         {"--prompts", "prompts", K::kInt, "prompts (" + std::to_string(d.prompts) + ")"},
         {"--min-tokens", "min_tokens", K::kInt, "shortest prompt (" + std::to_string(d.min_tokens) + ")"},
         {"--max-tokens", "max_tokens", K::kInt,
          "longest prompt, clipped to half the model's context (" + std::to_string(d.max_tokens) + ")"},
         {"--tokens-per-prompt", "tokens_per_prompt", K::kInt,
          "sampled tokens per prompt (" + std::to_string(d.tokens_per_prompt) + ")"},
         {"--ridge", "ridge", K::kReal, "ridge penalty relative to the mean diagonal of XᵀX (0.001)"},
         {"--seed", "seed", K::kInt, "seed (0)"},
         {"-t,--threads", "threads", K::kInt, "threads (0: all cores)"},
         {"--tau", "tau", K::kReal, "τ recorded as the checkpoint's default threshold (-4)"},
         {"--window", "window", K::kInt, "w recorded as the checkpoint's default window (128)"},
         {"--sinks", "sinks", K::kInt, "s recorded as the checkpoint's default sinks (0)"}},
        run_kvzap);
}

KVSIEVE_TRAINER(kvzap_trainer);

}  // namespace kvsieve::cli
