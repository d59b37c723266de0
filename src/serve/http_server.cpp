#include "serve/http_server.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include <sys/stat.h>

#include "predict/bundled_predictors.h"
#include "serve/client_socket.h"
#include "serve/http_front.h"
#include "serve/json_body.h"
#include "serve/routes.h"

namespace kvsieve {

namespace {
using json = nlohmann::json;

void send_json(HttpResponse& res, int status, const json& body) {
    res.status = status;
    res.set_content(dump_json(body), "application/json");
}

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

using Clock = std::chrono::steady_clock;

/// How often a waiting request looks at its client's connection (and the deadline).
constexpr std::chrono::milliseconds kClientPoll{100};

enum class Wait { kEvent, kDeadline, kClientGone };

/// Waits for the next event of `h`: kEvent (in `ev`) when it comes first, kDeadline when `deadline` passes first,
/// kClientGone when the client of connection socket `sock` has gone away (client_gone: checked at each call, so also
/// while events come fast, and every kClientPoll while none comes; one poll() costs about a microsecond).
Wait next_before(RequestHandle& h, Clock::time_point deadline, int sock, GenerationEvent& ev) {
    for (;;) {
        if (client_gone(sock)) return Wait::kClientGone;
        const auto now = Clock::now();
        if (now >= deadline) return Wait::kDeadline;
        const auto wait = std::min<Clock::duration>(deadline - now, kClientPoll);
        if (h.next(ev, std::chrono::duration_cast<std::chrono::milliseconds>(wait) + std::chrono::milliseconds(1)))
            return Wait::kEvent;
    }
}

/// A streamed answer: its choices one after the other as server-sent events (all run at once; the later ones'
/// events wait in their handles), the first event already taken (it decided the status). write_next() writes the
/// next event's chunks and returns false when the client cannot be written to or has gone (the request is then
/// cancelled by release()); the last event of the last choice ends the stream with the usage chunk (if asked) and
/// `data: [DONE]`, an error ends it with an error event.
struct ChoiceStream {
    std::vector<std::shared_ptr<RequestHandle>> hs;  // one per choice
    ApiRequest ar;
    std::string id, model, owner, timed_out;
    int64_t created = 0;
    Clock::time_point deadline;
    std::shared_ptr<void> place;  // the owner's place, held to the end of the stream
    int sock = -1;
    const Tokenizer* tok = nullptr;

    size_t cur = 0;       // the choice being written
    bool opened = false;  // its first chunk (chat: the role; echo: the prompt) is written
    bool finished = false;
    size_t offset = 0;  // bytes of token pieces written in the choice (text_offset)
    int64_t completion_tokens = 0;
    GenerationUsage usage;  // the first choice's (the others did not run the prompt)
    GenerationEvent pending;
    bool has_pending = true;

    bool write_next(HttpSink& sink) {
        if (client_gone(sock)) return false;  // the releaser cancels the request
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        auto cancel = [&] {
            for (auto& h : hs) h->cancel();
        };
        const int index = static_cast<int>(cur);
        RequestHandle& h = *hs[cur];
        GenerationEvent ev;
        if (has_pending) {
            ev = std::move(pending);
            has_pending = false;
        } else {
            for (;;) {
                if (Clock::now() >= deadline) {  // the stream ends with the error as its last event
                    cancel();
                    ev.kind = GenerationEvent::Kind::kError;
                    ev.status = 504;
                    ev.error = timed_out;
                    break;
                }
                if (h.next(ev, kClientPoll)) break;
                if (!sink.is_writable() || client_gone(sock)) return false;
            }
        }
        if (!opened && ev.kind != GenerationEvent::Kind::kError) {
            opened = true;
            offset = 0;
            if (ar.chat && !write(sse(chunk_body(ar, id, created, model, "", "", true, index)))) return false;
            // The echoed prompt: with the prompt's log-probabilities when they were asked for (they come
            // as this choice's first event), else alone.
            if (ar.echo && !ar.gen.prompt_logprobs) {
                if (!write(sse(chunk_body(ar, id, created, model, ar.echo_text, "", false, index)))) return false;
                offset = ar.echo_text.size();
            }
        }
        if (ev.kind == GenerationEvent::Kind::kText) {
            json lp = nullptr;
            std::string text = ev.text;
            if (!ev.prompt_logprobs.empty()) {
                text = ar.echo_text + text;
                lp = logprobs_json(ar, *tok, ev.prompt_logprobs, ev.logprobs, offset);
            } else if (ar.gen.logprobs >= 0 && !ev.logprobs.empty()) {
                lp = logprobs_json(ar, *tok, {}, ev.logprobs, offset);
            }
            for (const auto* list : {&ev.prompt_logprobs, &ev.logprobs})
                for (const TokenLogprob& t : *list) offset += tok->token_to_piece(t.token, true).size();
            return write(sse(chunk_body(ar, id, created, model, text, "", false, index, lp)));
        }
        if (ev.kind == GenerationEvent::Kind::kError) {
            cancel();
            write(sse(error_body(ev.status, for_client(owner, ev.error))));
        } else {
            if (!write(sse(chunk_body(ar, id, created, model, "", ev.finish_reason, false, index)))) return false;
            completion_tokens += ev.usage.completion_tokens;
            if (cur == 0) usage = ev.usage;
            if (cur + 1 < hs.size()) {  // the next choice
                ++cur;
                opened = false;
                return true;
            }
            GenerationUsage u = usage;
            u.completion_tokens = completion_tokens;
            if (ar.include_usage && !write(sse(usage_chunk_body(ar, id, created, model, u)))) return false;
            if (!write("data: [DONE]\n\n")) return false;
        }
        finished = true;
        sink.done();
        return true;
    }

    /// The stream's end, written or not: a client that went away before the last event cancels every choice.
    void release() {
        if (!finished)
            for (auto& h : hs) h->cancel();
    }
};
}  // namespace

std::shared_ptr<void> HttpServer::take_place(const std::string& owner) {
    std::lock_guard<std::mutex> lk(in_flight_mu_);
    int& n = in_flight_[owner];
    if (opts_.max_requests_per_key > 0 && n >= opts_.max_requests_per_key) return nullptr;
    ++n;
    return std::shared_ptr<void>(new int(0), [this, owner](void* p) {
        delete static_cast<int*>(p);
        std::lock_guard<std::mutex> lk(in_flight_mu_);
        if (--in_flight_[owner] == 0) in_flight_.erase(owner);
    });
}

HttpLimits http_limits(const HttpOptions& o) {
    HttpLimits l;
    l.max_header_bytes = o.max_header_bytes;
    l.max_headers = o.max_headers;
    l.max_body_bytes = o.max_body_bytes;
    l.request_timeout_s = o.read_timeout_s;
    l.keep_alive_s = o.keep_alive_s;
    l.max_connections = o.max_connections;
    return l;
}

HttpServer::HttpServer(Scheduler& scheduler, ApiContext ctx, HttpOptions opts)
    : sched_(scheduler), ctx_(std::move(ctx)), opts_(std::move(opts)),
      svr_(std::make_unique<HttpFront>(http_limits(opts_))) {
    routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::responses_in_flight() {
    std::lock_guard<std::mutex> lk(in_flight_mu_);
    int n = 0;
    for (const auto& [owner, k] : in_flight_) n += k;
    return n;
}

int HttpServer::bind() { return svr_->bind(opts_.host, opts_.port); }

void HttpServer::listen() { svr_->listen(); }
void HttpServer::stop() { svr_->stop(); }

void HttpServer::routes() {
    front_hooks();
    // Every route comes from the table of serve/routes.h (which docs/openapi.json describes); another one fails here.
    auto on = [this](const char* method, const char* path, HttpFront::Handler h) {
        svr_->on(method, find_route(method, path).path, std::move(h));
    };
    using Req = const HttpRequest&;
    using Res = HttpResponse&;
    using Owner = const std::string&;
    on("GET", "/health", [this](Req, Res res) { health(res); });
    if (opts_.metrics)
        on("GET", "/metrics", guarded(false, [this](Req, Res res, Owner) {
               res.set_content(prometheus_text(sched_.snapshot(), counters_, ctx_.model_id),
                               "text/plain; version=0.0.4");
           }));
    on("GET", "/ready", [this](Req, Res res) { ready(res); });
    // The OpenAPI document of these routes (no key needed: it describes, it does not serve).
    on("GET", "/openapi.json", [](Req, Res res) {
        res.status = 200;
        res.set_content(std::string(openapi_document()), "application/json");
    });
    on("GET", "/v1/models", guarded(false, [this](Req, Res res, Owner) { models(res); }));
    // Saved sequences and kept conversations (docs/serving.md).
    on("POST", "/v1/cache/save", guarded(true, [this](Req q, Res r, Owner o) { cache_op(q, r, o, false); }));
    on("POST", "/v1/cache/restore", guarded(true, [this](Req q, Res r, Owner o) { cache_op(q, r, o, true); }));
    on("GET", "/v1/cache/conversations", guarded(false, [this](Req, Res r, Owner o) { list_conversations(r, o); }));
    on("DELETE", "/v1/cache/conversations/{id}",
       guarded(false, [this](Req q, Res r, Owner o) { drop_conversation(q, r, o); }));
    on("DELETE", "/v1/cache/saved/{name}", guarded(false, [this](Req q, Res r, Owner o) { delete_saved(q, r, o); }));
    // The tokenizer (the shapes of vLLM's endpoints; lm-evaluation-harness's remote tokenizer reads them).
    for (const char* path : {"/tokenize", "/detokenize"}) {
        const bool encode = std::string(path) == "/tokenize";
        on("POST", path, guarded(true, [this, encode](Req req, Res res, Owner) {
               try {
                   const json body = parse_json_body(req.body);
                   send_json(res, 200, encode ? tokenize_answer(body, ctx_) : detokenize_answer(body, ctx_));
               } catch (const StatusError& e) { send_json(res, e.status(), error_body(e.status(), e.what())); }
           }));
    }
    on("GET", "/tokenizer_info",
       guarded(false, [this](Req, Res res, Owner) { send_json(res, 200, tokenizer_info(ctx_)); }));
    for (const char* path : {"/v1/completions", "/completions", "/v1/chat/completions", "/chat/completions"}) {
        const bool chat = std::string(path).find("chat") != std::string::npos;
        on("POST", path, guarded(true, [this, chat](Req q, Res r, Owner o) { generate(q, r, o, chat); }));
    }
}

void HttpServer::front_hooks() {
    const bool loopback = is_loopback_address(opts_.host);
    // Checks of every request when its head is in, before its body is read: where it claims to go (Host), which
    // page sent it (Origin), and, with keys, who sends it: a request with a body, or to a route that needs a key,
    // without a valid key is refused here, so that no byte of an unauthenticated body is ever read.
    svr_->set_head_check(
        [this, loopback](const HttpRequest& req, HttpResponse& res) { return check_head(req, res, loopback); });
    // Every error the front answers itself, and a handler's error without a body, gets a JSON body.
    svr_->set_error_body([](const HttpRequest&, HttpResponse& res, const std::string& message) {
        send_json(res, res.status, error_body(res.status, message));
    });
    svr_->set_logger([this](const HttpRequest& req, const HttpResponse& res) {
        counters_.count(route_label(req.path), res.status);
    });
}

HttpFront::Handler HttpServer::guarded(bool post, OwnedHandler h) {
    return [this, post, h = std::move(h)](const HttpRequest& req, HttpResponse& res) {
        std::string owner;
        if (opts_.keys && opts_.keys->enabled()) {
            std::optional<std::string> o = opts_.keys->owner_of(req.header("Authorization"));
            if (!o) {
                res.set_header("WWW-Authenticate", "Bearer");
                return send_json(res, 401, error_body(401, "a valid API key is required (Authorization: Bearer KEY)"));
            }
            owner = std::move(*o);  // from here on the request is this owner's, whatever happens to the key
        }
        if (post && !is_json_content_type(req.header("Content-Type")))
            return send_json(
                res, 415, error_body(415, "the request body must be JSON, sent with Content-Type: application/json"));
        if (post && !owner.empty() && !ctx_.cache_dir.empty())
            ::mkdir((ctx_.cache_dir + "/" + owner).c_str(), 0700);  // the owner's saved files (exists: fine)
        h(req, res, owner);
    };
}

void HttpServer::health(HttpResponse& res) const {
    const SchedulerSnapshot snap = sched_.snapshot();
    // Liveness only, for anyone: the pool's figures (which tell how long others' conversations are) are in
    // /metrics, behind the key.
    send_json(res, snap.running ? 200 : 503, {{"status", snap.running ? "ok" : "stopped"}});
}

void HttpServer::ready(HttpResponse& res) const {
    const SchedulerSnapshot snap = sched_.snapshot();
    std::string why;
    if (!snap.running || snap.draining)
        why = "the server is shutting down";
    else if (snap.queued >= snap.max_queue && static_cast<int>(snap.active.size()) >= snap.slots)
        why = "all slots are busy and the queue is full";
    else if (snap.stalled_s > opts_.ready_stall_s)
        why = "the scheduler has made no progress for " + std::to_string(static_cast<int64_t>(snap.stalled_s)) +
              " s while requests wait";
    if (why.empty()) return send_json(res, 200, {{"status", "ready"}});
    send_json(res, 503, {{"status", "not ready"}, {"reason", why}});
}

void HttpServer::models(HttpResponse& res) const {
    json m = {{"id", ctx_.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "kvsieve"}};
    // The learned presets ready for this model: the names of its predictors (never their paths), default first.
    json ready = json::object();
    for (const BundledPredictor& p : ready_predictors()) {
        json& names = ready[p.preset];
        if (!names.is_array()) names = json::array();
        if (p.is_default)
            names.insert(names.begin(), p.name);
        else
            names.push_back(p.name);
    }
    m["kv_predictors"] = ready;
    // The model under its id, then under each other name a request may give (--alias).
    json data = json::array({m});
    for (const std::string& name : ctx_.model_names)
        if (name != ctx_.model_id) {
            json a = m;
            a["id"] = name;
            data.push_back(a);
        }
    send_json(res, 200, {{"object", "list"}, {"data", data}});
}

void HttpServer::list_conversations(HttpResponse& res, const std::string& owner) const {
    json data = json::array();
    for (const auto& c : sched_.snapshot().conversations)
        if (std::optional<std::string> id = client_id(owner, c.id))
            data.push_back({{"id", *id}, {"tokens", c.tokens}, {"kv_bytes", c.kv_bytes}, {"policy", c.policy}});
    send_json(res, 200, {{"object", "list"}, {"data", data}});
}

void HttpServer::drop_conversation(const HttpRequest& req, HttpResponse& res, const std::string& owner) {
    const std::string id = req.matches[1];
    try {
        if (!sched_.drop(scoped_id(owner, id)))
            return send_json(res, 404, error_body(404, "no conversation '" + excerpt(id, 64) + "' is kept"));
        send_json(res, 200, {{"id", id}, {"object", "kv_cache.conversation"}, {"deleted", true}});
    } catch (const ServerBusy& e) { send_json(res, 503, error_body(503, e.what())); }
}

void HttpServer::delete_saved(const HttpRequest& req, HttpResponse& res, const std::string& owner) const {
    // A saved sequence of the owner's folder removed (its bytes no longer count against --cache-dir-quota-mb).
    const std::string name = req.matches[1];
    try {
        const std::string path = cache_path(json(name), "name", ctx_, owner);
        std::error_code ec;
        if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec)) ||
            !std::filesystem::remove(path, ec))
            return send_json(res, 404, error_body(404, "no saved sequence '" + name + "' in the server's --cache-dir"));
        send_json(res, 200, {{"name", name}, {"object", "kv_cache.saved"}, {"deleted", true}});
    } catch (const StatusError& e) { send_json(res, e.status(), error_body(e.status(), e.what())); }
}

bool HttpServer::check_head(const HttpRequest& req, HttpResponse& res, bool loopback) const {
    if (loopback && !is_loopback_host_header(req.header("Host"))) {
        send_json(res, 403,
                  error_body(403,
                             "the Host header must name the loopback address (127.0.0.1, localhost or [::1]) "
                             "on a server bound to it"));
        return true;
    }
    if (req.has_header("Origin")) {
        const std::string origin = req.header("Origin");
        if (std::find(opts_.allowed_origins.begin(), opts_.allowed_origins.end(), origin) ==
            opts_.allowed_origins.end()) {
            send_json(res, 403,
                      error_body(403, "requests from the origin '" + excerpt(origin, 100) +
                                          "' are not allowed (the server's --allowed-origins)"));
            return true;
        }
        res.set_header("Access-Control-Allow-Origin", origin);
        res.set_header("Vary", "Origin");
        if (req.method == "OPTIONS") {  // a browser's preflight
            res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE");
            res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
            res.set_header("Access-Control-Max-Age", "600");
            res.status = 204;
            return true;
        }
    }
    if (opts_.keys && opts_.keys->enabled()) {
        const std::string route = match_route_path(req.path);
        const bool open = route == "/health" || route == "/ready" || route == "/openapi.json";
        const bool body = (!req.header("Content-Length").empty() && req.header("Content-Length") != "0") ||
                          req.has_header("Transfer-Encoding");
        if ((body || (!route.empty() && !open)) && !opts_.keys->owner_of(req.header("Authorization"))) {
            res.set_header("WWW-Authenticate", "Bearer");
            send_json(res, 401, error_body(401, "a valid API key is required (Authorization: Bearer KEY)"));
            return true;
        }
    }
    return false;
}

void HttpServer::generate(const HttpRequest& req, HttpResponse& res, const std::string& owner, bool chat) {
    // The deadline counts from the request's arrival: time in the queue is part of it.
    const Clock::time_point deadline =
        opts_.timeout_s > 0
            ? Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts_.timeout_s))
            : Clock::time_point::max();
    const std::string timed_out = "the request did not finish within the server's --timeout of " +
                                  dump_json(json(opts_.timeout_s)) + " s; it was cancelled";
    ApiRequest ar;
    std::vector<std::shared_ptr<RequestHandle>> hs;  // one per choice
    std::shared_ptr<void> place;
    if (!submit_generation(req, res, owner, chat, ar, hs, place)) return;
    auto cancel_all = [&hs] {
        for (auto& h : hs) h->cancel();
    };
    // The client's connection, polled while the request waits for its events: a client that leaves cancels it.
    const int sock = req.socket;
    // The next event of handle `h` into `ev`; false when the request ended without one: the client left (499)
    // or the deadline passed (504), the request cancelled and the answer set.
    auto next = [&](RequestHandle& h, GenerationEvent& ev) {
        const Wait w = next_before(h, deadline, sock, ev);
        if (w == Wait::kEvent) return true;
        cancel_all();
        if (w == Wait::kClientGone)
            send_json(res, 499, error_body(499, "the client closed the connection; the request was cancelled"));
        else
            send_json(res, 504, error_body(504, timed_out));
        return false;
    };
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    // The server's own model name, never the client's `model` value: a stream repeats it in every chunk.
    const std::string& model = ctx_.model_id;
    // The first event decides the status: an error before any text is the response itself.
    GenerationEvent first;
    if (!next(*hs[0], first)) return;
    if (first.kind == GenerationEvent::Kind::kError) {
        cancel_all();
        return send_json(res, first.status, error_body(first.status, for_client(owner, first.error)));
    }
    if (!ar.stream) {
        std::vector<ChoiceResult> choices(hs.size());
        for (size_t i = 0; i < hs.size(); ++i) {
            GenerationEvent ev;
            if (i == 0) {
                ev = std::move(first);
            } else if (!next(*hs[i], ev)) {
                return;
            }
            ChoiceResult& c = choices[i];
            while (ev.kind == GenerationEvent::Kind::kText) {
                c.text += ev.text;
                for (auto& t : ev.prompt_logprobs) c.prompt_logprobs.push_back(std::move(t));
                for (auto& t : ev.logprobs) c.logprobs.push_back(std::move(t));
                if (!next(*hs[i], ev)) return;
            }
            if (ev.kind == GenerationEvent::Kind::kError) {
                cancel_all();
                return send_json(res, ev.status, error_body(ev.status, for_client(owner, ev.error)));
            }
            c.done = std::move(ev);
        }
        return send_json(res, 200, completion_body(ar, id, created, model, choices, *ctx_.tok));
    }
    auto st = std::make_shared<ChoiceStream>();
    st->hs = hs;
    st->ar = ar;
    st->id = id;
    st->model = model;
    st->owner = owner;
    st->timed_out = timed_out;
    st->created = created;
    st->deadline = deadline;
    st->place = place;
    st->sock = sock;
    st->tok = ctx_.tok;
    st->pending = std::move(first);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [st](HttpSink& sink) { return st->write_next(sink); }, [st](bool) { st->release(); });
}

bool HttpServer::submit_generation(const HttpRequest& req, HttpResponse& res, const std::string& owner, bool chat,
                                   ApiRequest& ar, std::vector<std::shared_ptr<RequestHandle>>& hs,
                                   std::shared_ptr<void>& place) {
    auto refuse = [&](int status, const json& body) {
        for (auto& h : hs) h->cancel();
        send_json(res, status, body);
        return false;
    };
    try {
        ar = parse_api_request(parse_json_body(req.body), chat, ctx_, owner);
        place = take_place(owner);
        if (!place)
            return refuse(429,
                          error_body(429, "this key already has " + std::to_string(opts_.max_requests_per_key) +
                                              " requests running or waiting (the server's --max-requests-per-key)"));
        // The choices share the prompt's prefill; choice i samples with the seed + i.
        hs = sched_.submit_choices(ar.gen, ar.n);
        return true;
    } catch (const ApiError& e) {
        return refuse(e.status(), error_body(e.status(), for_client(owner, e.what()), e.code()));
    } catch (const ServerBusy& e) { return refuse(503, error_body(503, e.what())); } catch (const Error& e) {
        return refuse(400, error_body(400, e.what()));
    }
}

void HttpServer::cache_op(const HttpRequest& req, HttpResponse& res, const std::string& owner, bool restore) {
    try {
        const json body = parse_json_body(req.body);
        const CacheOpRequest op = parse_cache_op(body, restore, ctx_, owner);
        auto answer = [&](const char* object, CacheOpResult r) {
            if (!r.conversation.empty()) r.conversation = client_id(owner, r.conversation).value_or("");
            send_json(res, 200, cache_op_body(object, op.name, r));
        };
        if (!restore) return answer("kv_cache.saved", sched_.save(op.ref, op.path));
        if (!std::filesystem::exists(op.path))
            throw ApiError(404, "no saved sequence '" + op.name + "' in the server's --cache-dir");
        std::shared_ptr<const SavedSequence> saved;
        try {
            saved = std::make_shared<const SavedSequence>(read_sequence(op.path, *ctx_.model, op.name + ".kvseq"));
        } catch (const Error& e) { throw ApiError(400, "'" + op.name + "': " + e.what()); }
        answer("kv_cache.restored", sched_.restore(saved, op.ref.conversation, owner));
    } catch (const StatusError& e) {  // ApiError from the body, CacheOpError from the scheduler
        send_json(res, e.status(), error_body(e.status(), for_client(owner, e.what())));
    } catch (const ServerBusy& e) { send_json(res, 503, error_body(503, e.what())); }
}

}  // namespace kvsieve
