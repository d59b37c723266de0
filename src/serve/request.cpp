#include "serve/request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/error.h"

namespace kvsieve {

TokenLogprob token_logprob(const float* logits, int n_vocab, int32_t token, int top) {
    require(token >= 0 && token < n_vocab, "token id ", token, " is outside the vocabulary of ", n_vocab);
    require(top >= 0, "the number of alternatives must be ≥ 0, got ", top);
    double m = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < n_vocab; ++i) m = std::max(m, static_cast<double>(logits[i]));
    double sum = 0;
    for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - m);
    const double log_z = m + std::log(sum);
    TokenLogprob t;
    t.token = token;
    t.logprob = static_cast<double>(logits[token]) - log_z;
    const int k = std::min(top, n_vocab);
    if (k > 0) {
        std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
        for (int i = 0; i < n_vocab; ++i) ids[i] = i;
        std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        });
        for (int i = 0; i < k; ++i) t.top.emplace_back(ids[i], static_cast<double>(logits[ids[i]]) - log_z);
    }
    return t;
}

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
