#include "serve/client_socket.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

namespace kvsieve {

namespace {

/// The numeric host and port of a socket address; false when it is not an IP address.
bool numeric_address(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
    if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return false;
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return false;
    host = h;
    port = std::atoi(p);
    return true;
}

}  // namespace

int connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port) {
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
        const int fd = std::atoi(name.c_str());
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        std::string host;
        int port = -1;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !numeric_address(a, len, host, port))
            continue;
        if (port != local_port || host != local_addr) continue;
        len = sizeof a;
        if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !numeric_address(a, len, host, port))
            continue;
        if (port == remote_port && host == remote_addr) return fd;
    }
    return -1;
}

bool client_gone(int fd) {
    if (fd < 0) return false;
    pollfd p{fd, POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace kvsieve
