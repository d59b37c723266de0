#include "serve/request.h"

namespace kvsieve {

void RequestHandle::push(GenerationEvent ev) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        events_.push_back(std::move(ev));
    }
    cv_.notify_all();
}

bool RequestHandle::next(GenerationEvent& ev, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return false;
    ev = std::move(events_.front());
    events_.pop_front();
    return true;
}

GenerationEvent RequestHandle::next() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !events_.empty(); });
    GenerationEvent ev = std::move(events_.front());
    events_.pop_front();
    return ev;
}

}  // namespace kvsieve
