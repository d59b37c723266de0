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
#include "train/mirror.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve::train {

namespace {
using json = nlohmann::json;

/// Throws Error naming the first key of `j` (an object at `where`) that is not in `known`.
void check_keys(const json& j, const std::string& where, const std::set<std::string>& known) {
    require(j.is_object(), where, " must be a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (known.count(it.key())) continue;
        std::string k;
        for (const auto& s : known) k += (k.empty() ? "" : ", ") + s;
        fail("unknown config key '", where, ".", it.key(), "' (known: ", k, ")");
    }
}

std::string resolve(const std::filesystem::path& base, const std::string& p) {
    std::filesystem::path q(p);
    return q.is_absolute() ? p : (base / q).lexically_normal().string();
}

/// Weighted cross-entropy of logits [B, T, V] predicting tokens[:, 1:], weights [B, T] (weight of target t).
torch::Tensor weighted_ce(const torch::Tensor& logits, const torch::Tensor& tokens, const torch::Tensor& w) {
    const int64_t V = logits.size(2);
    auto lp = torch::log_softmax(logits.narrow(1, 0, logits.size(1) - 1).reshape({-1, V}), -1);
    auto tgt = tokens.narrow(1, 1, tokens.size(1) - 1).reshape({-1});
    auto ww = w.narrow(1, 1, w.size(1) - 1).reshape({-1});
    auto nll = -lp.gather(1, tgt.unsqueeze(1)).squeeze(1);
    return (nll * ww).sum() / ww.sum().clamp_min(1e-6);
}
/// Teacher-forced answer tokens of `s` from `answer_begin` to before its final EOS: (predicted correctly, count).
/// All correct is the same as greedy decoding producing the answer exactly.
std::pair<int64_t, int64_t> answer_hits(LlamaMirror& model, const Sequence& s, int64_t answer_begin) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    auto t = torch::tensor(std::vector<int64_t>(s.tokens.begin(), s.tokens.end()));
    auto pred = model->forward(t.unsqueeze(0)).argmax(-1).squeeze(0);  // pred[i] predicts token i+1
    auto ok = pred.slice(0, answer_begin - 1, n - 2).eq(t.slice(0, answer_begin, n - 1));
    return {ok.sum().item<int64_t>(), n - 1 - answer_begin};
}

/// (correct, total) greedy predictions over the tokens of `s` whose weight is > 0 (teacher-forced, one forward).
std::pair<int64_t, int64_t> weighted_hits(LlamaMirror& model, const Sequence& s) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    auto t = torch::tensor(std::vector<int64_t>(s.tokens.begin(), s.tokens.end()));
    auto pred = model->forward(t.unsqueeze(0)).argmax(-1).squeeze(0);  // pred[i] predicts token i+1
    auto w = torch::tensor(std::vector<float>(s.weight.begin() + 1, s.weight.end())).gt(0);
    auto ok = pred.slice(0, 0, n - 1).eq(t.slice(0, 1, n)).logical_and(w);
    return {ok.sum().item<int64_t>(), w.sum().item<int64_t>()};
}

}  // namespace

bool run_pretrain(const std::string& config_path, bool resume, bool progress) {
    const json cfg = json::parse(read_whole_file(config_path, "config"), nullptr, false);
    require(!cfg.is_discarded(), "config '", config_path, "' is not valid JSON");
    const std::filesystem::path base = std::filesystem::path(config_path).parent_path();
    check_keys(cfg, "config", {"out", "output", "name", "seed", "threads", "model", "init", "tokenizer", "data", "optim",
                                "eval", "checkpoint_every", "log_every", "attention_supervision"});
    require(cfg.contains("out"), "config needs \"out\" (the run directory)");
    const std::string out = resolve(base, cfg["out"].get<std::string>());
    const std::string output = cfg.contains("output") ? resolve(base, cfg["output"].get<std::string>()) : out + "/model.gguf";
    const uint64_t seed = cfg.value("seed", uint64_t(1));
    set_num_threads(cfg.value("threads", 0));
    torch::set_num_threads(std::max(1, num_threads()));

    // --- data (validated before anything is built) ---
    require(cfg.contains("data"), "config needs \"data\"");
    const json& d = cfg["data"];
    check_keys(d, "data", {"text", "haystack", "holdout_fraction", "synthetic_fraction", "tasks", "lengths",
                           "length_weights", "tokens_per_batch", "prompt_weight", "answer_weight"});
    std::vector<std::string> text_paths, texts;
    for (const auto& p : d.at("text")) text_paths.push_back(resolve(base, p.get<std::string>()));
    require(!text_paths.empty(), "data.text lists no files");
    for (const auto& p : text_paths) texts.push_back(read_whole_file(p, "corpus file"));
    std::string haystack;
    for (const auto& p : d.value("haystack", json::array())) haystack += read_whole_file(resolve(base, p.get<std::string>()), "haystack file") + "\n";
    MixSpec mix;
    mix.synthetic_fraction = d.value("synthetic_fraction", 0.5);
    const json tasks = d.value("tasks", json::object());
    require(tasks.is_object(), "data.tasks must map task names to weights");
    for (auto it = tasks.begin(); it != tasks.end(); ++it) {
        if (!is_training_only_task(it.key())) check_task_name(it.key());
        mix.tasks[it.key()] = it.value().get<double>();
    }
    mix.lengths = d.value("lengths", std::vector<int64_t>{512});
    mix.length_weights = d.value("length_weights", std::vector<double>{});
    require(mix.length_weights.empty() || mix.length_weights.size() == mix.lengths.size(),
            "data.length_weights has ", mix.length_weights.size(), " entries for ", mix.lengths.size(), " lengths");
    mix.tokens_per_batch = d.value("tokens_per_batch", int64_t(16384));
    mix.prompt_weight = d.value("prompt_weight", 1.0f);
    mix.answer_weight = d.value("answer_weight", 1.0f);
    const double holdout = d.value("holdout_fraction", 0.05);

    // --- optimiser and loop options ---
    const json o = cfg.value("optim", json::object());
    check_keys(o, "optim", {"steps", "lr", "min_lr_ratio", "schedule", "warmup_steps", "decay_fraction", "weight_decay",
                            "beta1", "beta2", "clip", "grad_accum"});
    LoopOptions lo;
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
    const double lr = o.value("lr", 1e-3), wd = o.value("weight_decay", 0.1);
    lo.out_dir = out;
    lo.resume = resume;
    lo.progress = progress;
    lo.checkpoint_every = cfg.value("checkpoint_every", int64_t(100));
    lo.log_every = cfg.value("log_every", int64_t(10));
    // Attention supervision of the chain-following circuit (train/attn_supervision.h): weight × the mean
    // −log p of the carry and lookup edges, added to the LM loss.
    const json as = cfg.value("attention_supervision", json::object());
    check_keys(as, "attention_supervision", {"weight", "carry", "lookup"});
    const double as_weight = as.value("weight", 0.0);
    require(as_weight >= 0, "attention_supervision.weight must be ≥ 0");
    std::array<int, 2> as_carry{1, 0}, as_lookup{2, 0};  // (layer, query head)
    if (as_weight > 0) {
        require(as.contains("carry") && as.contains("lookup"),
                "attention_supervision needs \"carry\" and \"lookup\" as [layer, query head]");
        as_carry = as["carry"].get<std::array<int, 2>>();
        as_lookup = as["lookup"].get<std::array<int, 2>>();
    }
    const json ev = cfg.value("eval", json::object());
    check_keys(ev, "eval", {"every", "tasks", "length", "samples", "text_windows", "window"});
    lo.eval_every = ev.value("every", int64_t(0));
    std::vector<std::string> eval_tasks = ev.value("tasks", std::vector<std::string>{});
    for (const auto& t : eval_tasks)
        if (!is_copy_task(t) && !is_recall_style_task(t)) check_task_name(t);

    // --- tokenizer ---
    const json tk = cfg.value("tokenizer", json::object());
    check_keys(tk, "tokenizer", {"from_gguf", "train_bpe"});
    GGUFMetadata tok_meta;
    std::unique_ptr<Tokenizer> tok;
    if (tk.contains("from_gguf")) {
        const std::string p = resolve(base, tk["from_gguf"].get<std::string>());
        GGUFFile f(p);
        tok = Tokenizer::from_gguf(f);
        tok_meta = tokenizer_metadata(p);
    } else {
        const json tb = tk.value("train_bpe", json::object());
        check_keys(tb, "tokenizer.train_bpe", {"vocab_size", "min_char_count", "extra_task_samples"});
        BpeTrainOptions bo;
        bo.vocab_size = tb.value("vocab_size", 2048);
        bo.min_char_count = tb.value("min_char_count", 50);
        std::string text;
        for (const auto& t : texts) text += t + "\n";
        // Task templates go into the merge statistics too, so their fixed words become single tokens.
        const int extra = tb.value("extra_task_samples", 0);
        if (extra > 0 && !mix.tasks.empty()) {
            auto byte_vocab = train_bpe_vocab(text.substr(0, 1 << 20), BpeTrainOptions{512, bo.min_char_count, true});
            SpmTokenizer tmp(byte_vocab);
            int i = 0;
            for (int s = 0; s < extra; ++s)
                for (const auto& [name, w] : mix.tasks)
                if (!is_training_only_task(name)) text += make_task_example(name, 1024, tmp, haystack, seed * 7919 + ++i).input + "\n";
        }
        Vocab v = train_bpe_vocab(text, bo);
        if (progress) std::fprintf(stderr, "trained a BPE vocabulary of %d tokens\n", v.size());
        tok_meta = tokenizer_metadata(v);
        tok = std::make_unique<SpmTokenizer>(std::move(v));
    }

    // --- model ---
    LlamaMirror model(nullptr);
    if (cfg.contains("init")) {
        model = load_mirror(resolve(base, cfg["init"].get<std::string>()));
        require(model->config().n_vocab == tok->vocab().size(), "init model has a vocabulary of ", model->config().n_vocab,
                " tokens but the tokenizer has ", tok->vocab().size());
    } else {
        require(cfg.contains("model"), "config needs \"model\" (a shape) or \"init\" (a GGUF to start from)");
        const json m = cfg["model"];
        check_keys(m, "model", {"arch", "n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_ctx",
                                "rope_base", "rms_eps", "tied"});
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
        c.n_vocab = tok->vocab().size();
        require(c.n_head % c.n_head_kv == 0, "model.n_head must be a multiple of model.n_head_kv");
        torch::manual_seed(seed);
        model = LlamaMirror(c, m.value("tied", true));
    }
    for (const auto& [what, lh] : {std::pair{"carry", as_carry}, std::pair{"lookup", as_lookup}})
        if (as_weight > 0)
            require(lh[0] >= 0 && lh[0] < model->config().n_layer && lh[1] >= 0 && lh[1] < model->config().n_head,
                    "attention_supervision.", what, " [", lh[0], ", ", lh[1], "] is outside the model's ",
                    model->config().n_layer, " layers and ", model->config().n_head, " query heads");
    const ChainTokenIds chain_ids = as_weight > 0 ? chain_token_ids(*tok) : ChainTokenIds{};
    for (int64_t L : mix.lengths)
        require(L <= model->config().n_ctx_train, "data.lengths holds ", L, ", beyond the model's context of ",
                model->config().n_ctx_train);

    GGUFMetadata meta = tok_meta;
    meta.insert(meta.begin(), {"general.name", GGUFValue::make_string(cfg.value("name", std::string("kvsieve-model")))});

    std::filesystem::create_directories(out);
    const TextStream stream(texts, *tok, holdout);
    for (size_t i = 0; i < text_paths.size(); ++i) {
        std::ofstream(out + "/heldout_" + std::filesystem::path(text_paths[i]).filename().string(), std::ios::binary)
            << stream.heldout_text(i);
    }
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
        const Batch b = make_batch(mix, stream, *tok, haystack, seed, step * lo.grad_accum + m);
        const double data_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        auto toks = torch::from_blob(const_cast<int64_t*>(b.tokens.data()), {b.B, b.T}, torch::kInt64);
        auto w = torch::from_blob(const_cast<float*>(b.weight.data()), {b.B, b.T}, torch::kFloat32);
        MicroResult r;
        if (as_weight > 0) {
            std::vector<AttnTensors> cap;
            MirrorHooks hooks;
            hooks.capture = &cap;
            r.loss = weighted_ce(model->forward(toks, hooks), toks, w);
            const ChainTargets tg = chain_targets(b.tokens, b.B, b.T, chain_ids);
            const AttnTargetLoss c = attention_target_loss(cap, as_carry[0], as_carry[1], tg.carry);
            const AttnTargetLoss k = attention_target_loss(cap, as_lookup[0], as_lookup[1], tg.lookup);
            r.metrics["lm_loss"] = r.loss.item<double>();
            r.loss = r.loss + as_weight * (c.loss + k.loss);
            if (c.edges) r.metrics["carry_nll"] = c.loss.item<double>(), r.metrics["carry_hit"] = c.hit_rate;
            if (k.edges) r.metrics["lookup_nll"] = k.loss.item<double>(), r.metrics["lookup_hit"] = k.hit_rate;
        } else {
            r.loss = weighted_ce(model->forward(toks), toks, w);
        }
        r.tokens = b.B * b.T;
        r.data_seconds = data_s;
        return r;
    };
    const int64_t ev_len = ev.value("length", int64_t(1024)), ev_n = ev.value("samples", int64_t(16));
    const int64_t ev_win = ev.value("window", int64_t(512)), ev_windows = ev.value("text_windows", int64_t(8));
    // Row i of an eval task (answers weigh 1, prompts 0 for the recall-style tasks); *a0 = first answer token.
    auto eval_row = [&](const std::string& task, int64_t i, int64_t* a0) {
        if (is_recall_style_task(task)) {
            uint64_t st = mix_seed(seed ^ 0x5EC1, static_cast<uint64_t>(i));
            return recall_style_maker(task)(*tok, ev_len, st, 0, 1, a0);
        }
        if (is_copy_task(task)) {
            uint64_t st = mix_seed(seed ^ 0xC0B1, static_cast<uint64_t>(i));
            return copy_task_sequence(task, *tok, ev_len, st, 1, 1, a0);
        }
        return synthetic_sequence(task, ev_len, *tok, haystack, mix_seed(seed ^ 0xE7A1, i), 1, 1, a0);
    };
    for (const auto& [task, w] : mix.tasks)  // say now which tasks a batch length leaves out
        for (int64_t T : mix.lengths) {
            if (w <= 0 || task_fits_length(task, T, *tok, haystack)) continue;
            require(task != kRepeatTask && !is_copy_task(task), "task '", task, "' does not fit data.lengths ", T,
                    " tokens");
            std::fprintf(stderr, "warning: task '%s' does not fit data.lengths %lld tokens; its rows at that length are text rows\n",
                         task.c_str(), static_cast<long long>(T));
        }
    for (const auto& task : eval_tasks) {  // a length too short for a task is an error now, not at the first eval
        int64_t a0 = 0;
        try {
            (void)eval_row(task, 0, &a0);
        } catch (const Error& e) {
            fail("eval task '", task, "' at eval.length ", ev_len, ": ", e.what());
        }
    }
    auto eval = [&](int64_t) {
        json e;
        for (size_t f = 0; f < text_paths.size(); ++f) {
            const std::string name = std::filesystem::path(text_paths[f]).stem().string();
            double s = 0;
            int64_t n = 0;
            for (const auto& seq : stream.heldout_windows(f, ev_win, ev_windows)) {
                auto t = torch::tensor(std::vector<int64_t>(seq.tokens.begin(), seq.tokens.end())).unsqueeze(0);
                auto w = torch::ones_like(t, torch::kFloat32);
                s += weighted_ce(model->forward(t), t, w).item<double>();
                ++n;
            }
            if (n) e["nll_" + name] = s / n;
        }
        for (const auto& task : eval_tasks) {
            int64_t hit = 0, total = 0, exact = 0;
            for (int64_t i = 0; i < ev_n; ++i) {
                int64_t a0 = 0;
                const Sequence s = eval_row(task, i, &a0);
                if (is_recall_style_task(task)) {
                    const auto [h, n] = weighted_hits(model, s);
                    hit += h;
                    total += n;
                    continue;
                }
                const auto [h, n] = answer_hits(model, s, a0);
                hit += h;
                total += n;
                exact += h == n;
            }
            // copy: token accuracy of the copied half (≈ 0 before induction forms, → 1 after); recall-style tasks:
            // token accuracy of the answers; eval tasks: exact match.
            e["acc_" + task] = is_copy_task(task) || is_recall_style_task(task)
                                   ? (total ? static_cast<double>(hit) / static_cast<double>(total) : 0.0)
                                                 : static_cast<double>(exact) / static_cast<double>(ev_n);
        }
        return e;
    };
    auto save = [&](int64_t) { save_mirror(model, out + "/model.gguf", meta); };
    const int64_t reached = loop.run(micro, eval, save);
    if (reached < lo.steps) return false;
    save_mirror(model, output, meta);
    if (progress) std::fprintf(stderr, "wrote %s\n", output.c_str());
    return true;
}

}  // namespace kvsieve::train
