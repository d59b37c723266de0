// kvsieve eval nll | sweep: quality of a KV policy as NLL vs density, and sweeps over policies × ratios.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "eval/nll.h"
#include "eval/sweep.h"
#include "io/gguf.h"
#include "kernels/parallel.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "text/tokenizer.h"
#include "util/error.h"

namespace kvsieve::cli {

namespace {
struct EvalCommon {
    std::string model, corpus, out = "results", protocol = "chunked", kv_type = "f16";
    int64_t samples = 8, window_tokens = 512, chunk = 16, prefix = -1;
    int threads = 0, sinks = 4, window = 128;
    uint64_t seed = 0;
    bool quiet = false;

    void add_to(CLI::App* cmd) {
        cmd->add_option("-m,--model", model, "GGUF model")->required()->check(CLI::ExistingFile);
        cmd->add_option("--corpus", corpus, "text file to evaluate on")->required();
        cmd->add_option("--samples", samples, "evaluation windows (taken in order from the corpus start)")->capture_default_str();
        cmd->add_option("--length", window_tokens, "tokens per window, BOS included")->capture_default_str();
        cmd->add_option("--protocol", protocol, "chunked (SP-KV App. A.2: chunks, compression after each) or plain")
            ->capture_default_str();
        cmd->add_option("--chunk", chunk, "chunk size of the chunked protocol")->capture_default_str();
        cmd->add_option("--sinks", sinks, "sink tokens kept by the chunked protocol")->capture_default_str();
        cmd->add_option("--window", window, "local window kept by the chunked protocol")->capture_default_str();
        cmd->add_option("--prefix", prefix, "plain protocol: prompt tokens (-1: half the window)")->capture_default_str();
        cmd->add_option("--kv-type", kv_type, "f32, f16 or bf16")->capture_default_str();
        cmd->add_option("--seed", seed, "seed (random policies)")->capture_default_str();
        cmd->add_option("--out", out, "output directory")->capture_default_str();
        cmd->add_option("-t,--threads", threads, "threads (0: all cores)");
        cmd->add_flag("-q,--quiet", quiet, "no progress bar");
    }
    NllOptions nll_options() const {
        NllOptions o;
        require(protocol == "chunked" || protocol == "plain", "--protocol must be chunked or plain, got '", protocol, "'");
        o.protocol = protocol == "chunked" ? NllProtocol::kChunked : NllProtocol::kPlain;
        o.window_tokens = window_tokens;
        o.samples = samples;
        o.chunk = chunk;
        o.sinks = sinks;
        o.window = window;
        o.prefix = prefix;
        o.kv_type = kv_type;
        o.progress = !quiet;
        require(sinks >= 0 && window >= 0, "--sinks and --window must be ≥ 0");
        return o;
    }
    std::string read_corpus() const {
        std::ifstream f(corpus, std::ios::binary);
        if (!f) fail("cannot open corpus '", corpus, "'");
        std::stringstream ss;
        ss << f.rdbuf();
        require(!ss.str().empty(), "corpus '", corpus, "' is empty");
        return ss.str();
    }
};

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
}  // namespace

void add_eval(CLI::App& app) {
    auto* eval = app.add_subcommand("eval", "evaluate KV cache policies");
    eval->require_subcommand(1);

    auto* nll = eval->add_subcommand("nll", "NLL and perplexity of a text under a policy, with ΔNLL vs full");
    auto c1 = std::make_shared<EvalCommon>();
    auto policy = std::make_shared<std::string>("full");
    c1->add_to(nll);
    nll->add_option("--policy", *policy, "policy spec")->capture_default_str();
    nll->callback([c1, policy] {
        set_num_threads(c1->threads);
        const NllOptions o = c1->nll_options();
        parse_policy(*policy);  // bad specs fail before the model loads
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

    auto* sweep = eval->add_subcommand("sweep", "policies × ratios (or thresholds): NLL vs density, kvpress layout");
    auto c2 = std::make_shared<EvalCommon>();
    auto policies = std::make_shared<std::string>();
    auto ratios = std::make_shared<std::string>();
    auto thresholds = std::make_shared<std::string>();
    auto task = std::make_shared<std::string>("nll");
    c2->add_to(sweep);
    sweep->add_option("--policies", *policies, "comma-separated presets, e.g. streaming_llm,h2o,snapkv")->required();
    sweep->add_option("--ratios", *ratios, "comma-separated compression ratios, e.g. 0.25,0.5,0.75");
    sweep->add_option("--thresholds", *thresholds, "comma-separated thresholds τ (rule=threshold)");
    sweep->add_option("--task", *task, "nll (RULER-style tasks come with the task generators)")->capture_default_str();
    sweep->callback([c2, policies, ratios, thresholds, task] {
        require(*task == "nll", "sweep task '", *task, "' is not available (nll)");
        set_num_threads(c2->threads);
        SweepOptions o;
        std::stringstream ss(*policies);
        for (std::string p; std::getline(ss, p, ';');)  // ';' separates specs that contain ','
            if (!p.empty()) {
                if (p.find(':') == std::string::npos) {
                    std::stringstream s2(p);
                    for (std::string q; std::getline(s2, q, ',');)
                        if (!q.empty()) o.policies.push_back(q);
                } else {
                    o.policies.push_back(p);
                }
            }
        o.ratios = parse_list(*ratios, "--ratios");
        o.thresholds = parse_list(*thresholds, "--thresholds");
        o.out_dir = c2->out;
        o.model_path = c2->model;
        o.corpus_path = c2->corpus;
        o.nll = c2->nll_options();
        const std::string text = c2->read_corpus();
        LlamaModel m(c2->model);
        const auto tok = Tokenizer::from_gguf(m.file());
        run_nll_sweep(m, *tok, text, o);
    });
}

}  // namespace kvsieve::cli
