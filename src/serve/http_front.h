#pragma once
// The server's HTTP/1.1 front: accepts connections, reads requests under hard limits, routes them and writes the
// answers. Requests are parsed by Boost.Beast's HTTP/1.1 parser (HttpRequestReader); the connections, limits and
// deadlines are the front's own. One event thread reads every connection's request (line, headers, body) without blocking, so a slow or
// idle client costs a buffer, never a thread; a request read whole runs on a handler thread (ConnectionThreads),
// which writes its answer and gives the connection back for the next request. Limits hold before any byte is
// trusted: the header block is bounded in bytes and lines while it is read, a request must arrive whole within a
// deadline counted from its first byte (not per byte), the body is read only after a head check (keys, origin)
// passed and only up to its cap, and a connection over the limit of open connections is answered 503 and closed
// at once. Pipelined requests are answered in order, one at a time per connection.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvsieve {

/// The limits of the front; HttpFront's constructor checks their ranges (Error naming the option).
struct HttpLimits {
    size_t max_header_bytes = 64u << 10;  ///< request line and headers, in bytes (more: 431)
    int max_headers = 100;                ///< header lines of one request (more: 431)
    size_t max_body_bytes = 8u << 20;     ///< Content-Length above this: 413, before any body byte is read
    /// Seconds a client has to send one whole request (line, headers and body), counted from its first byte (from
    /// the connection's opening for the first request); then 408 and the connection is closed.
    double request_timeout_s = 10;
    double keep_alive_s = 5;  ///< seconds an idle keep-alive connection waits for its next request
    /// Seconds one write of an answer may wait for the client to take bytes (a client that reads nothing).
    double write_timeout_s = 60;
    /// Connections open at once (reading, answering or idle); one more is answered 503 and closed at once. At most
    /// this many handler threads run.
    int max_connections = 256;
};

/// Throws Error naming the command-line option when a limit is out of range: max_connections [1, 65536],
/// max_headers [8, 10000], max_header_bytes [1 KiB, 16 MiB], max_body_bytes [1, 4 GiB], request_timeout_s
/// (0, 86400], keep_alive_s (0, 3600], write_timeout_s (0, 86400].
void check_limits(const HttpLimits& limits);

/// One request, as read. Header names keep the client's case; look them up with header() (case-insensitive).
struct HttpRequest {
    std::string method;   ///< "GET", "POST", …
    std::string target;   ///< as sent: path and query
    std::string path;     ///< the target's path, percent-decoded (may hold any byte but NUL)
    std::string query;    ///< after '?', as sent
    std::string version;  ///< "HTTP/1.1" or "HTTP/1.0"
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    /// matches[0] the path, matches[i] the i-th {parameter} of the route template it matched.
    std::vector<std::string> matches;
    std::string remote_addr, local_addr;  ///< numeric hosts
    int remote_port = 0, local_port = 0;
    int socket = -1;  ///< the connection's socket (for client_gone); valid while the handler and its stream run

    /// The first value of header `name` (any case), "" when absent.
    std::string header(std::string_view name) const;
    bool has_header(std::string_view name) const;
};

/// One request read from bytes as they arrive, by Boost.Beast's HTTP/1.1 parser under HttpLimits. The caller owns the
/// connection's buffer and calls feed() with it after each read: the reader takes (erases from the front) the bytes
/// it used and leaves the rest, which may be the start of a pipelined next request. The body is never read before
/// the caller said so (read_body()), so that a request may be refused on its head alone. Answers the front makes
/// from what the reader says:
///
/// - 431: the request line and headers over HttpLimits::max_header_bytes, or more than max_headers header fields
/// - 400: a malformed request line or header (Beast's bad_* errors), a target that is not an absolute path, a
///   Content-Length that is not one decimal number or disagrees with another, both Content-Length and
///   Transfer-Encoding
/// - 505: an HTTP version other than 1.0 and 1.1 on a well-formed line
/// - 501: a Transfer-Encoding other than `chunked` alone (chunked bodies are decoded as they come, under the same
///   body limit)
/// - 415: a Content-Encoding other than identity (nothing is inflated)
/// - 413: a body over HttpLimits::max_body_bytes, if one arrives past the caller's own check of body_length(): for a
///   chunked body, as soon as its decoded bytes pass the limit, or its bytes on the wire (chunk framing included)
///   pass twice the limit plus kChunkFramingSlack
/// - 400: a malformed chunk, or a chunk-size line (with its extensions) longer than kChunkFramingSlack
class HttpRequestReader {
public:
    /// Bytes of chunk framing a chunked body may carry beyond twice its limit, and the longest chunk-size line.
    static constexpr size_t kChunkFramingSlack = 64u << 10;
    /// The most undecoded bytes of a chunked body a connection buffers before they are fed to the parser.
    static constexpr size_t kChunkReadAhead = 4 * kChunkFramingSlack;
    enum class Step {
        kMore,     ///< needs more bytes (of the head, or of the body after read_body())
        kHead,     ///< the line and headers are in and passed the checks above: request() has them
        kDone,     ///< after read_body(): the whole body is in request().body
        kRefused,  ///< refused: answer status() with message(), then close the connection
    };

    /// The limits are taken as they are (HttpFront checks them).
    explicit HttpRequestReader(const HttpLimits& limits);
    ~HttpRequestReader();
    HttpRequestReader(const HttpRequestReader&) = delete;
    HttpRequestReader& operator=(const HttpRequestReader&) = delete;

    /// Parses what it can of `in`, erasing the bytes it used. kHead is returned once (then kMore until read_body());
    /// after kRefused or kDone it returns the same again without reading. Empty lines before a request line are
    /// skipped (RFC 9112 2.2).
    Step feed(std::string& in);
    /// After kHead: reads the body (body_length() bytes) on the next calls of feed(), at most max_body_bytes.
    void read_body();
    /// Whether any byte of this request (other than skipped empty lines) has arrived.
    bool started() const { return started_; }
    /// The most bytes the connection should read now when `buffered` bytes wait in its buffer: the head's bytes left
    /// under the limit (and one more, to see it passed), or the body's bytes still to come; 0 when none are wanted.
    size_t want(size_t buffered) const;
    /// After kHead: the line and headers (method, target, path, query, version, headers); after kDone the body too.
    HttpRequest& request() { return req_; }
    /// After kHead: the body's length in bytes (Content-Length; 0 without one or for a chunked body).
    uint64_t body_length() const { return body_length_; }
    /// After kHead: whether a body follows the head (a Content-Length above 0, or Transfer-Encoding: chunked).
    bool has_body() const { return body_length_ > 0 || chunked_; }
    /// After kHead: whether the connection stays open after the answer (HTTP/1.1 without Connection: close, or
    /// HTTP/1.0 with Connection: keep-alive).
    bool keep_alive() const { return keep_alive_; }
    /// After kRefused: the status to answer (400, 413, 415, 431, 501, 505) and a message naming the problem.
    int status() const { return status_; }
    const std::string& message() const { return message_; }

private:
    Step refuse(int status, std::string message);
    /// The most bytes a chunked body may take on the wire: twice the body limit plus kChunkFramingSlack.
    uint64_t wire_limit() const { return 2 * static_cast<uint64_t>(limits_.max_body_bytes) + kChunkFramingSlack; }
    struct Parser;  ///< Beast's request parser (kept out of this header)
    std::unique_ptr<Parser> parser_;
    HttpLimits limits_;
    HttpRequest req_;
    Step step_ = Step::kMore;
    bool started_ = false, head_done_ = false, reading_body_ = false;
    size_t head_bytes_ = 0;     ///< bytes of the line and headers used so far
    uint64_t body_length_ = 0;  ///< Content-Length
    uint64_t body_bytes_ = 0;   ///< bytes of the body used so far (on the wire: chunk framing included)
    bool chunked_ = false;      ///< Transfer-Encoding: chunked
    bool keep_alive_ = true;
    int status_ = 0;
    std::string message_;
};

/// Where a streamed answer writes (chunked transfer encoding): each write() is one chunk, sent before it returns.
class HttpSink {
public:
    virtual ~HttpSink() = default;
    /// Sends `n` bytes as one chunk; false when the connection failed (the stream should stop).
    virtual bool write(const char* data, size_t n) = 0;
    /// Ends the stream (the last, empty chunk); the provider is not called again.
    virtual void done() = 0;
    /// False once a write failed.
    virtual bool is_writable() const = 0;
};

/// An answer: a status and headers with either a body or a stream provider.
struct HttpResponse {
    int status = 200;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    /// Called again and again while it returns true and has not called sink.done(); false ends the stream and
    /// closes the connection.
    std::function<bool(HttpSink& sink)> provider;
    /// Called once after the stream, true when it ended by sink.done().
    std::function<void(bool finished)> releaser;

    /// Sets header `name` (replacing one of the same name, any case).
    void set_header(const std::string& name, const std::string& value);
    std::string header(std::string_view name) const;
    void set_content(std::string content, const std::string& content_type);
    /// Answers with a stream of `content_type` (see provider and releaser).
    void set_chunked_content_provider(const std::string& content_type, std::function<bool(HttpSink&)> provider,
                                      std::function<void(bool)> releaser);
};

/// The HTTP/1.1 front (see the file's comment). Thread-safe where noted; configure it before listen().
class HttpFront {
public:
    using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
    /// Runs on the event thread when a request's line and headers are in, before its body is read: true when it
    /// answered in `res` (the body is then never read, and the connection is closed when one was announced).
    using HeadCheck = std::function<bool(const HttpRequest&, HttpResponse&)>;
    /// Fills the body of an error answer: called with the status and a message naming the problem, for every
    /// answer the front makes itself (400, 404, 405, 408, 411, 413, 415, 431, 500, 501, 503, 505) and for a handler's
    /// answer of status ≥ 400 that has no body.
    using ErrorBody = std::function<void(const HttpRequest&, HttpResponse&, const std::string& message)>;
    /// Called after each answer (its status), on the thread that made it.
    using Logger = std::function<void(const HttpRequest&, const HttpResponse&)>;

    /// Throws Error when a limit is out of range.
    explicit HttpFront(HttpLimits limits);
    ~HttpFront();
    HttpFront(const HttpFront&) = delete;
    HttpFront& operator=(const HttpFront&) = delete;

    /// Routes `method` requests whose decoded path matches `path_template` ("/a/{id}": a {parameter} stands for
    /// one non-empty segment without '/') to `handler`. A path no route matches gets 404, a path only other
    /// methods' routes match 405 (with Allow), both before the body is read.
    void on(const std::string& method, const std::string& path_template, Handler handler);
    void set_head_check(HeadCheck check) { head_check_ = std::move(check); }
    void set_error_body(ErrorBody fill) { error_body_ = std::move(fill); }
    void set_logger(Logger logger) { logger_ = std::move(logger); }

    /// Binds `host`:`port` (0: a free port); returns the port. Throws Error when it cannot.
    int bind(const std::string& host, int port);
    /// Serves until stop() (call after bind()); returns once every handler thread has finished.
    void listen();
    /// Makes listen() return: no new connections, idle ones closed at once, answers still being written cut off.
    /// Thread-safe, also before listen().
    void stop();
    /// Connections open now (thread-safe).
    int open_connections() const { return open_.load(); }

private:
    struct Conn;
    struct Route {
        std::string method, path_template;
        Handler handler;
    };
    void run_event_loop();
    void on_readable(Conn& c);
    /// Parses what `c` holds: dispatches, answers an error, or waits for more bytes. False when `c` was closed.
    bool advance(std::unique_ptr<Conn>& c);
    void answer_now(std::unique_ptr<Conn>& c, HttpResponse& res, bool close);
    void dispatch(std::unique_ptr<Conn> c, const Route* route);
    void serve(std::unique_ptr<Conn> c, const Route* route);
    void finish(std::unique_ptr<Conn> c);
    void close_conn(std::unique_ptr<Conn> c);
    void error(const HttpRequest& req, HttpResponse& res, int status, const std::string& message);

    HttpLimits limits_;
    std::vector<Route> routes_;
    HeadCheck head_check_;
    ErrorBody error_body_;
    Logger logger_;
    int listen_fd_ = -1;
    int wake_fd_ = -1;  ///< eventfd: stop() and handler threads returning connections wake the event thread
    int epoll_fd_ = -1;
    std::atomic<int> open_{0};
    std::atomic<bool> stopping_{false};
    std::mutex mu_;                                ///< guards returned_, busy_ and stopped_
    std::vector<std::unique_ptr<Conn>> returned_;  ///< connections handler threads gave back
    std::vector<int> busy_;                        ///< sockets of connections on handler threads
    bool stopped_ = false;                         ///< the event loop has ended: handler threads close what they hold
    struct Workers;
    std::unique_ptr<Workers> workers_;
};

/// Whether `path` matches `path_template` (as HttpFront::on takes it); its parameters then in `params`.
bool match_path_template(const std::string& path_template, const std::string& path, std::vector<std::string>& params);

/// `s` with each %XX (two hex digits) replaced by its byte; a '%' without two hex digits stays as it is.
std::string percent_decode(std::string_view s);

}  // namespace kvsieve
