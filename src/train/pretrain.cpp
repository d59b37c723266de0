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
#include "train/mirror.h"
#include "train/run_config.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve::train {

using json = nlohmann::json;

bool run_pretrain(const std::string& config_path, bool resume, bool progress) {
    const RunConfig rc = RunConfig::read(config_path);
    const json& cfg = rc.root;
    check_keys(cfg, "config", {"out", "output", "name", "seed", "threads", "model", "init", "tokenizer", "data", "optim",
                                "eval", "checkpoint_every", "log_every", "attention_supervision"});
    require(cfg.contains("out"), "config needs \"out\" (the run directory)");
    const std::string out = rc.resolve(cfg["out"].get<std::string>());
    const std::string output = cfg.contains("output") ? rc.resolve(cfg["output"].get<std::string>()) : out + "/model.gguf";
    const uint64_t seed = cfg.value("seed", uint64_t(1));
    set_num_threads(cfg.value("threads", 0));
    torch::set_num_threads(std::max(1, num_threads()));

    // --- data (validated before anything is built) ---
    require(cfg.contains("data"), "config needs \"data\"");
    const json& d = cfg["data"];
    check_keys(d, "data", {"text", "haystack", "holdout_fraction", "synthetic_fraction", "tasks", "lengths",
                           "length_weights", "tokens_per_batch", "prompt_weight", "answer_weight"});
    std::vector<std::string> text_paths, texts;
    for (const auto& p : d.at("text")) text_paths.push_back(rc.resolve(p.get<std::string>()));
    require(!text_paths.empty(), "data.text lists no files");
    for (const auto& p : text_paths) texts.push_back(read_whole_file(p, "corpus file"));
    std::string haystack;
    for (const auto& p : d.value("haystack", json::array())) haystack += read_whole_file(rc.resolve(p.get<std::string>()), "haystack file") + "\n";
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
    const OptimConfig oc = read_optim(cfg.value("optim", json::object()));
    LoopOptions lo = oc.loop;
    const double lr = oc.lr, wd = oc.weight_decay;
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
    std::vector<std::string> task_names;
    for (const auto& [name, w] : mix.tasks) task_names.push_back(name);
    TokenizerConfig tc = read_tokenizer(rc, cfg.value("tokenizer", json::object()), texts, task_names, haystack, seed, progress);
    const GGUFMetadata tok_meta = tc.meta;
    std::unique_ptr<Tokenizer> tok = std::move(tc.tok);

    // --- model ---
    LlamaMirror model = read_model(rc, *tok, seed);
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
        std::vector<std::string> names;
        for (const auto& p : text_paths) names.push_back(std::filesystem::path(p).stem().string());
        json e = heldout_nll(model, stream, names, ev_win, ev_windows);
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
