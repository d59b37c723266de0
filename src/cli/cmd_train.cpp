// kvsieve train kvzap: fit a KVzap surrogate from KVzip+ scores.
#include <cstdio>

#include "cli/commands.h"
#include "cli/corpus.h"
#include "kernels/parallel.h"
#include "model/llama_model.h"
#include "predict/kvzap_fit.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve::cli {

void add_train(CLI::App& app) {
    auto* train = app.add_subcommand("train", "fit learned KV policies");
    train->require_subcommand(1);
    auto* kz = train->add_subcommand("kvzap", "fit KVzap (linear, ridge regression) on KVzip+ scores of corpus prompts");
    struct Opts {
        std::string model, out;
        std::vector<std::string> corpus;
        bool mlp = false;
        int threads = 0;
        KVzapFitOptions fit;
    };
    auto o = std::make_shared<Opts>();
    kz->add_option("--model", o->model, "GGUF model")->required()->check(CLI::ExistingFile);
    kz->add_option("--corpus", o->corpus, "text files to cut prompts from")->required();
    kz->add_option("--out", o->out, "checkpoint directory (config.json + model.safetensors)")->required();
    kz->add_flag("--mlp", o->mlp, "fit the MLP surrogate (needs the libtorch training stack)");
    kz->add_option("--prompts", o->fit.prompts, "prompts")->capture_default_str();
    kz->add_option("--min-tokens", o->fit.min_tokens, "shortest prompt")->capture_default_str();
    kz->add_option("--max-tokens", o->fit.max_tokens, "longest prompt (clipped to half the model's context)")->capture_default_str();
    kz->add_option("--tokens-per-prompt", o->fit.tokens_per_prompt, "sampled tokens per prompt")->capture_default_str();
    kz->add_option("--ridge", o->fit.ridge, "ridge penalty relative to the mean diagonal of XᵀX")->capture_default_str();
    kz->add_option("--seed", o->fit.seed, "seed")->capture_default_str();
    kz->add_option("-t,--threads", o->threads, "threads (0: all cores)");
    kz->callback([o] {
        require(!o->mlp, "train kvzap --mlp needs the libtorch training stack, which this build does not include");
        require(o->fit.ridge >= 0, "--ridge must be ≥ 0");
        set_num_threads(o->threads);
        std::string text;
        for (const auto& path : o->corpus) text += read_corpus_file(path) + "\n";
        LlamaModel m(o->model);
        const auto tok = Tokenizer::from_gguf(m.file());
        const KVzapFitReport r = fit_kvzap_linear(m, *tok, text, o->out, o->fit);
        std::fputs(r.table().c_str(), stdout);
        std::printf("wrote %s\n", o->out.c_str());
    });
}

}  // namespace kvsieve::cli
