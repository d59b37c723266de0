#pragma once
// The threads that run the HTTP server's requests: the front (serve/http_front.h) reads a request whole on its
// event thread, then runs its handler and writes its answer as one task here.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvsieve {

/// A task queue with a thread per running task: a thread is started when a task arrives and no thread is idle, up
/// to `max_threads` (the server's --max-connections, so that every open connection can have one); beyond that a
/// task waits, first come first served, until a thread is free. Threads stay for later tasks until shutdown().
class ConnectionThreads {
public:
    /// Throws Error when max_threads is 0.
    explicit ConnectionThreads(size_t max_threads);
    ~ConnectionThreads();
    /// Runs `fn` (one request) on an idle thread, a new one, or, at the limit, the next one that is free.
    void enqueue(std::function<void()> fn);
    /// Runs the connections already queued, then joins every thread; enqueue() must not be called after it.
    void shutdown();
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
