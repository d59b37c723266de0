// kvsieve train kvzap: fit a KVzap surrogate (KVzap paper) from KVzip+ scores of corpus prompts; linear by ridge
// regression, or --mlp with AdamW (libtorch training stack).
#include <cstdio>

#include "cli/trainers.h"
#include "kernels/parallel.h"
#include "model/llama_model.h"
#include "fit/kvzap_fit.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#ifdef KVSIEVE_HAVE_TRAIN
#include "train/kvzap_mlp.h"
#endif

namespace kvsieve::cli {

TrainerSpec kvzap_trainer() {
    TrainerSpec s;
    s.name = "kvzap";
    s.help = "fit KVzap (linear by ridge regression, or --mlp) on KVzip+ scores of corpus prompts";
    s.setup = [](CLI::App& kz) {
        struct Opts {
            std::string model, out;
            std::vector<std::string> corpus;
            bool mlp = false;
            int threads = 0;
            int epochs = 15;
            KVzapFitOptions fit;
        };
        auto o = std::make_shared<Opts>();
        kz.add_option("--model", o->model, "GGUF model")->required()->check(CLI::ExistingFile);
        kz.add_option("--corpus", o->corpus, "text files to cut prompts from")->required();
        kz.add_option("--out", o->out, "checkpoint directory (config.json + model.safetensors)")->required();
        kz.add_flag("--mlp", o->mlp, "fit the MLP surrogate D→D/8→H_kv with AdamW (needs the libtorch training stack)");
        kz.add_option("--epochs", o->epochs, "MLP epochs")->capture_default_str();
        kz.add_option("--prompts", o->fit.prompts, "prompts")->capture_default_str();
        kz.add_option("--min-tokens", o->fit.min_tokens, "shortest prompt")->capture_default_str();
        kz.add_option("--max-tokens", o->fit.max_tokens, "longest prompt (clipped to half the model's context)")
            ->capture_default_str();
        kz.add_option("--tokens-per-prompt", o->fit.tokens_per_prompt, "sampled tokens per prompt")->capture_default_str();
        kz.add_option("--ridge", o->fit.ridge, "ridge penalty relative to the mean diagonal of XᵀX")->capture_default_str();
        kz.add_option("--seed", o->fit.seed, "seed")->capture_default_str();
        kz.add_option("-t,--threads", o->threads, "threads (0: all cores)");
        kz.callback([o] {
#ifndef KVSIEVE_HAVE_TRAIN
            require(!o->mlp, "train kvzap --mlp needs the libtorch training stack, which this build does not include");
#endif
            require(o->fit.ridge >= 0, "--ridge must be ≥ 0");
            set_num_threads(o->threads);
            std::string text;
            for (const auto& path : o->corpus) text += read_whole_file(path, "corpus") + "\n";
            LlamaModel m(o->model);
            const auto tok = Tokenizer::from_gguf(m.file());
            const KVzapPairs pairs = collect_kvzap_pairs(m, *tok, text, o->fit);
#ifdef KVSIEVE_HAVE_TRAIN
            train::KVzapMlpOptions mo;
            mo.epochs = o->epochs;
            mo.seed = o->fit.seed;
            const KVzapFitReport r =
                o->mlp ? train::fit_kvzap_mlp(pairs, o->out, mo) : fit_kvzap_linear(pairs, o->out, o->fit);
#else
            const KVzapFitReport r = fit_kvzap_linear(pairs, o->out, o->fit);
#endif
            std::fputs(r.table().c_str(), stdout);
            std::printf("wrote %s\n", o->out.c_str());
        });
    };
    return s;
}

}  // namespace kvsieve::cli
