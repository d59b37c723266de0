#include "session/stop_strings.h"

#include <algorithm>

namespace kvsieve {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
    for (auto& s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(const std::string& text) {
    if (stopped_) return {};
    held_ += text;
    size_t first = std::string::npos;
    for (const auto& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
        stopped_ = true;
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    // Keep the longest tail of held_ that is a proper prefix of some stop string.
    size_t keep = 0;
    for (const auto& s : stops_)
        for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
            if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
                keep = n;
                break;
            }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopMatcher::finish() {
    std::string out;
    out.swap(held_);
    return stopped_ ? std::string() : out;
}

}  // namespace kvsieve
