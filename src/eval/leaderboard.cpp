#include "eval/leaderboard.h"
#include "eval/plot.h"
#include "policy/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/file.h"

namespace kvsieve {

namespace fs = std::filesystem;

namespace {

/// `key: value` lines of a cell's config.yaml (values unquoted).
std::map<std::string, std::string> read_yaml(const fs::path& p) {
    std::map<std::string, std::string> kv;
    std::istringstream in(read_whole_file(p.string(), "cell config"));
    for (std::string line; std::getline(in, line);) {
        const size_t c = line.find(": ");
        if (c == std::string::npos) continue;
        std::string v = line.substr(c + 2);
        if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
        kv[line.substr(0, c)] = v;
    }
    return kv;
}

/// Records of a CSV file whose fields may be quoted ("" inside quotes is a quote; quoted fields may hold commas
/// and newlines, as predictions do).
std::vector<std::vector<std::string>> read_csv(const fs::path& p) {
    const std::string text = read_whole_file(p.string(), "cell predictions");
    std::vector<std::vector<std::string>> rows(1);
    std::string field;
    bool quoted = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (quoted) {
            if (c == '"' && i + 1 < text.size() && text[i + 1] == '"')
                field += '"', ++i;
            else if (c == '"')
                quoted = false;
            else
                field += c;
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            rows.back().push_back(std::move(field));
            field.clear();
        } else if (c == '\n') {
            rows.back().push_back(std::move(field));
            field.clear();
            rows.emplace_back();
        } else if (c != '\r') {
            field += c;
        }
    }
    if (!field.empty() || !rows.back().empty()) rows.back().push_back(field);
    if (rows.back().empty()) rows.pop_back();
    return rows;
}

/// Per-sample values of one CSV column, keyed by the columns that name a sample (RULER: task, length, index; NLL:
/// sample), so that two cells of a sweep can be paired example by example. Throws Error naming the file and record
/// of a missing or non-numeric field, or a sample that appears twice.
/// Records whose "task" field is in `skip_tasks` are left out (the file must then have a task column). `rows` is
/// the file read by read_csv, so that several columns of one file are taken from one reading.
std::vector<std::pair<std::string, double>> column_values(const fs::path& csv,
                                                          const std::vector<std::vector<std::string>>& rows,
                                                          const std::string& column,
                                                          const std::vector<std::string>& key_columns,
                                                          const std::vector<std::string>& skip_tasks = {},
                                                          std::set<std::string>* tasks_seen = nullptr) {
    require(!rows.empty(), csv.string(), " has no header");
    auto index_of = [&](const std::string& name) {
        const auto it = std::find(rows[0].begin(), rows[0].end(), name);
        require(it != rows[0].end(), csv.string(), " has no column '", name, "'");
        return static_cast<size_t>(it - rows[0].begin());
    };
    const size_t at = index_of(column);
    const size_t task_at = skip_tasks.empty() && !tasks_seen ? 0 : index_of("task");
    std::vector<size_t> keys;
    for (const auto& k : key_columns) keys.push_back(index_of(k));
    std::vector<std::pair<std::string, double>> v;
    std::map<std::string, size_t> seen;
    for (size_t r = 1; r < rows.size(); ++r) {
        if (!skip_tasks.empty() || tasks_seen) {
            require(task_at < rows[r].size(), csv.string(), ": record ", r, " has no 'task' field");
            if (tasks_seen) tasks_seen->insert(rows[r][task_at]);
            if (std::find(skip_tasks.begin(), skip_tasks.end(), rows[r][task_at]) != skip_tasks.end()) continue;
        }
        require(at < rows[r].size(), csv.string(), ": record ", r, " has no '", column, "' field");
        char* end = nullptr;
        const double x = std::strtod(rows[r][at].c_str(), &end);
        require(end && *end == '\0' && !rows[r][at].empty(), csv.string(), ": record ", r, " has '", rows[r][at],
                "' for ", column, ", not a number");
        std::string key;
        for (size_t k : keys) {
            require(k < rows[r].size(), csv.string(), ": record ", r, " has no '", rows[0][k], "' field");
            key += rows[r][k] + '\x1f';
        }
        const auto [first, fresh] = seen.emplace(key, r);
        require(fresh, csv.string(), ": record ", r, " repeats the sample of record ", first->second);
        v.emplace_back(std::move(key), x);
    }
    return v;
}

/// Mean and 95% half-width (1.96 · s / √n, s the sample standard deviation; 0 for fewer than two values).
std::pair<double, double> mean_ci95(const std::vector<double>& v) {
    if (v.size() < 2) return {v.empty() ? 0.0 : v[0], 0.0};
    double m = 0;
    for (double x : v) m += x / static_cast<double>(v.size());
    double ss = 0;
    for (double x : v) ss += (x - m) * (x - m);
    return {m, 1.96 * std::sqrt(ss / static_cast<double>(v.size() - 1)) / std::sqrt(static_cast<double>(v.size()))};
}

/// A spec's method: the spec without the quantity a sweep varies (ratio=, budget=, capacity=, tau=), so that one
/// method's cells form one curve: the policy's name, the last path component of its model= (two learned surrogates of
/// one policy are two methods) and its other parameters in key order, e.g. "kvzap smollm2-135m-mlp (rule=threshold,
/// sinks=4)" or "knorm (sinks=4, window=128)". A composed spec's later parts ("+quest:…", ">kvpop:…") are kept as written.
std::string method_of(const std::string& spec) {
    const size_t colon = spec.find(':');
    const size_t end = std::min(spec.size(), spec.find_first_of("+>@", colon == std::string::npos ? 0 : colon));
    std::string m = spec.substr(0, std::min(colon, end));
    std::string params;
    if (colon != std::string::npos && colon < end)
        for (const auto& [key, value] : parse_spec_params(m, spec.substr(colon + 1, end - colon - 1))) {
            if (key == "model") {
                std::string path = value;
                while (!path.empty() && path.back() == '/') path.pop_back();
                m += " " + path.substr(path.find_last_of('/') + 1);
            } else if (key != "ratio" && key != "budget" && key != "capacity" && key != "tau") {
                params += (params.empty() ? "" : ", ") + key + "=" + value;
            }
        }
    if (!params.empty()) m += " (" + params + ")";
    if (end < spec.size()) m += " " + spec.substr(end);
    return m;
}

}  // namespace

std::vector<LeaderboardRow> collect_leaderboard(const std::vector<std::string>& dirs,
                                                const std::vector<std::string>& exclude_tasks) {
    std::vector<LeaderboardRow> rows;
    std::set<std::string> ruler_tasks;  // every task of every RULER cell, to refuse an exclusion that matches none
    for (const auto& d : dirs) {
        require(fs::is_directory(d), "leaderboard: '", d, "' is not a directory");
        std::vector<LeaderboardRow> sweep;
        std::vector<std::vector<std::pair<std::string, double>>> per_sample;  // per row, keyed values
        for (const auto& e : fs::directory_iterator(d)) {
            if (!e.is_directory() || !fs::exists(e.path() / "metrics.json")) continue;
            const auto cfg = read_yaml(e.path() / "config.yaml");
            const auto m = nlohmann::json::parse(read_whole_file((e.path() / "metrics.json").string(), "cell metrics"),
                                                 nullptr, false);
            require(!m.is_discarded(), "leaderboard: ", (e.path() / "metrics.json").string(), " is not valid JSON");
            LeaderboardRow r;
            r.sweep = fs::path(d).lexically_normal().filename().string();
            if (r.sweep.empty()) r.sweep = fs::path(d).lexically_normal().parent_path().filename().string();  // "dir/"
            r.task = cfg.count("task") ? cfg.at("task") : "ruler";
            r.model = fs::path(cfg.count("model") ? cfg.at("model") : "?").filename().string();
            r.policy = m.value("policy", cfg.count("policy") ? cfg.at("policy") : e.path().filename().string());
            r.method = method_of(r.policy);
            r.compression = m.value("compression_ratio", 0.0);
            r.density = m.value("density", 1.0);
            r.query_aware = m.value("query_aware", true);
            r.format = m.value("format", std::string("raw"));
            const bool ruler = r.task == "ruler";
            const fs::path csv = e.path() / "predictions.csv";
            const auto records = read_csv(csv);
            const std::vector<std::string> keys =
                ruler ? std::vector<std::string>{"task", "length", "index"} : std::vector<std::string>{"sample"};
            const std::vector<std::string> skip = ruler ? exclude_tasks : std::vector<std::string>{};
            auto keyed =
                column_values(csv, records, ruler ? "score" : "nll", keys, skip, ruler ? &ruler_tasks : nullptr);
            std::vector<double> values;
            for (const auto& kv : keyed) values.push_back(kv.second);
            const auto [mean, ci] = mean_ci95(values);
            r.value = ruler ? 100 * mean : m.value("nll", mean);
            r.ci95 = ruler ? 100 * ci : ci;
            r.samples = m.value("samples", int64_t(0));
            if (!skip.empty()) {  // the cell's means over the samples kept
                auto mean_of = [&](const char* column) {
                    std::vector<double> v;
                    for (const auto& kv : column_values(csv, records, column, keys, skip)) v.push_back(kv.second);
                    return mean_ci95(v).first;
                };
                r.compression = mean_of("compression_ratio");
                r.density = mean_of("density");
                r.samples = static_cast<int64_t>(values.size());
            }
            sweep.push_back(r);
            per_sample.push_back(std::move(keyed));
        }
        require(!sweep.empty(), "leaderboard: '", d, "' holds no finished cells (<cell>/metrics.json)");
        const auto full =
            std::find_if(sweep.begin(), sweep.end(), [](const LeaderboardRow& r) { return r.policy == "full"; });
        require(full != sweep.end(), "leaderboard: '", d, "' has no full-cache cell to compare with");
        const auto& full_samples = per_sample[static_cast<size_t>(full - sweep.begin())];
        std::map<std::string, double> full_by_key(full_samples.begin(), full_samples.end());
        for (size_t i = 0; i < sweep.size(); ++i) {
            auto& r = sweep[i];
            const bool ruler = r.task == "ruler";
            r.full = full->value;
            r.delta = ruler ? r.value - r.full : 100 * (r.value - r.full) / r.full;
            // Paired interval: the same examples in both cells, differences d_i = x_i − full_i.
            std::vector<double> d;
            for (const auto& [key, x] : per_sample[i]) {
                const auto f = full_by_key.find(key);
                if (f == full_by_key.end()) break;
                d.push_back(x - f->second);
            }
            const double unit = ruler ? 100.0 : 100.0 / r.full;
            r.delta_ci95 = d.size() == per_sample[i].size() && !d.empty() ? unit * mean_ci95(d).second
                                                                          : std::numeric_limits<double>::quiet_NaN();
        }
        rows.insert(rows.end(), sweep.begin(), sweep.end());
    }
    for (const auto& t : exclude_tasks)
        require(ruler_tasks.count(t), "leaderboard: no RULER cell has the task '", t, "' to leave out");
    return rows;
}

namespace {
using LeaderboardGroups = std::map<std::pair<std::string, std::string>, std::vector<LeaderboardRow>>;  // (model, task)

/// The rows by (model, task). RULER cells are grouped by protocol and prompt format too: scores of raw and
/// chat-format prompts are not comparable, so each format gets tables (and plots) of its own.
LeaderboardGroups group_rows(const std::vector<LeaderboardRow>& rows) {
    LeaderboardGroups groups;
    for (const auto& r : rows)
        groups[{r.model,
                r.task + (r.task == "ruler" ? std::string(r.query_aware ? ", query-aware" : ", query-agnostic") + ", " +
                                                  r.format + " prompts"
                                            : "")}]
            .push_back(r);
    return groups;
}

/// Full rows first (equal ones together), then by method and compression; the full cache once where sweeps of the
/// same model and task each carry the same one.
void order_group(std::vector<LeaderboardRow>& g) {
    std::sort(g.begin(), g.end(), [](const LeaderboardRow& a, const LeaderboardRow& b) {
        if (a.policy == "full" || b.policy == "full")
            return a.policy == "full" && b.policy == "full" ? a.value < b.value : a.policy == "full";
        return a.method != b.method ? a.method < b.method : a.compression < b.compression;
    });
    g.erase(std::unique(g.begin(), g.end(),
                        [](const LeaderboardRow& a, const LeaderboardRow& b) {
                            return a.policy == "full" && b.policy == "full" && a.value == b.value && a.ci95 == b.ci95 &&
                                   a.samples == b.samples;
                        }),
            g.end());
}

/// The group's table. Sweeps whose full caches differ (made on other machines: the float rounding can change an
/// answer) each name theirs; every Δ is against its own sweep's.
void write_group_table(std::ostringstream& md, const std::vector<LeaderboardRow>& g, bool ruler, bool several_full) {
    md << "| method | spec | compression ratio | density | " << (ruler ? "score (0–100) ± 95% CI" : "NLL ± 95% CI")
       << " | Δ vs full ± 95% CI (paired) |\n|---|---|---|---|---|---|\n";
    char buf[512];
    for (const auto& r : g) {
        char interval[64] = "";
        if (r.policy != "full")
            std::snprintf(interval, sizeof interval, std::isnan(r.delta_ci95) ? " (unpaired)" : " ± %.2f%s",
                          r.delta_ci95, ruler ? "" : "%");
        const std::string method = r.policy == "full" && several_full ? "full (" + r.sweep + ")" : r.method;
        std::snprintf(buf, sizeof buf, "| %s | `%s` | %.3f | %.3f | %.2f ± %.2f | %+.2f%s%s |\n", method.c_str(),
                      r.policy.c_str(), r.compression, r.density, r.value, r.ci95, r.delta, ruler ? "" : "%", interval);
        md << buf;
    }
}

/// RULER's lines under the table: the highest compression at which a method keeps ≥ 95% of the full score, by the
/// point estimate and by the lower end of the paired interval on Δ (full + Δ − half-width ≥ 0.95 · full), and the
/// tasks left out.
void write_keeps_lines(std::ostringstream& md, const std::vector<LeaderboardRow>& g, const std::vector<double>& fulls,
                       const std::vector<std::string>& exclude_tasks) {
    auto line = [&](const std::string& what, auto keeps) {
        std::map<std::string, double> best;
        for (const auto& r : g)
            if (r.policy != "full" && keeps(r)) best[r.method] = std::max(best[r.method], r.compression);
        md << what;
        bool first = true;
        for (const auto& r : g) {
            if (r.policy == "full" || best.count(r.method) == 0) continue;
            char item[320];
            std::snprintf(item, sizeof item, "%s%s %.2f", first ? "" : ", ", r.method.c_str(), best[r.method]);
            md << item;
            best.erase(r.method);
            first = false;
        }
        md << (first ? "none" : "") << ".\n";
    };
    std::string fs_text;
    for (double f : fulls) {
        char one[32];
        std::snprintf(one, sizeof one, "%s%.2f", fs_text.empty() ? "" : " / ", f);
        fs_text += one;
    }
    line("\nKeeps ≥ 95% of the full score (" + fs_text +
             (fulls.size() > 1 ? ", each method against its own sweep's" : "") + ") up to compression ratio: ",
         [](const LeaderboardRow& r) { return r.value >= 0.95 * r.full; });
    line("\nKeeps ≥ 95% of it at the lower end of the paired 95% interval up to compression ratio: ",
         [](const LeaderboardRow& r) {
             return !std::isnan(r.delta_ci95) && r.full + r.delta - r.delta_ci95 >= 0.95 * r.full;
         });
    if (exclude_tasks.empty()) return;
    md << "\nLeft out of every value (scores, intervals, compression, density): ";
    for (size_t i = 0; i < exclude_tasks.size(); ++i) md << (i ? ", " : "") << exclude_tasks[i];
    md << ".\n";
}

/// The group's plot: one curve per method, through its own sweep's full-cache point (sweeps whose full caches
/// differ each start their methods at theirs); `stem`.dat, .gp and .png in out_dir.
void plot_group(const std::string& out_dir, const std::pair<std::string, std::string>& key,
                const std::vector<LeaderboardRow>& g, bool ruler) {
    const bool chat = ruler && key.second.find(", chat prompts") != std::string::npos;
    const std::string stem = "score_vs_compression_" + key.first + (ruler ? (chat ? "_chat" : "") : "_nll");
    std::ostringstream dat;
    std::vector<std::string> methods;
    for (const auto& r : g)
        if (r.policy != "full" && std::find(methods.begin(), methods.end(), r.method) == methods.end())
            methods.push_back(r.method);
    for (const auto& mth : methods) {
        const auto first = std::find_if(g.begin(), g.end(), [&](const LeaderboardRow& r) { return r.method == mth; });
        dat << "# " << mth << "\n0 " << first->full << " 0\n";
        for (const auto& r : g)
            if (r.method == mth) dat << r.compression << " " << r.value << " " << r.ci95 << "\n";
        dat << "\n\n";
    }
    write_text((fs::path(out_dir) / (stem + ".dat")).string(), dat.str());
    std::ostringstream gp;
    gp << "set terminal pngcairo size 900,760 noenhanced\nset output '" << stem
       << ".png'\nset xlabel 'compression ratio'\n"
       << "set ylabel '" << (ruler ? "score (0-100)" : "NLL (nats/token)") << "'\nset title '" << key.first << ": "
       << key.second << "'\nset key below left Left reverse\nset grid\nset xrange [0:1.02]\n"
       << (ruler ? "set yrange [0:*]\n" : "") << "plot ";
    for (size_t i = 0; i < methods.size(); ++i)
        gp << (i ? ", " : "") << "'" << stem << ".dat' index " << i << " using 1:2:3 with yerrorlines"
           << series_style(i) << " title '" << methods[i] << "'";
    gp << "\n";
    if (!methods.empty()) render_gnuplot(out_dir, stem, gp.str());
}
}  // namespace

std::string write_leaderboard(const std::vector<LeaderboardRow>& rows, const std::string& out_dir,
                              const std::vector<std::string>& exclude_tasks) {
    fs::create_directories(out_dir);
    LeaderboardGroups groups = group_rows(rows);
    std::ostringstream md;
    md << "# Leaderboard\n";
    for (auto& [key, g] : groups) {
        const bool ruler = key.second.rfind("ruler", 0) == 0;
        order_group(g);
        md << "\n## " << key.first << " — " << key.second << "\n\n";
        std::vector<double> fulls;
        for (const auto& r : g)
            if (r.policy == "full") fulls.push_back(r.value);
        write_group_table(md, g, ruler, fulls.size() > 1);
        if (ruler) write_keeps_lines(md, g, fulls, exclude_tasks);
        plot_group(out_dir, key, g, ruler);
    }
    write_text((fs::path(out_dir) / "leaderboard.md").string(), md.str());
    return md.str();
}

}  // namespace kvsieve
