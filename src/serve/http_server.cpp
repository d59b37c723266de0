#include "serve/http_server.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include "serve/json_body.h"

namespace kvsieve {

namespace {
using json = nlohmann::json;

void send_json(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(dump_json(body), "application/json");
}

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }
}  // namespace

HttpServer::HttpServer(Scheduler& scheduler, ApiContext ctx, HttpOptions opts)
    : sched_(scheduler), ctx_(std::move(ctx)), opts_(std::move(opts)), svr_(std::make_unique<httplib::Server>()) {
    const SchedulerOptions& so = sched_.options();
    const int threads = opts_.threads > 0 ? opts_.threads : std::max(8, 2 * so.slots + so.max_queue + 4);
    svr_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr_->set_payload_max_length(opts_.max_body_bytes);
    svr_->set_read_timeout(60, 0);
    svr_->set_write_timeout(60, 0);
    routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
    int port = opts_.port;
    if (port == 0) {
        port = svr_->bind_to_any_port(opts_.host);
        if (port < 0) fail("cannot listen on ", opts_.host, " (any port)");
    } else if (!svr_->bind_to_port(opts_.host, port)) {
        fail("cannot listen on ", opts_.host, ":", port, " (address in use or not available)");
    }
    return port;
}

void HttpServer::listen() { svr_->listen_after_bind(); }
void HttpServer::stop() { svr_->stop(); }

void HttpServer::routes() {
    httplib::Server& s = *svr_;
    // Every error status gets a JSON body naming the problem (httplib's own 404 / 413 / 400 have none).
    s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        std::string msg;
        if (res.status == 404) msg = "no endpoint " + excerpt(req.method, 16) + " " + excerpt(req.path);
        else if (res.status == 413)
            msg = "the request body is larger than the server's limit of " + std::to_string(opts_.max_body_bytes) + " bytes";
        else if (res.status == 405) msg = "method " + excerpt(req.method, 16) + " is not allowed on " + excerpt(req.path);
        else msg = "bad request";
        send_json(res, res.status, error_body(res.status, msg));
    });
    s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string msg = "internal error";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            msg = excerpt(e.what(), 2 * kMaxQuotedBytes);
        } catch (...) {
        }
        send_json(res, 500, error_body(500, msg));
    });
    s.set_logger([this](const httplib::Request& req, const httplib::Response& res) { counters_.count(route_label(req.path), res.status); });

    s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        const SchedulerSnapshot snap = sched_.snapshot();
        json j = {{"status", snap.running ? "ok" : "stopped"},
                  {"slots", snap.slots},
                  {"slots_busy", snap.active.size()},
                  {"queued", snap.queued},
                  {"kv_bytes_in_use", snap.pool_pages_in_use * snap.pool_page_bytes},
                  {"kv_bytes_free", (snap.pool_pages_capacity - snap.pool_pages_in_use) * snap.pool_page_bytes}};
        send_json(res, snap.running ? 200 : 503, j);
    });
    if (opts_.metrics)
        s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(prometheus_text(sched_.snapshot(), counters_, ctx_.model_id), "text/plain; version=0.0.4");
        });
    s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
        json m = {{"id", ctx_.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "kvsieve"}};
        send_json(res, 200, {{"object", "list"}, {"data", json::array({m})}});
    });

    auto generate = [this](const httplib::Request& req, httplib::Response& res, bool chat) {
        json body;
        ApiRequest ar;
        std::shared_ptr<RequestHandle> h;
        try {
            body = parse_json_body(req.body);
            ar = parse_api_request(body, chat, ctx_);
            h = sched_.submit(std::move(ar.gen));
        } catch (const ApiError& e) {
            return send_json(res, e.status(), error_body(e.status(), e.what()));
        } catch (const ServerBusy& e) {
            return send_json(res, 503, error_body(503, e.what()));
        } catch (const Error& e) {
            return send_json(res, 400, error_body(400, e.what()));
        }
        const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++);
        const int64_t created = static_cast<int64_t>(std::time(nullptr));
        const std::string model = body.contains("model") && body["model"].is_string() ? body["model"].get<std::string>()
                                                                                      : ctx_.model_id;
        // The first event decides the status: an error before any text is the response itself.
        GenerationEvent first = h->next();
        if (first.kind == GenerationEvent::Kind::kError) return send_json(res, first.status, error_body(first.status, first.error));
        if (!ar.stream) {
            std::string text;
            GenerationEvent ev = std::move(first);
            while (ev.kind == GenerationEvent::Kind::kText) {
                text += ev.text;
                ev = h->next();
            }
            if (ev.kind == GenerationEvent::Kind::kError) return send_json(res, ev.status, error_body(ev.status, ev.error));
            return send_json(res, 200, completion_body(ar, id, created, model, text, ev));
        }
        struct Stream {
            bool started = false, finished = false;
            GenerationEvent pending;
            bool has_pending = true;
        };
        auto st = std::make_shared<Stream>();
        st->pending = std::move(first);
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream",
            [h, st, ar, id, created, model](size_t, httplib::DataSink& sink) {
                auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
                if (!st->started) {
                    st->started = true;
                    if (ar.chat && !write(sse(chunk_body(ar, id, created, model, "", "", true)))) return false;
                }
                GenerationEvent ev;
                if (st->has_pending) {
                    ev = std::move(st->pending);
                    st->has_pending = false;
                } else {
                    while (!h->next(ev, std::chrono::milliseconds(200)))
                        if (!sink.is_writable()) return false;
                }
                if (ev.kind == GenerationEvent::Kind::kText) return write(sse(chunk_body(ar, id, created, model, ev.text, "")));
                if (ev.kind == GenerationEvent::Kind::kError) {
                    write(sse(error_body(ev.status, ev.error)));
                } else {
                    if (!write(sse(chunk_body(ar, id, created, model, "", ev.finish_reason)))) return false;
                    if (ar.include_usage && !write(sse(usage_chunk_body(ar, id, created, model, ev.usage)))) return false;
                    if (!write("data: [DONE]\n\n")) return false;
                }
                st->finished = true;
                sink.done();
                return true;
            },
            [h, st](bool) {
                if (!st->finished) h->cancel();  // the client went away before the end
            });
    };
    // Saved sequences and kept conversations (docs/serving.md).
    auto cache_op = [this](const httplib::Request& req, httplib::Response& res, bool restore) {
        try {
            const json body = parse_json_body(req.body);
            const CacheOpRequest op = parse_cache_op(body, restore, ctx_);
            if (!restore) return send_json(res, 200, cache_op_body("kv_cache.saved", op.name, sched_.save(op.ref, op.path)));
            if (!std::filesystem::exists(op.path)) throw ApiError(404, "no saved sequence '" + op.name + "' in the server's --cache-dir");
            std::shared_ptr<const SavedSequence> saved;
            try {
                saved = std::make_shared<const SavedSequence>(read_sequence(op.path, *ctx_.model, op.name + ".kvseq"));
            } catch (const Error& e) {
                throw ApiError(400, "'" + op.name + "': " + e.what());
            }
            send_json(res, 200, cache_op_body("kv_cache.restored", op.name, sched_.restore(saved, op.ref.conversation)));
        } catch (const StatusError& e) {  // ApiError from the body, CacheOpError from the scheduler
            send_json(res, e.status(), error_body(e.status(), e.what()));
        } catch (const ServerBusy& e) {
            send_json(res, 503, error_body(503, e.what()));
        }
    };
    s.Post("/v1/cache/save", [cache_op](const httplib::Request& q, httplib::Response& r) { cache_op(q, r, false); });
    s.Post("/v1/cache/restore", [cache_op](const httplib::Request& q, httplib::Response& r) { cache_op(q, r, true); });
    s.Get("/v1/cache/conversations", [this](const httplib::Request&, httplib::Response& res) {
        json data = json::array();
        for (const auto& c : sched_.snapshot().conversations)
            data.push_back({{"id", c.id}, {"tokens", c.tokens}, {"kv_bytes", c.kv_bytes}, {"policy", c.policy}});
        send_json(res, 200, {{"object", "list"}, {"data", data}});
    });
    s.Delete(R"(/v1/cache/conversations/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
        const std::string id = req.matches[1];
        try {
            if (!sched_.drop(id)) return send_json(res, 404, error_body(404, "no conversation '" + excerpt(id, 64) + "' is kept"));
            send_json(res, 200, {{"id", id}, {"object", "kv_cache.conversation"}, {"deleted", true}});
        } catch (const ServerBusy& e) {
            send_json(res, 503, error_body(503, e.what()));
        }
    });

    s.Post("/v1/completions", [generate](const httplib::Request& q, httplib::Response& r) { generate(q, r, false); });
    s.Post("/v1/chat/completions", [generate](const httplib::Request& q, httplib::Response& r) { generate(q, r, true); });
    s.Post("/completions", [generate](const httplib::Request& q, httplib::Response& r) { generate(q, r, false); });
    s.Post("/chat/completions", [generate](const httplib::Request& q, httplib::Response& r) { generate(q, r, true); });
}

}  // namespace kvsieve
