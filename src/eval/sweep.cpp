#include "eval/sweep.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "policy/policy.h"
#include "util/error.h"

namespace kvsieve {

namespace fs = std::filesystem;

std::string cell_spec(const std::string& policy, const char* param, double value) {
    std::ostringstream v;
    v << value;
    if (std::string(param) == "tau") return policy + (policy.find(':') == std::string::npos ? ":" : ",") + "rule=threshold,tau=" + v.str();
    return policy + (policy.find(':') == std::string::npos ? ":" : ",") + "ratio=" + v.str();
}

std::string cell_name(const std::string& spec) {
    std::string s = spec;
    for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
    return s;
}

namespace {
void write_text(const fs::path& p, const std::string& text) {
    std::ofstream f(p);
    if (!f) fail("cannot write '", p.string(), "'");
    f << text;
}
}  // namespace

void run_nll_sweep(const LlamaModel& model, const Tokenizer& tok, const std::string& corpus_text, const SweepOptions& o) {
    require(!o.policies.empty(), "sweep: --policies is empty");
    require(!o.ratios.empty() || !o.thresholds.empty(), "sweep: give --ratios or --thresholds");
    for (double r : o.ratios) require(r >= 0 && r < 1, "sweep: ratio ", r, " is outside [0, 1)");
    // Build and validate every cell before any work.
    std::vector<std::string> specs{"full"};
    for (const auto& p : o.policies) {
        if (p == "full") continue;
        for (double r : o.ratios) specs.push_back(cell_spec(p, "ratio", r));
        for (double t : o.thresholds) specs.push_back(cell_spec(p, "tau", t));
    }
    for (const auto& s : specs) parse_policy(s);
    fs::create_directories(o.out_dir);

    std::map<std::string, nlohmann::json> results;
    for (size_t i = 0; i < specs.size(); ++i) {
        const fs::path dir = fs::path(o.out_dir) / cell_name(specs[i]);
        const fs::path metrics = dir / "metrics.json";
        if (fs::exists(metrics)) {
            std::ifstream f(metrics);
            results[specs[i]] = nlohmann::json::parse(f);
            std::fprintf(stderr, "[%zu/%zu] %s: done before, skipped\n", i + 1, specs.size(), specs[i].c_str());
            continue;
        }
        std::fprintf(stderr, "[%zu/%zu] %s\n", i + 1, specs.size(), specs[i].c_str());
        const NllResult r = evaluate_nll(model, tok, corpus_text, specs[i], o.nll);
        fs::create_directories(dir);
        std::ostringstream csv;
        csv << "sample,nll,density,compression_ratio\n";
        for (size_t s = 0; s < r.nll.size(); ++s) csv << s << "," << r.nll[s] << "," << r.density[s] << "," << r.compression[s] << "\n";
        write_text(dir / "predictions.csv", csv.str());
        std::ostringstream yaml;
        yaml << "task: nll\npolicy: \"" << specs[i] << "\"\nmodel: \"" << o.model_path << "\"\ncorpus: \"" << o.corpus_path
             << "\"\nprotocol: " << (o.nll.protocol == NllProtocol::kChunked ? "chunked" : "plain")
             << "\nwindow_tokens: " << o.nll.window_tokens << "\nsamples: " << o.nll.samples << "\nchunk: " << o.nll.chunk
             << "\nsinks: " << o.nll.sinks << "\nwindow: " << o.nll.window << "\nkv_type: " << o.nll.kv_type << "\n";
        write_text(dir / "config.yaml", yaml.str());
        nlohmann::json m = r.to_json();
        m["score"] = nullptr;  // NLL cells have no task score
        write_text(metrics.string() + ".tmp", m.dump(2) + "\n");
        fs::rename(metrics.string() + ".tmp", metrics);  // a cell is finished only when its metrics exist
        results[specs[i]] = m;
    }

    // Summary table, with ΔNLL against full.
    const double base = results["full"]["nll"].get<double>();
    std::ostringstream md;
    md << "| policy | compression ratio | density | NLL | ΔNLL vs full | PPL |\n|---|---|---|---|---|---|\n";
    std::ostringstream dat;
    for (const auto& s : specs) {
        const auto& m = results[s];
        const double nll = m["nll"].get<double>();
        char row[256];
        std::snprintf(row, sizeof row, "| `%s` | %.3f | %.3f | %.4f | %+.2f%% | %.3f |\n", s.c_str(),
                      m["compression_ratio"].get<double>(), m["density"].get<double>(), nll, 100.0 * (nll - base) / base,
                      m["ppl"].get<double>());
        md << row;
    }
    write_text(fs::path(o.out_dir) / "summary.md", md.str());
    // Plot data: one block per policy (gnuplot "index").
    std::vector<std::string> names;
    for (const auto& p : o.policies) {
        if (p == "full") continue;
        names.push_back(p.substr(0, p.find(':')));
        dat << "# " << p << "\n" << results["full"]["density"].get<double>() << " " << base << "\n";
        for (double r : o.ratios) {
            const auto& m = results[cell_spec(p, "ratio", r)];
            dat << m["density"].get<double>() << " " << m["nll"].get<double>() << "\n";
        }
        for (double t : o.thresholds) {
            const auto& m = results[cell_spec(p, "tau", t)];
            dat << m["density"].get<double>() << " " << m["nll"].get<double>() << "\n";
        }
        dat << "\n\n";
    }
    write_text(fs::path(o.out_dir) / "nll_vs_density.dat", dat.str());
    std::ostringstream gp;
    gp << "set terminal pngcairo size 900,600 noenhanced\nset output 'nll_vs_density.png'\nset xlabel 'density (kept fraction beyond the window)'\n"
       << "set ylabel 'NLL (nats/token)'\nset title 'NLL vs density: " << fs::path(o.model_path).filename().string() << "'\n"
       << "set key top right\nset grid\nset xrange [0:1.02]\nplot ";
    for (size_t i = 0; i < names.size(); ++i)
        gp << (i ? ", " : "") << "'nll_vs_density.dat' index " << i << " using 1:2 with linespoints title '" << names[i] << "'";
    gp << "\n";
    write_text(fs::path(o.out_dir) / "nll_vs_density.gp", gp.str());
    if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
        const std::string cmd = "cd '" + o.out_dir + "' && gnuplot nll_vs_density.gp";
        if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "gnuplot failed; data and script are in %s\n", o.out_dir.c_str());
    } else {
        std::fprintf(stderr, "gnuplot not installed: plot script written to %s/nll_vs_density.gp\n", o.out_dir.c_str());
    }
    std::fputs(md.str().c_str(), stdout);
}

}  // namespace kvsieve
