#pragma once
// The OpenAI-compatible HTTP server of the scheduler (on the front of serve/http_front.h): /v1/completions, /v1/chat/completions,
// /v1/models, /health and (with HttpOptions::metrics) /metrics; and kvsieve's /v1/cache/save, /v1/cache/restore and /v1/cache/conversations.
#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <vector>

#include "serve/auth.h"
#include "serve/http_front.h"
#include "serve/metrics.h"
#include "serve/openai_api.h"
#include "serve/scheduler.h"

namespace kvsieve {

class HttpFront;

/// The server's options; HttpServer's constructor checks their ranges (Error naming the option).
struct HttpOptions {
    std::string host = "127.0.0.1";
    int port = 8080;  ///< 0: any free port (bind() returns it)
    /// A request announcing a longer body (Content-Length, in bytes) gets 413 before any of it is read.
    size_t max_body_bytes = 8u << 20;
    /// Connections open at once, idle, reading or answering (HttpLimits::max_connections); one more is answered 503
    /// and closed at once. A slow or idle connection holds no thread, only its buffer.
    int max_connections = 1024;
    /// Seconds a client has to send a whole request (line, headers and body) from its first byte; then 408 and
    /// the connection is closed.
    double read_timeout_s = 10;
    double keep_alive_s = 5;              ///< seconds an idle keep-alive connection waits for its next request
    int max_headers = 100;                ///< header lines of a request (more: 431)
    size_t max_header_bytes = 64u << 10;  ///< bytes of a request's line and headers (more: 431)
    bool metrics = false;                 ///< serve GET /metrics (otherwise it is a 404 like any unknown path)
    /// API keys (null or !enabled(): none, every client is the same anonymous owner). With keys every endpoint but
    /// /health needs `Authorization: Bearer KEY` (401 otherwise), and each key sees only its own sequences.
    std::shared_ptr<KeyRing> keys;
    /// Origins (scheme://host[:port]) whose browser pages may call the server; a request with another Origin
    /// header is refused with 403 (none by default: every browser page from elsewhere is refused).
    std::vector<std::string> allowed_origins;
    /// Seconds a generation request may take from its arrival, queue included (0: no limit): a non-streamed one
    /// then gets 504, a stream ends with a last `data: {"error": …504…}` event; the request is cancelled.
    double timeout_s = 0;
    /// Generation requests one key may have running or queued at once (0: no limit); one more gets 429. Without
    /// keys all clients count as one.
    int max_requests_per_key = 0;
    /// GET /ready answers 503 when the scheduler has made no progress for this many seconds while requests wait.
    double ready_stall_s = 30;
};

/// The front's limits of `opts` (HttpLimits: check_limits() checks them).
HttpLimits http_limits(const HttpOptions& opts);

/// Routes requests to the scheduler. POST bodies are parsed by parse_api_request (errors: JSON bodies with the
/// status ApiError gives; invalid JSON 400; a body over max_body_bytes 413; queue full or KV pool exhausted 503).
/// A streamed request (`stream: true`) answers with server-sent events `data: {chunk}` ending in `data: [DONE]`;
/// its status is that of its first event, so a request the pool cannot hold gets 503 even when streamed; an error
/// after the first token comes as a last `data: {"error": …}` event. A client that closes its connection cancels
/// its request, streamed or not, while it waits in the queue, during its prefill and during decoding: the
/// connection's socket (HttpRequest::socket) is polled every 100 ms, the request is cancelled at once when the peer
/// is gone (client_gone), and the scheduler drops it and frees its pages at its next step (so within one
/// prefill chunk or decode step). Such a request is logged with status 499. POST /v1/cache/save and /v1/cache/restore
/// (parse_cache_op) save a kept conversation or running slot to --cache-dir and keep a saved file under a
/// conversation id (Scheduler::save / restore; errors with CacheOpError's status); GET /v1/cache/conversations
/// lists the kept ones, DELETE /v1/cache/conversations/ID drops one (404 when none is kept). GET /ready is 200
/// {"status": "ready"} when the server takes requests, else 503 with the reason: stopping (draining or stopped),
/// the queue full, or no scheduler progress for ready_stall_s while requests wait.
/// Before any route: a server bound to a loopback address answers only requests whose Host header names loopback
/// (403: DNS rebinding), and a request with an Origin header not in allowed_origins is refused (403). With keys,
/// a request without a valid key gets 401 (the key is checked once, and the request runs as its owner to the end,
/// even if the key is revoked meanwhile); POST bodies must be `Content-Type: application/json` (415).
class HttpServer {
public:
    HttpServer(Scheduler& scheduler, ApiContext ctx, HttpOptions opts);
    ~HttpServer();
    /// Binds the address; returns the port. Throws Error when it cannot (address in use, bad host).
    int bind();
    /// Serves until stop() (call after bind()).
    void listen();
    /// Makes listen() return; safe from another thread. Responses still being written are cut off: after
    /// Scheduler::stop(), wait for responses_in_flight() to reach 0 (bounded) first.
    void stop();
    /// Generation responses not yet fully sent (their last event included).
    int responses_in_flight();

private:
    /// Registers every route of serve/routes.h with its handler, and the checks every request passes first.
    void routes();
    /// The front's hooks: check_head before any body byte, JSON error bodies, the per-route counters.
    void front_hooks();
    /// A handler that runs for the request's owner ("" without keys).
    using OwnedHandler = std::function<void(const HttpRequest&, HttpResponse&, const std::string& owner)>;
    /// `h` behind the key (with keys: 401 and WWW-Authenticate without a valid one) and, for a POST (`post`), a
    /// JSON body (415 else); a POST with keys and --cache-dir makes the owner's folder for saved sequences.
    HttpFront::Handler guarded(bool post, OwnedHandler h);
    /// GET /health: 200 {"status": "ok"} while the scheduler runs, else 503 "stopped"; liveness only, no figures.
    void health(HttpResponse& res) const;
    /// GET /ready (the class comment above).
    void ready(HttpResponse& res) const;
    /// GET /v1/models: the model under its id and each alias, with the learned presets ready for it
    /// (`kv_predictors`: preset → predictor names, the default first; never a path).
    void models(HttpResponse& res) const;
    /// GET /v1/cache/conversations: `owner`'s kept conversations (id, tokens, KV bytes, policy), no one else's.
    void list_conversations(HttpResponse& res, const std::string& owner) const;
    /// DELETE /v1/cache/conversations/ID: drops `owner`'s conversation ID (404 when none is kept, 503 when busy).
    void drop_conversation(const HttpRequest& req, HttpResponse& res, const std::string& owner);
    /// DELETE /v1/cache/saved/NAME: removes a saved sequence of `owner`'s folder (404 when there is none).
    void delete_saved(const HttpRequest& req, HttpResponse& res, const std::string& owner) const;
    /// The checks of a request whose head is in, before any byte of its body is read: the Host header on a loopback
    /// server, the Origin against allowed_origins (and a browser's preflight), and with keys a valid key for a
    /// request with a body or to a route that needs one. True when it answered the request (res is the answer).
    bool check_head(const HttpRequest& req, HttpResponse& res, bool loopback) const;
    /// POST /v1/completions and /v1/chat/completions (`chat`) for `owner`: parses the body, submits the request(s)
    /// to the scheduler and answers them, streamed or whole, under the server's --timeout and the owner's share.
    void generate(const HttpRequest& req, HttpResponse& res, const std::string& owner, bool chat);
    /// generate()'s start: parses the body into `ar`, takes one of the owner's places and submits the choices into
    /// `hs`. False when it answered the request instead (400, 404, 413, 422 … from the API's checks, 429 no place, 503
    /// busy), every submitted choice cancelled.
    bool submit_generation(const HttpRequest& req, HttpResponse& res, const std::string& owner, bool chat,
                           ApiRequest& ar, std::vector<std::shared_ptr<RequestHandle>>& hs,
                           std::shared_ptr<void>& place);
    /// POST /v1/cache/save (`restore` false) and /v1/cache/restore for `owner`.
    void cache_op(const HttpRequest& req, HttpResponse& res, const std::string& owner, bool restore);

    Scheduler& sched_;
    ApiContext ctx_;
    HttpOptions opts_;
    HttpCounters counters_;
    std::unique_ptr<HttpFront> svr_;
    std::atomic<uint64_t> next_id_{1};
    std::mutex in_flight_mu_;
    std::map<std::string, int> in_flight_;  ///< generation requests per owner, for max_requests_per_key
    /// A ticket of one of `owner`'s max_requests_per_key places (released when the last copy goes), or null when
    /// all are taken.
    std::shared_ptr<void> take_place(const std::string& owner);
};

}  // namespace kvsieve
