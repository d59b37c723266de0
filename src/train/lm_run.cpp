#include "train/lm_run.h"

#include <cstdio>
#include <filesystem>

#include "eval/tasks.h"
#include "train/lm_eval.h"
#include "train/palindrome.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve::train {

using json = nlohmann::json;

std::vector<std::string> LmData::names() const {
    std::vector<std::string> out;
    for (const auto& p : text_paths) out.push_back(std::filesystem::path(p).stem().string());
    return out;
}

std::vector<std::string> LmData::task_names() const {
    std::vector<std::string> out;
    for (const auto& [name, w] : mix.tasks) out.push_back(name);
    return out;
}

LmData read_lm_data(const RunConfig& rc, const json& d) {
    check_keys(d, "data",
               {"text", "haystack", "holdout_fraction", "synthetic_fraction", "tasks", "lengths", "length_weights",
                "tokens_per_batch", "prompt_weight", "answer_weight"});
    LmData out;
    require(d.contains("text"), "data needs \"text\" (a list of corpus files)");
    for (const auto& p : d.at("text")) out.text_paths.push_back(rc.resolve(p.get<std::string>()));
    require(!out.text_paths.empty(), "data.text lists no files");
    for (const auto& p : out.text_paths) out.texts.push_back(read_whole_file(p, "corpus file"));
    for (const auto& p : d.value("haystack", json::array()))
        out.haystack += read_whole_file(rc.resolve(p.get<std::string>()), "haystack file") + "\n";
    MixSpec& mix = out.mix;
    mix.synthetic_fraction = d.value("synthetic_fraction", 0.5);
    const json tasks = d.value("tasks", json::object());
    require(tasks.is_object(), "data.tasks must map task names to weights");
    for (auto it = tasks.begin(); it != tasks.end(); ++it) {
        if (!is_training_only_task(it.key())) check_task_name(it.key());
        mix.tasks[it.key()] = it.value().get<double>();
    }
    mix.lengths = d.value("lengths", std::vector<int64_t>{512});
    mix.length_weights = d.value("length_weights", std::vector<double>{});
    require(mix.length_weights.empty() || mix.length_weights.size() == mix.lengths.size(), "data.length_weights has ",
            mix.length_weights.size(), " entries for ", mix.lengths.size(), " lengths");
    mix.tokens_per_batch = d.value("tokens_per_batch", int64_t(16384));
    mix.prompt_weight = d.value("prompt_weight", 1.0f);
    mix.answer_weight = d.value("answer_weight", 1.0f);
    out.holdout = d.value("holdout_fraction", 0.05);
    return out;
}

void write_heldout_texts(const std::string& dir, const LmData& data, const TextStream& stream) {
    for (size_t i = 0; i < data.text_paths.size(); ++i)
        write_text(
            (std::filesystem::path(dir) / ("heldout_" + std::filesystem::path(data.text_paths[i]).filename().string()))
                .string(),
            stream.heldout_text(i));
}

LmEvalSpec read_lm_eval(const json& ev) {
    check_keys(ev, "eval", {"every", "tasks", "length", "samples", "text_windows", "window"});
    LmEvalSpec s;
    s.every = ev.value("every", s.every);
    s.tasks = ev.value("tasks", std::vector<std::string>{});
    for (const auto& t : s.tasks)
        if (!is_copy_task(t) && !is_recall_style_task(t)) check_task_name(t);
    s.length = ev.value("length", s.length);
    s.samples = ev.value("samples", s.samples);
    s.window = ev.value("window", s.window);
    s.text_windows = ev.value("text_windows", s.text_windows);
    return s;
}

LmEval::LmEval(const LmEvalSpec& spec, const LmData& data, const TextStream& stream, const Tokenizer& tok,
               uint64_t seed)
    : spec_(spec), data_(data), stream_(stream), tok_(tok), seed_(seed) {
    for (const auto& [task, w] : data.mix.tasks)  // say now which tasks a batch length leaves out
        for (int64_t T : data.mix.lengths) {
            if (w <= 0 || task_fits_length(task, T, tok, data.haystack)) continue;
            require(task != kRepeatTask && !is_copy_task(task), "task '", task, "' does not fit data.lengths ", T,
                    " tokens");
            std::fprintf(
                stderr,
                "warning: task '%s' does not fit data.lengths %lld tokens; its rows at that length are text rows\n",
                task.c_str(), static_cast<long long>(T));
        }
    for (const auto& task : spec_.tasks) {  // a length too short for a task is an error now, not at the first eval
        int64_t a0 = 0;
        try {
            (void)row(task, 0, &a0);
        } catch (const Error& e) { fail("eval task '", task, "' at eval.length ", spec_.length, ": ", e.what()); }
    }
}

Sequence LmEval::row(const std::string& task, int64_t i, int64_t* a0) const {
    if (is_recall_style_task(task)) {
        uint64_t st = mix_seed(seed_ ^ 0x5EC1, static_cast<uint64_t>(i));
        return recall_style_maker(task)(tok_, spec_.length, st, 0, 1, a0);
    }
    if (is_copy_task(task)) {
        uint64_t st = mix_seed(seed_ ^ 0xC0B1, static_cast<uint64_t>(i));
        return copy_task_sequence(task, tok_, spec_.length, st, 1, 1, a0);
    }
    return synthetic_sequence(task, spec_.length, tok_, data_.haystack, mix_seed(seed_ ^ 0xE7A1, i), 1, 1, a0);
}

json LmEval::heldout(LlamaMirror& model, const MirrorHooks& hooks, const std::string& prefix) const {
    json e = json::object();
    const json nll = heldout_nll(model, stream_, data_.names(), spec_.window, spec_.text_windows, hooks);
    for (auto it = nll.begin(); it != nll.end(); ++it) e[prefix + it.key()] = it.value();
    return e;
}

json LmEval::operator()(LlamaMirror& model, const MirrorHooks& hooks, const std::string& prefix) const {
    json e = heldout(model, hooks, prefix);
    for (const auto& task : spec_.tasks) {
        int64_t hit = 0, total = 0, exact = 0;
        const bool one_token_palindrome = task == kPalindromeTokensTask || task == kPalindromeTokensMixedTask;
        PalindromeTally tally;
        for (int64_t i = 0; i < spec_.samples; ++i) {
            int64_t a0 = 0;
            const Sequence s = row(task, i, &a0);
            if (is_recall_style_task(task)) {
                const std::vector<uint8_t> hits = next_token_hits(model, s, hooks);
                const auto [h, n] = weighted_hits(s, hits);
                hit += h;
                total += n;
                if (one_token_palindrome) tally.add(s, a0, hits);
                continue;
            }
            const auto [h, n] = answer_hits(model, s, a0, hooks);
            hit += h;
            total += n;
            exact += h == n;
        }
        // copy: token accuracy of the copied half (≈ 0 before induction forms, → 1 after); recall-style tasks:
        // token accuracy of the answers; eval tasks: exact match.
        e[prefix + "acc_" + task] = is_copy_task(task) || is_recall_style_task(task)
                                        ? (total ? static_cast<double>(hit) / static_cast<double>(total) : 0.0)
                                        : static_cast<double>(exact) / static_cast<double>(spec_.samples);
        if (one_token_palindrome) e.update(tally.to_json(prefix + "acc_" + task + "_"));
    }
    return e;
}

FrozenModelRun open_frozen_run(const std::string& config_path, const std::string& section,
                               const std::string& output_subdir, const std::string& what, bool resume, bool progress,
                               const std::function<void(const nlohmann::json&)>& read_section) {
    FrozenModelRun r;
    r.rc = RunConfig::read(config_path);
    const nlohmann::json& cfg = r.rc.root;
    r.rb = read_run_basics(r.rc, {"init", "data", "eval", section}, resume, progress);
    r.output = cfg.contains("output") ? r.rb.output : r.rb.out + "/" + output_subdir;
    read_section(cfg.value(section, nlohmann::json::object()));
    require(cfg.contains("init"), "config needs \"init\" (the GGUF model the ", what,
            " is trained for; it stays frozen)");
    require(cfg.contains("data"), "config needs \"data\"");
    r.data = read_lm_data(r.rc, cfg["data"]);
    r.loop = r.rb.loop;
    r.eval = read_lm_eval(cfg.value("eval", nlohmann::json::object()));
    r.loop.eval_every = r.eval.every;
    nlohmann::json tk = {{"from_gguf", cfg["init"]}};
    TokenizerConfig tc =
        read_tokenizer(r.rc, tk, r.data.texts, r.data.task_names(), r.data.haystack, r.rb.seed, progress);
    r.tok = std::move(tc.tok);
    r.lm = read_model(r.rc, *r.tok, r.rb.seed);
    for (int64_t L : r.data.mix.lengths)
        require(L <= r.lm->config().n_ctx_train, "data.lengths holds ", L, ", beyond the model's context of ",
                r.lm->config().n_ctx_train);
    for (auto& p : r.lm->parameters()) p.set_requires_grad(false);
    return r;
}

}  // namespace kvsieve::train
