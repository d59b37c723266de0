// kvsieve serve: the OpenAI-compatible server. Sequences share one KV pool and decode together; each request may
// name its own KV policy. SIGINT / SIGTERM stop it: running and queued requests end with a 503 error (with
// --shutdown-grace S they may first finish for up to S seconds). SIGHUP re-reads --api-key-file.
#include <algorithm>
#include <optional>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <pthread.h>
#include <thread>

#include "cli/cache_options.h"
#include "predict/bundled_predictors.h"
#include "predict/learned_methods.h"
#include "cli/commands.h"
#include "kernels/parallel.h"
#include "model/llama_model.h"
#include "policy/predictor_names.h"
#include "serve/auth.h"
#include "serve/http_server.h"
#include "serve/scheduler.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace kvsieve::cli {

namespace {
struct ServeOpts {
    std::string model, policy = "full", chat_template, cache_dir;
    std::vector<std::string> aliases;  // --alias (repeatable): the first is the id responses carry
    KVTypeOptions kv;                  // server-wide: the one pool's key and value types and rotation
    std::vector<std::string> predictors, predictor_dirs;  // NAME=PATH; folders of predictors
    double kv_pool_mb = 0;
    HttpOptions http;
    SchedulerOptions sched;
    int threads = 0;
    double max_body_mb = 8;
    double max_header_kb = 64;
    std::vector<std::string> api_keys;
    std::string api_key_file, allowed_origins;
    double shutdown_grace_s = 0;
    std::optional<double> cache_dir_quota_mb;  // not given: kDefaultCacheQuotaMb with --cache-dir
    std::optional<int> max_requests_per_key;   // not given: default_requests_per_key
};

/// --cache-dir-quota-mb's default: MiB of saved sequences each key's folder may hold, so that no key can fill the
/// disk the others save to.
constexpr double kDefaultCacheQuotaMb = 1024;

/// --max-requests-per-key's default: with API keys, the slots plus half the queue, so that no key can hold every
/// slot and the whole queue; without keys 0 (no limit: every client is the same owner, bounded by the queue).
int default_requests_per_key(const SchedulerOptions& s, bool keys) {
    return keys ? s.slots + std::max(1, s.max_queue / 2) : 0;
}

/// The options' ranges and combinations, checked before anything loads (Error naming the option).
void check_options(const ServeOpts& o) {
    require(o.kv_pool_mb >= 0, "--kv-pool-mb must be ≥ 0, got ", o.kv_pool_mb);
    require(std::isfinite(o.max_body_mb) && o.max_body_mb > 0 && o.max_body_mb <= 4096,
            "--max-body-mb must be in (0, 4096] MiB, got ", o.max_body_mb);
    require(std::isfinite(o.max_header_kb) && o.max_header_kb >= 1 && o.max_header_kb <= 16384,
            "--max-header-kb must be in [1, 16384] KiB, got ", o.max_header_kb);
    {
        HttpOptions h = o.http;
        h.max_body_bytes = static_cast<size_t>(o.max_body_mb * 1048576.0);
        h.max_header_bytes = static_cast<size_t>(o.max_header_kb * 1024.0);
        check_limits(http_limits(h));  // before the model loads: a bad limit is one error at once
    }
    require(o.http.port >= 0 && o.http.port <= 65535, "--port must be in [0, 65535], got ", o.http.port);
    require(o.http.timeout_s >= 0, "--timeout must be ≥ 0 seconds, got ", o.http.timeout_s);
    require(o.shutdown_grace_s >= 0, "--shutdown-grace must be ≥ 0 seconds, got ", o.shutdown_grace_s);
    require(o.http.ready_stall_s > 0, "--ready-stall must be > 0 seconds, got ", o.http.ready_stall_s);
    if (o.max_requests_per_key)
        require(*o.max_requests_per_key >= 0, "--max-requests-per-key must be ≥ 0, got ", *o.max_requests_per_key);
    if (o.cache_dir_quota_mb) {
        require(*o.cache_dir_quota_mb >= 0, "--cache-dir-quota-mb must be ≥ 0, got ", *o.cache_dir_quota_mb);
        require(*o.cache_dir_quota_mb == 0 || !o.cache_dir.empty(), "--cache-dir-quota-mb needs --cache-dir DIR");
    }
}

/// The predictors requests may name (model=NAME): the operator's, then the ones trained for this model under their
/// folder names (an operator's registration of the same name wins; a learned preset without model= takes its default
/// one, predict/bundled_predictors.h); each loaded once and checked against the model here.
NamedPredictors register_predictors(const ServeOpts& o, const LlamaModel& model) {
    NamedPredictors preds;
    for (const auto& d : o.predictor_dirs) preds.add_dir(d);
    for (const auto& a : o.predictors) preds.add_assignment(a);
    const std::vector<std::string> registered = preds.names();
    for (const BundledPredictor& b : ready_predictors())
        if (std::find(registered.begin(), registered.end(), b.name) == registered.end()) preds.add(b.name, b.path);
    preds.validate(model.config());
    return preds;
}

/// What the request parser needs: the tokenizer, the chat template (null: none), the model's names (its file stem
/// and --alias; a request's `model` must be one of them), the default policy, the context and the cache folder
/// (created, its stale temporaries removed).
ApiContext api_context(const ServeOpts& o, const LlamaModel& model, const Tokenizer& tok, const ChatTemplate* tmpl,
                       int64_t n_ctx, const PolicyParseOptions& policy_options) {
    ApiContext ctx;
    ctx.tok = &tok;
    ctx.chat_template = tmpl;
    const std::string stem = std::filesystem::path(o.model).stem().string();
    ctx.model_id = o.aliases.empty() ? stem : o.aliases.front();
    ctx.model_names = o.aliases;
    if (std::find(ctx.model_names.begin(), ctx.model_names.end(), stem) == ctx.model_names.end())
        ctx.model_names.push_back(stem);
    ctx.default_policy = o.policy;
    ctx.n_ctx = n_ctx;
    ctx.model = &model;
    ctx.policy_options = policy_options;
    if (!o.cache_dir.empty()) {
        std::filesystem::create_directories(o.cache_dir);
        ctx.cache_dir = o.cache_dir;
        // A save interrupted by a crash leaves its temporary behind; none is in use before the server runs.
        if (const int n = remove_stale_temporaries(o.cache_dir); n > 0)
            std::fprintf(stderr, "kvsieve serve: removed %d unfinished temporary file(s) from --cache-dir\n", n);
    }
    return ctx;
}

/// Waits for SIGINT / SIGTERM (SIGHUP re-reads the key file), then stops: with a grace period, new requests are
/// refused while the running ones finish (a second signal cuts it short); then the scheduler and the HTTP front.
void wait_for_signals(const ServeOpts& o, sigset_t& sigs, KeyRing& keys, Scheduler& sched, HttpServer& http) {
    int sig = 0;
    for (;;) {
        sigwait(&sigs, &sig);
        if (sig != SIGHUP) break;
        if (o.api_key_file.empty()) continue;
        try {  // a bad file keeps the keys in force
            std::fprintf(stderr, "kvsieve serve: key file re-read: %zu API key(s)\n", keys.reload());
        } catch (const Error& e) {
            std::fprintf(stderr, "kvsieve serve: key file not re-read (%s); the previous keys stay\n", e.what());
        }
        std::fflush(stderr);
    }
    if (o.shutdown_grace_s > 0) {
        // Graceful: new requests get 503 (and /ready 503) while the running and queued ones finish, for at most
        // the grace period or until a second signal; whatever is left then ends with a 503 error.
        std::fprintf(stderr, "kvsieve serve: stopping (signal %d): letting running requests finish, at most %g s\n",
                     sig, o.shutdown_grace_s);
        std::fflush(stderr);
        sched.drain();
        const auto end =
            std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                   std::chrono::duration<double>(o.shutdown_grace_s));
        const timespec tick{0, 50 * 1000 * 1000};
        bool again = false;
        while (!sched.idle() && std::chrono::steady_clock::now() < end && !again) {
            const int s2 = sigtimedwait(&sigs, nullptr, &tick);
            again = s2 == SIGINT || s2 == SIGTERM;
        }
        if (!sched.idle()) std::fprintf(stderr, "kvsieve serve: cancelling the requests still running\n");
    } else {
        std::fprintf(stderr, "kvsieve serve: stopping (signal %d)\n", sig);
    }
    std::fflush(stderr);
    sched.stop();
    // Every request has its last event now; give the responses a moment to send it before the sockets close.
    for (int i = 0; i < 200 && http.responses_in_flight() > 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http.stop();
}

void run(const ServeOpts& o) {
    check_options(o);
    // Signals go to one waiting thread only (blocked here, before any thread starts, so every thread inherits it).
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    // Keys are read before the model, so that a bad key file stops the server at once.
    auto keys = std::make_shared<KeyRing>(o.api_keys, o.api_key_file);
    set_num_threads(o.threads);
    LlamaModel model(o.model);
    select_predictor_model(model.file());  // a learned preset without model= takes its predictor
    const auto tok = Tokenizer::from_gguf(model.file());
    std::optional<ChatTemplate> tmpl;
    try {
        tmpl = chat_template_for_model(model.file(), tok->vocab(), o.chat_template);
    } catch (const Error& e) {
        if (!o.chat_template.empty()) throw;
        std::fprintf(stderr, "note: %s; /v1/chat/completions is off\n", e.what());
    }
    SchedulerOptions so = o.sched;
    so.cache_quota_bytes = static_cast<uint64_t>(o.cache_dir_quota_mb.value_or(kDefaultCacheQuotaMb) * 1048576.0);
    if (so.n_ctx == 0) so.n_ctx = std::min<int64_t>(model.config().n_ctx_train, 4096);
    const NamedPredictors preds = register_predictors(o, model);
    const PolicyParseOptions policy_options = preds.parse_options();
    so.policy_options = policy_options;
    // A bad default policy is an error at start, not per request; it names registered predictors as requests do.
    const Policy check = parse_policy(o.policy, policy_options);
    check_policy_fits(check, so.n_ctx);
    auto pool = o.kv.make_pool(model.config().head_dim, static_cast<uint64_t>(o.kv_pool_mb * 1048576.0));
    Scheduler sched(model, *tok, pool, so);
    const ApiContext ctx = api_context(o, model, *tok, tmpl ? &*tmpl : nullptr, so.n_ctx, policy_options);
    HttpOptions ho = o.http;
    ho.max_body_bytes = static_cast<size_t>(o.max_body_mb * 1048576.0);
    ho.max_header_bytes = static_cast<size_t>(o.max_header_kb * 1024.0);
    ho.keys = keys;
    ho.max_requests_per_key = o.max_requests_per_key.value_or(default_requests_per_key(o.sched, keys->enabled()));
    ho.allowed_origins = parse_origins(o.allowed_origins);
    HttpServer http(sched, ctx, ho);
    const int port = http.bind();
    std::fprintf(stderr, "model: %s\n", model.config().summary().c_str());
    std::fprintf(stderr, "predictors: %s\n", preds.names_text().c_str());
    std::fprintf(
        stderr,
        "kvsieve serve: listening on http://%s:%d (model id '%s', policy %s, %d slots of %ld tokens, "
        "KV pool %s, chat template %s)\n",
        ho.host.c_str(), port, ctx.model_id.c_str(), o.policy.c_str(), so.slots, static_cast<long>(so.n_ctx),
        o.kv_pool_mb > 0 ? (std::to_string(static_cast<long>(o.kv_pool_mb)) + " MiB").c_str() : "grows on demand",
        tmpl ? tmpl->name().c_str() : "none");
    if (keys->enabled())
        std::fprintf(stderr, "kvsieve serve: %zu API key(s); requests need Authorization: Bearer KEY\n", keys->size());
    else if (!is_loopback_address(ho.host))
        std::fprintf(stderr,
                     "warning: kvsieve serve listens on %s without API keys: anyone who can reach it may use it "
                     "and see every conversation (give --api-key or --api-key-file)\n",
                     ho.host.c_str());
    std::fflush(stderr);
    std::thread waiter([&] { wait_for_signals(o, sigs, *keys, sched, http); });
    http.listen();
    sched.stop();
    // listen() only returns after stop(); wake the waiter if it is still waiting (stop from elsewhere).
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
}
}  // namespace

namespace {
/// serve's options of the model, the KV cache, the scheduler and saved sequences, in the order --help lists them.
void add_engine_options(CLI::App* cmd, ServeOpts* o) {
    cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
    cmd->add_option("--alias", o->aliases,
                    "a name of the model (repeatable): a request's model must be one of these or the file name "
                    "without .gguf (else 404); the first is the id responses carry (default: the file name)");
    cmd->add_option("--host", o->http.host, "address to listen on")->capture_default_str();
    cmd->add_option("--port", o->http.port, "port (0: any free port, printed at start)")->capture_default_str();
    cmd->add_option("--policy", o->policy,
                    "default KV policy of a request (a request's kv_policy overrides it); "
                    "learned presets name a registered predictor: model=NAME")
        ->capture_default_str();
    cmd->add_option(
        "--predictor", o->predictors,
        "NAME=PATH: a learned predictor (" + learned_method_names_text() +
            " checkpoint) that policies may name as "
            "model=NAME (repeatable); loaded and checked against the model at start. Requests never name files");
    cmd->add_option("--predictor-dir", o->predictor_dirs,
                    "a folder whose subfolders are predictors, each registered under its own name (repeatable)");
    o->kv.add_to(cmd);
    add_kv_pool_option(cmd, o->kv_pool_mb, "size of the KV pool all sequences share, in MiB (0: grow on demand)");
    cmd->add_option("--slots", o->sched.slots, "sequences decoded together")->capture_default_str();
    cmd->add_option("-c,--ctx-size", o->sched.n_ctx,
                    "positions per sequence, prompt and answer (0: the model's, at most 4096)")
        ->capture_default_str();
    cmd->add_option(
           "--prefill-chunk", o->sched.prefill_chunk,
           "prompt tokens per step, interleaved with decoding (the cache keeps the same entries whatever it is; a "
           "multiple of 256 computes one batch's numbers bit for bit)")
        ->capture_default_str();
    cmd->add_flag("--compress-during-prefill", o->sched.compress_during_prefill,
                  "admit and compress after each prompt chunk, bounding a long prompt's cache (what is kept, and so "
                  "the answer, then depends on --prefill-chunk)");
    cmd->add_option("--max-conversations", o->sched.max_conversations,
                    "sequences kept between requests under a 'conversation' id (their next turn feeds only new tokens; "
                    "least recently used dropped first, or when running requests need the pages); 0: none")
        ->capture_default_str();
    cmd->add_option("--max-queue", o->sched.max_queue, "requests that may wait for a slot (one more gets 503)")
        ->capture_default_str();
    cmd->add_flag("--queue", o->sched.wait_for_memory,
                  "when the KV pool is full, a request waits for others to finish instead of failing with 503");
    cmd->add_option("--chat-template", o->chat_template,
                    "chat format instead of the model's: " + chat_template_names());
    cmd->add_option("--cache-dir", o->cache_dir,
                    "folder of saved sequences: requests may save theirs (\"cache_save\": NAME) and start from one "
                    "(\"cache_restore\": NAME)");
    cmd->add_option(
        "--cache-dir-quota-mb", o->cache_dir_quota_mb,
        "most MiB of saved sequences each API key's folder of --cache-dir may hold (without keys: the folder "
        "itself); a save past it is refused (cache_save: usage.cache_save_error; POST /v1/cache/save: 403), "
        "deleting saved sequences frees space (0: no limit; default 1024)");
    cmd->add_option("-t,--threads", o->threads, "compute threads (0: all cores)")->capture_default_str();
}

/// serve's options of the HTTP front: connections, time limits, sizes, keys and origins.
void add_http_options(CLI::App* cmd, ServeOpts* o) {
    cmd->add_option("--max-connections,--http-threads", o->http.max_connections,
                    "connections open at once, idle, reading or answering (one more: 503 and closed at once); a "
                    "request runs on a thread of its own once it has arrived whole")
        ->capture_default_str();
    cmd->add_option("--read-timeout", o->http.read_timeout_s,
                    "seconds a client has to send a whole request (line, headers and body) from its first byte; "
                    "then 408 and the connection is closed")
        ->capture_default_str();
    cmd->add_option("--keep-alive", o->http.keep_alive_s,
                    "seconds an idle keep-alive connection waits for its next request")
        ->capture_default_str();
    cmd->add_option("--max-headers", o->http.max_headers, "most header lines of a request (more: 431)")
        ->capture_default_str();
    cmd->add_option("--max-header-kb", o->max_header_kb,
                    "most KiB of a request's line and headers together (more: 431)")
        ->capture_default_str();
    cmd->add_flag("--metrics", o->http.metrics,
                  "serve GET /metrics (Prometheus text; off: 404; with keys it needs one)");
    cmd->add_option(
        "--api-key", o->api_keys,
        "an API key clients must present (Authorization: Bearer KEY); repeatable. Each key sees only its own "
        "conversations and saved sequences");
    cmd->add_option("--api-key-file", o->api_key_file,
                    "file of API keys, one per line ('#' comments and blank lines ignored); re-read on SIGHUP")
        ->check(CLI::ExistingFile);
    cmd->add_option("--timeout", o->http.timeout_s,
                    "seconds a generation request may take, queue included (0: no limit); then 504, or a last error "
                    "event in a stream")
        ->capture_default_str();
    cmd->add_option("--max-requests-per-key", o->max_requests_per_key,
                    "generation requests one API key may have running or queued at once (one more: 429; 0: no "
                    "limit). Default with API keys: --slots plus half of --max-queue; without keys no limit (all "
                    "clients are one owner). Free slots go to the key running the fewest requests");
    cmd->add_option(
           "--shutdown-grace", o->shutdown_grace_s,
           "on SIGTERM / SIGINT, seconds running and queued requests may take to finish while new ones get 503 "
           "(0: end them at once with 503; a second signal ends the wait)")
        ->capture_default_str();
    cmd->add_option("--ready-stall", o->http.ready_stall_s,
                    "GET /ready answers 503 when the scheduler has made no progress for this many seconds while "
                    "requests wait")
        ->capture_default_str();
    cmd->add_option("--allowed-origins", o->allowed_origins,
                    "comma-separated origins (https://app.example:8443) whose browser pages may call the server; a "
                    "request with another Origin header gets 403 (default: none)");
    cmd->add_option("--max-body-mb", o->max_body_mb, "largest request body in MiB (larger: 413)")
        ->capture_default_str();
}

}  // namespace

void add_serve(CLI::App& app) {
    auto* cmd = app.add_subcommand("serve",
                                   "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, "
                                   "/v1/models, /health, /metrics with --metrics); sequences share one KV pool");
    auto o = std::make_shared<ServeOpts>();
    add_engine_options(cmd, o.get());
    add_http_options(cmd, o.get());
    cmd->callback([o] { run(*o); });
}

}  // namespace kvsieve::cli
