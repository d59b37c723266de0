#include "serve/connection_threads.h"

#include "util/error.h"

namespace kvsieve {

ConnectionThreads::ConnectionThreads(size_t max_threads) : max_threads_(max_threads) {
    require(max_threads > 0, "the server needs at least one connection thread (--max-connections ≥ 1)");
}

ConnectionThreads::~ConnectionThreads() { shutdown(); }

void ConnectionThreads::enqueue(std::function<void()> fn) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        tasks_.push_back(std::move(fn));
        // Every queued task beyond the idle threads needs a thread of its own while the limit allows.
        if (tasks_.size() > idle_ && threads_.size() < max_threads_) threads_.emplace_back([this] { work(); });
    }
    cv_.notify_one();
}

void ConnectionThreads::shutdown() {
    std::vector<std::thread> threads;
    {
        std::lock_guard<std::mutex> lk(mu_);
        shutdown_ = true;
        threads.swap(threads_);
    }
    cv_.notify_all();
    for (auto& t : threads) t.join();
}

size_t ConnectionThreads::threads() {
    std::lock_guard<std::mutex> lk(mu_);
    return threads_.size();
}

size_t ConnectionThreads::waiting() {
    std::lock_guard<std::mutex> lk(mu_);
    return tasks_.size();
}

void ConnectionThreads::work() {
    for (;;) {
        std::function<void()> task;
        {
            std::unique_lock<std::mutex> lk(mu_);
            ++idle_;
            cv_.wait(lk, [this] { return !tasks_.empty() || shutdown_; });
            --idle_;
            if (tasks_.empty()) return;  // shut down with nothing left to run
            task = std::move(tasks_.front());
            tasks_.pop_front();
        }
        task();
    }
}

}  // namespace kvsieve
