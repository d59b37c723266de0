#include "eval/fidelity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <sstream>

#include "cache/kv_cache.h"
#include "cache/kv_rotation.h"
#include "eval/plot.h"
#include "model/llama_model.h"
#include "model/sampler.h"
#include "policy/policy.h"
#include "session/prefill_plan.h"
#include "session/session.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/progress.h"

namespace kvsieve {

namespace {
/// softmax of logits [V] in double.
std::vector<double> softmax(const std::vector<float>& logits) {
    const float mx = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(logits.size());
    double z = 0;
    for (size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp(static_cast<double>(logits[i]) - mx);
    for (auto& x : p) x /= z;
    return p;
}

/// A policy spec for a plot key: model=PATH shortened to the last component of PATH.
std::string short_label(const std::string& spec) {
    std::string out = spec;
    for (size_t at = out.find("model="); at != std::string::npos; at = out.find("model=", at + 6)) {
        const size_t b = at + 6, e = out.find_first_of(",+>", b);
        std::string path = out.substr(b, e == std::string::npos ? std::string::npos : e - b);
        while (!path.empty() && path.back() == '/') path.pop_back();
        const std::string last = std::filesystem::path(path).filename().string();
        const std::string parent = std::filesystem::path(path).parent_path().filename().string();
        const std::string name = last == "scorer" || last == "gates" || last == "output" ? parent + "/" + last : last;
        out.replace(b, path.size() + (e != std::string::npos && out[b + path.size()] == '/' ? 1 : 0), name);
    }
    return out;
}

std::vector<float> prompt_logits(Session& s, const std::vector<int32_t>& prompt, int64_t chunk) {
    PrefillPlan plan;
    plan.chunk = planned_chunk(s.cache().policy(), chunk);
    std::vector<float> logits;
    s.prefill(prompt, plan, logits);
    return logits;
}
}  // namespace

nlohmann::json FidelityResult::to_json() const {
    nlohmann::json mem = nlohmann::json::array();
    for (const auto& [t, b] : memory) mem.push_back({t, b});
    return {{"policy", policy},
            {"greedy_prefix", prefix},
            {"token_accuracy", accuracy},
            {"kl", kl},
            {"mean_greedy_prefix", mean_prefix},
            {"mean_token_accuracy", mean_accuracy},
            {"mean_kl", mean_kl},
            {"accuracy_by_step", accuracy_by_step},
            {"compression_ratio", compression},
            {"kv_bytes_final", kv_bytes_final},
            {"kv_bytes_peak", kv_bytes_peak},
            {"kv_bytes_full", kv_bytes_full},
            {"scorer_state_bytes", state_bytes},
            {"decode_tok_s", decode_tok_s},
            {"memory", mem}};
}

FidelityResult FidelityResult::from_json(const nlohmann::json& j) {
    FidelityResult r;
    auto get = [&j](const char* key) -> const nlohmann::json& {
        require(j.is_object() && j.contains(key), "fidelity.json: a result has no '", key, "'");
        return j.at(key);
    };
    try {
        r.policy = get("policy").get<std::string>();
        r.prefix = get("greedy_prefix").get<std::vector<double>>();
        r.accuracy = get("token_accuracy").get<std::vector<double>>();
        r.kl = get("kl").get<std::vector<double>>();
        r.mean_prefix = get("mean_greedy_prefix").get<double>();
        r.mean_accuracy = get("mean_token_accuracy").get<double>();
        r.mean_kl = get("mean_kl").get<double>();
        r.accuracy_by_step = get("accuracy_by_step").get<std::vector<double>>();
        r.compression = get("compression_ratio").get<double>();
        r.kv_bytes_final = get("kv_bytes_final").get<uint64_t>();
        r.kv_bytes_peak = get("kv_bytes_peak").get<uint64_t>();
        r.kv_bytes_full = get("kv_bytes_full").get<uint64_t>();
        r.state_bytes = get("scorer_state_bytes").get<uint64_t>();
        r.decode_tok_s = get("decode_tok_s").get<double>();
        for (const auto& m : get("memory")) r.memory.emplace_back(m.at(0).get<int64_t>(), m.at(1).get<uint64_t>());
    } catch (const nlohmann::json::exception& e) {
        throw Error("fidelity.json: a result of policy '" + r.policy + "' is malformed: " + e.what());
    }
    require(r.prefix.size() == r.accuracy.size() && r.accuracy.size() == r.kl.size(), "fidelity.json: policy '",
            r.policy, "' has per-prompt lists of different lengths");
    return r;
}

namespace {
/// The settings a report records, as they appear in fidelity.json.
nlohmann::json report_settings(const std::string& model_name, const FidelityOptions& o) {
    nlohmann::json j = {
        {"model", model_name},  {"corpus", o.corpus},  {"prompt_tokens", o.prompt_tokens}, {"gen_tokens", o.gen_tokens},
        {"samples", o.samples}, {"kl_top", o.top},     {"prefill_chunk", o.prefill_chunk}, {"temperature", o.temp},
        {"seed", o.seed},       {"kv_type", o.kv_type}};
    if (kv_rotate_matters(parse_kv_rotate_mode(o.kv_rotate), parse_kv_types(o.kv_type))) j["kv_rotate"] = o.kv_rotate;
    return j;
}
}  // namespace

std::vector<FidelityResult> read_fidelity_results(const std::string& dir, const std::string& model_name,
                                                  const FidelityOptions& o) {
    const std::string path = (std::filesystem::path(dir) / "fidelity.json").string();
    if (!std::filesystem::exists(path)) return {};
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(read_whole_file(path, "fidelity report"));
    } catch (const nlohmann::json::exception& e) {
        throw Error(path + " is not valid JSON (" + e.what() + "): remove it or choose another --out");
    }
    require(j.is_object() && j.contains("results") && j["results"].is_array(), path,
            " has no 'results' list: remove it or choose another --out");
    const nlohmann::json settings = report_settings(model_name, o);  // named: items() of a temporary dangles
    for (const auto& [key, want] : settings.items()) {
        if (!j.contains(key)) continue;  // reports written before the key existed (the corpus)
        const nlohmann::json& have = j[key];
        const bool same = want.is_number() && have.is_number()
                              ? std::abs(want.get<double>() - have.get<double>()) < 1e-12
                              : want == have;
        require(same, path, " was made with ", key, " = ", have.dump(), ", this run has ", want.dump(),
                ": choose another --out, or remove the file to start afresh");
    }
    std::vector<FidelityResult> out;
    for (const auto& r : j["results"]) {
        out.push_back(FidelityResult::from_json(r));
        require(static_cast<int64_t>(out.back().prefix.size()) == o.samples, path, ": policy '", out.back().policy,
                "' has ", out.back().prefix.size(), " prompts, not ", o.samples);
    }
    return out;
}

std::vector<FidelityTeacher> fidelity_teachers(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus,
                                               const FidelityOptions& o) {
    const ModelConfig& c = model.config();
    require(o.prompt_tokens >= 2 && o.gen_tokens >= 1 && o.samples >= 1 && o.top >= 1,
            "fidelity: prompt ≥ 2, gen ≥ 1, samples ≥ 1 and top ≥ 1 tokens needed");
    require(o.prompt_tokens + o.gen_tokens <= c.n_ctx_train, "fidelity: prompt ", o.prompt_tokens, " + generation ",
            o.gen_tokens, " tokens exceed the model's context of ", c.n_ctx_train);
    const std::vector<int32_t> ids = tok.encode(corpus, false, false);
    const int64_t per = o.prompt_tokens - 1;
    require(static_cast<int64_t>(ids.size()) >= per * o.samples, "fidelity: the corpus has ", ids.size(),
            " tokens, fewer than ", o.samples, " prompts of ", per);
    auto pool = make_kv_pool(c.head_dim, parse_kv_types(o.kv_type), parse_kv_rotate_mode(o.kv_rotate));
    std::vector<FidelityTeacher> out;
    require(o.temp >= 0, "fidelity: temperature must be ≥ 0");
    Progress bar("teacher (full cache)", o.samples * o.gen_tokens, o.progress);
    for (int64_t s = 0; s < o.samples; ++s) {
        FidelityTeacher t;
        std::mt19937_64 rng(o.seed + static_cast<uint64_t>(s));
        t.prompt.push_back(tok.vocab().bos >= 0 ? tok.vocab().bos : ids[0]);
        t.prompt.insert(t.prompt.end(), ids.begin() + s * per, ids.begin() + (s + 1) * per);
        KVCache cache(c, o.prompt_tokens + o.gen_tokens + 1, parse_policy("full"), pool);
        Session session(model, tok, cache);
        std::vector<float> logits = prompt_logits(session, t.prompt, o.prefill_chunk);
        for (int64_t g = 0; g < o.gen_tokens; ++g) {
            const std::vector<double> p = softmax(logits);
            std::vector<int32_t> idx(p.size());
            std::iota(idx.begin(), idx.end(), 0);
            const int64_t m = std::min<int64_t>(o.top, static_cast<int64_t>(p.size()));
            std::partial_sort(idx.begin(), idx.begin() + m, idx.end(),
                              [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
            std::vector<std::pair<int32_t, float>> top;
            double kept = 0;
            for (int64_t i = 0; i < m; ++i) top.emplace_back(idx[i], static_cast<float>(p[idx[i]])), kept += p[idx[i]];
            const int32_t best = argmax(logits.data(), static_cast<int>(logits.size()));
            int32_t next = best;
            if (o.temp > 0) {  // sample from p^(1/T)
                std::vector<double> w(p.size());
                for (size_t i = 0; i < p.size(); ++i)
                    w[i] = std::exp((static_cast<double>(logits[i]) - logits[best]) / o.temp);
                next = static_cast<int32_t>(std::discrete_distribution<int32_t>(w.begin(), w.end())(rng));
            }
            t.best.push_back(best);
            t.tokens.push_back(next);
            t.top.push_back(std::move(top));
            t.rest.push_back(static_cast<float>(std::max(0.0, 1.0 - kept)));
            if (g + 1 < o.gen_tokens) session.decode(next, logits);
            bar.update(s * o.gen_tokens + g + 1);
        }
        out.push_back(std::move(t));
    }
    bar.finish();
    return out;
}

FidelityResult evaluate_fidelity(const LlamaModel& model, const Tokenizer& tok,
                                 const std::vector<FidelityTeacher>& teachers, const std::string& policy_spec,
                                 const FidelityOptions& o) {
    const ModelConfig& c = model.config();
    const Policy pol = parse_policy(policy_spec);
    auto pool = make_kv_pool(c.head_dim, parse_kv_types(o.kv_type), parse_kv_rotate_mode(o.kv_rotate));
    FidelityResult r;
    r.policy = policy_spec;
    const int64_t every = std::max<int64_t>(o.memory_every, 1);
    std::vector<double> bin_hits, bin_n;
    int64_t total_steps = 0;
    double decode_s = 0;
    Progress bar(policy_spec, static_cast<int64_t>(teachers.size()) * o.gen_tokens, o.progress);
    for (size_t s = 0; s < teachers.size(); ++s) {
        const FidelityTeacher& t = teachers[s];
        const int64_t G = static_cast<int64_t>(t.tokens.size());
        KVCache cache(c, static_cast<int64_t>(t.prompt.size()) + G + 1, pol, pool);
        Session session(model, tok, cache);
        std::vector<float> logits = prompt_logits(session, t.prompt, o.prefill_chunk);
        int64_t prefix = -1, hits = 0;
        double kl = 0;
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t g = 0; g < G; ++g) {
            const bool hit = argmax(logits.data(), static_cast<int>(logits.size())) == t.best[g];
            hits += hit;
            if (!hit && prefix < 0) prefix = g;
            const size_t bin = static_cast<size_t>(g / every);
            if (bin_hits.size() <= bin) bin_hits.resize(bin + 1, 0.0), bin_n.resize(bin + 1, 0.0);
            bin_hits[bin] += hit;
            bin_n[bin] += 1;
            // KL over the teacher's top tokens and one bucket for the rest.
            const std::vector<double> q = softmax(logits);
            double step = 0, q_top = 0;
            for (const auto& [id, pt] : t.top[g]) {
                q_top += q[id];
                if (pt > 0) step += pt * std::log(pt / std::max(q[id], 1e-300));
            }
            const double pr = t.rest[g], qr = std::max(1.0 - q_top, 1e-300);
            if (pr > 0) step += pr * std::log(pr / qr);
            kl += std::max(step, 0.0);
            if (s == 0 && (g % every == 0 || g + 1 == G))
                r.memory.emplace_back(session.n_tokens(), cache.stats().kv_bytes_final);
            if (g + 1 < G) session.decode(t.tokens[g], logits);
            bar.update(static_cast<int64_t>(s) * o.gen_tokens + g + 1);
        }
        decode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        total_steps += G;
        r.prefix.push_back(static_cast<double>(prefix < 0 ? G : prefix));
        r.accuracy.push_back(static_cast<double>(hits) / G);
        r.kl.push_back(kl / G);
        const KVStats st = cache.stats();
        r.compression += st.compression_ratio / static_cast<double>(teachers.size());
        if (s == 0) {
            r.kv_bytes_final = st.kv_bytes_final;
            r.kv_bytes_peak = st.kv_bytes_peak;
            r.kv_bytes_full = st.kv_bytes_full;
            r.state_bytes = st.scorer_state_bytes;
        }
    }
    bar.finish();
    const double n = static_cast<double>(teachers.size());
    for (size_t i = 0; i < teachers.size(); ++i)
        r.mean_prefix += r.prefix[i] / n, r.mean_accuracy += r.accuracy[i] / n, r.mean_kl += r.kl[i] / n;
    for (size_t b = 0; b < bin_hits.size(); ++b) r.accuracy_by_step.push_back(bin_hits[b] / bin_n[b]);
    r.decode_tok_s = decode_s > 0 ? static_cast<double>(total_steps) / decode_s : 0.0;
    return r;
}

void write_fidelity_report(const std::string& dir, const std::string& model_name, const FidelityOptions& o,
                           const std::vector<FidelityResult>& results) {
    namespace fs = std::filesystem;
    fs::create_directories(dir);
    nlohmann::json j = report_settings(model_name, o);
    j["results"] = nlohmann::json::array();
    for (const auto& r : results) j["results"].push_back(r.to_json());
    write_text((fs::path(dir) / "fidelity.json").string(), j.dump(2) + "\n");

    std::ostringstream md;
    char buf[1024];
    std::string temp_text = "greedy";
    if (o.temp > 0) {
        std::snprintf(buf, sizeof buf, "sampled at temperature %g, seed %llu", o.temp,
                      static_cast<unsigned long long>(o.seed));
        temp_text = buf;
    }
    std::snprintf(buf, sizeof buf,
                  "# %s: decode-heavy fidelity\n\n%lld prompts of %lld tokens, %lld generated tokens each (the full "
                  "cache's continuation, %s, fed back to every policy). Greedy prefix: tokens until the policy's most "
                  "likely token first differs from the full cache's; accuracy: their agreement over all steps (full "
                  "cache = 1); KL: nats per step over the full cache's top %lld tokens and one rest bucket. KV bytes "
                  "at the end of the first prompt's generation.\n\n",
                  model_name.c_str(), static_cast<long long>(o.samples), static_cast<long long>(o.prompt_tokens),
                  static_cast<long long>(o.gen_tokens), temp_text.c_str(), static_cast<long long>(o.top));
    md << buf
       << "| policy | greedy prefix | token accuracy | KL (nats/step) | compression ratio | KV MiB (final / peak / "
          "full) | scorer state MiB | decode tok/s |\n"
       << "|---|---:|---:|---:|---:|---|---:|---:|\n";
    for (const auto& r : results) {
        std::snprintf(buf, sizeof buf, "| `%s` | %.0f | %.3f | %.4f | %.3f | %.2f / %.2f / %.2f | %.2f | %.1f |\n",
                      r.policy.c_str(), r.mean_prefix, r.mean_accuracy, r.mean_kl, r.compression,
                      r.kv_bytes_final / 1048576.0, r.kv_bytes_peak / 1048576.0, r.kv_bytes_full / 1048576.0,
                      r.state_bytes / 1048576.0, r.decode_tok_s);
        md << buf;
    }
    md << "\n![KV memory vs generated tokens](fidelity_memory.png)\n\n![token accuracy along the "
          "generation](fidelity_accuracy.png)\n";
    write_text((fs::path(dir) / "fidelity.md").string(), md.str());

    // Plots: one .dat block per policy.
    std::ostringstream mem, acc;
    for (const auto& r : results) {
        mem << "# " << r.policy << "\n";
        for (const auto& [t, b] : r.memory) mem << t << " " << b / 1048576.0 << "\n";
        mem << "\n\n";
        acc << "# " << r.policy << "\n";
        for (size_t b = 0; b < r.accuracy_by_step.size(); ++b)
            acc << (b + 0.5) * o.memory_every << " " << r.accuracy_by_step[b] << "\n";
        acc << "\n\n";
    }
    write_text((fs::path(dir) / "fidelity_memory.dat").string(), mem.str());
    write_text((fs::path(dir) / "fidelity_accuracy.dat").string(), acc.str());
    auto script = [&](const std::string& stem, const std::string& ylabel, const std::string& title) {
        std::ostringstream gp;
        gp << "set terminal pngcairo size 900,640 noenhanced\nset output '" << stem << ".png'\nset title '" << title
           << "'\nset xlabel 'tokens in the sequence'\nset ylabel '" << ylabel << "'\nset key below\nset grid\nplot ";
        for (size_t i = 0; i < results.size(); ++i)
            gp << (i ? ", " : "") << "'" << stem << ".dat' index " << i << " with linespoints" << series_style(i)
               << " title '" << short_label(results[i].policy) << "'";
        gp << "\n";
        return gp.str();
    };
    render_gnuplot(dir, "fidelity_memory",
                   script("fidelity_memory", "KV cache (MiB)", model_name + ": KV memory during generation"));
    std::string acc_gp = script("fidelity_accuracy", "greedy agreement with the full cache",
                                model_name + ": token accuracy along the generation");
    acc_gp.replace(acc_gp.find("tokens in the sequence"), 22, "generated tokens");
    render_gnuplot(dir, "fidelity_accuracy", acc_gp);
}

}  // namespace kvsieve
