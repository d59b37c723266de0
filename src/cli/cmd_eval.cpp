// kvsieve eval nll | sweep: quality of a KV policy as NLL vs density, and sweeps over policies × ratios.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>
#include <tuple>
#include <utility>

#include "cache/kv_pool.h"
#include "cli/cache_options.h"
#include "cli/commands.h"
#include "predict/bundled_predictors.h"
#include "util/file.h"
#include "eval/fidelity.h"
#include "eval/head_density.h"
#include "eval/kept_positions.h"
#include "eval/retrieval_heads.h"
#include "eval/leaderboard.h"
#include "eval/nll.h"
#include "eval/ruler.h"
#include "eval/tasks.h"
#include "eval/sweep.h"
#include "io/gguf.h"
#include "kernels/parallel.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve::cli {

namespace {
struct EvalCommon {
    std::string model, corpus, out = "results", protocol = "chunked";
    KVTypeOptions kv;
    int64_t samples = 8, sample_tokens = 512, chunk = 16, prefix = -1;
    int threads = 0, sinks = 4, window = 128;
    uint64_t seed = 0;
    bool quiet = false;

    void add_to(CLI::App* cmd) {
        cmd->add_option("-m,--model", model, "GGUF model")->required()->check(CLI::ExistingFile);
        cmd->add_option("--corpus", corpus, "text file to evaluate on")->required();
        cmd->add_option("--samples", samples, "evaluation windows (taken in order from the corpus start)")
            ->capture_default_str();
        cmd->add_option("--length", sample_tokens, "tokens per window, BOS included")->capture_default_str();
        cmd->add_option("--protocol", protocol, "chunked (SP-KV App. A.2: chunks, compression after each) or plain")
            ->capture_default_str();
        cmd->add_option("--chunk", chunk, "chunk size of the chunked protocol")->capture_default_str();
        cmd->add_option("--sinks", sinks, "sink tokens kept by the chunked protocol")->capture_default_str();
        cmd->add_option("--window", window, "local window kept by the chunked protocol")->capture_default_str();
        cmd->add_option("--prefix", prefix, "plain protocol: prompt tokens (-1: half the window)")
            ->capture_default_str();
        kv.add_to(cmd);
        cmd->add_option("--seed", seed, "seed (random policies)")->capture_default_str();
        cmd->add_option("--out", out, "output directory")->capture_default_str();
        cmd->add_option("-t,--threads", threads, "threads (0: all cores)");
        cmd->add_flag("-q,--quiet", quiet, "no progress bar");
    }
    NllOptions nll_options() const {
        NllOptions o;
        require(protocol == "chunked" || protocol == "plain", "--protocol must be chunked or plain, got '", protocol,
                "'");
        o.protocol = protocol == "chunked" ? NllProtocol::kChunked : NllProtocol::kPlain;
        o.sample_tokens = sample_tokens;
        o.samples = samples;
        o.chunk = chunk;
        o.sinks = sinks;
        o.window = window;
        o.prefix = prefix;
        o.kv_type = kv.spec();
        o.kv_rotate = kv.rotate;
        o.progress = !quiet;
        require(sinks >= 0 && window >= 0, "--sinks and --window must be ≥ 0");
        return o;
    }
    std::string read_corpus() const {
        return read_whole_file(corpus, "corpus");  // throws on an unreadable or empty file
    }
};

/// The --format option of the commands that build RULER prompts: chat, raw, or empty for the model's default.
void add_format_option(CLI::App* cmd, std::string& format) {
    cmd->add_option("--format", format,
                    "RULER prompt format: chat (kvpress's: the context inside the model's chat template, then the "
                    "question after the end of the user turn) or raw (context and question as plain text); default: "
                    "chat for a model with a chat template, raw otherwise")
        ->check(CLI::IsMember({"chat", "raw"}));
}

/// Sets o.format and o.chat_template from --format (empty: chat when the GGUF has tokenizer.chat_template, else
/// raw). Throws Error for chat on a model without a template, or a template kvsieve does not render.
void apply_format(const std::string& flag, const LlamaModel& m, const Tokenizer& tok, const std::string& model_path,
                  RulerOptions& o) {
    const bool has_template = m.file().has("tokenizer.chat_template");
    const RulerFormat f =
        flag.empty() ? (has_template ? RulerFormat::kChat : RulerFormat::kRaw) : parse_ruler_format(flag);
    o.format = f;
    if (f == RulerFormat::kRaw) return;
    require(has_template, "--format chat: ", model_path,
            " has no chat template (tokenizer.chat_template); use --format raw");
    try {
        o.chat_template = chat_template_for_model(m.file(), tok.vocab(), "");
    } catch (const Error& e) {
        fail("--format chat", flag.empty() ? " (the default for a model with a chat template)" : "", ": ", e.what(),
             "; or use --format raw");
    }
}

std::vector<std::string> split_names(const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) v.push_back(item);
    return v;
}

std::vector<double> parse_list(const std::string& s, const char* what) {
    std::vector<double> v;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');) {
        if (item.empty()) continue;
        char* end = nullptr;
        const double x = std::strtod(item.c_str(), &end);
        require(end && *end == '\0' && std::isfinite(x), what, ": '", item, "' is not a number");
        v.push_back(x);
    }
    return v;
}

/// `kvsieve eval nll`: NLL and perplexity of a text under a policy, and its ΔNLL against the full cache.
void add_eval_nll(CLI::App* eval) {
    auto* nll = eval->add_subcommand("nll", "NLL and perplexity of a text under a policy, with ΔNLL vs full");
    auto c1 = std::make_shared<EvalCommon>();
    auto policy = std::make_shared<std::string>("full");
    c1->add_to(nll);
    nll->add_option("--policy", *policy, "policy spec")->capture_default_str();
    nll->callback([c1, policy] {
        set_num_threads(c1->threads);
        const NllOptions o = c1->nll_options();
        select_predictor_model(c1->model);  // learned presets without model=
        parse_policy(*policy);              // bad specs fail before the model loads
        const std::string text = c1->read_corpus();
        LlamaModel m(c1->model);
        const auto tok = Tokenizer::from_gguf(m.file());
        const NllResult r = evaluate_nll(m, *tok, text, *policy, o);
        nlohmann::json j = r.to_json();
        if (*policy != "full") {
            const NllResult base = evaluate_nll(m, *tok, text, "full", o);
            j["nll_full"] = base.mean_nll;
            j["delta_nll_pct"] = 100.0 * (r.mean_nll - base.mean_nll) / base.mean_nll;
        } else {
            j["nll_full"] = r.mean_nll;
            j["delta_nll_pct"] = 0.0;
        }
        std::filesystem::create_directories(c1->out);
        std::ofstream(std::filesystem::path(c1->out) / "nll_metrics.json") << j.dump(2) << "\n";
        std::printf("policy=%s tokens=%ld nll=%.5f ppl=%.4f delta_nll_pct=%+.3f density=%.4f compression_ratio=%.4f\n",
                    policy->c_str(), static_cast<long>(r.tokens), r.mean_nll, r.ppl, j["delta_nll_pct"].get<double>(),
                    r.mean_density, r.mean_compression);
    });
}

/// `kvsieve eval ruler`'s options.
struct RulerArgs {
    EvalCommon common;
    std::string policy = "full", tasks = "niah_single_1", lengths = "1024", format, export_jsonl;
    bool query_aware = false, during = false;
    int64_t decode_preamble = 0, chunk = 0;
};

/// Runs `kvsieve eval ruler`: the policy's cell (or, with --export-jsonl, the examples alone).
void run_ruler_command(const RulerArgs& a) {
    const EvalCommon& c = a.common;
    set_num_threads(c.threads);
    RulerOptions o;
    o.tasks = split_names(a.tasks);
    o.lengths.clear();
    for (double l : parse_list(a.lengths, "--lengths")) o.lengths.push_back(static_cast<int64_t>(l));
    o.samples = c.samples;
    o.seed = c.seed;
    o.kv_type = c.kv.spec();
    o.kv_rotate = c.kv.rotate;
    o.progress = !c.quiet;
    o.query_aware = a.query_aware;
    o.decode_preamble = a.decode_preamble;
    o.prefill_chunk = a.chunk;
    o.compress_during_prefill = a.during;
    require(!a.during || a.chunk > 0, "--compress-during-prefill needs --prefill-chunk N (N > 0)");
    for (auto& t : o.tasks) check_task_name(canonical_task(t));
    select_predictor_model(c.model);  // learned presets without model=
    parse_policy(a.policy);
    const std::string text = c.read_corpus();
    LlamaModel m(c.model);
    const auto tok = Tokenizer::from_gguf(m.file());
    apply_format(a.format, m, *tok, c.model, o);
    if (!a.export_jsonl.empty()) {
        export_ruler_examples(a.export_jsonl, m, *tok, text, o);
        std::fprintf(stderr, "wrote %s (%s format)\n", a.export_jsonl.c_str(), ruler_format_name(o.format).c_str());
        return;
    }
    const RulerResult r = run_ruler(m, *tok, text, a.policy, o);
    write_ruler_cell(c.out, r, o, c.model, c.corpus);
    const auto j = r.metrics();
    for (const auto& [k, v] : j["tasks"].items()) std::printf("%-24s %6.1f\n", k.c_str(), v.get<double>());
    std::printf("policy=%s format=%s score=%.2f density=%.4f compression_ratio=%.4f\n", a.policy.c_str(),
                ruler_format_name(o.format).c_str(), r.score(), j["density"].get<double>(),
                j["compression_ratio"].get<double>());
}

/// `kvsieve eval ruler`: RULER-style tasks under a policy (or --export-jsonl: the examples alone).
void add_eval_ruler(CLI::App* eval) {
    auto* ruler = eval->add_subcommand("ruler", "RULER-style long-context tasks under a policy (greedy, string match)");
    auto a = std::make_shared<RulerArgs>();
    a->common.add_to(ruler);
    ruler->add_option("--policy", a->policy, "policy spec")->capture_default_str();
    std::string names;
    for (const auto& t : task_names()) names += (names.empty() ? "" : ", ") + t;
    ruler->add_option("--tasks", a->tasks, "comma-separated tasks: " + names)->capture_default_str();
    ruler->add_option("--lengths", a->lengths, "comma-separated input lengths in the model's tokens")
        ->capture_default_str();
    ruler->add_flag("--query-aware", a->query_aware,
                    "compress after the question too (default: query-agnostic, the context is compressed before the "
                    "question is fed, as kvpress)");
    ruler
        ->add_option("--decode-preamble", a->decode_preamble,
                     "decode-time variant: after the context the model generates this many tokens of its own (decode "
                     "steps, where fixed-budget policies evict) before the question comes")
        ->capture_default_str();
    ruler
        ->add_option("--prefill-chunk", a->chunk,
                     "feed the context in chunks of this many tokens (0: one piece; a step scorer is still fed in one "
                     "piece unless --compress-during-prefill)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    ruler->add_flag("--compress-during-prefill", a->during,
                    "judge and compress after every --prefill-chunk chunk (the server's memory-bounded prefill) "
                    "instead of once at the context's end");
    add_format_option(ruler, a->format);
    ruler->add_option("--export-jsonl", a->export_jsonl,
                      "write the examples (context, question, answer prefix, answers and the prompt ids in --format) "
                      "to this JSON Lines file and stop, running no policy");
    ruler->callback([a] { run_ruler_command(*a); });
}

/// `kvsieve eval density`: a policy's per-head density map and the hybrid layouts it suggests.
void add_eval_density(CLI::App* eval) {
    auto* dens = eval->add_subcommand(
        "density", "per-head density map of a policy (heatmap) and the hybrid local/global layouts it suggests");
    auto c4 = std::make_shared<EvalCommon>();
    auto dpolicy = std::make_shared<std::string>();
    auto dglobal = std::make_shared<int>(-1);
    auto dno_hybrid = std::make_shared<bool>(false);
    c4->add_to(dens);
    dens->add_option("--policy", *dpolicy, "policy spec, e.g. spkv:tau=0.5")->required();
    dens->add_option("--global-heads", *dglobal,
                     "global heads of the densest and random layouts (-1: as many as layout A)")
        ->capture_default_str();
    dens->add_flag("--no-hybrid", *dno_hybrid, "only the density map");
    dens->callback([c4, dpolicy, dglobal, dno_hybrid] {
        set_num_threads(c4->threads);
        const NllOptions o = c4->nll_options();
        select_predictor_model(c4->model);  // learned presets without model=
        parse_policy(*dpolicy);
        const std::string text = c4->read_corpus();
        LlamaModel m(c4->model);
        const auto tok = Tokenizer::from_gguf(m.file());
        std::fputs(
            head_density_report(m, *tok, text, *dpolicy, o, c4->out, !*dno_hybrid, *dglobal, c4->seed ? c4->seed : 1)
                .c_str(),
            stdout);
        std::fprintf(stderr, "wrote %s/head_density.{md,json,png} and %s/hybrid.md\n", c4->out.c_str(),
                     c4->out.c_str());
    });
}

/// `kvsieve eval retrieval-heads`: long-range attention mass per head and the layout it suggests.
void add_eval_retrieval_heads(CLI::App* eval) {
    auto* rh = eval->add_subcommand("retrieval-heads",
                                    "long-range attention mass per head on a calibration text, and the "
                                    "static hybrid layout whose global heads have the most (DuoAttention-style)");
    auto c5 = std::make_shared<EvalCommon>();
    auto rglobal = std::make_shared<int>(-1);
    c5->add_to(rh);
    rh->add_option("--global-heads", *rglobal, "global heads of the layout (-1: a quarter of all heads)")
        ->capture_default_str();
    rh->callback([c5, rglobal] {
        set_num_threads(c5->threads);
        const std::string text = c5->read_corpus();
        LlamaModel m(c5->model);
        select_predictor_model(m.file());  // learned presets without model=
        const auto tok = Tokenizer::from_gguf(m.file());
        const int total = m.config().n_layer * m.config().n_head_kv;
        const int n = *rglobal >= 0 ? *rglobal : std::max(1, total / 4);
        std::fputs(retrieval_heads_report(m, *tok, text, c5->sample_tokens, c5->samples, c5->window, c5->sinks, n,
                                          c5->out, !c5->quiet)
                       .c_str(),
                   stdout);
        std::fprintf(stderr, "wrote %s/retrieval_heads.{md,json,png} and %s/policy.txt\n", c5->out.c_str(),
                     c5->out.c_str());
    });
}

/// `kvsieve eval kept`'s options.
struct KeptOpts {
    std::string model, examples, policies, out;
    KVTypeOptions kv;
    int threads = 0;
    bool query_aware = false;
};

/// The exported examples of `path` (eval ruler --export-jsonl) as (index, ids to prefill): context_ids, then
/// question_ids with `query_aware`. Throws Error naming the file and line of a malformed one, or for none.
std::vector<std::pair<int64_t, std::vector<int32_t>>> read_exported_contexts(const std::string& path,
                                                                             bool query_aware) {
    std::vector<std::pair<int64_t, std::vector<int32_t>>> contexts;
    std::istringstream in(read_whole_file(path, "examples"));
    int64_t line_no = 0;
    for (std::string line; std::getline(in, line);) {
        ++line_no;
        if (line.empty()) continue;
        const auto j = nlohmann::json::parse(line, nullptr, false);
        require(!j.is_discarded() && j.is_object() && j.contains("context_ids") && j.contains("index"), path, ": line ",
                line_no, " is not an exported example (JSON with index and context_ids)");
        require(!query_aware || j.contains("question_ids"), path, ": line ", line_no,
                " has no question_ids, which --query-aware prefills after the context");
        try {
            auto ids = j.at("context_ids").get<std::vector<int32_t>>();
            if (query_aware) {
                const auto q = j.at("question_ids").get<std::vector<int32_t>>();
                ids.insert(ids.end(), q.begin(), q.end());
            }
            contexts.emplace_back(j.at("index").get<int64_t>(), std::move(ids));
        } catch (const nlohmann::json::exception&) {
            fail(path, ": line ", line_no, " has an index, context_ids or question_ids of the wrong type");
        }
    }
    require(!contexts.empty(), path, " holds no examples");
    return contexts;
}

/// Runs `kvsieve eval kept`: every policy after prefilling every example, one JSON line per pair.
void run_kept(const KeptOpts& ko) {
    set_num_threads(ko.threads);
    std::vector<std::string> specs;
    std::stringstream ss(ko.policies);
    for (std::string p; std::getline(ss, p, ';');)
        if (!p.empty()) specs.push_back(p);
    require(!specs.empty(), "--policies names no policy");
    select_predictor_model(ko.model);               // learned presets without model=
    for (const auto& sp : specs) parse_policy(sp);  // bad specs fail before the model loads
    const std::string kv_types = ko.kv.spec();      // a bad type or place fails before the model loads
    parse_kv_rotate_mode(ko.kv.rotate);
    const auto contexts = read_exported_contexts(ko.examples, ko.query_aware);
    LlamaModel m(ko.model);
    for (const auto& ctx : contexts)
        for (int32_t id : ctx.second)
            require(id >= 0 && id < m.config().n_vocab, ko.examples, ": example ", ctx.first, " has token id ", id,
                    " outside the vocabulary of ", m.config().n_vocab);
    std::ostringstream out;
    for (const auto& ctx : contexts)
        for (const auto& spec : specs) {
            nlohmann::json heads = nlohmann::json::array();
            for (const auto& h : kept_after_prefill(m, ctx.second, spec, kv_types, ko.kv.rotate))
                heads.push_back(
                    {{"layer", h.layer}, {"head", h.head}, {"positions", h.positions}, {"scores", h.scores}});
            out << nlohmann::json{{"index", ctx.first},
                                  {"policy", spec},
                                  {"n_tokens", ctx.second.size()},
                                  {"heads", heads}}
                       .dump()
                << "\n";
            std::fprintf(stderr, "example %ld, %s: done\n", static_cast<long>(ctx.first), spec.c_str());
        }
    write_text(ko.out, out.str());
}

/// `kvsieve eval kept`: the positions and scores each policy keeps per (layer, KV head) after prefilling exported
/// examples.
void add_eval_kept(CLI::App* eval) {
    auto* kept = eval->add_subcommand("kept",
                                      "per (layer, KV head): the positions and scores a policy keeps after "
                                      "prefilling each exported RULER context (eval ruler --export-jsonl)");
    auto ko = std::make_shared<KeptOpts>();
    ko->kv.both = "f32";  // kvpress's float32 runs (tools/kvpress_crosscheck.py)
    kept->add_option("-m,--model", ko->model, "GGUF model")->required()->check(CLI::ExistingFile);
    kept->add_option("--examples", ko->examples,
                     "JSON Lines of eval ruler --export-jsonl (its context_ids are prefilled)")
        ->required()
        ->check(CLI::ExistingFile);
    kept->add_flag("--query-aware", ko->query_aware,
                   "prefill each example's context_ids followed by its question_ids, as eval ruler --query-aware "
                   "does, so the question lies inside the prompt that is compressed");
    kept->add_option("--policies", ko->policies,
                     "policy specs separated by ';', e.g. 'snapkv:ratio=0.5;snapkv:ratio=0'")
        ->required();
    kept->add_option("--out", ko->out,
                     "output JSON Lines: one object per example and policy (index, policy, "
                     "n_tokens, heads: [{layer, head, positions, scores}])")
        ->required();
    ko->kv.add_to(kept);
    kept->add_option("-t,--threads", ko->threads, "threads (0: all cores)");
    kept->callback([ko] { run_kept(*ko); });
}

/// `kvsieve eval leaderboard`: sweep folders into one table per model and a score-vs-compression plot.
void add_eval_leaderboard(CLI::App* eval) {
    auto* board =
        eval->add_subcommand("leaderboard", "sweep directories → one table per model and a score-vs-compression plot");
    auto board_dirs = std::make_shared<std::vector<std::string>>();
    auto board_out = std::make_shared<std::string>("leaderboard");
    board->add_option("dirs", *board_dirs, "sweep directories (eval sweep --out)")
        ->required()
        ->check(CLI::ExistingDirectory);
    board->add_option("--out", *board_out, "output directory (leaderboard.md, plots)")->capture_default_str();
    auto board_skip = std::make_shared<std::string>();
    board->add_option("--exclude-tasks", *board_skip,
                      "comma-separated RULER tasks left out of every value (e.g. tasks at chance with the full cache)");
    board->callback([board_dirs, board_out, board_skip] {
        const auto skip = split_names(*board_skip);
        const auto rows = collect_leaderboard(*board_dirs, skip);
        std::fputs(write_leaderboard(rows, *board_out, skip).c_str(), stdout);
        std::fprintf(stderr, "wrote %s/leaderboard.md\n", board_out->c_str());
    });
}

/// `kvsieve eval fidelity`'s options.
struct FidOpts {
    std::string model, corpus, policies, out = "results";
    KVTypeOptions kv;
    int64_t prompt = 512, gen = 1024, samples = 2, top = 256, chunk = 0, every = 64;
    double temp = 0;
    uint64_t seed = 1;
    int threads = 0;
    bool quiet = false;
};

/// SPEC@FILE.gguf: the policy and the other model it runs on (its path after the last '@'); "" for the loaded one.
std::pair<std::string, std::string> split_model_suffix(const std::string& entry) {
    const size_t at = entry.rfind('@');
    if (at == std::string::npos || !entry.ends_with(".gguf")) return {entry, ""};
    return {entry.substr(0, at), entry.substr(at + 1)};
}

/// The entries of --policies, each spec parsed (bad specs fail before the model loads) and each other model present.
std::vector<std::string> fidelity_specs(const std::string& policies) {
    std::vector<std::string> specs;
    std::stringstream ss(policies);
    for (std::string p; std::getline(ss, p, ';');)
        if (!p.empty()) specs.push_back(p);
    require(!specs.empty(), "--policies names no policy");
    for (const auto& p : specs) {
        const auto [spec, path] = split_model_suffix(p);
        parse_policy(spec);
        require(path.empty() || std::filesystem::exists(path), "--policies: model file '", path, "' of '", p,
                "' does not exist");
    }
    return specs;
}

/// The other models of `specs`, each loaded once and checked before the teachers run: the same vocabulary size and
/// the same token ids for the start of the corpus `text` as `m` (whose file is `model_path`).
std::map<std::string, std::unique_ptr<LlamaModel>> other_models(const std::vector<std::string>& specs,
                                                                const LlamaModel& m, const Tokenizer& tok,
                                                                const std::string& text,
                                                                const std::string& model_path) {
    std::map<std::string, std::unique_ptr<LlamaModel>> others;
    const std::string probe = text.substr(0, 65536);
    const auto probe_ids = tok.encode(probe, true, false);
    for (const auto& p : specs) {
        const auto [spec, path] = split_model_suffix(p);
        if (path.empty() || others.count(path)) continue;
        auto other = std::make_unique<LlamaModel>(path);
        require(other->config().n_vocab == m.config().n_vocab &&
                    Tokenizer::from_gguf(other->file())->encode(probe, true, false) == probe_ids,
                "--policies: ", path, " does not share the tokenizer of ", model_path,
                " (the teachers' tokens would mean other words)");
        others[path] = std::move(other);
    }
    return others;
}

FidelityOptions fidelity_options(const FidOpts& fo) {
    require(fo.temp >= 0, "--temp must be ≥ 0");
    require(fo.chunk >= 0 && fo.every >= 1, "--prefill-chunk must be ≥ 0 and --every ≥ 1");
    FidelityOptions o;
    o.prompt_tokens = fo.prompt;
    o.gen_tokens = fo.gen;
    o.samples = fo.samples;
    o.top = fo.top;
    o.prefill_chunk = fo.chunk;
    o.memory_every = fo.every;
    o.kv_type = fo.kv.spec();
    o.kv_rotate = fo.kv.rotate;
    o.temp = fo.temp;
    o.seed = fo.seed;
    o.corpus = fo.corpus;
    o.progress = !fo.quiet;
    return o;
}

/// Runs `kvsieve eval fidelity`: the teachers once, then each policy not already in --out's table, the table
/// rewritten after each (the earlier run's policies this run does not name are kept after the others).
void run_fidelity(const FidOpts& fo) {
    set_num_threads(fo.threads);
    const std::vector<std::string> specs = fidelity_specs(fo.policies);
    const FidelityOptions o = fidelity_options(fo);
    const std::string text = read_whole_file(fo.corpus, "corpus");
    LlamaModel m(fo.model);
    select_predictor_model(m.file());  // learned presets without model=
    const auto tok = Tokenizer::from_gguf(m.file());
    const auto others = other_models(specs, m, *tok, text, fo.model);
    const std::string name = m.file().get_string("general.name", std::filesystem::path(fo.model).stem().string());
    const std::vector<FidelityResult> earlier = read_fidelity_results(fo.out, name, o);
    std::vector<FidelityResult> results;
    auto report = [&] {
        std::vector<FidelityResult> all = results;
        for (const auto& r : earlier)
            if (std::none_of(all.begin(), all.end(), [&r](const FidelityResult& x) { return x.policy == r.policy; }))
                all.push_back(r);
        write_fidelity_report(fo.out, name, o, all);
    };
    std::vector<FidelityTeacher> teachers;
    for (const auto& p : specs) {
        const auto done = std::find_if(earlier.begin(), earlier.end(), [&p](const auto& r) { return r.policy == p; });
        if (done != earlier.end()) {
            results.push_back(*done);
        } else {
            if (teachers.empty()) teachers = fidelity_teachers(m, *tok, text, o);
            const auto [spec, path] = split_model_suffix(p);
            const LlamaModel* student = path.empty() ? &m : others.at(path).get();
            results.push_back(evaluate_fidelity(*student, *tok, teachers, spec, o));
            results.back().policy = p;
            report();  // each finished policy is on disk at once
        }
        const auto& r = results.back();
        std::printf("policy=%s greedy_prefix=%.0f token_accuracy=%.4f kl=%.5f compression_ratio=%.3f kv_mib=%.2f%s\n",
                    p.c_str(), r.mean_prefix, r.mean_accuracy, r.mean_kl, r.compression, r.kv_bytes_final / 1048576.0,
                    done != earlier.end() ? " (from the earlier run in --out)" : "");
        std::fflush(stdout);
    }
    report();
}

/// `kvsieve eval fidelity`: decode-heavy fidelity of policies against the full cache's own generations.
void add_eval_fidelity(CLI::App* eval) {
    auto* fid = eval->add_subcommand("fidelity",
                                     "decode-heavy fidelity: long greedy generations of the full cache, fed to "
                                     "each policy; greedy prefix, token accuracy, KL and KV memory along the way");
    auto fo = std::make_shared<FidOpts>();
    fid->add_option("-m,--model", fo->model, "GGUF model")->required()->check(CLI::ExistingFile);
    fid->add_option("--corpus", fo->corpus, "text file the prompts are taken from")->required();
    fid->add_option("--policies", fo->policies,
                    "policy specs separated by ';' (e.g. 'full;kvpop:model=M,capacity=512'); "
                    "SPEC@FILE.gguf runs the policy on another model of the same vocabulary "
                    "(e.g. one fine-tuned for the budget) against the same teachers")
        ->required();
    fid->add_option("--prompt", fo->prompt, "prompt tokens, BOS included")->capture_default_str();
    fid->add_option("--gen", fo->gen, "generated tokens per prompt")->capture_default_str();
    fid->add_option("--samples", fo->samples, "prompts (consecutive windows of the corpus)")->capture_default_str();
    fid->add_option("--top", fo->top, "teacher probabilities kept per step for the KL")->capture_default_str();
    fid->add_option("--prefill-chunk", fo->chunk,
                    "chunked prefill of the prompt, compression after each chunk (0: one batch)")
        ->capture_default_str();
    fid->add_option("--every", fo->every, "steps between KV-memory records and accuracy bins")->capture_default_str();
    fo->kv.add_to(fid);
    fid->add_option("--temp", fo->temp, "teacher's sampling temperature (0: greedy)")->capture_default_str();
    fid->add_option("--seed", fo->seed, "teacher's sampling seed")->capture_default_str();
    fid->add_option("--out", fo->out,
                    "output directory; a table already there with the same settings is resumed (its "
                    "policies are not run again)")
        ->capture_default_str();
    fid->add_option("-t,--threads", fo->threads, "threads (0: all cores)");
    fid->add_flag("-q,--quiet", fo->quiet, "no progress bar");
    fid->callback([fo] { run_fidelity(*fo); });
}

/// `kvsieve eval sweep`: policies × ratios (or thresholds), NLL or RULER, in kvpress's result layout.
/// `kvsieve eval sweep`'s options.
struct SweepArgs {
    EvalCommon common;
    std::string policies, ratios, thresholds, tau_policies, task = "nll", tasks = "niah_single_1", lengths = "1024";
    std::string format, shard;
    bool query_aware = false;
    int64_t decode_preamble = 0, cells_per_pass = 0;
    CLI::Option* cells_per_pass_opt = nullptr;
};

/// --policies: ';' separates specs that contain ','; a ';'-entry without ':' is a ','-separated list of presets.
std::vector<std::string> sweep_policies(const std::string& policies) {
    std::vector<std::string> out;
    std::stringstream ss(policies);
    for (std::string p; std::getline(ss, p, ';');) {
        if (p.empty()) continue;
        if (p.find(':') != std::string::npos) {
            out.push_back(p);
            continue;
        }
        std::stringstream s2(p);
        for (std::string q; std::getline(s2, q, ',');)
            if (!q.empty()) out.push_back(q);
    }
    return out;
}

/// --shard K/N as (K, N); throws Error unless 0 ≤ K < N.
std::pair<int, int> parse_shard(const std::string& shard) {
    const size_t slash = shard.find('/');
    int k = -1, n = 0;
    try {
        size_t used_k = 0, used_n = 0;
        require(slash != std::string::npos, "");
        k = std::stoi(shard.substr(0, slash), &used_k);
        n = std::stoi(shard.substr(slash + 1), &used_n);
        require(used_k == slash && used_n == shard.size() - slash - 1, "");
    } catch (const std::exception&) { k = -1; }
    require(k >= 0 && n >= 1 && k < n, "--shard '", shard, "' is not K/N with 0 ≤ K < N, e.g. 0/2");
    return {k, n};
}

/// The sweep's options from its command line; throws Error for an option of the other task or a bad value.
SweepOptions sweep_options(const SweepArgs& a) {
    const bool ruler = a.task == "ruler";
    require(a.task == "nll" || ruler, "sweep task '", a.task, "' is not nll or ruler");
    require(ruler || !a.query_aware, "--query-aware applies to --task ruler");
    require(ruler || a.decode_preamble == 0, "--decode-preamble applies to --task ruler");
    require(ruler || a.format.empty(), "--format applies to --task ruler");
    require(a.cells_per_pass >= 0, "--cells-per-pass must be ≥ 0, got ", a.cells_per_pass);
    require(ruler || a.cells_per_pass_opt->count() == 0, "--cells-per-pass applies to --task ruler");
    require(ruler || a.shard.empty(), "--shard applies to --task ruler");
    const EvalCommon& c = a.common;
    SweepOptions o;
    o.policies = sweep_policies(a.policies);
    std::stringstream ts(a.tau_policies);
    for (std::string p; std::getline(ts, p, ';');)
        if (!p.empty()) o.threshold_policies.push_back(p);
    o.ratios = parse_list(a.ratios, "--ratios");
    o.thresholds = parse_list(a.thresholds, "--thresholds");
    o.out_dir = c.out;
    o.model_path = c.model;
    o.corpus_path = c.corpus;
    o.nll = c.nll_options();
    o.ruler.tasks = split_names(a.tasks);
    for (auto& t : o.ruler.tasks) check_task_name(canonical_task(t));
    o.ruler.lengths.clear();
    for (double l : parse_list(a.lengths, "--lengths")) o.ruler.lengths.push_back(static_cast<int64_t>(l));
    o.ruler.samples = c.samples;
    o.ruler.seed = c.seed;
    o.ruler.kv_type = c.kv.spec();
    o.ruler.kv_rotate = c.kv.rotate;
    o.ruler.progress = !c.quiet;
    o.ruler.query_aware = a.query_aware;
    o.ruler.decode_preamble = a.decode_preamble;
    o.cells_per_pass = a.cells_per_pass;
    if (!a.shard.empty()) std::tie(o.ruler.shard, o.ruler.shards) = parse_shard(a.shard);
    return o;
}

void run_sweep_command(const SweepArgs& a) {
    require(a.task == "nll" || a.task == "ruler", "sweep task '", a.task, "' is not nll or ruler");
    set_num_threads(a.common.threads);
    SweepOptions o = sweep_options(a);
    const std::string text = a.common.read_corpus();
    LlamaModel m(a.common.model);
    select_predictor_model(m.file());  // learned presets without model=
    const auto tok = Tokenizer::from_gguf(m.file());
    if (a.task == "ruler") apply_format(a.format, m, *tok, a.common.model, o.ruler);
    if (a.task == "nll")
        run_nll_sweep(m, *tok, text, o);
    else
        run_ruler_sweep(m, *tok, text, o);
}

void add_eval_sweep(CLI::App* eval) {
    auto* sweep = eval->add_subcommand("sweep", "policies × ratios (or thresholds): NLL vs density, kvpress layout");
    auto a = std::make_shared<SweepArgs>();
    a->common.add_to(sweep);
    sweep->add_option("--policies", a->policies, "comma-separated presets, e.g. streaming_llm,h2o,snapkv")->required();
    sweep->add_option("--ratios", a->ratios, "comma-separated compression ratios, e.g. 0.25,0.5,0.75");
    sweep->add_option(
        "--thresholds", a->thresholds,
        "comma-separated thresholds τ (rule=threshold); with neither, each policy spec is one cell as written");
    sweep->add_option(
        "--threshold-policies", a->tau_policies,
        "';'-separated presets swept over --thresholds alone, in the same pass as --policies over --ratios "
        "(e.g. the baselines over ratios and KVzap over τ, one prefill per example for both)");
    sweep->add_option("--task", a->task, "nll or ruler")->capture_default_str();
    sweep->add_option("--tasks", a->tasks, "ruler: comma-separated tasks")->capture_default_str();
    sweep->add_option("--lengths", a->lengths, "ruler: comma-separated lengths in tokens")->capture_default_str();
    sweep->add_flag("--query-aware", a->query_aware,
                    "ruler: compress after the question too (default: query-agnostic)");
    sweep
        ->add_option("--decode-preamble", a->decode_preamble,
                     "ruler: tokens the model generates between the context and the question")
        ->capture_default_str();
    a->cells_per_pass_opt =
        sweep
            ->add_option(
                "--cells-per-pass", a->cells_per_pass,
                "ruler: unfinished cells run together, sharing each example's prefill (0: all; 1: one at a time)")
            ->capture_default_str();
    add_format_option(sweep, a->format);
    sweep->add_option(
        "--shard", a->shard,
        "ruler: K/N runs only the examples e with e mod N = K, so N processes (one per core) share a sweep; "
        "each keeps its own partial files, and the last to finish writes the cells");
    sweep->callback([a] { run_sweep_command(*a); });
}

}  // namespace

void add_eval(CLI::App& app) {
    auto* eval = app.add_subcommand("eval", "evaluate KV cache policies");
    eval->require_subcommand(1);
    add_eval_nll(eval);
    add_eval_ruler(eval);
    add_eval_density(eval);
    add_eval_retrieval_heads(eval);
    add_eval_kept(eval);
    add_eval_leaderboard(eval);
    add_eval_fidelity(eval);
    add_eval_sweep(eval);
}

void add_eval_tasks(CLI::App& app) {
    auto* cmd = app.add_subcommand("eval-tasks", "accuracy of a model on N held-out generated examples of one task");
    struct Opts {
        std::string model, task = "niah_single", corpus, policy = "full", format;
        int64_t length = 2048, n = 50;
        uint64_t seed = 1000003;  // held out: training data generators use other seeds
        int threads = 0;
    };
    auto o = std::make_shared<Opts>();
    cmd->add_option("-m,--model", o->model, "GGUF model")->required()->check(CLI::ExistingFile);
    cmd->add_option("--task", o->task,
                    "task name (niah_single, niah_multikey, variable_tracking, or any eval ruler task)")
        ->capture_default_str();
    cmd->add_option("--length", o->length, "input length in tokens")->capture_default_str();
    cmd->add_option("-n", o->n, "examples")->capture_default_str();
    cmd->add_option("--corpus", o->corpus, "haystack text for prose-haystack tasks");
    cmd->add_option("--policy", o->policy, "KV policy")->capture_default_str();
    cmd->add_option("--seed", o->seed, "first example seed")->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "threads (0: all cores)");
    add_format_option(cmd, o->format);
    cmd->callback([o] {
        set_num_threads(o->threads);
        RulerOptions r;
        r.tasks = {o->task};
        r.lengths = {o->length};
        r.samples = o->n;
        r.seed = o->seed;
        const std::string corpus = o->corpus.empty() ? std::string() : read_whole_file(o->corpus, "corpus");
        LlamaModel m(o->model);
        select_predictor_model(m.file());  // learned presets without model=
        const auto tok = Tokenizer::from_gguf(m.file());
        apply_format(o->format, m, *tok, o->model, r);
        const RulerResult res = run_ruler(m, *tok, corpus, o->policy, r);
        int correct = 0;
        for (const auto& s : res.samples) correct += s.score >= 1.0;
        std::printf("task=%s length=%ld n=%ld format=%s exact=%d\naccuracy=%.4f\n", canonical_task(o->task).c_str(),
                    static_cast<long>(o->length), static_cast<long>(o->n), ruler_format_name(r.format).c_str(), correct,
                    res.score() / 100.0);
    });
}

}  // namespace kvsieve::cli
