#pragma once
// The TCP connection an HTTP request came on, and whether its client has gone away (HttpRequest::socket is polled
// with client_gone while a request waits for its events).
#include <string>

namespace kvsieve {

/// The file descriptor of this process's connected TCP socket whose local address is local_addr:local_port and
/// whose peer is remote_addr:remote_port (numeric hosts as getnameinfo(NI_NUMERICHOST) writes them); −1 when no
/// open descriptor matches. For a server whose HTTP layer does not hand out the socket (the front of
/// serve/http_front.h does: HttpRequest::socket). Cost: one getsockname() per open descriptor (a scan of
/// /proc/self/fd).
int connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

/// True when the peer of the connected socket `fd` has closed its side or reset the connection (poll() with
/// POLLRDHUP and a zero timeout: no wait, and no byte of a pipelined next request is consumed). A client that
/// shuts down only its sending side (shutdown(SHUT_WR)) after its request counts as gone too. False for fd < 0.
bool client_gone(int fd);

}  // namespace kvsieve
