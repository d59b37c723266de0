#include "serve/http_front.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_map>

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/string_body.hpp>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve/connection_threads.h"
#include "serve/json_body.h"
#include "util/error.h"

namespace kvsieve {

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

/// How often the event thread looks for connections past their deadline.
constexpr std::chrono::milliseconds kSweep{100};
/// After an error answer that leaves unread bytes, the connection is read (and the bytes dropped) this long or up to
/// kDrainBytes, so that the client sees the answer instead of a reset; then it is closed.
constexpr std::chrono::milliseconds kDrainTime{1000};
constexpr size_t kDrainBytes = 4u << 20;

namespace http = boost::beast::http;

/// Beast's string_view (boost::string_view in 1.74) as a standard one.
std::string_view sv(boost::beast::string_view v) { return {v.data(), v.size()}; }

bool iequal(std::string_view a, std::string_view b) {
    return boost::beast::iequals(boost::beast::string_view(a.data(), a.size()),
                                 boost::beast::string_view(b.data(), b.size()));
}

/// Whether a comma-separated header value (RFC 9110 5.6.1) holds `token` (any case).
bool has_token(std::string_view value, std::string_view token) {
    for (const auto& t : http::token_list(boost::beast::string_view(value.data(), value.size())))
        if (iequal(sv(t), token)) return true;
    return false;
}

/// Whether a comma-separated header value is exactly one token, `token` (any case).
bool only_token(std::string_view value, std::string_view token) {
    int n = 0;
    for (const auto& t : http::token_list(boost::beast::string_view(value.data(), value.size())))
        if (++n > 1 || !iequal(sv(t), token)) return false;
    return n == 1;
}

const char* reason(int status) {
    switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 204: return "No Content";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 411: return "Length Required";
        case 413: return "Payload Too Large";
        case 415: return "Unsupported Media Type";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 499: return "Client Closed Request";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        case 505: return "HTTP Version Not Supported";
        case 507: return "Insufficient Storage";
        default: return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
    }
}

/// A header value as it may be written: CR, LF and NUL removed (a handler cannot split the answer's head).
std::string safe_value(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v)
        if (c != '\r' && c != '\n' && c != '\0') out += c;
    return out;
}

/// Sends all of `data` on the non-blocking socket `fd`, waiting at most `timeout` for the client to take bytes each
/// time it takes none; false on an error, a closed peer or the wait running out.
bool send_all(int fd, const char* data, size_t n, Clock::duration timeout) {
    while (n > 0) {
        const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
        if (w > 0) {
            data += w;
            n -= static_cast<size_t>(w);
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            pollfd p{fd, POLLOUT, 0};
            const int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());
            const int r = ::poll(&p, 1, std::max(ms, 1));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
            continue;
        }
        return false;
    }
    return true;
}

/// The numeric host and port of a socket address.
void numeric_address(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
        host = h;
        port = std::atoi(p);
    }
}

/// The head of an answer: status line, headers, the framing header and Connection: close when `close`.
std::string response_head(const HttpResponse& res, bool chunked, bool close) {
    std::string h = "HTTP/1.1 " + std::to_string(res.status) + " " + reason(res.status) + "\r\n";
    for (const auto& [name, value] : res.headers) {
        if (iequal(name, "Content-Length") || iequal(name, "Transfer-Encoding") || iequal(name, "Connection")) continue;
        h += safe_value(name) + ": " + safe_value(value) + "\r\n";
    }
    if (chunked)
        h += "Transfer-Encoding: chunked\r\n";
    else if (!(res.provider) && res.status != 204 && res.status >= 200)
        h += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
    if (close) h += "Connection: close\r\n";
    h += "\r\n";
    return h;
}

/// A streamed answer's sink: one chunk per write (or raw bytes for an HTTP/1.0 client, whose connection then ends).
class SocketSink : public HttpSink {
public:
    SocketSink(int fd, Clock::duration timeout, bool chunked) : fd_(fd), timeout_(timeout), chunked_(chunked) {}
    bool write(const char* data, size_t n) override {
        if (!ok_ || done_) return false;
        if (n == 0) return true;  // an empty chunk would end the stream
        if (!chunked_) return ok_ = send_all(fd_, data, n, timeout_);
        char size[24];
        const int k = std::snprintf(size, sizeof size, "%zx\r\n", n);
        std::string out;
        out.reserve(static_cast<size_t>(k) + n + 2);
        out.append(size, static_cast<size_t>(k)).append(data, n).append("\r\n");
        return ok_ = send_all(fd_, out.data(), out.size(), timeout_);
    }
    void done() override {
        if (done_) return;
        done_ = true;
        if (ok_ && chunked_) ok_ = send_all(fd_, "0\r\n\r\n", 5, timeout_);
    }
    bool is_writable() const override { return ok_; }
    bool finished() const { return done_ && ok_; }

private:
    int fd_;
    Clock::duration timeout_;
    bool chunked_;
    bool ok_ = true, done_ = false;
};

}  // namespace

std::string percent_decode(std::string_view s) {
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0
                           ? static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]))
                           : '\0';
        if (c != '\0') {  // a "%00" stays as it is
            out += c;
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}

bool match_path_template(const std::string& tmpl, const std::string& path, std::vector<std::string>& params) {
    params.clear();
    size_t t = 0, p = 0;
    while (t < tmpl.size()) {
        if (tmpl[t] == '{') {
            const size_t close = tmpl.find('}', t);
            if (close == std::string::npos) return false;
            const size_t start = p;
            while (p < path.size() && path[p] != '/') ++p;
            if (p == start) return false;
            params.push_back(path.substr(start, p - start));
            t = close + 1;
        } else {
            if (p >= path.size() || path[p] != tmpl[t]) return false;
            ++t;
            ++p;
        }
    }
    return p == path.size();
}

std::string HttpRequest::header(std::string_view name) const {
    for (const auto& [k, v] : headers)
        if (iequal(k, name)) return v;
    return "";
}

bool HttpRequest::has_header(std::string_view name) const {
    for (const auto& [k, v] : headers)
        if (iequal(k, name)) return true;
    return false;
}

void HttpResponse::set_header(const std::string& name, const std::string& value) {
    for (auto& [k, v] : headers)
        if (iequal(k, name)) {
            v = value;
            return;
        }
    headers.emplace_back(name, value);
}

std::string HttpResponse::header(std::string_view name) const {
    for (const auto& [k, v] : headers)
        if (iequal(k, name)) return v;
    return "";
}

void HttpResponse::set_content(std::string content, const std::string& content_type) {
    body = std::move(content);
    set_header("Content-Type", content_type);
}

void HttpResponse::set_chunked_content_provider(const std::string& content_type, std::function<bool(HttpSink&)> p,
                                                std::function<void(bool)> r) {
    set_header("Content-Type", content_type);
    provider = std::move(p);
    releaser = std::move(r);
}

struct HttpRequestReader::Parser {
    http::request_parser<http::string_body> p;
};

HttpRequestReader::HttpRequestReader(const HttpLimits& limits) : parser_(std::make_unique<Parser>()), limits_(limits) {
    auto& p = parser_->p;
    p.eager(false);  // stop after the head: the body waits for read_body()
    p.header_limit(static_cast<std::uint32_t>(std::min<size_t>(limits_.max_header_bytes, UINT32_MAX)));
    // No body limit while the head is read: Beast would refuse a long Content-Length before the head is done, and
    // a request without a key or to an unknown route must be answered 401 or 404 first. The caller compares
    // body_length() with the limit after its own checks, and read_body() sets it.
    p.body_limit(std::numeric_limits<std::uint64_t>::max());
}

HttpRequestReader::~HttpRequestReader() = default;

HttpRequestReader::Step HttpRequestReader::refuse(int status, std::string message) {
    status_ = status;
    message_ = std::move(message);
    return step_ = Step::kRefused;
}

size_t HttpRequestReader::want(size_t buffered) const {
    if (step_ != Step::kMore) return 0;
    if (!head_done_) {
        const size_t cap = limits_.max_header_bytes + 1;
        const size_t have = head_bytes_ + buffered;
        return have >= cap ? 0 : cap - have;
    }
    if (!reading_body_) return 0;
    const uint64_t have = body_bytes_ + buffered;
    // A chunked body's end is known only from its last chunk: read on, up to the most its framing may take (and one
    // byte more, to see it passed).
    const uint64_t end = chunked_ ? wire_limit() + 1 : body_length_;
    if (have >= end) return 0;
    uint64_t n = end - have;
    // A chunked body is decoded as it comes: the connection holds at most kChunkReadAhead undecoded bytes (more than
    // the longest chunk-size line, so that one too long is seen), not the whole wire limit on top of the body.
    if (chunked_) n = std::min<uint64_t>(n, buffered >= kChunkReadAhead ? 0 : kChunkReadAhead - buffered);
    return static_cast<size_t>(std::min<uint64_t>(n, SIZE_MAX));
}

void HttpRequestReader::read_body() {
    if (step_ != Step::kHead || reading_body_) return;
    reading_body_ = true;
    step_ = Step::kMore;
    parser_->p.body_limit(static_cast<std::uint64_t>(limits_.max_body_bytes));
    parser_->p.eager(true);
}

// One function on purpose (longer than ~80 lines): the parser's states and every limit checked before a byte is
// kept (head size, header count, body size, chunked framing, an encoded body refused) read as one state machine.
HttpRequestReader::Step HttpRequestReader::feed(std::string& in) {
    if (step_ == Step::kRefused || step_ == Step::kDone || (step_ == Step::kHead && !reading_body_)) return step_;
    auto& p = parser_->p;
    if (!started_) {
        size_t skip = 0;
        while (skip + 1 < in.size() && in[skip] == '\r' && in[skip + 1] == '\n') skip += 2;
        in.erase(0, skip);
        if (in.empty() || in == "\r") return Step::kMore;
        started_ = true;
    }
    auto too_large = [&] {
        return refuse(431, "the request's headers exceed the server's limit of " + std::to_string(limits_.max_headers) +
                               " fields and " + std::to_string(limits_.max_header_bytes) + " bytes");
    };
    auto count_fields = [&] { return static_cast<size_t>(std::distance(p.get().begin(), p.get().end())); };
    boost::beast::error_code ec;
    if (!head_done_) {
        const size_t used = in.empty() ? 0 : p.put(boost::asio::buffer(in.data(), in.size()), ec);
        in.erase(0, used);
        head_bytes_ += used;
        if (in.empty() && !ec && !p.is_header_done()) ec = http::error::need_more;
        if (ec == http::error::need_more) {
            // The parser takes whole fields as they come; the limits hold over all of them.
            if (count_fields() > static_cast<size_t>(limits_.max_headers) ||
                head_bytes_ + in.size() > limits_.max_header_bytes)
                return too_large();
            return Step::kMore;
        }
        if (ec == http::error::header_limit) return too_large();
        if (ec == http::error::bad_content_length)
            return refuse(400, "malformed or conflicting Content-Length (one decimal number)");
        if (ec == http::error::bad_transfer_encoding)
            return refuse(400, "a request may not have both Content-Length and Transfer-Encoding");
        if (ec == http::error::bad_version) {
            // Beast says bad_version both for a version it does not speak (505) and for a malformed one or a line
            // not ended by CRLF (400): the line's last word tells which.
            const size_t eol = in.find('\n');
            std::string_view line(in.data(), eol == std::string::npos ? in.size() : eol);
            const bool crlf = !line.empty() && line.back() == '\r';
            if (crlf) line.remove_suffix(1);
            const size_t sp = line.rfind(' ');
            const std::string_view v = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
            const auto digit = [](char ch) { return ch >= '0' && ch <= '9'; };
            if ((crlf || eol == std::string::npos) && v.size() == 8 && v.substr(0, 5) == "HTTP/" && digit(v[5]) &&
                v[6] == '.' && digit(v[7]))
                return refuse(505, "HTTP version " + std::string(v) + " is not supported (HTTP/1.1 and HTTP/1.0 are)");
            return refuse(400, "malformed request line (METHOD TARGET HTTP/1.1, ended by CRLF)");
        }
        if (ec) return refuse(400, "malformed request: " + ec.message());
        head_done_ = true;
        if (head_bytes_ > limits_.max_header_bytes || count_fields() > static_cast<size_t>(limits_.max_headers))
            return too_large();
        const auto& m = p.get();
        req_.method = std::string(sv(m.method_string()));
        req_.target = std::string(sv(m.target()));
        req_.version = m.version() == 10 ? "HTTP/1.0" : "HTTP/1.1";
        for (const auto& f : m) req_.headers.emplace_back(sv(f.name_string()), sv(f.value()));
        if (req_.target.empty() || req_.target[0] != '/')
            return refuse(400, "malformed request line: the target must be an absolute path");
        const size_t q = req_.target.find('?');
        req_.path = percent_decode(std::string_view(req_.target).substr(0, q));
        if (q != std::string::npos) req_.query = req_.target.substr(q + 1);
        // Framing: Beast takes a list of equal lengths ("2, 2"); one number per field is asked here.
        for (const auto& f : m) {
            if (f.name() != http::field::content_length) continue;
            const std::string_view v = sv(f.value());
            if (v.empty() || !std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
                return refuse(400, "malformed Content-Length '" + excerpt(v, 32) + "' (one decimal number)");
        }
        if (m.count(http::field::transfer_encoding)) {
            if (m.count(http::field::content_length))
                return refuse(400, "a request may not have both Content-Length and Transfer-Encoding");
            const std::string_view te = sv(m[http::field::transfer_encoding]);
            if (m.count(http::field::transfer_encoding) != 1 || !only_token(te, "chunked"))
                return refuse(501, "Transfer-Encoding '" + excerpt(te, 64) + "' is not supported (only chunked)");
            chunked_ = true;
        }
        for (const auto& f : m)
            if (f.name() == http::field::content_encoding && !iequal(sv(f.value()), "identity"))
                return refuse(415, "Content-Encoding '" + excerpt(sv(f.value()), 64) +
                                       "' is not accepted: send the body uncompressed");
        body_length_ = p.content_length().value_or(0);
        keep_alive_ = p.keep_alive();
        return step_ = Step::kHead;
    }
    // The body, after read_body().
    auto too_long = [&] {
        return refuse(413, "the request body is larger than the server's limit of " +
                               std::to_string(limits_.max_body_bytes) + " bytes");
    };
    while (!p.is_done() && !in.empty()) {  // a chunked body is taken a chunk at a time
        const size_t used = p.put(boost::asio::buffer(in.data(), in.size()), ec);
        in.erase(0, used);
        body_bytes_ += used;
        if (ec == http::error::body_limit) return too_long();
        if (ec && ec != http::error::need_more) return refuse(400, "malformed request body: " + ec.message());
        if (chunked_ && body_bytes_ + in.size() > wire_limit()) return too_long();
        if (used == 0) {
            // Beast waits for a whole chunk-size line: bound it.
            if (chunked_ && in.size() > kChunkFramingSlack)
                return refuse(400, "a chunk-size line longer than " + std::to_string(kChunkFramingSlack) + " bytes");
            break;
        }
    }
    if (!p.is_done()) return Step::kMore;
    req_.body = std::move(p.get().body());
    return step_ = Step::kDone;
}

struct HttpFront::Conn {
    enum class State { kIdle, kHead, kBody, kDrain };
    int fd = -1;
    State state = State::kHead;
    Clock::time_point deadline;
    std::string in;                             ///< bytes read and not yet taken by the reader
    std::unique_ptr<HttpRequestReader> reader;  ///< the request being read
    const Route* route = nullptr;
    size_t drained = 0;
    bool eof = false;  ///< the peer closed its side: what the buffer holds is all that comes
    /// Headers the head check set without answering (CORS), sent with the handler's answer.
    std::vector<std::pair<std::string, std::string>> pre_headers;
    std::string remote_addr, local_addr;
    int remote_port = 0, local_port = 0;
};

struct HttpFront::Workers {
    explicit Workers(size_t n) : q(n) {}
    ConnectionThreads q;
};

void check_limits(const HttpLimits& limits_) {
    require(limits_.max_connections >= 1 && limits_.max_connections <= 65536,
            "--max-connections must be in [1, 65536], got ", limits_.max_connections);
    require(limits_.max_headers >= 8 && limits_.max_headers <= 10000, "--max-headers must be in [8, 10000], got ",
            limits_.max_headers);
    require(limits_.max_header_bytes >= 1024 && limits_.max_header_bytes <= (16u << 20),
            "--max-header-kb must be in [1, 16384] KiB, got ", limits_.max_header_bytes / 1024.0);
    require(
        std::isfinite(limits_.request_timeout_s) && limits_.request_timeout_s > 0 && limits_.request_timeout_s <= 86400,
        "--read-timeout must be in (0, 86400] seconds, got ", limits_.request_timeout_s);
    require(std::isfinite(limits_.keep_alive_s) && limits_.keep_alive_s > 0 && limits_.keep_alive_s <= 3600,
            "--keep-alive must be in (0, 3600] seconds, got ", limits_.keep_alive_s);
    require(std::isfinite(limits_.write_timeout_s) && limits_.write_timeout_s > 0 && limits_.write_timeout_s <= 86400,
            "the write timeout must be in (0, 86400] seconds, got ", limits_.write_timeout_s);
    require(limits_.max_body_bytes >= 1 && limits_.max_body_bytes <= (uint64_t{4} << 30),
            "--max-body-mb must be in (0, 4096] MiB, got ", limits_.max_body_bytes / 1048576.0);
}

HttpFront::HttpFront(HttpLimits limits) : limits_(limits) {
    check_limits(limits_);
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    require(wake_fd_ >= 0, "cannot create the server's event descriptor: ", std::strerror(errno));
}

HttpFront::~HttpFront() {
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
}

void HttpFront::on(const std::string& method, const std::string& path_template, Handler handler) {
    routes_.push_back({method, path_template, std::move(handler)});
}

int HttpFront::bind(const std::string& host, int port) {
    require(port >= 0 && port <= 65535, "--port must be in [0, 65535], got ", port);
    // Every open connection is a descriptor: let the process have as many as the system allows it.
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &rl);
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* res = nullptr;
    const std::string service = std::to_string(port);
    if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || !res)
        fail("cannot listen on ", host, " (not an address this machine has)");
    int fd = -1;
    for (addrinfo* a = res; a; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (a->ai_family == AF_INET6) {
            int zero = 0;  // "::" takes IPv4 clients too
            ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        }
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) break;
        ::close(fd);
        fd = -1;
    }
    ::freeaddrinfo(res);
    if (fd < 0) fail("cannot listen on ", host, ":", port, " (address in use or not available)");
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    std::string h;
    int bound = port;
    numeric_address(a, len, h, bound);
    listen_fd_ = fd;
    return bound;
}

void HttpFront::stop() {
    stopping_ = true;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(wake_fd_, &one, sizeof one);
}

void HttpFront::error(const HttpRequest& req, HttpResponse& res, int status, const std::string& message) {
    res.status = status;
    res.body.clear();
    if (error_body_)
        error_body_(req, res, message);
    else
        res.set_content(message + "\n", "text/plain");
}

void HttpFront::listen() {
    require(listen_fd_ >= 0, "HttpFront::listen() before bind()");
    workers_ = std::make_unique<Workers>(static_cast<size_t>(limits_.max_connections));
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    require(epoll_fd_ >= 0, "cannot create the server's epoll descriptor: ", std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = listen_fd_;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
    ev.data.fd = wake_fd_;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    run_event_loop();
}

// One function on purpose (longer than CONTRIBUTING's ~80 lines): the epoll loop's order of events (wake-up,
// new connections, readable and writable sockets, deadlines) is the front's one guarantee that no client stalls
// another, and reads as one sequence.
void HttpFront::run_event_loop() {
    std::unordered_map<int, std::unique_ptr<Conn>> conns;
    auto watch = [&](std::unique_ptr<Conn> c) {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP;
        ev.data.fd = c->fd;
        if (!c->eof) ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev);
        const int fd = c->fd;
        conns[fd] = std::move(c);
        return fd;
    };
    // Parses what a watched connection holds; drops it from the table when it is closed or handed to a thread.
    auto step = [&](int fd) {
        auto it = conns.find(fd);
        if (it == conns.end()) return;
        if (!advance(it->second)) conns.erase(fd);
    };
    bool listening = true;
    Clock::time_point accept_again{};
    Clock::time_point last_sweep = Clock::now();
    std::vector<epoll_event> events(256);
    while (!stopping_) {
        const int n =
            ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), static_cast<int>(kSweep.count()));
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; i < std::max(n, 0); ++i) {
            const int fd = events[i].data.fd;
            if (fd == wake_fd_) {
                uint64_t v;
                [[maybe_unused]] ssize_t r = ::read(wake_fd_, &v, sizeof v);
                std::vector<std::unique_ptr<Conn>> back;
                {
                    std::lock_guard<std::mutex> lk(mu_);
                    back.swap(returned_);
                }
                for (auto& c : back) step(watch(std::move(c)));  // a pipelined request may be there already
            } else if (fd == listen_fd_) {
                for (;;) {
                    sockaddr_storage peer{};
                    socklen_t plen = sizeof peer;
                    const int s =
                        ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (s < 0) {
                        if (errno == EINTR || errno == ECONNABORTED) continue;
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                            // Out of descriptors: stop accepting for a moment (the backlog waits) instead of spinning.
                            ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
                            listening = false;
                            accept_again = Clock::now() + kSweep;
                        }
                        break;
                    }
                    if (open_.load() >= limits_.max_connections) {
                        // Refused at once: a connection beyond the limit is never queued.
                        HttpRequest none;
                        HttpResponse res;
                        error(none, res, 503,
                              "the server has " + std::to_string(limits_.max_connections) +
                                  " connections open, its --max-connections; try again later");
                        const std::string out = response_head(res, false, true) + res.body;
                        [[maybe_unused]] ssize_t w = ::send(s, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
                        ::shutdown(s, SHUT_WR);
                        ::close(s);
                        if (logger_) logger_(none, res);
                        continue;
                    }
                    ++open_;
                    int one = 1;
                    ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    auto c = std::make_unique<Conn>();
                    c->fd = s;
                    c->state = Conn::State::kHead;  // its first request's deadline runs from the opening
                    c->deadline = Clock::now() + seconds(limits_.request_timeout_s);
                    numeric_address(peer, plen, c->remote_addr, c->remote_port);
                    sockaddr_storage local{};
                    socklen_t llen = sizeof local;
                    if (::getsockname(s, reinterpret_cast<sockaddr*>(&local), &llen) == 0)
                        numeric_address(local, llen, c->local_addr, c->local_port);
                    watch(std::move(c));
                }
            } else {
                auto it = conns.find(fd);
                if (it == conns.end()) continue;
                on_readable(*it->second);
                step(fd);
            }
        }
        const auto now = Clock::now();
        if (!listening && now >= accept_again) {
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.fd = listen_fd_;
            ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
            listening = true;
        }
        if (now - last_sweep >= kSweep) {
            last_sweep = now;
            std::vector<int> late;
            for (const auto& [fd, c] : conns)
                if (now >= c->deadline) late.push_back(fd);
            for (int fd : late) {
                auto it = conns.find(fd);
                Conn& c = *it->second;
                if ((c.state == Conn::State::kHead && ((c.reader && c.reader->started()) || !c.in.empty())) ||
                    c.state == Conn::State::kBody) {
                    static const HttpRequest kNone;
                    HttpResponse res;
                    error(c.reader ? c.reader->request() : kNone, res, 408,
                          "the request did not arrive whole within the server's --read-timeout of " +
                              dump_json(nlohmann::json(limits_.request_timeout_s)) + " s");
                    answer_now(it->second, res, true);  // then drained briefly and closed
                } else {
                    close_conn(std::move(it->second));
                    conns.erase(it);
                }
            }
        }
    }
    // Stopping: no new connections; idle and half-read ones closed now, answers being written cut off.
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
    ::close(listen_fd_);
    listen_fd_ = -1;
    for (auto& [fd, c] : conns) close_conn(std::move(c));
    conns.clear();
    {
        std::lock_guard<std::mutex> lk(mu_);
        stopped_ = true;
        for (int fd : busy_) ::shutdown(fd, SHUT_RDWR);
    }
    workers_->q.shutdown();
    std::vector<std::unique_ptr<Conn>> back;
    {
        std::lock_guard<std::mutex> lk(mu_);
        back.swap(returned_);
    }
    for (auto& c : back) close_conn(std::move(c));
}

void HttpFront::on_readable(Conn& c) {
    char buf[16384];
    for (;;) {
        size_t want = sizeof buf;
        if (c.state == Conn::State::kDrain) {
            if (c.drained >= kDrainBytes) {
                c.deadline = Clock::now();  // closed at the next sweep
                return;
            }
        } else {
            // The head: never more than its limit (and one byte, to know it is passed); the body: never past its end.
            if (!c.reader) c.reader = std::make_unique<HttpRequestReader>(limits_);
            want = std::min(want, c.reader->want(c.in.size()));
        }
        if (want == 0) return;
        const ssize_t r = ::recv(c.fd, buf, want, 0);
        if (r > 0) {
            if (c.state == Conn::State::kDrain)
                c.drained += static_cast<size_t>(r);
            else
                c.in.append(buf, static_cast<size_t>(r));
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        // The peer closed its side (or reset): nothing more comes, but a whole request in the buffer is answered.
        c.eof = true;
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
        return;
    }
}

void HttpFront::close_conn(std::unique_ptr<Conn> c) {
    if (!c) return;
    if (epoll_fd_ >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    ::close(c->fd);
    --open_;
}

void HttpFront::answer_now(std::unique_ptr<Conn>& c, HttpResponse& res, bool close) {
    const std::string out = response_head(res, false, close) + res.body;
    // Small answers of the event thread: one non-blocking send; a client that does not read them loses them.
    const ssize_t w = ::send(c->fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    static const HttpRequest kNone;
    if (logger_) logger_(c->reader ? c->reader->request() : kNone, res);
    c->reader.reset();
    if (close || w != static_cast<ssize_t>(out.size())) {
        ::shutdown(c->fd, SHUT_WR);
        c->state = Conn::State::kDrain;
        c->deadline = Clock::now() + kDrainTime;
        c->in.clear();
        return;
    }
    c->state = Conn::State::kIdle;
    c->deadline = Clock::now() + seconds(limits_.keep_alive_s);
}

// One function on purpose (longer than ~80 lines): a connection's state machine (idle, reading, handed to its
// thread, writing, keep-alive) is one switch whose transitions are easier to check side by side.
bool HttpFront::advance(std::unique_ptr<Conn>& c) {
    using State = Conn::State;
    using Step = HttpRequestReader::Step;
    for (;;) {
        if (c->state == State::kDrain) {
            if (c->eof || Clock::now() >= c->deadline) {
                close_conn(std::move(c));
                return false;
            }
            return true;
        }
        if (!c->reader) c->reader = std::make_unique<HttpRequestReader>(limits_);
        HttpRequestReader& reader = *c->reader;
        HttpRequest& req = reader.request();
        const bool was_started = reader.started();
        const Step step = reader.feed(c->in);
        if (c->state == State::kIdle && reader.started() && !was_started) {
            // The next request's deadline runs from its first byte.
            c->state = State::kHead;
            c->deadline = Clock::now() + seconds(limits_.request_timeout_s);
        }
        if (step == Step::kMore) {
            if (!c->eof) return true;
            c->state = State::kDrain;  // cut off: never answered
            continue;
        }
        req.remote_addr = c->remote_addr;
        req.remote_port = c->remote_port;
        req.local_addr = c->local_addr;
        req.local_port = c->local_port;
        req.socket = c->fd;
        HttpResponse res;
        if (step == Step::kRefused) {
            error(req, res, reader.status(), reader.message());
            answer_now(c, res, true);
            continue;
        }
        if (step == Step::kDone) {
            const Route* route = c->route;
            dispatch(std::move(c), route);
            return false;
        }
        // Step::kHead: the line and headers passed the reader's checks; the body has not been read.
        const bool announced_body = reader.has_body();
        const bool close = !reader.keep_alive();
        if (head_check_ && head_check_(req, res)) {
            answer_now(c, res, close || announced_body);
            continue;
        }
        // The route, before the body: an unknown path or method is refused without reading it.
        const Route* route = nullptr;
        std::string allow;
        std::vector<std::string> params;
        for (const Route& r : routes_) {
            if (!match_path_template(r.path_template, req.path, params)) continue;
            if (r.method == req.method) {
                route = &r;
                break;
            }
            if (allow.find(r.method) == std::string::npos) allow += (allow.empty() ? "" : ", ") + r.method;
        }
        if (!route) {
            if (allow.empty())
                error(req, res, 404, "no endpoint " + excerpt(req.method, 16) + " " + excerpt(req.path));
            else {
                error(req, res, 405, "method " + excerpt(req.method, 16) + " is not allowed on " + excerpt(req.path));
                res.set_header("Allow", allow);
            }
            answer_now(c, res, close || announced_body);
            continue;
        }
        req.matches.clear();
        req.matches.push_back(req.path);
        for (auto& p : params) req.matches.push_back(std::move(p));
        if (reader.body_length() > limits_.max_body_bytes) {
            error(req, res, 413,
                  "the request body of " + std::to_string(reader.body_length()) +
                      " bytes is larger than the server's limit of " + std::to_string(limits_.max_body_bytes) +
                      " bytes");
            answer_now(c, res, true);
            continue;
        }
        if (close) req.headers.emplace_back("Connection", "close");
        c->route = route;
        c->pre_headers = std::move(res.headers);
        if (announced_body && iequal(req.header("Expect"), "100-continue") &&
            (c->in.size() < reader.body_length() || (reader.body_length() == 0 && c->in.empty()))) {
            static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
            [[maybe_unused]] ssize_t w = ::send(c->fd, kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        c->state = State::kBody;
        reader.read_body();  // the next feed() reads it (or finds it empty: kDone)
    }
}

void HttpFront::dispatch(std::unique_ptr<Conn> c, const Route* route) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    {
        std::lock_guard<std::mutex> lk(mu_);
        busy_.push_back(c->fd);
    }
    auto held = std::make_shared<std::unique_ptr<Conn>>(std::move(c));
    workers_->q.enqueue([this, held, route] { serve(std::move(*held), route); });
}

void HttpFront::serve(std::unique_ptr<Conn> c, const Route* route) {
    HttpRequest& req = c->reader->request();
    HttpResponse res;
    res.headers = std::move(c->pre_headers);
    try {
        route->handler(req, res);
    } catch (const std::exception& e) {
        res = HttpResponse();
        error(req, res, 500, excerpt(e.what(), 2 * kMaxQuotedBytes));
    } catch (...) {
        res = HttpResponse();
        error(req, res, 500, "internal error");
    }
    if (res.status >= 400 && res.body.empty() && !res.provider) error(req, res, res.status, "request failed");
    const bool http10 = req.version == "HTTP/1.0";
    bool close = stopping_ || has_token(req.header("Connection"), "close") ||
                 has_token(res.header("Connection"), "close") || (res.provider && http10);
    const auto timeout = seconds(limits_.write_timeout_s);
    if (!res.provider) {
        const std::string out = response_head(res, false, close) + res.body;
        if (!send_all(c->fd, out.data(), out.size(), timeout)) close = true;
    } else {
        const std::string head = response_head(res, !http10, close);
        SocketSink sink(c->fd, timeout, !http10);
        bool ok = send_all(c->fd, head.data(), head.size(), timeout);
        while (ok && !sink.finished()) {
            bool more = false;
            try {
                more = res.provider(sink);
            } catch (...) { more = false; }
            if (!more || !sink.is_writable()) ok = false;
        }
        if (res.releaser) res.releaser(ok && sink.finished());
        if (!ok) {
            close = true;
            res.status = 499;  // cut short: the client left or stopped reading (logged so, as nginx does)
        }
    }
    if (logger_) logger_(req, res);
    if (close) {
        ::shutdown(c->fd, SHUT_WR);
        // Unread bytes would turn the close into a reset that may destroy the answer in flight: drop them briefly.
        c->state = Conn::State::kDrain;
        c->deadline = Clock::now() + kDrainTime;
    } else {
        c->state = Conn::State::kIdle;
        c->deadline = Clock::now() + seconds(limits_.keep_alive_s);
    }
    c->reader.reset();
    finish(std::move(c));
}

void HttpFront::finish(std::unique_ptr<Conn> c) {
    std::unique_lock<std::mutex> lk(mu_);
    busy_.erase(std::find(busy_.begin(), busy_.end(), c->fd));
    if (stopped_) {
        lk.unlock();
        ::close(c->fd);
        --open_;
        return;
    }
    returned_.push_back(std::move(c));
    lk.unlock();
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(wake_fd_, &one, sizeof one);
}

}  // namespace kvsieve
