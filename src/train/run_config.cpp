#include "train/run_config.h"

#include "kernels/parallel.h"

#include <cstdio>

#include "eval/tasks.h"
#include "io/gguf.h"
#include "text/bpe_trainer.h"
#include "text/spm_tokenizer.h"
#include "train/data.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve::train {

using json = nlohmann::json;

RunConfig RunConfig::read(const std::string& path) {
    RunConfig rc;
    rc.root = json::parse(read_whole_file(path, "config"), nullptr, false);
    require(!rc.root.is_discarded(), "config '", path, "' is not valid JSON");
    require(rc.root.is_object(), "config '", path, "' is not a JSON object");
    rc.base = std::filesystem::path(path).parent_path();
    return rc;
}

std::string RunConfig::resolve(const std::string& p) const {
    const std::filesystem::path q(p);
    return q.is_absolute() ? p : (base / q).lexically_normal().string();
}

void check_keys(const json& j, const std::string& where, const std::set<std::string>& known) {
    require(j.is_object(), where, " must be a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (known.count(it.key())) continue;
        std::string k;
        for (const auto& s : known) k += (k.empty() ? "" : ", ") + s;
        fail("unknown config key '", where, ".", it.key(), "' (known: ", k, ")");
    }
}

OptimConfig read_optim(const json& o) {
    check_keys(o, "optim",
               {"steps", "lr", "min_lr_ratio", "schedule", "warmup_steps", "decay_fraction", "weight_decay", "beta1",
                "beta2", "clip", "grad_accum"});
    OptimConfig oc;
    LoopOptions& lo = oc.loop;
    lo.steps = o.value("steps", int64_t(1000));
    lo.grad_accum = o.value("grad_accum", int64_t(1));
    lo.clip = o.value("clip", 1.0);
    lo.beta1 = o.value("beta1", 0.9);
    lo.beta2 = o.value("beta2", 0.95);
    lo.schedule.kind = o.value("schedule", std::string("cosine"));
    lo.schedule.warmup = o.value("warmup_steps", int64_t(100));
    lo.schedule.total = lo.steps;
    lo.schedule.min_ratio = o.value("min_lr_ratio", 0.1);
    lo.schedule.decay_fraction = o.value("decay_fraction", 0.2);
    (void)lo.schedule.factor(0);  // validates the kind
    oc.lr = o.value("lr", 1e-3);
    oc.weight_decay = o.value("weight_decay", 0.1);
    return oc;
}

RunBasics read_run_basics(const RunConfig& rc, const std::set<std::string>& trainer_keys, bool resume, bool progress) {
    const json& cfg = rc.root;
    std::set<std::string> keys{"out", "output", "name", "seed", "threads", "optim", "checkpoint_every", "log_every"};
    keys.insert(trainer_keys.begin(), trainer_keys.end());
    check_keys(cfg, "config", keys);
    require(cfg.contains("out"), "config needs \"out\" (the run directory)");
    RunBasics b;
    b.out = rc.resolve(cfg["out"].get<std::string>());
    b.output = cfg.contains("output") ? rc.resolve(cfg["output"].get<std::string>()) : b.out + "/model.gguf";
    b.seed = cfg.value("seed", uint64_t(1));
    set_num_threads(cfg.value("threads", 0));
    torch::set_num_threads(std::max(1, num_threads()));
    b.optim = read_optim(cfg.value("optim", json::object()));
    b.loop = b.optim.loop;
    b.loop.out_dir = b.out;
    b.loop.resume = resume;
    b.loop.progress = progress;
    b.loop.checkpoint_every = cfg.value("checkpoint_every", int64_t(100));
    b.loop.log_every = cfg.value("log_every", int64_t(10));
    return b;
}

TokenizerConfig read_tokenizer(const RunConfig& rc, const json& tk, const std::vector<std::string>& texts,
                               const std::vector<std::string>& tasks, const std::string& haystack, uint64_t seed,
                               bool progress) {
    check_keys(tk, "tokenizer", {"from_gguf", "train_bpe"});
    TokenizerConfig out;
    if (tk.contains("from_gguf")) {
        const std::string p = rc.resolve(tk["from_gguf"].get<std::string>());
        GGUFFile f(p);
        out.tok = Tokenizer::from_gguf(f);
        out.meta = tokenizer_metadata(p);
        return out;
    }
    const json tb = tk.value("train_bpe", json::object());
    check_keys(tb, "tokenizer.train_bpe", {"vocab_size", "min_char_count", "extra_task_samples"});
    BpeTrainOptions bo;
    bo.vocab_size = tb.value("vocab_size", 2048);
    bo.min_char_count = tb.value("min_char_count", 50);
    std::string text;
    for (const auto& t : texts) text += t + "\n";
    // Task templates go into the merge statistics too, so their fixed words become single tokens.
    const int extra = tb.value("extra_task_samples", 0);
    if (extra > 0 && !tasks.empty()) {
        auto byte_vocab = train_bpe_vocab(text.substr(0, 1 << 20), BpeTrainOptions{512, bo.min_char_count, true});
        SpmTokenizer tmp(byte_vocab);
        int i = 0;
        for (int s = 0; s < extra; ++s)
            for (const auto& name : tasks)
                if (!is_training_only_task(name))
                    text += make_task_example(name, 1024, tmp, haystack, seed * 7919 + ++i).input + "\n";
    }
    Vocab v = train_bpe_vocab(text, bo);
    if (progress) std::fprintf(stderr, "trained a BPE vocabulary of %d tokens\n", v.size());
    out.meta = tokenizer_metadata(v);
    out.tok = std::make_unique<SpmTokenizer>(std::move(v));
    return out;
}

LlamaMirror read_model(const RunConfig& rc, const Tokenizer& tok, uint64_t seed) {
    const json& cfg = rc.root;
    if (cfg.contains("init")) {
        LlamaMirror model = load_mirror(rc.resolve(cfg["init"].get<std::string>()));
        require(model->config().n_vocab == tok.vocab().size(), "init model has a vocabulary of ",
                model->config().n_vocab, " tokens but the tokenizer has ", tok.vocab().size());
        return model;
    }
    require(cfg.contains("model"), "config needs \"model\" (a shape) or \"init\" (a GGUF to start from)");
    const json m = cfg["model"];
    check_keys(m, "model",
               {"arch", "n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_ctx", "rope_base", "rms_eps",
                "tied"});
    ModelConfig c;
    c.arch_name = m.value("arch", std::string("llama"));
    require(c.arch_name == "llama" || c.arch_name == "qwen2" || c.arch_name == "qwen3", "model.arch '", c.arch_name,
            "' is not one the trainer knows (llama, qwen2, qwen3)");
    c.arch = c.arch_name == "llama" ? Arch::kLlama : c.arch_name == "qwen2" ? Arch::kQwen2 : Arch::kQwen3;
    c.rope_layout = c.arch == Arch::kLlama ? RopeLayout::kNormal : RopeLayout::kNeox;
    c.qkv_bias = c.arch == Arch::kQwen2;
    c.qk_norm = c.arch == Arch::kQwen3;
    c.n_layer = m.at("n_layer");
    c.n_embd = m.at("n_embd");
    c.n_head = m.at("n_head");
    c.n_head_kv = m.value("n_head_kv", c.n_head);
    c.head_dim = m.value("head_dim", c.n_embd / c.n_head);
    c.n_rot = c.head_dim;
    c.n_ff = m.at("n_ff");
    c.n_ctx_train = m.value("n_ctx", int64_t(2048));
    c.rope_base = m.value("rope_base", 10000.0f);
    c.rms_eps = m.value("rms_eps", 1e-5f);
    c.n_vocab = tok.vocab().size();
    require(c.n_head % c.n_head_kv == 0, "model.n_head must be a multiple of model.n_head_kv");
    torch::manual_seed(seed);
    return LlamaMirror(c, m.value("tied", true));
}

}  // namespace kvsieve::train
