#include "eval/ruler.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "cache/kv_cache.h"
#include "eval/tasks.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "session/session.h"
#include "text/tokenizer.h"
#include "util/error.h"
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
    double dens = 0, comp = 0;
    for (const auto& x : samples) {
        auto& p = per[x.task + "@" + std::to_string(x.length)];
        p.first += x.score;
        ++p.second;
        dens += x.density;
        comp += x.compression_ratio;
    }
    nlohmann::json j;
    j["policy"] = policy;
    j["query_aware"] = query_aware;
    j["decode_preamble"] = decode_preamble;
    j["score"] = score();
    j["density"] = samples.empty() ? 1.0 : dens / samples.size();
    j["compression_ratio"] = samples.empty() ? 0.0 : comp / samples.size();
    j["samples"] = samples.size();
    for (const auto& [k, v] : per) j["tasks"][k] = 100.0 * v.first / v.second;
    return j;
}

RulerResult run_ruler(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus,
                      const std::string& policy_spec, const RulerOptions& o) {
    const ModelConfig& c = model.config();
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
    const Policy policy = parse_policy(policy_spec);
    // Generate everything first, so bad lengths fail before any model work.
    std::vector<std::pair<TaskExample, int64_t>> examples;
    for (const auto& t : tasks)
        for (int64_t len : o.lengths) {
            for (int64_t i = 0; i < o.samples; ++i) {
                TaskExample ex = make_task_example(t, len, tok, corpus, o.seed + static_cast<uint64_t>(i));
                const int64_t need = ex.input_tokens + 1 + o.decode_preamble + ex.max_new_tokens;
                require(need <= c.n_ctx_train, "task ", t, " at length ", len, " needs ", need,
                        " positions (input, BOS, decode preamble and answer), beyond the model's context of ",
                        c.n_ctx_train);
                examples.emplace_back(std::move(ex), len);
            }
        }
    auto pool = std::make_shared<KVPool>(c.head_dim, parse_kv_type(o.kv_type));
    RulerResult r;
    r.policy = policy_spec;
    r.query_aware = o.query_aware;
    r.decode_preamble = o.decode_preamble;
    Progress bar("ruler " + policy_spec, static_cast<int64_t>(examples.size()), o.progress);
    for (size_t e = 0; e < examples.size(); ++e) {
        const TaskExample& ex = examples[e].first;
        // Query-aware: one prompt. Query-agnostic: the context (BOS first), compressed, then the question.
        const std::vector<int32_t> ids = tok.encode(o.query_aware ? ex.input : ex.context(), true, false);
        const std::vector<int32_t> question = o.query_aware ? std::vector<int32_t>{} : tok.encode(ex.question, false, false);
        const int64_t n_in = static_cast<int64_t>(ids.size() + question.size());
        // Room for the answer, and for KVzip's reconstruction prompt if the policy replays the context.
        KVCache cache(c, 2 * n_in + o.decode_preamble + ex.max_new_tokens + 64, policy, pool);
        std::vector<float> logits;
        PrefillPlan plan;
        plan.chunk = o.prefill_chunk;
        Session session(model, tok, cache);
        session.prefill(ids, plan, logits);
        // Decode-time variant: the model goes on from the context by itself before the question comes.
        for (int64_t t = 0; t < o.decode_preamble; ++t) {
            int32_t next = -1;
            for (int32_t v = 0; v < c.n_vocab; ++v)
                if (!tok.is_eog(v) && (next < 0 || logits[v] > logits[next])) next = v;
            session.decode(next, logits);
        }
        if (!question.empty()) {
            PrefillPlan q;
            q.compress = false;
            session.prefill(question, q, logits);
        }
        std::vector<int32_t> out;
        for (int64_t t = 0; t < ex.max_new_tokens; ++t) {
            const int32_t next = argmax(logits.data(), c.n_vocab);
            if (tok.is_eog(next)) break;
            out.push_back(next);
            if (t + 1 < ex.max_new_tokens) session.decode(next, logits);
        }
        RulerSample s;
        s.task = ex.task;
        s.length = examples[e].second;
        s.index = static_cast<int64_t>(e);
        s.prediction = tok.decode(out);
        s.answers = ex.answers;
        s.score = task_score(ex.task, s.prediction, ex.answers);
        const KVStats st = cache.stats();
        s.density = st.density;
        s.compression_ratio = st.compression_ratio;
        r.samples.push_back(std::move(s));
        char extra[48];
        std::snprintf(extra, sizeof extra, "score %.1f", r.score());
        bar.update(static_cast<int64_t>(e + 1), extra);
    }
    bar.finish();
    return r;
}

namespace {
std::string csv_field(const std::string& s) {
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
}
}  // namespace

void write_ruler_cell(const std::string& dir, const RulerResult& r, const RulerOptions& o, const std::string& model_path,
                      const std::string& corpus_path) {
    namespace fs = std::filesystem;
    fs::create_directories(dir);
    std::ofstream csv(fs::path(dir) / "predictions.csv");
    csv << "task,length,index,score,density,compression_ratio,prediction,answers\n";
    for (const auto& s : r.samples) {
        std::string ans;
        for (size_t i = 0; i < s.answers.size(); ++i) ans += (i ? "|" : "") + s.answers[i];
        csv << s.task << "," << s.length << "," << s.index << "," << s.score << "," << s.density << "," << s.compression_ratio
            << "," << csv_field(s.prediction) << "," << csv_field(ans) << "\n";
    }
    std::ofstream y(fs::path(dir) / "config.yaml");
    y << "task: ruler\npolicy: \"" << r.policy << "\"\nmodel: \"" << model_path << "\"\ncorpus: \"" << corpus_path
      << "\"\nquery_aware: " << (o.query_aware ? "true" : "false") << "\ndecode_preamble: " << o.decode_preamble
      << "\nsamples: " << o.samples << "\nseed: " << o.seed << "\nkv_type: " << o.kv_type << "\ntasks: [";
    for (size_t i = 0; i < o.tasks.size(); ++i) y << (i ? ", " : "") << o.tasks[i];
    y << "]\nlengths: [";
    for (size_t i = 0; i < o.lengths.size(); ++i) y << (i ? ", " : "") << o.lengths[i];
    y << "]\n";
    const std::string m = (fs::path(dir) / "metrics.json").string();
    std::ofstream(m + ".tmp") << r.metrics().dump(2) << "\n";
    fs::rename(m + ".tmp", m);
}

}  // namespace kvsieve
