// kvsieve bench: prefill (pp) and decode (tg) throughput at a context depth, like llama-bench.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "predict/bundled_predictors.h"
#include "cli/cache_options.h"
#include "cli/commands.h"
#include "kernels/bandwidth.h"
#include "kernels/blas_core.h"
#include "kernels/cpu_features.h"
#include "kernels/dot.h"
#include "kernels/parallel.h"
#include "model/llama_model.h"
#include "policy/policy.h"
#include "session/batch_step.h"
#include "session/prefill_plan.h"
#include "session/session.h"
#include "session/synthetic_fill.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace kvsieve::cli {

namespace {
struct BenchOpts {
    std::string model;
    int n_prompt = 512, n_gen = 64, reps = 3, threads = 0;
    int batch = 1;  // sequences decoding together in the decode test
    int64_t depth = 0;
    double bandwidth_gbs = 0;  // 0: measure
    uint64_t seed = 42;
    CacheOptions cache;
    std::string fill = "prefill";
    std::string text;  // token ids from this file instead of random ones
};

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Stat {
    double mean = 0, sd = 0;
};
Stat stats(const std::vector<double>& v) {
    Stat s;
    for (double x : v) s.mean += x;
    s.mean /= v.size();
    for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
    s.sd = v.size() > 1 ? std::sqrt(s.sd / (v.size() - 1)) : 0;
    return s;
}

/// The tokens a benchmark feeds: random ids in [3, n_vocab), or consecutive ones of a text (wrapping around), so
/// that learned policies see text.
class BenchTokens {
public:
    BenchTokens(const LlamaModel& model, const BenchOpts& o)
        : rng_(static_cast<uint32_t>(o.seed)), tok_(3, model.config().n_vocab - 1) {
        if (o.text.empty()) return;
        text_ids_ = Tokenizer::from_gguf(model.file())->encode(read_whole_file(o.text, "bench text"), false, false);
        require(text_ids_.size() >= 16, "--text '", o.text, "' holds ", text_ids_.size(),
                " tokens; give a longer text");
    }
    std::vector<int32_t> next(int64_t n) {
        std::vector<int32_t> t(n);
        for (auto& x : t) {
            if (text_ids_.empty()) {
                x = tok_(rng_);
            } else {
                x = text_ids_[at_];
                at_ = (at_ + 1) % text_ids_.size();
            }
        }
        return t;
    }

private:
    std::mt19937 rng_;
    std::uniform_int_distribution<int32_t> tok_;
    std::vector<int32_t> text_ids_;
    size_t at_ = 0;
};

/// Fills `session` to o.depth tokens (synthetic entries with --fill random, else a prefill in the chunk planner's
/// pieces, its prefill ended as every prompt's is: after-prefill step and compression); returns the history at the
/// depth, which each repetition rolls back to (rewind()).
std::vector<int32_t> fill_to_depth(const BenchOpts& o, Session& session, BenchTokens& tokens) {
    KVCache& kv = session.cache();
    if (o.depth > 0 && o.fill == "random") {
        fill_synthetic(kv, o.depth, o.seed);
        session.restore_tokens(tokens.next(o.depth));  // the history synthetic entries stand for
        kv.end_prefill();
    } else if (o.depth > 0) {
        std::fprintf(stderr, "filling context to depth %ld...\n", static_cast<long>(o.depth));
        // --prefill-chunk as the chunk planner takes it (session/prefill_plan.h), else pieces of 512; the policy
        // admits and compresses once at the end (after each piece with --compress-during-prefill).
        PrefillPlan plan;
        plan.chunk = planned_chunk(kv.policy(), o.cache.prefill_chunk > 0 ? o.cache.prefill_chunk : 512, true,
                                   o.cache.compress_during_prefill);
        std::vector<float> logits;
        session.prefill(tokens.next(o.depth), plan, logits, [&](int64_t, int64_t end, const std::vector<float>&) {
            std::fprintf(stderr, "\r  %ld / %ld", static_cast<long>(end), static_cast<long>(o.depth));
        });
        std::fprintf(stderr, "\n");
    } else {
        kv.end_prefill();
    }
    return session.tokens();
}

/// Rolls `session` back to the depth it was filled to (`history`: fill_to_depth's). Rolls the cache back directly,
/// so that a policy with a per-sequence scorer state (KVpop) can repeat a test; its state is not rewound, which
/// changes what it keeps, not what a step costs.
void rewind(Session& session, const std::vector<int32_t>& history) {
    session.cache().rollback(static_cast<int64_t>(history.size()));
    session.restore_tokens(history);
}

/// One row of the table: mean ± standard deviation of the repetitions' tokens per second.
Stat report(const std::string& name, const std::vector<double>& tps) {
    const Stat s = stats(tps);
    std::printf("| %s | %.2f ± %.2f | %.2f |\n", name.c_str(), s.mean, s.sd, 1e3 / s.mean);
    std::fflush(stdout);
    return s;
}

/// ppN: a prefill of o.n_prompt tokens at the depth, o.reps times after a warm-up: one batched step that extends
/// the sequence (Session::StepKind::kExtend: the forward and the cache writes, no compression after it).
void bench_prefill(const BenchOpts& o, Session& session, const std::vector<int32_t>& history, BenchTokens& tokens,
                   const std::string& at) {
    std::vector<float> logits;
    std::vector<double> tps;
    BatchStep step;
    for (int r = 0; r <= o.reps; ++r) {  // repetition 0 is a warm-up
        rewind(session, history);
        const auto toks = tokens.next(o.n_prompt);
        const double t0 = now_s();
        step.clear();
        step.add(session, toks, Session::StepKind::kExtend, logits);
        step.forward();
        step.end_all();
        if (r > 0) tps.push_back(o.n_prompt / (now_s() - t0));
    }
    report("pp" + std::to_string(o.n_prompt) + at, tps);
    const KVStats after = session.cache().stats();
    std::fprintf(stderr, "after the prefill test: density %.3f, %.1f MiB kept (full F16: %.1f MiB)\n", after.density,
                 after.kv_bytes_final / 1048576.0, after.kv_bytes_full / 1048576.0);
}

/// tgN: o.n_gen decode steps at the depth, o.reps times after a warm-up; -b N: N sequences (each its own cache at the
/// same depth) decode together, one forward_batch per step, and t/s counts the tokens of all of them. Then the bytes
/// a decoded token reads against the memory bandwidth.
void bench_decode(const BenchOpts& o, Session& first, const std::vector<int32_t>& history, BenchTokens& tokens,
                  const std::string& at, int64_t n_ctx) {
    const LlamaModel& model = first.model();
    std::vector<std::unique_ptr<KVCache>> caches;
    std::vector<std::unique_ptr<Session>> others;
    std::vector<Session*> seqs{&first};
    std::vector<std::vector<int32_t>> histories{history};
    for (int i = 1; i < o.batch; ++i) {
        caches.push_back(o.cache.make_cache(model, n_ctx));
        others.push_back(std::make_unique<Session>(model, first.tokenizer(), *caches.back()));
        histories.push_back(fill_to_depth(o, *others.back(), tokens));
        seqs.push_back(others.back().get());
    }
    std::vector<std::vector<int32_t>> next(o.batch, std::vector<int32_t>(1));
    std::vector<std::vector<float>> logits(o.batch);
    BatchStep step;
    std::vector<double> tps;
    for (int r = 0; r <= o.reps; ++r) {  // repetition 0 is a warm-up
        for (int b = 0; b < o.batch; ++b) rewind(*seqs[b], histories[b]);
        const std::vector<int32_t> feed = tokens.next(static_cast<int64_t>(o.n_gen) * o.batch);
        const double t0 = now_s();
        for (int i = 0; i < o.n_gen; ++i) {
            step.clear();
            for (int b = 0; b < o.batch; ++b) {
                next[b][0] = feed[static_cast<size_t>(i) * o.batch + b];
                step.add(*seqs[b], next[b], Session::StepKind::kDecode, logits[b]);
            }
            step.forward();
            step.end_all();
        }
        if (r > 0) tps.push_back(static_cast<double>(o.n_gen) * o.batch / (now_s() - t0));
    }
    const Stat s =
        report("tg" + std::to_string(o.n_gen) + at + (o.batch > 1 ? " x" + std::to_string(o.batch) : ""), tps);
    // Bytes a decoded token reads: every weight matrix once per step (shared by the batch's tokens) + the KV
    // pages of its sequence (at the end of the test); under a read-time selection only the pages it chose in
    // the selected layers (its measured read fraction), plus the key bounds it ranks them by.
    const KVStats st = first.cache().stats();
    double kv_bytes = static_cast<double>(st.kv_bytes_final);
    const Selection& sel = first.cache().policy().selection;
    if (sel.active()) {
        const int L = model.config().n_layer, skip = std::min(sel.skip_layers, L);
        kv_bytes = kv_bytes * (skip + (L - skip) * st.read_fraction) / L + static_cast<double>(st.selection_bytes);
    }
    const double w_bytes = static_cast<double>(model.weight_bytes_per_token()) / o.batch;
    const double bytes = w_bytes + kv_bytes;
    const double gbs = bytes * s.mean / 1e9;
    const bool measured = o.bandwidth_gbs <= 0;
    const double ref = measured ? measure_read_bandwidth_gbs() : o.bandwidth_gbs;
    std::printf("decode reads %.1f MB/token (weights %.1f MB, KV %.1f MB) = %.1f GB/s, %.0f%% of %.1f GB/s (%s)\n",
                bytes / 1e6, w_bytes / 1e6, kv_bytes / 1e6, gbs, 100.0 * gbs / ref, ref,
                measured ? "streaming read measured in this run" : "given");
}

void run(const BenchOpts& o) {
    require(o.n_prompt >= 0 && o.n_gen >= 0 && o.depth >= 0, "-p, -n and -d must be ≥ 0");
    require(o.reps >= 1, "-r must be ≥ 1, got ", o.reps);
    require(o.batch >= 1 && o.batch <= 256, "-b/--batch must be in 1..256, got ", o.batch);
    require(o.bandwidth_gbs >= 0, "--bandwidth-gbs must be ≥ 0 (0 measures it), got ", o.bandwidth_gbs);
    require(o.fill == "prefill" || o.fill == "random", "--fill must be prefill or random, got '", o.fill, "'");
    set_num_threads(o.threads);
    LlamaModel model(o.model);
    select_predictor_model(model.file());  // a learned preset without model= takes its predictor
    const ModelConfig& c = model.config();
    // Room for an after-prefill step's replay of the context (KVzip: an instruction, then the context again).
    const bool replays = static_cast<bool>(parse_policy(o.cache.policy).after_prefill);
    const int64_t n_ctx = o.depth + std::max(o.n_prompt, o.n_gen) + 1 + (replays ? o.depth + 64 : 0);
    std::unique_ptr<KVCache> cache_ptr = o.cache.make_cache(model, n_ctx);
    KVCache& cache = *cache_ptr;
    BenchTokens tokens(model, o);
    const auto tok = Tokenizer::from_gguf(model.file());
    Session session(model, *tok, cache);
    const std::vector<int32_t> history = fill_to_depth(o, session, tokens);
    const KVStats filled = cache.stats();
    const double gib = static_cast<double>(model.file().file_size()) / (1 << 30);
    std::printf("model: %s | %s | %.2f GiB | threads %d | kernels %s | BLAS %s\n", o.model.c_str(), c.summary().c_str(),
                gib, num_threads(), dot_kernels().isa, blas_core_name().c_str());
    std::printf("KV cache: policy %s, %s; at depth %ld: %.1f MiB kept (full F16: %.1f MiB), compression ratio %.3f\n",
                cache.policy().describe().c_str(), o.cache.kv.spec().c_str(), static_cast<long>(o.depth),
                filled.kv_bytes_final / 1048576.0, filled.kv_bytes_full / 1048576.0, filled.compression_ratio);
    std::printf("| test | t/s | ms/token |\n|---|---|---|\n");
    const std::string at = o.depth > 0 ? " @ d" + std::to_string(o.depth) : "";
    if (o.n_prompt > 0) bench_prefill(o, session, history, tokens, at);
    if (o.n_gen > 0) bench_decode(o, session, history, tokens, at, n_ctx);
    o.cache.write_stats(cache.stats());
}
}  // namespace

void add_bench(CLI::App& app) {
    auto* cmd = app.add_subcommand("bench", "measure prefill (pp) and decode (tg) tokens/s at a context depth");
    auto o = std::make_shared<BenchOpts>();
    cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
    cmd->add_option("-p,--n-prompt", o->n_prompt, "prompt tokens for the prefill test (0: skip)")
        ->capture_default_str();
    cmd->add_option("-n,--n-gen", o->n_gen, "tokens for the decode test (0: skip)")->capture_default_str();
    cmd->add_option("-d,--depth", o->depth, "context depth before each test, in tokens")->capture_default_str();
    cmd->add_option("-b,--batch", o->batch,
                    "sequences decoding together in the decode test (one batched forward per step; t/s counts all)")
        ->capture_default_str();
    cmd->add_option("-r,--repetitions", o->reps, "timed repetitions (after one warm-up)")->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "threads (0: all cores)")->capture_default_str();
    cmd->add_option("--bandwidth-gbs", o->bandwidth_gbs,
                    "memory bandwidth to compare decode against, GB/s (0: measure a streaming read)")
        ->capture_default_str();
    cmd->add_option("--text", o->text,
                    "take the token ids from this text file (consecutive, wrapping) instead of random ones")
        ->check(CLI::ExistingFile);
    cmd->add_option("--seed", o->seed, "seed of the random token ids")->capture_default_str();
    cmd->add_option("--fill", o->fill,
                    "how the context is filled to the depth: prefill (real tokens) or random (synthetic "
                    "entries, much faster; decode cost does not depend on their values)")
        ->capture_default_str();
    o->cache.add_to(cmd);
    cmd->callback([o] { run(*o); });
}

}  // namespace kvsieve::cli
