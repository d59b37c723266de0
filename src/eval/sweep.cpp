#include "eval/sweep.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "cache/kv_pool.h"
#include "cache/kv_rotation.h"
#include "eval/plot.h"
#include "eval/sweep_curves.h"
#include "policy/policy.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve {

namespace fs = std::filesystem;

std::string cell_spec(const std::string& policy, const char* param, double value) {
    std::ostringstream v;
    v << value;
    // The parameter belongs to the preset, before a read-time selection ("wgkv:…+quest:…").
    const size_t plus = policy.find('+');
    const std::string base = policy.substr(0, plus), tail = plus == std::string::npos ? "" : policy.substr(plus);
    const std::string sep = base.find(':') == std::string::npos ? ":" : ",";
    if (std::string(param) == "tau") return base + sep + "rule=threshold,tau=" + v.str() + tail;
    return base + sep + "ratio=" + v.str() + tail;
}

std::string cell_name(const std::string& spec) {
    std::string s = spec;
    for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
    return s;
}

namespace {

/// The value of `key` in the config.yaml of the cell in `dir` (the "key: value" lines the cells write, quotes
/// stripped), or "" when the file or the key is absent.
std::string recorded_setting(const fs::path& dir, const std::string& key) {
    std::ifstream f(dir / "config.yaml");
    std::string line;
    const std::string prefix = key + ": ";
    while (std::getline(f, line)) {
        if (line.compare(0, prefix.size(), prefix) != 0) continue;
        std::string v = line.substr(prefix.size());
        if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
        return v;
    }
    return "";
}

/// Throws Error naming both when the finished cell in `dir` was made with other KV cache settings than the sweep's
/// `types_spec` (parse_kv_types) and `rotate` (--kv-rotate): its config.yaml's kv_type, and its kv_rotate where
/// that setting matters (kv_rotate_matters; a quantized cell that does not record it ran before cells recorded it,
/// with the default, auto). A cell that records no kv_type passes.
void check_cache_settings(const fs::path& dir, const std::string& types_spec, const std::string& rotate) {
    const std::string got_spec = recorded_setting(dir, "kv_type");
    if (got_spec.empty()) return;
    const KVTypes want = parse_kv_types(types_spec);
    KVTypes got;
    try {
        got = parse_kv_types(got_spec);
    } catch (const Error&) {
        fail("sweep: cell ", dir.string(), " records kv_type '", got_spec, "', which is not a KV cache types spec");
    }
    require(kv_types_spec(got) == kv_types_spec(want), "sweep: cell ", dir.string(), " was made with KV cache types ",
            kv_types_spec(got), "; this sweep has ", kv_types_spec(want), " (use another --out, or --kv-type ",
            kv_types_spec(got), " to continue this one)");
    const std::string want_rot = kv_rotate_matters(parse_kv_rotate_mode(rotate), want) ? rotate : "";
    std::string got_rot = recorded_setting(dir, "kv_rotate");
    if (got_rot.empty() && kv_quantized(got)) got_rot = "auto";
    require(got_rot == want_rot, "sweep: cell ", dir.string(), " was made with --kv-rotate ",
            got_rot.empty() ? "auto or off (unrotated)" : got_rot, "; this sweep has --kv-rotate ", rotate,
            " (use another --out)");
}

/// What differs between sweep kinds: how a cell runs, which metric is plotted and tabulated.
struct SweepKind {
    std::function<nlohmann::json(const std::string& spec, const fs::path& dir)> run_cell;  // writes the cell files
    std::string metric, metric_label;                                                      // "nll" / "score"
    std::string x_key, x_label;  // "density" / "compression_ratio"
    std::string plot_stem;
    /// Throws Error if a finished cell's metrics were made under other settings than this sweep's (optional).
    std::function<void(const nlohmann::json& metrics, const fs::path& dir)> check_done;
    /// Runs several cells together (optional; else run_cell one at a time); one metrics object per cell.
    std::function<std::vector<nlohmann::json>(const std::vector<std::string>& specs, const std::vector<fs::path>& dirs)>
        run_cells;
    size_t cells_per_pass = 0;       ///< for run_cells; 0: every unfinished cell in one pass
    std::string kv_type, kv_rotate;  ///< the sweep's cache settings, which every finished cell must share
};

/// Every cell of the sweep, "full" first, each once, after checking that no two share a directory and that every
/// spec parses (Error otherwise), before any work.
std::vector<std::string> sweep_cells(const SweepOptions& o) {
    require(!o.policies.empty(), "sweep: --policies is empty");
    for (double r : o.ratios) require(r >= 0 && r < 1, "sweep: ratio ", r, " is outside [0, 1)");
    // The cells of one policy: one per ratio and threshold, or the spec as written when neither is given.
    require(o.threshold_policies.empty() || !o.thresholds.empty(),
            "sweep: policies to sweep over thresholds are given, but no thresholds");
    const bool split = !o.threshold_policies.empty();  // thresholds belong to threshold_policies alone
    auto cells_of = [&](const std::string& p) {
        std::vector<std::string> c;
        for (double r : o.ratios) c.push_back(cell_spec(p, "ratio", r));
        if (!split)
            for (double t : o.thresholds) c.push_back(cell_spec(p, "tau", t));
        if (o.ratios.empty() && (split || o.thresholds.empty())) c.push_back(p);
        return c;
    };
    // Build and validate every cell before any work.
    std::vector<std::string> specs{"full"};
    for (const auto& p : o.policies) {
        if (p == "full") continue;
        for (const auto& c : cells_of(p)) specs.push_back(c);
    }
    for (const auto& p : o.threshold_policies)
        for (double t : o.thresholds) specs.push_back(cell_spec(p, "tau", t));
    // A spec given twice is one cell; two specs of one directory name would write into each other.
    std::vector<std::string> unique;
    for (const auto& s : specs)
        if (std::find(unique.begin(), unique.end(), s) == unique.end()) unique.push_back(s);
    specs.swap(unique);
    std::map<std::string, std::string> by_dir;
    for (const auto& s : specs) {
        const auto [it, fresh] = by_dir.emplace(cell_name(s), s);
        require(fresh, "sweep: cells '", it->second, "' and '", s, "' would share the directory ", it->first);
    }
    for (const auto& s : specs) parse_policy(s);
    return specs;
}

/// Runs the cells of `specs` that have no metrics.json yet (one at a time, or together with kind.run_cells) and
/// reads the others' into `results`. False when some cells wait for other shards' examples (no summary yet).
bool run_pending_cells(const SweepOptions& o, const SweepKind& kind, const std::vector<std::string>& specs,
                       std::map<std::string, nlohmann::json>& results) {
    std::vector<std::string> todo;
    std::vector<fs::path> todo_dirs;
    for (size_t i = 0; i < specs.size(); ++i) {
        const fs::path dir = fs::path(o.out_dir) / cell_name(specs[i]);
        const fs::path metrics = dir / "metrics.json";
        if (fs::exists(metrics)) {
            std::ifstream f(metrics);
            results[specs[i]] = nlohmann::json::parse(f);
            if (kind.check_done) kind.check_done(results[specs[i]], dir);
            check_cache_settings(dir, kind.kv_type, kind.kv_rotate);
            std::fprintf(stderr, "[%zu/%zu] %s: done before, skipped\n", i + 1, specs.size(), specs[i].c_str());
            continue;
        }
        fs::create_directories(dir);
        if (kind.run_cells) {
            todo.push_back(specs[i]);
            todo_dirs.push_back(dir);
            continue;
        }
        std::fprintf(stderr, "[%zu/%zu] %s\n", i + 1, specs.size(), specs[i].c_str());
        results[specs[i]] = kind.run_cell(specs[i], dir);
    }
    const size_t pass = kind.cells_per_pass > 0 ? kind.cells_per_pass : std::max<size_t>(1, todo.size());
    for (size_t b = 0; b < todo.size(); b += pass) {
        const size_t e = std::min(todo.size(), b + pass);
        const std::vector<std::string> group(todo.begin() + b, todo.begin() + e);
        std::fprintf(stderr, "cells %zu–%zu of the %zu left, together:", b + 1, e, todo.size());
        for (const auto& g : group) std::fprintf(stderr, " %s", g.c_str());
        std::fprintf(stderr, "\n");
        const std::vector<nlohmann::json> m =
            kind.run_cells(group, std::vector<fs::path>(todo_dirs.begin() + b, todo_dirs.begin() + e));
        for (size_t i = 0; i < group.size(); ++i) results[group[i]] = m[i];
    }
    // A shard's run leaves cells whose other examples another shard is still making: no summary yet.
    size_t waiting = 0;
    for (const auto& s : specs) waiting += results[s].is_null();
    if (waiting > 0) {
        std::fprintf(stderr,
                     "%zu of the %zu cells wait for the other shards' examples; run the sweep again (any shard, or "
                     "without --shard) once they are done to write the cells and the summary\n",
                     waiting, specs.size());
        return false;
    }
    return true;
}

/// The summary's rows: `specs`, then the cells earlier sweeps into the same folder finished under the same settings
/// (added to `results`).
std::vector<std::string> summary_rows(const SweepOptions& o, const SweepKind& kind,
                                      const std::vector<std::string>& specs,
                                      std::map<std::string, nlohmann::json>& results) {
    // Cells that earlier sweeps into this directory finished under the same settings (other policies) are listed
    // and plotted too, so that adding a policy to a results directory does not drop the others from its summary.
    std::vector<std::string> earlier;
    for (const auto& e : fs::directory_iterator(o.out_dir)) {
        const fs::path mp = e.path() / "metrics.json";
        if (!e.is_directory() || !fs::exists(mp)) continue;
        try {
            std::ifstream f(mp);
            const nlohmann::json m = nlohmann::json::parse(f);
            const std::string spec = m.at("policy").get<std::string>();
            if (results.count(spec) || cell_name(spec) != e.path().filename().string()) continue;
            if (kind.check_done) kind.check_done(m, e.path());
            check_cache_settings(e.path(), kind.kv_type, kind.kv_rotate);
            (void)m.at(kind.metric).get<double>();
            results[spec] = m;
            earlier.push_back(spec);
        } catch (const std::exception& ex) {
            std::fprintf(stderr, "note: %s is left out of the summary: %s\n", e.path().string().c_str(), ex.what());
        }
    }
    std::sort(earlier.begin(), earlier.end());
    std::vector<std::string> rows = specs;
    rows.insert(rows.end(), earlier.begin(), earlier.end());
    return rows;
}

/// summary.md: one row per cell with its compression ratio, density, metric and Δ against the full cache (and the
/// RULER tasks' scores); returns its text.
std::string write_summary(const SweepOptions& o, const SweepKind& kind, const std::vector<std::string>& rows,
                          std::map<std::string, nlohmann::json>& results) {
    const double base = results["full"][kind.metric].get<double>();
    std::ostringstream md;
    md << "| policy | compression ratio | density | " << kind.metric_label << " | Δ vs full |";
    std::vector<std::string> task_cols;
    if (results["full"].contains("tasks"))
        for (const auto& [k, v] : results["full"]["tasks"].items()) task_cols.push_back(k);
    for (const auto& t : task_cols) md << " " << t << " |";
    md << "\n|---|---|---|---|---|";
    for (size_t i = 0; i < task_cols.size(); ++i) md << "---|";
    md << "\n";
    for (const auto& s : rows) {
        const auto& m = results[s];
        const double v = m[kind.metric].get<double>();
        char row[256];
        const double delta = kind.metric == "nll" ? 100.0 * (v - base) / base : v - base;
        std::snprintf(row, sizeof row, "| `%s` | %.3f | %.3f | %.4g | %+.2f%s |", s.c_str(),
                      m["compression_ratio"].get<double>(), m["density"].get<double>(), v, delta,
                      kind.metric == "nll" ? "%" : "");
        md << row;
        for (const auto& t : task_cols) {
            std::snprintf(row, sizeof row, " %.1f |", m["tasks"].value(t, 0.0));
            md << row;
        }
        md << "\n";
    }
    write_text((fs::path(o.out_dir) / "summary.md").string(), md.str());
    return md.str();
}

/// The metric against the x axis, one curve per preset and settings, into PLOT_STEM.{dat,png}.
void plot_sweep(const SweepOptions& o, const SweepKind& kind, const std::vector<std::string>& rows,
                std::map<std::string, nlohmann::json>& results) {
    // One curve per preset and settings over the swept value (sweep_curves), each through the full cache's point;
    // points in the order of the x axis.
    const double base = results.at("full")[kind.metric].get<double>();
    const std::vector<SweepCurve> curves = sweep_curves(rows);
    std::ostringstream dat;
    std::vector<std::string> names;
    for (const auto& curve : curves) {
        names.push_back(curve.title);
        std::vector<std::pair<double, double>> points{{results["full"][kind.x_key].get<double>(), base}};
        for (const auto& c : curve.cells)
            points.emplace_back(results[c][kind.x_key].get<double>(), results[c][kind.metric].get<double>());
        std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        dat << "# " << (curve.cells.size() == 1 ? curve.cells[0] : curve.title) << "\n";
        for (const auto& [x, y] : points) dat << x << " " << y << "\n";
        dat << "\n\n";
    }
    write_text((fs::path(o.out_dir) / (kind.plot_stem + ".dat")).string(), dat.str());
    std::ostringstream gp;
    gp << "set terminal pngcairo size 900,600 noenhanced\nset output '" << kind.plot_stem << ".png'\nset xlabel '"
       << kind.x_label << "'\nset ylabel '" << kind.metric_label << "'\nset title '" << kind.metric_label << " vs "
       << kind.x_label << ": " << fs::path(o.model_path).filename().string()
       << "'\nset key outside right\nset grid\nset xrange [0:1.02]\nplot ";
    for (size_t i = 0; i < names.size(); ++i)
        gp << (i ? ", " : "") << "'" << kind.plot_stem << ".dat' index " << i << " using 1:2 with linespoints"
           << series_style(i) << " title '" << names[i] << "'";
    gp << "\n";
    render_gnuplot(o.out_dir, kind.plot_stem, gp.str());
}

void run_sweep(const SweepOptions& o, const SweepKind& kind) {
    const std::vector<std::string> specs = sweep_cells(o);
    fs::create_directories(o.out_dir);
    std::map<std::string, nlohmann::json> results;
    if (!run_pending_cells(o, kind, specs, results)) return;
    const std::vector<std::string> rows = summary_rows(o, kind, specs, results);
    const std::string md = write_summary(o, kind, rows, results);
    plot_sweep(o, kind, rows, results);
    std::fputs(md.c_str(), stdout);
}

}  // namespace

void run_nll_sweep(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus_text,
                   const SweepOptions& o) {
    SweepKind k;
    k.metric = "nll";
    k.metric_label = "NLL (nats/token)";
    k.x_key = "density";
    k.x_label = "density (kept fraction beyond the window)";
    k.plot_stem = "nll_vs_density";
    k.kv_type = o.nll.kv_type;
    k.kv_rotate = o.nll.kv_rotate;
    k.check_done = [&](const nlohmann::json&, const fs::path& dir) {
        const std::string protocol = o.nll.protocol == NllProtocol::kChunked ? "chunked" : "plain";
        const std::pair<const char*, std::string> want[] = {{"protocol", protocol},
                                                            {"window_tokens", std::to_string(o.nll.sample_tokens)},
                                                            {"samples", std::to_string(o.nll.samples)}};
        for (const auto& [key, value] : want) {
            const std::string got = recorded_setting(dir, key);
            require(got.empty() || got == value, "sweep: cell ", dir.string(), " was made with ", key, " ", got,
                    "; this sweep has ", value, " (use another --out)");
        }
    };
    k.run_cell = [&](const std::string& spec, const fs::path& dir) {
        const NllResult r = evaluate_nll(model, tok, corpus_text, spec, o.nll);
        std::ostringstream csv;
        csv << "sample,nll,density,compression_ratio\n";
        for (size_t s = 0; s < r.nll.size(); ++s)
            csv << s << "," << r.nll[s] << "," << r.density[s] << "," << r.compression[s] << "\n";
        write_text((dir / "predictions.csv").string(), csv.str());
        std::ostringstream yaml;
        yaml << "task: nll\npolicy: \"" << spec << "\"\nmodel: \"" << o.model_path << "\"\ncorpus: \"" << o.corpus_path
             << "\"\nprotocol: " << (o.nll.protocol == NllProtocol::kChunked ? "chunked" : "plain")
             << "\nwindow_tokens: " << o.nll.sample_tokens << "\nsamples: " << o.nll.samples
             << "\nchunk: " << o.nll.chunk << "\nsinks: " << o.nll.sinks << "\nwindow: " << o.nll.window
             << "\nkv_type: " << o.nll.kv_type << "\n";
        if (kv_rotate_matters(parse_kv_rotate_mode(o.nll.kv_rotate), parse_kv_types(o.nll.kv_type)))
            yaml << "kv_rotate: " << o.nll.kv_rotate << "\n";
        write_text((dir / "config.yaml").string(), yaml.str());
        nlohmann::json m = r.to_json();
        m["score"] = nullptr;  // NLL cells have no task score
        const fs::path metrics = dir / "metrics.json";
        write_text(metrics.string() + ".tmp", m.dump(2) + "\n");
        fs::rename(metrics.string() + ".tmp", metrics);  // a cell is finished only when its metrics exist
        return m;
    };
    run_sweep(o, k);
}

void run_ruler_sweep(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus_text,
                     const SweepOptions& o) {
    SweepKind k;
    k.metric = "score";
    k.metric_label = "score (0-100)";
    k.x_key = "compression_ratio";
    k.x_label = "compression ratio";
    k.plot_stem = "score_vs_compression";
    k.kv_type = o.ruler.kv_type;
    k.kv_rotate = o.ruler.kv_rotate;
    // Samples a finished cell holds: tasks × lengths × samples.
    const size_t want = o.ruler.tasks.size() * o.ruler.lengths.size() * static_cast<size_t>(o.ruler.samples);
    k.check_done = [&](const nlohmann::json& m, const fs::path& dir) {
        // Cells written before the protocol was recorded were query-aware.
        const bool qa = m.value("query_aware", true);
        require(qa == o.ruler.query_aware, "sweep: cell ", dir.string(), " was made ",
                qa ? "query-aware" : "query-agnostic", "; this sweep is ",
                o.ruler.query_aware ? "query-aware" : "query-agnostic",
                " (use another --out, or --query-aware to match)");
        const int64_t got = m.value("samples", int64_t{-1});
        require(got == static_cast<int64_t>(want), "sweep: cell ", dir.string(), " holds ", got,
                " samples; this sweep makes ", want, " (tasks × lengths × samples; use another --out)");
        // Cells written before the prompt format was recorded were raw.
        const std::string fmt = m.value("format", std::string("raw"));
        const std::string want_fmt = ruler_format_name(o.ruler.format);
        require(fmt == want_fmt, "sweep: cell ", dir.string(), " was made with --format ", fmt,
                "; this sweep has --format ", want_fmt, " (use another --out, or --format ", fmt, " to resume it)");
        const int64_t pre = m.value("decode_preamble", int64_t{0});
        require(pre == o.ruler.decode_preamble, "sweep: cell ", dir.string(), " was made with --decode-preamble ", pre,
                "; this sweep has ", o.ruler.decode_preamble, " (use another --out)");
    };
    k.run_cells = [&](const std::vector<std::string>& specs, const std::vector<fs::path>& dirs) {
        std::vector<nlohmann::json> settings;
        std::vector<RulerResult> done(specs.size());
        for (size_t i = 0; i < specs.size(); ++i) {
            settings.push_back(ruler_cell_settings(specs[i], o.ruler, o.model_path, o.corpus_path));
            done[i].samples = read_ruler_partial(dirs[i].string(), settings[i]);
            if (!done[i].samples.empty())
                std::fprintf(stderr, "%s: %zu samples from its partial file\n", specs[i].c_str(),
                             done[i].samples.size());
        }
        std::vector<RulerResult> rs = run_ruler_cells(
            model, tok, corpus_text, specs, o.ruler, std::move(done), [&](size_t cell, const RulerSample& s) {
                append_ruler_partial(dirs[cell].string(), settings[cell], s, o.ruler.shard, o.ruler.shards);
            });
        std::vector<nlohmann::json> m;
        for (size_t i = 0; i < specs.size(); ++i) {
            if (rs[i].samples.size() < want) {  // a shard: the other shards' samples so far, made while this one ran
                std::vector<RulerSample> all = read_ruler_partial(dirs[i].string(), settings[i]);
                if (all.size() < want) {
                    m.push_back(nullptr);  // unfinished: the cell waits for the other shards
                    continue;
                }
                rs[i].samples = std::move(all);
            }
            write_ruler_cell(dirs[i].string(), rs[i], o.ruler, o.model_path, o.corpus_path);
            remove_ruler_partials(dirs[i].string());
            m.push_back(rs[i].metrics());
        }
        return m;
    };
    k.cells_per_pass = static_cast<size_t>(o.cells_per_pass);
    run_sweep(o, k);
}

}  // namespace kvsieve
