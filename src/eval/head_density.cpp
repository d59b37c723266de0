#include "eval/head_density.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "eval/nll.h"
#include "eval/plot.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve {

double HeadDensityMap::mean() const {
    double s = 0;
    int64_t n = 0;
    for (const auto& row : density)
        for (double d : row) s += d, ++n;
    return n ? s / static_cast<double>(n) : 0.0;
}

const char* hybrid_strategy_name(HybridStrategy s) {
    switch (s) {
        case HybridStrategy::kDensest: return "densest heads (SP-KV §4)";
        case HybridStrategy::kEvery4From0: return "A: 3:1, global layers 0, 4, 8, …";
        case HybridStrategy::kEvery4From3: return "B: 3:1, global layers 3, 7, 11, …";
        case HybridStrategy::kRandom: return "C: random heads";
    }
    return "?";
}

std::vector<HeadId> hybrid_global_heads(const HeadDensityMap& m, HybridStrategy s, int n, uint64_t seed) {
    const int L = m.n_layer(), H = m.n_head_kv();
    require(n >= 0 && n <= L * H, "hybrid layout: ", n, " global heads is outside [0, ", L * H, "]");
    std::vector<HeadId> all;
    for (int l = 0; l < L; ++l)
        for (int h = 0; h < H; ++h) all.push_back({l, h});
    std::vector<HeadId> out;
    switch (s) {
        case HybridStrategy::kDensest:
            std::stable_sort(all.begin(), all.end(), [&](const HeadId& a, const HeadId& b) {
                return m.density[a.first][a.second] > m.density[b.first][b.second];
            });
            out.assign(all.begin(), all.begin() + n);
            break;
        case HybridStrategy::kEvery4From0:
        case HybridStrategy::kEvery4From3: {
            const int first = s == HybridStrategy::kEvery4From0 ? 0 : 3;
            for (const HeadId& id : all)
                if (id.first >= first && (id.first - first) % 4 == 0) out.push_back(id);
            break;
        }
        case HybridStrategy::kRandom: {
            std::mt19937_64 rng(seed);
            std::shuffle(all.begin(), all.end(), rng);
            out.assign(all.begin(), all.begin() + n);
            break;
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

double density_coverage(const HeadDensityMap& m, const std::vector<HeadId>& global) {
    double total = 0, kept = 0;
    for (const auto& row : m.density)
        for (double d : row) total += d;
    for (const auto& [l, h] : global) kept += m.density.at(l).at(h);
    return total > 0 ? kept / total : 1.0;
}

std::string hybrid_policy_spec(const std::vector<HeadId>& global, int window, int sinks) {
    std::string s = "hybrid_heads:global=";
    for (size_t i = 0; i < global.size(); ++i)
        s += (i ? "/" : "") + std::to_string(global[i].first) + "." + std::to_string(global[i].second);
    return s + ",window=" + std::to_string(window) + ",sinks=" + std::to_string(sinks);
}

void write_head_density(const std::string& dir, const std::string& stem, const std::string& title,
                        const HeadDensityMap& m, const std::string& what) {
    namespace fs = std::filesystem;
    fs::create_directories(dir);
    const int L = m.n_layer(), H = m.n_head_kv();
    std::ostringstream md, dat;
    char buf[64];
    md << "# " << title << "\n\n"
       << what << "; mean " << (std::snprintf(buf, sizeof buf, "%.3f", m.mean()), buf) << ".\n\n| layer |";
    for (int h = 0; h < H; ++h) md << " head " << h << " |";
    md << " layer mean |\n|---|";
    for (int h = 0; h <= H; ++h) md << "---|";
    md << "\n";
    nlohmann::json j = nlohmann::json::array();
    for (int l = 0; l < L; ++l) {
        md << "| " << l << " |";
        double s = 0;
        for (int h = 0; h < H; ++h) {
            std::snprintf(buf, sizeof buf, " %.3f |", m.density[l][h]);
            md << buf;
            s += m.density[l][h];
            dat << (h ? " " : "") << m.density[l][h];
        }
        std::snprintf(buf, sizeof buf, " %.3f |\n", H ? s / H : 0.0);
        md << buf;
        dat << "\n";
        j.push_back(m.density[l]);
    }
    write_text((fs::path(dir) / (stem + ".md")).string(), md.str());
    write_text((fs::path(dir) / (stem + ".json")).string(),
               nlohmann::json{{"head_density", j}, {"mean", m.mean()}}.dump(1) + "\n");
    write_text((fs::path(dir) / (stem + ".dat")).string(), dat.str());
    std::ostringstream gp;
    gp << "set terminal pngcairo size " << std::max(360, 90 * H + 220) << "," << std::max(300, 18 * L + 140)
       << " noenhanced\nset output '" << stem << ".png'\nset title '" << title << "'\nset xlabel 'KV head'\n"
       << "set ylabel 'layer'\nset cblabel 'density'\nset cbrange [0:1]\nset palette rgb 21,22,23\n"
       << "set xrange [-0.5:" << H - 0.5 << "]\nset yrange [" << L - 0.5 << ":-0.5]\nset xtics 1\nset ytics "
       << (L > 16 ? 2 : 1) << "\nplot '" << stem << ".dat' matrix with image notitle\n";
    render_gnuplot(dir, stem, gp.str());
}

std::string head_density_report(const LlamaModel& model, const Tokenizer& tok, const std::string& text,
                                const std::string& policy, const NllOptions& o, const std::string& out_dir, bool hybrid,
                                int n_global, uint64_t seed) {
    namespace fs = std::filesystem;
    Policy pol = parse_policy(policy);
    if (pol.scorer) {  // the window and sinks the cache will use (a learned policy may take them from the model)
        pol.scorer->for_model(model.config())->adjust_policy(pol);
    }
    const NllResult r = evaluate_nll(model, tok, text, policy, o);
    HeadDensityMap m{r.head_density};
    const std::string name = model.file().get_string("general.name", fs::path(model.config().path).stem().string());
    write_head_density(out_dir, "head_density", name + ": " + policy, m);
    std::ostringstream md;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "# %s: head density and hybrid layouts\n\nPolicy `%s`, %lld windows of %lld tokens, "
                  "%s protocol. Mean density %.3f, NLL %.4f.\n\n![head density](head_density.png)\n\n",
                  name.c_str(), policy.c_str(), static_cast<long long>(r.nll.size()),
                  static_cast<long long>(o.sample_tokens), o.protocol == NllProtocol::kChunked ? "chunked" : "plain",
                  r.mean_density, r.mean_nll);
    md << buf;
    if (!hybrid) {
        write_text((fs::path(out_dir) / "hybrid.md").string(), md.str());
        return md.str();
    }
    const int window = pol.window > 0 ? pol.window : o.window, sinks = pol.sinks;
    const int n_a = static_cast<int>(hybrid_global_heads(m, HybridStrategy::kEvery4From0, 0).size());
    const int n = n_global >= 0 ? n_global : n_a;
    const NllResult full = evaluate_nll(model, tok, text, "full", o);
    struct Row {
        std::string layout;
        std::vector<HeadId> heads;
        std::string spec;
    };
    std::vector<Row> rows;
    rows.push_back({"learned policy (" + policy + ")", {}, policy});
    for (HybridStrategy s : {HybridStrategy::kDensest, HybridStrategy::kEvery4From0, HybridStrategy::kEvery4From3,
                             HybridStrategy::kRandom}) {
        auto heads = hybrid_global_heads(m, s, n, seed);
        rows.push_back({hybrid_strategy_name(s), heads, hybrid_policy_spec(heads, window, sinks)});
    }
    rows.push_back({"every head local", {}, hybrid_policy_spec({}, window, sinks)});
    md << "Hybrid layouts (SP-KV §4): global heads keep every entry, local heads keep " << sinks << " sinks and a "
       << window << "-token window. Full-cache NLL " << (std::snprintf(buf, sizeof buf, "%.4f", full.mean_nll), buf)
       << ".\n\n| layout | global heads | density coverage | density | NLL | ΔNLL vs full "
          "|\n|---|---|---|---|---|---|\n";
    nlohmann::json j = {{"policy", policy}, {"nll_full", full.mean_nll}, {"layouts", nlohmann::json::array()}};
    for (size_t i = 0; i < rows.size(); ++i) {
        const Row& row = rows[i];
        const NllResult e = i == 0 ? r : evaluate_nll(model, tok, text, row.spec, o);
        const double cov = i == 0 ? 1.0 : density_coverage(m, row.heads);
        const double delta = 100.0 * (e.mean_nll - full.mean_nll) / full.mean_nll;
        std::snprintf(buf, sizeof buf, "| %s | %s | %.3f | %.3f | %.4f | %+.2f%% |\n", row.layout.c_str(),
                      i == 0 ? "—" : std::to_string(row.heads.size()).c_str(), cov, e.mean_density, e.mean_nll, delta);
        md << buf;
        j["layouts"].push_back({{"layout", row.layout},
                                {"spec", row.spec},
                                {"global_heads", row.heads.size()},
                                {"coverage", cov},
                                {"density", e.mean_density},
                                {"nll", e.mean_nll},
                                {"delta_nll_pct", delta}});
    }
    write_text((fs::path(out_dir) / "hybrid.md").string(), md.str());
    write_text((fs::path(out_dir) / "hybrid.json").string(), j.dump(1) + "\n");
    return md.str();
}

}  // namespace kvsieve
