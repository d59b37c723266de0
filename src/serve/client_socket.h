#pragma once
// The TCP connection an HTTP request came on, and whether its client has gone away: cpp-httplib 0.11 gives a
// handler neither the socket nor a "connection closed" test, so the server finds the socket by its addresses.
#include <string>

namespace kvsieve {

/// The file descriptor of this process's connected TCP socket whose local address is local_addr:local_port and
/// whose peer is remote_addr:remote_port (numeric hosts as getnameinfo(NI_NUMERICHOST) writes them, which is how
/// httplib::Request reports them); −1 when no open descriptor matches. The pair of addresses names one connection,
/// and the descriptor stays that connection's while the request's handler and content provider run (httplib's
/// connection thread closes it only after them), so it may be polled from both. Cost: one getsockname() per open
/// descriptor (a scan of /proc/self/fd), once per request.
int connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

/// True when the peer of the connected socket `fd` has closed its side or reset the connection (poll() with
/// POLLRDHUP and a zero timeout: no wait, and no byte of a pipelined next request is consumed). A client that
/// shuts down only its sending side (shutdown(SHUT_WR)) after its request counts as gone too. False for fd < 0.
bool client_gone(int fd);

}  // namespace kvsieve
