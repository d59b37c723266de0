#pragma once
// Whether the client of a TCP connection has gone away (HttpRequest::socket is polled with client_gone while a
// request waits for its events).
namespace kvsieve {

/// True when the peer of the connected socket `fd` has closed its side or reset the connection (poll() with
/// POLLRDHUP and a zero timeout: no wait, and no byte of a pipelined next request is consumed). A client that
/// shuts down only its sending side (shutdown(SHUT_WR)) after its request counts as gone too. False for fd < 0.
bool client_gone(int fd);

}  // namespace kvsieve
