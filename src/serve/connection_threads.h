#pragma once
// The threads that serve the HTTP server's connections: cpp-httplib runs each accepted connection as one task of
// its TaskQueue, from reading the request to closing the socket.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>

namespace kvsieve {

/// A TaskQueue with one thread per open connection: a thread is started when a connection arrives and no thread is
/// idle, up to `max_threads` (the server's --max-connections); beyond that a connection waits, first come first
/// served, until a thread is free. Threads stay for later connections until shutdown(). Unlike httplib's fixed
/// ThreadPool, a burst of idle or half-sent connections cannot occupy every thread as long as it stays under the
/// limit. A task cannot be refused: httplib's task owns the accepted socket, and only running it closes that.
class ConnectionThreads : public httplib::TaskQueue {
public:
    /// Throws Error when max_threads is 0.
    explicit ConnectionThreads(size_t max_threads);
    ~ConnectionThreads() override;
    /// Runs `fn` (one connection) on an idle thread, a new one, or, at the limit, the next one that is free.
    void enqueue(std::function<void()> fn) override;
    /// Runs the connections already queued, then joins every thread; enqueue() must not be called after it.
    void shutdown() override;
    /// Threads started so far (≤ max_threads).
    size_t threads();
    /// Connections waiting for a thread.
    size_t waiting();

private:
    void work();

    const size_t max_threads_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> tasks_;
    std::vector<std::thread> threads_;
    size_t idle_ = 0;
    bool shutdown_ = false;
};

}  // namespace kvsieve
