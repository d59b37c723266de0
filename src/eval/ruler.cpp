#include "eval/ruler.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "cache/kv_cache.h"
#include "cache/kv_rotation.h"
#include "eval/tasks.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "session/batch_step.h"
#include "session/decode_driver.h"
#include "session/prefill_plan.h"
#include "session/session.h"
#include "session/shared_prefill.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/progress.h"

namespace kvsieve {

std::string canonical_task(const std::string& name) {
    if (name == "niah_single") return "niah_single_1";
    if (name == "niah_multikey") return "niah_multikey_1";
    if (name == "variable_tracking") return "vt";
    return name;
}

double RulerResult::score() const {
    double s = 0;
    for (const auto& x : samples) s += x.score;
    return samples.empty() ? 0 : 100.0 * s / samples.size();
}

nlohmann::json RulerResult::metrics() const {
    std::map<std::string, std::pair<double, int>> per;
    double dens = 0, comp = 0, bytes = 0, vs_f16 = 0;
    bool have_bytes = !samples.empty();
    for (const auto& x : samples) {
        auto& p = per[x.task + "@" + std::to_string(x.length)];
        p.first += x.score;
        ++p.second;
        dens += x.density;
        comp += x.compression_ratio;
        have_bytes = have_bytes && x.kv_bytes_per_token && x.kv_bytes_vs_full_f16;
        if (have_bytes) {
            bytes += *x.kv_bytes_per_token;
            vs_f16 += *x.kv_bytes_vs_full_f16;
        }
    }
    nlohmann::json j;
    j["policy"] = policy;
    j["query_aware"] = query_aware;
    j["decode_preamble"] = decode_preamble;
    j["format"] = ruler_format_name(format);
    j["score"] = score();
    j["density"] = samples.empty() ? 1.0 : dens / samples.size();
    j["compression_ratio"] = samples.empty() ? 0.0 : comp / samples.size();
    j["samples"] = samples.size();
    if (have_bytes) {
        j["kv_bytes_per_token"] = bytes / samples.size();
        j["kv_bytes_vs_full_f16"] = vs_f16 / samples.size();
    }
    for (const auto& [k, v] : per) j["tasks"][k] = 100.0 * v.first / v.second;
    return j;
}

namespace {

/// One example of a run: the generated task, its nominal length, its seed and its prompt ids in the run's format.
struct RunExample {
    TaskExample ex;
    int64_t length = 0;
    uint64_t seed = 0;
    RulerPromptIds ids;
};

/// Every example of the run, in generation order (task, then length, then sample).
std::vector<RunExample> make_examples(const ModelConfig& c, const Tokenizer& tok, const std::string& corpus,
                                      const RulerOptions& o) {
    require(!o.tasks.empty() && !o.lengths.empty(), "give at least one task and one length");
    require(o.samples >= 1, "--samples must be ≥ 1");
    require(o.decode_preamble >= 0, "--decode-preamble must be ≥ 0, got ", o.decode_preamble);
    require(o.decode_preamble == 0 || !o.query_aware,
            "--decode-preamble generates between the context and the question: it needs the query-agnostic protocol "
            "(drop --query-aware)");
    std::vector<std::string> tasks;
    for (const auto& t : o.tasks) {
        tasks.push_back(canonical_task(t));
        check_task_name(tasks.back());
    }
    std::vector<RunExample> examples;
    for (const auto& t : tasks)
        for (int64_t len : o.lengths)
            for (int64_t i = 0; i < o.samples; ++i) {
                RunExample r;
                r.seed = o.seed + static_cast<uint64_t>(i);
                r.ex = make_task_example(t, len, tok, corpus, r.seed);
                r.length = len;
                r.ids = ruler_prompt_ids(tok, r.ex, o.format, o.chat_template);
                const int64_t need = static_cast<int64_t>(r.ids.context.size() + r.ids.question.size()) +
                                     o.decode_preamble + r.ex.max_new_tokens;
                require(need <= c.n_ctx_train, "task ", t, " at length ", len, " needs ", need, " positions (",
                        ruler_format_name(o.format),
                        " prompt, decode preamble and answer), beyond the model's context of ", c.n_ctx_train);
                examples.push_back(std::move(r));
            }
    return examples;
}

/// One batched step (session/batch_step.h): sessions[i] takes ids[i] (a kind step); every session's logits land in
/// logits[i].
void step_together(BatchStep& step, const std::vector<Session*>& sessions, const std::vector<std::vector<int32_t>>& ids,
                   Session::StepKind kind, const std::vector<std::vector<float>*>& logits) {
    step.clear();
    try {
        for (size_t i = 0; i < sessions.size(); ++i) step.add(*sessions[i], ids[i], kind, *logits[i]);
    } catch (...) {
        step.abort();
        throw;
    }
    step.forward();
    step.end_all();
}

/// The greedy next token that is not an end-of-generation token (the decode preamble never stops).
int32_t argmax_not_eog(const std::vector<float>& logits, const Tokenizer& tok) {
    int32_t next = -1;
    for (int32_t v = 0; v < static_cast<int32_t>(logits.size()); ++v)
        if (!tok.is_eog(v) && (next < 0 || logits[v] > logits[next])) next = v;
    return next;
}

/// The example's sequences, one per policy: their caches and sessions, and each one's next-token logits.
struct ExampleRun {
    std::vector<std::unique_ptr<KVCache>> caches;
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<Session*> all;
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<float>*> all_logits;
    BatchStep batch;
};

/// Makes one sequence per policy and prefills `ids` into each: the policies that share a dense prefill in one
/// forward (session/shared_prefill.h), the others alone in the chunk planner's pieces.
void prefill_all(const LlamaModel& model, const Tokenizer& tok, const std::vector<const Policy*>& policies,
                 const std::vector<int32_t>& ids, int64_t n_ctx, const RulerOptions& o,
                 const std::shared_ptr<KVPool>& pool, ExampleRun& x) {
    const size_t N = policies.size();
    x.logits.resize(N);
    std::vector<Session*> shared;
    for (size_t i = 0; i < N; ++i) {
        x.caches.push_back(std::make_unique<KVCache>(model.config(), n_ctx, *policies[i], pool));
        x.caches.back()->set_compress_during_prefill(o.compress_during_prefill);
        x.sessions.push_back(std::make_unique<Session>(model, tok, *x.caches.back()));
        x.all.push_back(x.sessions.back().get());
        x.all_logits.push_back(&x.logits[i]);
        if (o.prefill_chunk == 0 && shares_dense_prefill(*policies[i])) {
            shared.push_back(x.all.back());
        } else {
            PrefillPlan plan;
            plan.chunk = planned_chunk(*policies[i], o.prefill_chunk, true, o.compress_during_prefill);
            x.all.back()->prefill(ids, plan, x.logits[i]);
        }
    }
    if (shared.empty()) return;
    std::vector<float> lg;
    prefill_shared(shared, ids, lg);
    for (size_t i = 0; i < N; ++i)
        if (std::find(shared.begin(), shared.end(), x.all[i]) != shared.end()) x.logits[i] = lg;
}

/// Every sequence's answer, greedy, through the decode driver (session/decode_driver.h), the live ones stepping
/// together: each until an end-of-generation token or max_new_tokens. The answers' tokens, the end token left out.
std::vector<std::vector<int32_t>> answer_all(const Tokenizer& tok, int64_t max_new_tokens, ExampleRun& x) {
    const size_t N = x.all.size();
    SamplerParams greedy;
    greedy.temp = 0;
    StopRules rules;
    rules.max_tokens = max_new_tokens;
    std::vector<std::unique_ptr<Sampler>> samplers;
    std::vector<std::unique_ptr<DecodeDriver>> drivers;
    for (size_t i = 0; i < N; ++i) {
        samplers.push_back(std::make_unique<Sampler>(greedy));
        drivers.push_back(std::make_unique<DecodeDriver>(tok, *samplers.back(), rules));
        if (rules.max_tokens == 0) drivers.back()->finish(FinishReason::kMaxTokens);
    }
    for (;;) {
        std::vector<Session*> go;
        std::vector<std::vector<int32_t>> go_ids;
        std::vector<std::vector<float>*> go_logits;
        for (size_t i = 0; i < N; ++i) {
            if (drivers[i]->finished()) continue;
            const int64_t left = x.all[i]->n_ctx() - x.all[i]->n_tokens();
            const DecodeStep st = drivers[i]->next(x.logits[i].data(), static_cast<int>(x.logits[i].size()), left);
            if (drivers[i]->finished()) continue;
            go.push_back(x.all[i]);
            go_ids.push_back({st.token});
            go_logits.push_back(&x.logits[i]);
        }
        if (go.empty()) break;
        step_together(x.batch, go, go_ids, Session::StepKind::kDecode, go_logits);
    }
    std::vector<std::vector<int32_t>> out(N);
    for (size_t i = 0; i < N; ++i) {
        out[i] = drivers[i]->tokens();
        if (drivers[i]->finish_reason() == FinishReason::kEndToken) out[i].pop_back();  // the end token has no text
    }
    return out;
}

/// The sample of one answer: its prediction and score, and its cache's density and bytes.
RulerSample score_sample(const Tokenizer& tok, const TaskExample& ex, const std::vector<int32_t>& answer,
                         const KVCache& cache) {
    RulerSample r;
    r.task = ex.task;
    r.prediction = tok.decode(answer);
    r.answers = ex.answers;
    r.score = task_score(ex.task, r.prediction, ex.answers);
    const KVStats st = cache.stats();
    r.density = st.density;
    r.compression_ratio = st.compression_ratio;
    if (st.tokens > 0 && st.kv_bytes_full > 0) {
        r.kv_bytes_per_token = static_cast<double>(st.kv_bytes_final) / static_cast<double>(st.tokens);
        r.kv_bytes_vs_full_f16 = static_cast<double>(st.kv_bytes_final) / static_cast<double>(st.kv_bytes_full);
    }
    return r;
}

/// Runs one example under every policy in `policies` together; one sample per policy.
std::vector<RulerSample> run_example(const LlamaModel& model, const Tokenizer& tok,
                                     const std::vector<const Policy*>& policies, const RunExample& run,
                                     const RulerOptions& o, const std::shared_ptr<KVPool>& pool) {
    const size_t N = policies.size();
    const TaskExample& ex = run.ex;
    // Query-aware: one prompt. Query-agnostic: the context, compressed, then the question.
    std::vector<int32_t> ids = run.ids.context;
    std::vector<int32_t> question = run.ids.question;
    if (o.query_aware) {
        if (o.format == RulerFormat::kRaw)
            ids = tok.encode(ex.input, true, false);  // one text, as before the formats existed
        else
            ids.insert(ids.end(), question.begin(), question.end());
        question.clear();
    }
    const int64_t n_in = static_cast<int64_t>(ids.size() + question.size());
    // Room for the answer, and for KVzip's reconstruction prompt if the policy replays the context.
    const int64_t n_ctx = 2 * n_in + o.decode_preamble + ex.max_new_tokens + 64;
    ExampleRun x;
    prefill_all(model, tok, policies, ids, n_ctx, o, pool, x);
    // Decode-time variant: the model goes on from the context by itself before the question comes.
    std::vector<std::vector<int32_t>> step(N);
    for (int64_t t = 0; t < o.decode_preamble; ++t) {
        for (size_t i = 0; i < N; ++i) step[i] = {argmax_not_eog(x.logits[i], tok)};
        step_together(x.batch, x.all, step, Session::StepKind::kDecode, x.all_logits);
    }
    if (!question.empty())
        step_together(x.batch, x.all, std::vector<std::vector<int32_t>>(N, question), Session::StepKind::kExtend,
                      x.all_logits);
    const std::vector<std::vector<int32_t>> out = answer_all(tok, ex.max_new_tokens, x);
    std::vector<RulerSample> r;
    for (size_t i = 0; i < N; ++i) r.push_back(score_sample(tok, ex, out[i], *x.caches[i]));
    return r;
}

}  // namespace

std::vector<RulerResult> run_ruler_cells(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus,
                                         const std::vector<std::string>& specs, const RulerOptions& o,
                                         std::vector<RulerResult> done, const RulerSampleFn& on_sample) {
    require(!specs.empty(), "ruler: no policies to run");
    std::vector<Policy> policies;
    for (const auto& s : specs) policies.push_back(parse_policy(s));
    // Generate everything first, so bad lengths fail before any model work.
    const auto examples = make_examples(model.config(), tok, corpus, o);
    require(done.empty() || done.size() == specs.size(), "ruler: ", done.size(), " partial results for ", specs.size(),
            " policies");
    ruler_partial_name(o.shard, o.shards);  // checks the shard
    done.resize(specs.size());
    const size_t n_ex = examples.size();
    // have[i][e]: cell i has example e already (from any shard's partial file).
    std::vector<std::vector<char>> have(specs.size(), std::vector<char>(n_ex, 0));
    for (size_t i = 0; i < specs.size(); ++i) {
        RulerResult& r = done[i];
        std::vector<RulerSample> kept;
        for (auto& smp : r.samples) {
            require(smp.index >= 0 && smp.index < static_cast<int64_t>(n_ex), "ruler: a sample made for ", specs[i],
                    " is example ", smp.index, ", beyond the ", n_ex, " examples of this run");
            const auto& ex = examples[static_cast<size_t>(smp.index)];
            require(smp.task == ex.ex.task && smp.length == ex.length, "ruler: the samples already made for ", specs[i],
                    " are not this run's examples (sample ", smp.index, " is ", smp.task, "@", smp.length,
                    ", the run's is ", ex.ex.task, "@", ex.length, ")");
            if (have[i][static_cast<size_t>(smp.index)]) continue;  // made twice (two runs over one example): the first
            have[i][static_cast<size_t>(smp.index)] = 1;
            kept.push_back(std::move(smp));
        }
        r.samples = std::move(kept);
        r.policy = specs[i];
        r.query_aware = o.query_aware;
        r.decode_preamble = o.decode_preamble;
        r.format = o.format;
    }
    // This shard's examples: e ≡ shard (mod shards).
    std::vector<size_t> mine;
    int64_t mine_done = 0;
    for (size_t e = static_cast<size_t>(o.shard); e < n_ex; e += static_cast<size_t>(o.shards)) {
        mine.push_back(e);
        bool all = true;
        for (size_t i = 0; i < specs.size(); ++i) all = all && have[i][e];
        mine_done += all;
    }
    auto pool = make_kv_pool(model.config().head_dim, parse_kv_types(o.kv_type), parse_kv_rotate_mode(o.kv_rotate));
    std::string title = specs.size() == 1 ? "ruler " + specs[0] : "ruler " + std::to_string(specs.size()) + " policies";
    if (o.shards > 1) title += " (shard " + std::to_string(o.shard) + "/" + std::to_string(o.shards) + ")";
    Progress bar(title, static_cast<int64_t>(mine.size()), o.progress);
    bar.resume_from(mine_done);
    int64_t step = mine_done;
    for (const size_t e : mine) {
        std::vector<size_t> active;
        std::vector<const Policy*> ps;
        for (size_t i = 0; i < specs.size(); ++i)
            if (!have[i][e]) {
                active.push_back(i);
                ps.push_back(&policies[i]);
            }
        if (active.empty()) continue;
        std::vector<RulerSample> got = run_example(model, tok, ps, examples[e], o, pool);
        for (size_t a = 0; a < active.size(); ++a) {
            got[a].length = examples[e].length;
            got[a].index = static_cast<int64_t>(e);
            if (on_sample) on_sample(active[a], got[a]);
            have[active[a]][e] = 1;
            done[active[a]].samples.push_back(std::move(got[a]));
        }
        ++step;
        char extra[64];
        std::snprintf(extra, sizeof extra, "score %.1f", done[0].score());
        bar.update(step, extra);
    }
    for (auto& r : done)
        std::sort(r.samples.begin(), r.samples.end(),
                  [](const RulerSample& a, const RulerSample& b) { return a.index < b.index; });
    bar.finish();
    return done;
}

RulerResult run_ruler(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus,
                      const std::string& policy_spec, const RulerOptions& o) {
    return run_ruler_cells(model, tok, corpus, {policy_spec}, o)[0];
}

nlohmann::json RulerSample::to_json() const {
    nlohmann::json j = {{"task", task},
                        {"length", length},
                        {"index", index},
                        {"score", score},
                        {"density", density},
                        {"compression_ratio", compression_ratio},
                        {"prediction", prediction},
                        {"answers", answers}};
    if (kv_bytes_per_token) j["kv_bytes_per_token"] = *kv_bytes_per_token;
    if (kv_bytes_vs_full_f16) j["kv_bytes_vs_full_f16"] = *kv_bytes_vs_full_f16;
    return j;
}

RulerSample RulerSample::from_json(const nlohmann::json& j) {
    auto field = [&](const char* k) -> const nlohmann::json& {
        require(j.is_object() && j.contains(k), "a RULER sample has no '", k, "'");
        return j.at(k);
    };
    RulerSample s;
    try {
        s.task = field("task").get<std::string>();
        s.length = field("length").get<int64_t>();
        s.index = field("index").get<int64_t>();
        s.score = field("score").get<double>();
        s.density = field("density").get<double>();
        s.compression_ratio = field("compression_ratio").get<double>();
        s.prediction = field("prediction").get<std::string>();
        s.answers = field("answers").get<std::vector<std::string>>();
        if (j.contains("kv_bytes_per_token")) s.kv_bytes_per_token = j.at("kv_bytes_per_token").get<double>();
        if (j.contains("kv_bytes_vs_full_f16")) s.kv_bytes_vs_full_f16 = j.at("kv_bytes_vs_full_f16").get<double>();
    } catch (const nlohmann::json::exception& e) {
        throw Error(std::string("a RULER sample has a field of the wrong type: ") + e.what());
    }
    return s;
}

void export_ruler_examples(const std::string& path, const LlamaModel& model, const Tokenizer& tok,
                           const std::string& corpus, const RulerOptions& o) {
    const auto examples = make_examples(model.config(), tok, corpus, o);
    std::ostringstream out;
    const auto replace = nlohmann::json::error_handler_t::replace;
    for (size_t e = 0; e < examples.size(); ++e) {
        const RunExample& r = examples[e];
        const nlohmann::json j = {{"index", e},
                                  {"task", r.ex.task},
                                  {"length", r.length},
                                  {"seed", r.seed},
                                  {"context", r.ex.context()},
                                  {"question", r.ex.question_only()},
                                  {"answer_prefix", r.ex.answer_prefix},
                                  {"answers", r.ex.answers},
                                  {"max_new_tokens", r.ex.max_new_tokens},
                                  {"format", ruler_format_name(o.format)},
                                  {"context_ids", r.ids.context},
                                  {"question_ids", r.ids.question}};
        out << j.dump(-1, ' ', false, replace) << "\n";
    }
    write_text(path, out.str());
}

nlohmann::json ruler_cell_settings(const std::string& spec, const RulerOptions& o, const std::string& model_path,
                                   const std::string& corpus_path) {
    nlohmann::json js = {{"policy", spec},
                         {"model", model_path},
                         {"corpus", corpus_path},
                         {"query_aware", o.query_aware},
                         {"decode_preamble", o.decode_preamble},
                         {"format", ruler_format_name(o.format)},
                         {"tasks", o.tasks},
                         {"lengths", o.lengths},
                         {"samples", o.samples},
                         {"seed", o.seed},
                         {"kv_type", o.kv_type},
                         {"prefill_chunk", o.prefill_chunk}};
    if (kv_rotate_matters(parse_kv_rotate_mode(o.kv_rotate), parse_kv_types(o.kv_type))) js["kv_rotate"] = o.kv_rotate;
    if (o.compress_during_prefill) js["compress_during_prefill"] = true;
    return js;
}

namespace {
const char* kPartial = "partial.jsonl";
}

std::string ruler_partial_name(int shard, int shards) {
    require(shards >= 1 && shard >= 0 && shard < shards, "ruler: shard ", shard, " of ", shards,
            " is not one of 0 … shards − 1");
    return shards == 1 ? kPartial : "partial.shard" + std::to_string(shard) + "of" + std::to_string(shards) + ".jsonl";
}

namespace {
/// Whether a file name is a partial file: partial.jsonl or partial.shard<K>of<N>.jsonl.
bool is_partial_name(const std::string& name) {
    static const std::regex re(R"(partial(\.shard[0-9]+of[0-9]+)?\.jsonl)");
    return std::regex_match(name, re);
}

/// The samples of one partial file (see read_ruler_partial).
std::vector<RulerSample> read_partial_file(const std::filesystem::path& p, const nlohmann::json& settings) {
    namespace fs = std::filesystem;
    std::vector<RulerSample> out;
    std::string text;
    {
        std::ifstream f(p, std::ios::binary);
        text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    std::vector<std::string> lines;
    for (size_t b = 0; b < text.size();) {
        const size_t e = text.find('\n', b);
        // A last line without its newline is a write an interruption cut short, even if it parses.
        if (e == std::string::npos) break;
        if (e > b) lines.push_back(text.substr(b, e - b));
        b = e + 1;
    }
    bool damaged_tail = !text.empty() && text.back() != '\n';
    nlohmann::json head;
    if (!lines.empty()) {
        try {
            head = nlohmann::json::parse(lines[0]);
        } catch (const nlohmann::json::exception&) {
            require(lines.size() == 1, p.string(), ": the settings line is not JSON");
            lines.clear();  // only a cut-short settings line: nothing was made
            damaged_tail = true;
        }
    }
    // A file from before the prompt format was recorded was made raw.
    if (!lines.empty() && head.is_object() && !head.contains("format"))
        head["format"] = ruler_format_name(RulerFormat::kRaw);
    if (!lines.empty())
        for (const auto& item : settings.items())
            require(head.contains(item.key()) && head.at(item.key()) == item.value(), p.string(), " was made with ",
                    item.key(), " = ", head.contains(item.key()) ? head.at(item.key()).dump() : std::string("(none)"),
                    ", this run has ", item.value().dump(),
                    " (remove the file to start the cell over, or run with its settings)");
    for (size_t i = 1; i < lines.size(); ++i) {
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(lines[i]);
        } catch (const nlohmann::json::exception&) {
            require(i + 1 == lines.size(), p.string(), ": line ", i + 1, " is not JSON");
            lines.pop_back();  // the write an interruption cut short
            damaged_tail = true;
            break;
        }
        out.push_back(RulerSample::from_json(j));
    }
    if (damaged_tail) {  // drop the cut-short write from the file too, so the next sample follows a whole line
        std::string kept;
        for (const auto& l : lines) kept += l + "\n";
        write_text(p.string() + ".tmp", kept);
        fs::rename(p.string() + ".tmp", p);
    }
    return out;
}

/// The partial files of a cell directory, by name.
std::vector<std::filesystem::path> partial_files(const std::string& dir) {
    namespace fs = std::filesystem;
    std::vector<fs::path> files;
    if (!fs::is_directory(dir)) return files;
    for (const auto& entry : fs::directory_iterator(dir))
        if (entry.is_regular_file() && is_partial_name(entry.path().filename().string())) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    return files;
}
}  // namespace

std::vector<RulerSample> read_ruler_partial(const std::string& dir, const nlohmann::json& settings) {
    std::vector<RulerSample> out;
    for (const auto& f : partial_files(dir)) {
        auto got = read_partial_file(f, settings);
        out.insert(out.end(), std::make_move_iterator(got.begin()), std::make_move_iterator(got.end()));
    }
    // By example; an example in two files (two runs over it) once, from the first file.
    std::stable_sort(out.begin(), out.end(),
                     [](const RulerSample& a, const RulerSample& b) { return a.index < b.index; });
    out.erase(std::unique(out.begin(), out.end(),
                          [](const RulerSample& a, const RulerSample& b) { return a.index == b.index; }),
              out.end());
    return out;
}

void remove_ruler_partials(const std::string& dir) {
    for (const auto& f : partial_files(dir)) std::filesystem::remove(f);
}

void append_ruler_partial(const std::string& dir, const nlohmann::json& settings, const RulerSample& s, int shard,
                          int shards) {
    namespace fs = std::filesystem;
    fs::create_directories(dir);
    const fs::path p = fs::path(dir) / ruler_partial_name(shard, shards);
    const bool fresh = !fs::exists(p) || fs::file_size(p) == 0;
    std::ofstream f(p, std::ios::app);
    // A prediction cut off inside a multi-byte character is not UTF-8: such bytes are written as U+FFFD (the score
    // was taken from the real text).
    const auto replace = nlohmann::json::error_handler_t::replace;
    if (fresh) f << settings.dump(-1, ' ', false, replace) << "\n";
    f << s.to_json().dump(-1, ' ', false, replace) << "\n";
    f.flush();
    require(f.good(), "cannot write ", p.string());
}

namespace {
std::string csv_field(const std::string& s) {
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
}
}  // namespace

void write_ruler_cell(const std::string& dir, const RulerResult& r, const RulerOptions& o,
                      const std::string& model_path, const std::string& corpus_path) {
    namespace fs = std::filesystem;
    fs::create_directories(dir);
    std::ofstream csv(fs::path(dir) / "predictions.csv");
    csv << "task,length,index,score,density,compression_ratio,prediction,answers\n";
    for (const auto& s : r.samples) {
        std::string ans;
        for (size_t i = 0; i < s.answers.size(); ++i) ans += (i ? "|" : "") + s.answers[i];
        csv << s.task << "," << s.length << "," << s.index << "," << s.score << "," << s.density << ","
            << s.compression_ratio << "," << csv_field(s.prediction) << "," << csv_field(ans) << "\n";
    }
    std::ofstream y(fs::path(dir) / "config.yaml");
    y << "task: ruler\npolicy: \"" << r.policy << "\"\nmodel: \"" << model_path << "\"\ncorpus: \"" << corpus_path
      << "\"\nquery_aware: " << (o.query_aware ? "true" : "false") << "\ndecode_preamble: " << o.decode_preamble
      << "\nformat: " << ruler_format_name(o.format) << "\nsamples: " << o.samples << "\nseed: " << o.seed
      << "\nkv_type: " << o.kv_type << "\ntasks: [";
    for (size_t i = 0; i < o.tasks.size(); ++i) y << (i ? ", " : "") << o.tasks[i];
    y << "]\nlengths: [";
    for (size_t i = 0; i < o.lengths.size(); ++i) y << (i ? ", " : "") << o.lengths[i];
    y << "]\n";
    const auto settings = ruler_cell_settings(r.policy, o, model_path, corpus_path);
    if (settings.contains("kv_rotate")) y << "kv_rotate: " << settings["kv_rotate"].get<std::string>() << "\n";
    if (o.prefill_chunk > 0) y << "prefill_chunk: " << o.prefill_chunk << "\n";
    if (o.compress_during_prefill) y << "compress_during_prefill: true\n";
    y.close();
    const std::string m = (fs::path(dir) / "metrics.json").string();
    std::ofstream(m + ".tmp") << r.metrics().dump(2) << "\n";
    fs::rename(m + ".tmp", m);
}

}  // namespace kvsieve
